"""Display strings for tokens, aligned one-to-one with the attention axes.

Byte-level BPE (GPT-2, RoBERTa) marks a leading space with ``Ġ`` and a newline
with ``Ċ``; SentencePiece (T5, Llama) marks a leading space with ``▁``. Both
leading-space markers are shown as ``WORD_START`` ("▁cat"), so a word split in
pieces reads "▁c at", not "c at": without it the reader cannot see where words
begin. Newlines and tabs become ``⏎`` and ``⇥`` (SentencePiece's byte-fallback ``<0x0A>`` and ``<0x09>`` too), a
token of spaces one ``␣`` each, other control characters an escape (``\\x1b``, drawn by every font): raw, they
vanish on screen and make an SVG export ill-formed XML; so do invisible format characters and spaces other than
U+0020 (``\\u200b``, ``\\u00a0``; a right-to-left override turned the rest of a label around). ``Ġ``, ``Ċ`` and
``ĉ`` are marks of byte-level tokenizers only: elsewhere they are Maltese and Esperanto letters. WordPiece
(BERT) marks the other side, a continuation, with ``##``, which is kept as it is.

A byte-level piece is spelled in GPT-2's byte alphabet ("café" is ``c af Ã©``, "東" is ``æĿ ±``): its bytes
are shown as the text they encode ("é"), and bytes of a character cut between pieces as SentencePiece's
byte-fallback pieces are spelled (``<0xE6><0x9D>``).
"""

from __future__ import annotations

import json
import re
import unicodedata
from functools import lru_cache

WORD_START = "▁"  # SentencePiece's own marker: the one readers of tokenizer output already know
_REPLACEMENTS = {"▁": WORD_START, "\n": "⏎", "\t": "⇥"}
_FALLBACK_BYTE = re.compile(r"<0x([0-7][0-9A-F])>")  # SentencePiece's byte-fallback piece of one ASCII character
# What a display string writes for a character it cannot show or a byte that is no whole character (``\x0d``,
# ``\u00a0``, ``\U000e0001``, ``<0xE2>``): its letters and digits are the escape's, not the text's.
ESCAPES = re.compile(r"\\x[0-9a-f]{2}|\\u[0-9a-f]{4}|\\U[0-9a-f]{8}|<0x[0-9A-F]{2}>")
# Invisible format characters: zero-width space, marks and bidi controls (a right-to-left override turns the rest of
# a label around), word joiners, the byte-order mark. Not the zero-width (non-)joiners, parts of Persian words and
# emoji, nor the format characters that draw (Arabic number signs, an emoji flag's tag characters).
_INVISIBLE = {0x00AD, 0x061C, 0x180E, 0xFEFF, *range(0x200B, 0x200C), *range(0x200E, 0x2010),
              *range(0x202A, 0x202F), *range(0x2060, 0x2065), *range(0x2066, 0x2070), *range(0xFFF9, 0xFFFC),
              *range(0x1BCA0, 0x1BCA4), *range(0x1D173, 0x1D17B),  # shorthand and musical format controls
              *range(0xD800, 0xE000)}  # a lone surrogate ("\ud800" in a JSON file): no UTF-8 holds it, Streamlit failed
# Characters that draw nothing, kept inside a token (a joiner joins, a Hangul filler fills a syllable), written out
# when a token is only these: four such tokens were four blank labels, and not one joiner has anything to join
_BLANK = {0x200C, 0x200D, 0x115F, 0x1160, 0x2800, 0x3164, 0xFFA0}


def prettify_token(token: str) -> str:
    """Return a readable form of one raw tokenizer piece (never an empty string), of a tokenizer that is not
    byte-level (``byte_level_token`` reads those)."""
    if not token:
        return "∅"
    fallback = _FALLBACK_BYTE.fullmatch(token)
    byte = chr(int(fallback.group(1), 16)) if fallback else ""
    if byte.isspace():  # a newline: ⏎, not <0x0A>
        token = byte
    return _standalone("".join(_REPLACEMENTS.get(ch) or _visible(ch) for ch in token))


def _standalone(text: str) -> str:
    """``text`` as a label of its own: one ``␣`` per character when it is word-start marks or spaces only (a token
    of spaces); combining marks with nothing to sit on (an Arabic vowel, a Devanagari vowel sign) on a dotted
    circle, Unicode's way of showing one alone; a lone variation selector (the U+FE0F after "❤"), or characters that
    draw nothing (``_BLANK``), as their escapes."""
    if not text.strip(WORD_START + " "):
        return "␣" * len(text)
    if all(ord(ch) in _BLANK for ch in text):
        return text.encode("unicode_escape").decode("ascii")
    if not all(unicodedata.category(ch) in ("Mn", "Mc", "Me") for ch in text):
        return text
    if all(_is_variation_selector(ch) for ch in text):
        return text.encode("unicode_escape").decode("ascii")
    return "◌" + text


def _is_variation_selector(ch: str) -> bool:
    return 0xFE00 <= ord(ch) <= 0xFE0F or 0xE0100 <= ord(ch) <= 0xE01EF


def visible(text: str, spaces: bool = True) -> str:
    """``text`` with its control and invisible characters shown as escapes (``\\x1b``, ``\\u202e``), for labels,
    titles and file contents; with ``spaces`` (a token's label) also the spaces other than U+0020, which look like
    one. Running text (a message, a probe, a file name) keeps them: an ideographic space is a space there."""
    return "".join(_visible(ch, spaces) for ch in text)


def _visible(ch: str, spaces: bool = True) -> str:
    code = ord(ch)
    if code < 0x20 or 0x7F <= code < 0xA0:
        return f"\\x{code:02x}"  # ASCII: every font draws it
    if code in _INVISIBLE or (spaces and ch != " " and unicodedata.category(ch) in ("Zs", "Zl", "Zp")):
        return f"\\u{code:04x}" if code <= 0xFFFF else f"\\U{code:08x}"  # invisible, or a space like a plain one
    return ch


def display_tokens(tokenizer, token_ids: list[int]) -> list[str]:
    """Readable display strings for ``token_ids``, one per id."""
    pieces = [str(p) for p in tokenizer.convert_ids_to_tokens(list(token_ids))]
    if not is_byte_level(tokenizer):
        return [prettify_token(p) for p in pieces]
    added = getattr(tokenizer, "added_tokens_decoder", {})  # spelled as typed ("Größe"), not in the byte alphabet
    return [prettify_token(p) if i in added else byte_level_token(p) for i, p in zip(token_ids, pieces)]


def byte_level_token(piece: str) -> str:
    """The display string of one byte-level piece: the text its bytes encode, with the marks of
    ``prettify_token``; an added token outside the byte alphabet ("<|im_start|>" is inside it) as it is."""
    to_byte = _unicode_to_byte()
    if not piece or any(ch not in to_byte for ch in piece):
        return prettify_token(piece)
    text = bytes(to_byte[ch] for ch in piece).decode("utf-8", errors="surrogateescape")
    return _standalone("".join(_BYTE_LEVEL_MARKS.get(ch) or _shown_byte(ch) for ch in text))


_BYTE_LEVEL_MARKS = {" ": WORD_START, "\n": "⏎", "\t": "⇥"}


def _shown_byte(ch: str) -> str:
    """A character decoded from bytes; a byte that is no whole UTF-8 character (a surrogate escape) as <0xNN>."""
    code = ord(ch)
    return f"<0x{code - 0xDC00:02X}>" if 0xDC80 <= code <= 0xDCFF else _visible(ch)


def is_byte_level(tokenizer) -> bool:
    """Whether ``tokenizer`` spells its pieces in the byte alphabet (GPT-2, RoBERTa, Llama 3, SmolLM2): its
    decoder or pre-tokenizer is ByteLevel, alone or in a Sequence; a slow tokenizer has a byte encoder."""
    if hasattr(tokenizer, "byte_encoder"):  # GPT2Tokenizer, RobertaTokenizer (not fast)
        return True
    backend = getattr(tokenizer, "backend_tokenizer", None)
    return any(_byte_level_step(getattr(backend, part, None), steps)
               for part, steps in (("decoder", "decoders"), ("pre_tokenizer", "pretokenizers")))


def _byte_level_step(component, steps: str) -> bool:
    """Whether a tokenizers ``component`` is ByteLevel or a Sequence (its ``steps``) holding one."""
    if type(component).__name__ == "Sequence":
        held = json.loads(component.__getstate__()).get(steps) or []
        return any(isinstance(step, dict) and step.get("type") == "ByteLevel" for step in held)
    return type(component).__name__ == "ByteLevel"


@lru_cache(maxsize=1)
def _unicode_to_byte() -> dict[str, int]:
    from transformers.convert_slow_tokenizer import bytes_to_unicode  # transformers takes a second to import

    return {ch: byte for byte, ch in bytes_to_unicode().items()}
