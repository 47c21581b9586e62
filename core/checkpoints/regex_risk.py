"""Regular expressions in an uploaded ``tokenizer.json`` that can backtrack for minutes.

A tokenizer's pre-tokenizer or normalizer may split or replace on a regex (``{"Regex": "..."}``), run by the
``tokenizers`` library's Oniguruma engine while holding the GIL. A repeated group that can match the same text in
several ways — ``(\\D|\\D\\D){1,22}\\d``, ``(\\D\\D?)+\\d``, ``(a+)+`` — backtracks: 45 characters took 1.2 s, 180 took
12 s, and the whole server froze meanwhile; past Oniguruma's retry limit the library panics with an exception that is
not an ``Exception``. The shape alone also catches harmless patterns of released tokenizers (SuperBPE's
``(?=(\\d{3})+(?!\\d))``, EXAONE's), so a pattern of that shape (``backtracks``) is only suspected: the tokenizer is
run on adversarial texts in a child process (``slow_pattern``), and refused when that takes over ``TIME_LIMIT_S``
or crashes. The main process never runs a suspected pattern that was not timed.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

_REPEATS = "*+{"  # a quantifier that may repeat what precedes it more than once ("?" allows at most one)
TIME_LIMIT_S = 5.0  # for the child to load the tokenizer and encode every adversarial text (a safe one: ~0.5 s)
# Texts on which a repeated ambiguous group fails slowly: long runs of one kind of character, none completing a match
_ADVERSARIAL = ["a" * 400, "1" * 400, " " * 400, "a1" * 200, "aé" * 200, "!" * 400, "a " * 200, "é" * 400,
                "The quick brown fox jumps over the lazy dog, again and again. " * 6]
# The child: load tokenizer.json alone (no transformers) under a 2 GB address space, encode each text
_CHILD = ("import resource, sys, json; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
          "from tokenizers import Tokenizer; t = Tokenizer.from_file(sys.argv[1]); "
          "[t.encode(text) for text in json.loads(sys.argv[2])]")


def slow_pattern(path: Path) -> str | None:
    """The first regex of the ``tokenizer.json`` at ``path`` that is suspected (``backtracks``) and, run in a child
    process on ``_ADVERSARIAL`` texts, takes over ``TIME_LIMIT_S`` or crashes it; else None."""
    suspected = [p for p in regex_patterns(json.loads(path.read_bytes())) if backtracks(p)]
    if not suspected:
        return None
    try:
        child = subprocess.run([sys.executable, "-c", _CHILD, str(path), json.dumps(_ADVERSARIAL)],
                               capture_output=True, timeout=TIME_LIMIT_S)
    except subprocess.TimeoutExpired:
        return suspected[0]
    return suspected[0] if child.returncode else None


def regex_patterns(node) -> list[str]:
    """Every ``{"Regex": pattern}`` in a parsed ``tokenizer.json``, at any depth."""
    found, stack = [], [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("Regex"), str):
                found.append(item["Regex"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found


def backtracks(pattern: str) -> bool:
    """Whether ``pattern`` repeats (``*``, ``+``, ``{n,m}`` with m > 1) a group holding a repetition, an optional
    part (``?``) or ``|``."""
    groups = []  # per open group: whether it holds a repetition or an alternative
    i = 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i = _class_end(pattern, i)
            continue
        if char == "(":
            groups.append(False)
            if pattern[i + 1:i + 2] == "?":  # (?: (?= (?i: ...: the group's kind, not a quantifier
                i += 1
        elif char == "|" and groups:
            groups[-1] = True
        elif char in "*+?" or (char == "{" and _braces(pattern, i)):  # \D\D? varies in length as \D+ does
            if groups:
                groups[-1] = True
        elif char == ")" and groups:
            ambiguous = groups.pop()
            if ambiguous and _repeated(pattern, i + 1):
                return True
            if ambiguous and groups:
                groups[-1] = True
        i += 1
    return False


def _repeated(pattern: str, at: int) -> bool:
    """Whether a quantifier that repeats more than once starts at ``at``."""
    if at >= len(pattern) or pattern[at] not in _REPEATS:
        return False
    braces = _braces(pattern, at) if pattern[at] == "{" else (1, None)
    return braces is not None and (braces[1] is None or braces[1] > 1)


def _braces(pattern: str, at: int) -> tuple[int, int | None] | None:
    """``(low, high)`` of the quantifier ``{n}``, ``{n,}`` or ``{n,m}`` at ``at`` (high None: unbounded), or None
    for a ``{`` that starts no quantifier (a plain character)."""
    end = pattern.find("}", at)
    body = pattern[at + 1:end] if end > at else ""
    low, comma, high = body.partition(",")
    if not (low.isdigit() or (comma and not low)) or (high and not high.isdigit()):
        return None
    return int(low or 0), int(high) if high else (None if comma else int(low))


def _class_end(pattern: str, start: int) -> int:
    """The index after the character class opening at ``start`` (classes may nest: ``[a-z&&[^aeiou]]``)."""
    depth, i = 0, start
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            depth += 1
            if pattern[i + 1:i + 2] == "]" or pattern[i + 1:i + 3] == "^]":  # "[]...]": a leading ] is literal
                i += 2 if pattern[i + 1] == "]" else 3
                continue
        elif char == "]":
            depth -= 1
            if depth == 0:
                return i + 1
        i += 1
    return len(pattern)
