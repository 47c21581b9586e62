"""Regular expressions in an uploaded ``tokenizer.json`` that can backtrack for minutes.

A tokenizer's pre-tokenizer or normalizer may split or replace on a regex (``{"Regex": "..."}``), run by the
``tokenizers`` library's Oniguruma engine while holding the GIL. A repeated group that can match the same text in
several ways — ``(\\D|\\D\\D){1,22}\\d``, ``(a+)+`` — backtracks: 45 characters took 1.2 s, 180 took
12 s, and the whole server froze meanwhile; past Oniguruma's retry limit the library panics with an exception that is
not an ``Exception``. Released tokenizers (GPT-2, Llama 3, Qwen, GPT-4o's, DeepSeek's) repeat single characters
and classes only, and at most make a group optional, so a group repeated more than once that itself holds a
repetition or an alternative is refused (the classic nested-quantifier test for catastrophic backtracking).
"""

from __future__ import annotations

_REPEATS = "*+{"  # a quantifier that may repeat what precedes it more than once ("?" allows at most one)


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
    """Whether ``pattern`` repeats (``*``, ``+``, ``{n,m}`` with m > 1) a group holding a repetition or ``|``."""
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
        elif char == "|" and groups:
            groups[-1] = True
        elif char in "*+" or (char == "{" and _repeats_braces(pattern, i)):
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
    return pattern[at] != "{" or _repeats_braces(pattern, at)


def _repeats_braces(pattern: str, at: int) -> bool:
    """Whether ``{n}``, ``{n,}`` or ``{n,m}`` at ``at`` allows more than one repetition (``{0,1}`` and ``{1}`` do
    not); a ``{`` that starts no quantifier is a plain character."""
    end = pattern.find("}", at)
    body = pattern[at + 1:end] if end > at else ""
    low, comma, high = body.partition(",")
    if not (low.isdigit() or (comma and not low)) or (high and not high.isdigit()):
        return False
    top = int(high) if high else (None if comma else int(low))
    return top is None or top > 1


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
