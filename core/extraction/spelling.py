"""How much of a text a tokenizer's tokens spell: a tokenizer without an unknown token drops what it cannot spell.

A BPE model with no ``unk_token`` (and no byte fallback) leaves out every
character it has no token for, and no token says so: the model reads
"the og" for "the dog". Inspect warns of it (``encode``) and a diagnosis counts
it in a probe's coverage (``diagnostics.probes``).
"""

from __future__ import annotations

import torch
from tokenizers import models

from .tokens import is_byte_level


def can_drop(tokenizer) -> bool:
    """Whether ``tokenizer`` can leave out characters it cannot spell: a fast BPE tokenizer with no unknown token and
    no byte fallback that is not byte-level (a byte-level vocabulary spells every byte). Any other has a token for
    what it cannot spell, or refuses the text (a Unigram or word-level model without an unknown token)."""
    model = getattr(getattr(tokenizer, "backend_tokenizer", None), "model", None)
    return (isinstance(model, models.BPE) and model.unk_token is None and not model.byte_fallback
            and not is_byte_level(tokenizer))


def _row(values) -> list:
    """One text's row of a tokenizer output, as a list (a batch of tensors holds one row)."""
    return values[0].tolist() if isinstance(values, torch.Tensor) else list(values)


def characters_spelt(tokenizer, batch, texts: tuple[str, str | None], cut_short: bool) -> tuple[int, int]:
    """Characters the tokenizer could spell, in the part of ``texts`` (a text and its pair) the model reads, that its
    tokens do spell, and how many it could: ``(spelt, could)``. ``batch`` is the fast tokenizer's output of one text
    (with ``special_tokens_mask`` and ``offset_mapping``). Those under an unknown token (one the tokenizer's class
    names where its model has none), or a special one the text names, count as spelt. Both sides are counted on the
    text as the normalizer leaves it (accents stripped, invisible marks dropped, Gemma's spaces as "▁"), in the
    pieces its pre-tokenizer keeps (split delimiters dropped), whitespace aside: the text read, against its tokens
    decoded. A text cut short (``cut_short``) is
    counted between its tokens' offsets (either side may be cut; they are wrong by a little where characters were
    dropped)."""
    backend, unknown = tokenizer.backend_tokenizer, tokenizer.unk_token_id

    def characters(text: str) -> int:
        text = backend.normalizer.normalize_str(text) if backend.normalizer else text
        spans = [span for _, span in backend.pre_tokenizer.pre_tokenize_str(text)] if backend.pre_tokenizer else [
            (0, len(text))]
        return sum(not char.isspace() for start, end in spans for char in text[start:end])

    could = spelt = 0
    marks = zip(_row(batch["input_ids"]), batch.sequence_ids(), _row(batch["special_tokens_mask"]),
                _row(batch["offset_mapping"]))
    tokens = [(i, sequence, added, span) for i, sequence, added, span in marks if sequence is not None]
    for sequence, text in enumerate((texts[0], texts[1] or "")):
        own = [(i, added, span) for i, seq, added, span in tokens if seq == sequence]
        if not own:
            continue
        spans = [span for _, _, span in own if span[1]]  # a special token the tokenizer adds has none
        read = text[min(s for s, _ in spans):max(e for _, e in spans)] if cut_short and spans else text
        could += characters(read)
        spelt += characters(tokenizer.decode([i for i, added, _ in own if i != unknown and not added]))
        spelt += sum(characters(text[s:e]) for i, added, (s, e) in own if i == unknown or added)
    return min(spelt, could), could
