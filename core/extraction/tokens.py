"""Display strings for tokens, aligned one-to-one with the attention axes.

Byte-level BPE (GPT-2, RoBERTa) marks a leading space with ``Ġ`` and a newline
with ``Ċ``; SentencePiece (T5, Llama) marks a leading space with ``▁``. Both
leading-space markers are shown as ``WORD_START`` ("▁cat"), so a word split in
pieces reads "▁c at", not "c at": without it the reader cannot see where words
begin. Newlines and tabs become ``⏎`` and ``⇥``, other control characters an escape
(``\\x1b``, drawn by every font): raw, they vanish on screen and make an SVG export ill-formed XML. WordPiece
(BERT) marks the other side, a continuation, with ``##``, which is kept as it is.
"""

from __future__ import annotations

WORD_START = "▁"  # SentencePiece's own marker: the one readers of tokenizer output already know
_REPLACEMENTS = {"Ġ": WORD_START, "▁": WORD_START, "Ċ": "⏎", "ĉ": "⇥", "\n": "⏎", "\t": "⇥"}


def prettify_token(token: str) -> str:
    """Return a readable form of one raw tokenizer piece (never an empty string)."""
    if not token:
        return "∅"
    text = "".join(_REPLACEMENTS.get(ch) or _visible(ch) for ch in token)
    return text if text.strip(WORD_START) else "␣" * len(text)  # a token of spaces only


def visible(text: str) -> str:
    """``text`` with its control characters shown as escapes (``\\x1b``), for labels, titles and file contents."""
    return "".join(_visible(ch) for ch in text)


def _visible(ch: str) -> str:
    code = ord(ch)
    return f"\\x{code:02x}" if code < 0x20 or 0x7F <= code < 0xA0 else ch  # ASCII: every font draws it


def display_tokens(tokenizer, token_ids: list[int]) -> list[str]:
    """Readable display strings for ``token_ids``, one per id."""
    pieces = tokenizer.convert_ids_to_tokens(list(token_ids))
    return [prettify_token(str(p)) for p in pieces]
