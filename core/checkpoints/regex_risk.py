"""Regular expressions in an uploaded ``tokenizer.json`` that can run for minutes.

A tokenizer's pre-tokenizer, normalizer or decoder may split or replace on a regex (``{"Regex": "..."}``), run by
the ``tokenizers`` library's Oniguruma engine while holding the GIL. Many shapes backtrack: a repeated group
(``(\\D|\\D\\D){1,22}\\d``: 12 s on 180 characters), two repetitions in one alternative (``q*q*q*q*q*\\W``: 49 s on
1,000 characters), a backreference (``(\\w*)\\1\\d``: 14 s on 10,000 letters), the absent operator
(``(?~\\x00)(?~\\x00)\\d``: 26 s on 1,000 characters), a recursive call (``\\g<r>``), or a repetition hidden by a
comment or extended mode; past Oniguruma's retry limit the library panics with an exception that is not an
``Exception``. Neither timing a regex on sample texts (a chain over a letter the samples lacked passed in 0.1 s)
nor judging its shape (Oniguruma's syntax has too many ways to repeat) cleared them: both were tried on
2026-12-07 and bypassed the same day. So an upload's tokenizer runs only regexes known by their exact pattern, those
of released tokenizers (``KNOWN_PATTERNS``), each measured on 50,000 characters of 26 runs of one or two kinds of
character; at most ``MAX_REGEXES`` of them. A local folder given on the command line is trusted and not checked.
"""

from __future__ import annotations

import json
from pathlib import Path

MAX_REGEXES = 8  # in one tokenizer.json: DeepSeek V3 has 3
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
           r"\s+(?!\S)|\s+")
_O200K_WORDS = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+{s}|"
                r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*{s}|")
_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
# Each at most 0.03 s on 50,000 characters of any of the 26 runs (tests/core/test_checkpoint.py), but SuperBPE's
KNOWN_PATTERNS = frozenset({
    r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+",  # GPT-2's
    _LLAMA3,  # Llama 3's, GPT-4's cl100k
    _LLAMA3.replace(r"\p{N}{1,3}", r"\p{N}"),  # Qwen 2's
    _O200K_WORDS.replace("{s}", _CONTRACTIONS) + r"\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",
    _O200K_WORDS.replace("{s}", "") + r"\p{N}| ?[^\s\p{L}\p{N}]+[\r\n/]*|\s*[\r\n]+|\s+(?!\S)|\s+",  # Mistral's Tekken
    r" ?[^(\s|[.,!?…。，、।۔،])]+",  # BLOOM's
    r"""[!"#$%&'()*+,\-./:;<=>?@\[\\\]^_`{|}~][A-Za-z]+|[^\r\n\p{L}\p{P}\p{S}]?[\p{L}\p{M}]+| ?[\p{P}\p{S}]+[\r\n]*|"""
    r"""\s*[\r\n]+|\s+(?!\S)|\s+""",  # DeepSeek V3's words
    r"[一-龥぀-ゟ゠-ヿ]+",  # DeepSeek V3's CJK
    r"\p{N}{1,3}",  # DeepSeek V3's digits
    r"(?=(\d{3})+(?!\d))",  # SuperBPE's digit groups: quadratic in a run of digits, 6 s on 50,000
})


def risky_pattern(path: Path) -> str | None:
    """The first regex of the ``tokenizer.json`` at ``path`` that is not in ``KNOWN_PATTERNS``, or the one past
    ``MAX_REGEXES``; None when every regex may run."""
    for i, pattern in enumerate(regex_patterns(json.loads(path.read_bytes()))):
        if pattern not in KNOWN_PATTERNS or i >= MAX_REGEXES:
            return pattern
    return None


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
