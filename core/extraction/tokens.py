"""Display strings for tokens, aligned one-to-one with the attention axes.

Byte-level BPE (GPT-2, RoBERTa) marks a leading space with ``Ġ`` and a newline
with ``Ċ``; SentencePiece (T5, Llama) marks a leading space with ``▁``. Those
markers are turned into readable text; WordPiece's ``##`` continuation marker
is kept because it tells the reader the piece joins the previous one.
"""

from __future__ import annotations

_REPLACEMENTS = {"Ġ": " ", "Ċ": "⏎", "ĉ": "⇥", "▁": " ", "\n": "⏎", "\t": "⇥"}


def prettify_token(token: str) -> str:
    """Return a readable form of one raw tokenizer piece (never an empty string)."""
    text = "".join(_REPLACEMENTS.get(ch, ch) for ch in token)
    text = text.strip(" ") or ("␣" if token else "∅")
    return text


def display_tokens(tokenizer, token_ids: list[int]) -> list[str]:
    """Readable display strings for ``token_ids``, one per id."""
    pieces = tokenizer.convert_ids_to_tokens(list(token_ids))
    return [prettify_token(str(p)) for p in pieces]
