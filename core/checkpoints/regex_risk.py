"""Regular expressions in an uploaded ``tokenizer.json`` that can run for minutes.

A tokenizer's pre-tokenizer, normalizer or decoder may split or replace on a regex (``{"Regex": "..."}``), run by
the ``tokenizers`` library's Oniguruma engine while holding the GIL. A regex backtracks when one match attempt can
split a text among its parts in many ways: a repeated group (``(\\D|\\D\\D){1,22}\\d``: 12 s on 180 characters),
or two repetitions in one alternative (``\\w*\\w*\\w*\\w*\\w*\\W``: 14 s on 100 letters; ``q*q*q*q*q*\\W``: 49 s on
1,000 characters); past Oniguruma's retry limit the library panics with an exception that is not an
``Exception``. Timing a regex on sample texts cannot clear it (it was tried until 2026-12-07: a chain over a
letter the samples lacked, or one gated on a word they lacked, passed in 0.1 s and then ran for minutes on a
caller's text), so a regex is judged by its shape (``may_backtrack``), and refused unless each of its top-level
alternatives repeats at most one thing, and that no group; at most ``MAX_REPETITIONS`` repetitions in all the
file's regexes. One match attempt is then linear in the text, and a whole text at worst quadratic (``\\w*\\d``:
8.6 s on 50,000 letters, the most a probe holds; 0.1 s on the 5,000 characters Inspect reads). Released tokenizers
whose patterns have two repetitions in one alternative but cannot backtrack on them are known by their exact
pattern (``KNOWN_PATTERNS``: at most 0.02 s on 50,000 characters of any of 26 runs of one or two kinds).
"""

from __future__ import annotations

import json
from pathlib import Path

MAX_REPETITIONS = 16  # over all the regexes of one tokenizer.json: each may cost a quadratic pass over the text
_ONE_OR_MORE = "*+"
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
           r"\s+(?!\S)|\s+")  # GPT-4's cl100k too
KNOWN_PATTERNS = frozenset({
    _LLAMA3,
    _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}"),  # Qwen 2
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*(?i:'s|'t|'re|'ve|'m|'ll|'d)?|"
    r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",  # GPT-4o's o200k
    r"(?=(\d{3})+(?!\d))",  # SuperBPE's digit groups: quadratic in a run of digits, 6 s on 50,000
})


def risky_pattern(path: Path) -> str | None:
    """The first regex of the ``tokenizer.json`` at ``path`` that ``may_backtrack`` (and is not known), or the one
    that takes the file past ``MAX_REPETITIONS``; None when every regex is safe to run."""
    total = 0
    for pattern in regex_patterns(json.loads(path.read_bytes())):
        if pattern not in KNOWN_PATTERNS and may_backtrack(pattern):
            return pattern
        total += sum(alternative_repetitions(pattern) or [1])
        if total > MAX_REPETITIONS:
            return pattern
    return None


def may_backtrack(pattern: str) -> bool:
    """Whether one match attempt of ``pattern`` may take more than one pass over the text: it repeats a group, or
    one of its top-level alternatives holds two repetitions."""
    repetitions = alternative_repetitions(pattern)
    return repetitions is None or max(repetitions, default=0) > 1


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


def alternative_repetitions(pattern: str) -> list[int] | None:
    """How many quantifiers that repeat (``*``, ``+``, ``{n,m}`` with m > 1) each top-level alternative of
    ``pattern`` holds, at any depth (lookarounds too); None when one repeats a group."""
    counts, depth, i = [0], 0, 0
    while i < len(pattern):
        char = pattern[i]
        if char == "\\":
            i += 2
            continue
        if char == "[":
            i = _class_end(pattern, i)
            continue
        if char == "(":
            depth += 1
            i += 2 if pattern[i + 1:i + 2] == "?" else 1  # (?: (?= (?i: ...: the group's kind, not a quantifier
            continue
        if char == ")":
            depth = max(depth - 1, 0)
            if _repeats(pattern, i + 1):
                return None
        elif char == "|" and depth == 0:
            counts.append(0)
        elif _repeats(pattern, i):
            counts[-1] += 1
        i = _quantifier_end(pattern, i) if _quantifier_end(pattern, i) > i else i + 1
    return counts


def _repeats(pattern: str, at: int) -> bool:
    """Whether a quantifier that repeats more than once starts at ``at``."""
    if at >= len(pattern) or pattern[at] not in _ONE_OR_MORE + "{":
        return False
    braces = _braces(pattern, at) if pattern[at] == "{" else (1, None)
    return braces is not None and (braces[1] is None or braces[1] > 1)


def _quantifier_end(pattern: str, at: int) -> int:
    """The index after the quantifier at ``at`` with its lazy (``?``) or possessive (``+``) mark; ``at`` if none."""
    if at >= len(pattern):
        return at
    if pattern[at] == "{" and _braces(pattern, at) is not None:
        end = pattern.find("}", at) + 1
    elif pattern[at] in _ONE_OR_MORE + "?":
        end = at + 1
    else:
        return at
    return end + 1 if pattern[end:end + 1] in ("?", "+") and end < len(pattern) else end


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
