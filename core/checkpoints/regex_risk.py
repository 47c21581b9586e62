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
character; at most ``MAX_REGEXES`` of them; and no step that lengthens the text (``growing``). A local folder given
on the command line is trusted and not checked.
"""

from __future__ import annotations

import base64
import json
import struct

from ..errors import clipped

MAX_REGEXES = 4  # in one tokenizer: DeepSeek V3 has 3
_LLAMA3 = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|"
           r"\s+(?!\S)|\s+")
_O200K_WORDS = (r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]*[\p{Ll}\p{Lm}\p{Lo}\p{M}]+{s}|"
                r"[^\r\n\p{L}\p{N}]?[\p{Lu}\p{Lt}\p{Lm}\p{Lo}\p{M}]+[\p{Ll}\p{Lm}\p{Lo}\p{M}]*{s}|")
_CONTRACTIONS = r"(?i:'s|'t|'re|'ve|'m|'ll|'d)?"
# Each at most 0.03 s on 50,000 characters of any of 26 runs, and 0.34 s on mixes (tests/core/test_checkpoint.py).
# Not SuperBPE's digit groups, (?=(\d{3})+(?!\d)): quadratic in a run of digits, 15 s on 50,000 mixed ones.
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
    " {2,}",  # transformers' SentencePiece converter's (T5, mT5, XLM-R, ALBERT, XLNet, DeBERTa-v2): runs of spaces
})


MAX_ADDED_CHARS = 16  # a Prepend's text; a Replace may not lengthen what it replaces
# WordPiece's longest-match search costs the cube of a word's length: BERT's 100; 10**9 took 8 s on 8,000 letters
MAX_WORD_CHARS = 1000
# A SentencePiece character map's longest replacement, in UTF-8 bytes: nmt_nfkc's is 33 (a map of 240 kB)
MAX_REPLACEMENT_BYTES = 64


def unknown_regex(tree) -> str | None:
    """The first regex of a parsed tokenizer (``tokenizer.json``, or a built tokenizer's ``to_str()``) that is not
    in ``KNOWN_PATTERNS``, or the one past ``MAX_REGEXES``; None when every regex may run."""
    for i, pattern in enumerate(regex_patterns(tree)):
        if pattern not in KNOWN_PATTERNS or i >= MAX_REGEXES:
            return pattern
    return None


def growing(node) -> str | None:
    """A step of a parsed tokenizer that may lengthen the text it reads, or make it costly, as text: a ``Replace``
    whose content is longer than its literal pattern (or than one character, for a regex), a ``Prepend`` of over
    ``MAX_ADDED_CHARS``, a WordPiece model that searches words of over ``MAX_WORD_CHARS``, or a SentencePiece
    character map past ``MAX_REPLACEMENT_BYTES`` (or a second one, each pass growing the text again). 20
    ``Replace`` steps of "a" by "aa" made 100 characters 4 GB in 18 s, and 1,000 aborted the process (a Rust
    allocation failure no handler catches)."""
    maps = 0
    for item in _nodes(node):
        kind = item.get("type")
        if kind == "Precompiled":  # one character may map to a string as long as the map holds
            maps += 1
            longest = _longest_replacement(item.get("precompiled_charsmap"))
            if maps > 1 or longest is None or longest > MAX_REPLACEMENT_BYTES:
                return f"a character map {'after another' if maps > 1 else 'of replacements up to'}" + (
                    "" if maps > 1 else f" {longest if longest is not None else '?'} bytes long")
        elif kind == "Replace":
            pattern, content = item.get("pattern") or {}, item.get("content")
            literal = pattern.get("String") if isinstance(pattern, dict) else None
            most = len(literal) if isinstance(literal, str) and literal else 1
            if not isinstance(content, str) or len(content) > most or not isinstance(pattern, dict):
                return f"Replace {clipped(json.dumps(pattern)[:40])} by {clipped(json.dumps(content)[:40])}"
        elif kind == "Prepend" and len(str(item.get("prepend", ""))) > MAX_ADDED_CHARS:
            return f"Prepend {clipped(json.dumps(item.get('prepend'))[:40])}"
        elif kind == "WordPiece" and not _at_most(item.get("max_input_chars_per_word", 100), MAX_WORD_CHARS):
            return f"WordPiece words of up to {clipped(str(item.get('max_input_chars_per_word')), 20)} characters"
    return None


def _longest_replacement(charsmap) -> int | None:
    """The longest string a SentencePiece ``precompiled_charsmap`` (base64: a little-endian trie size, the trie, then
    its replacements, each ended by a NUL) can put in place of a character; 0 without a map, None when unreadable."""
    if not charsmap:
        return 0
    try:
        data = base64.b64decode(charsmap, validate=True)
        trie = struct.unpack("<I", data[:4])[0]
    except (ValueError, TypeError, struct.error):
        return None
    return max(map(len, data[4 + trie:].split(b"\0"))) if 4 + trie <= len(data) else None


def _at_most(value, most: int) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value <= most


def _nodes(node):
    """Every dict in a parsed JSON tree."""
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            yield item
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)


def regex_patterns(node) -> list[str]:
    """Every ``{"Regex": pattern}`` in a parsed ``tokenizer.json``, at any depth."""
    return [item["Regex"] for item in _nodes(node) if isinstance(item.get("Regex"), str)]
