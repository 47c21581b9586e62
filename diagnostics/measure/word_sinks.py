"""Sinks on ordinary words: heads whose strongest sink key is a word of the text, not where trained models park.

Trained models park unused attention on the first token, on [CLS]/[SEP] and on punctuation (Clark et al. 2019;
Xiao et al. 2023; Gu et al. 2024), and some on a frequent word: healthy SmolLM2-135M, which has no BOS token,
parks heads of layers 3-10 on one early "the" (31 heads, 7 of layer 7's 9, on a 140-token tweet; 12 heads of
layers 4-8 on the sentence "Of all the books on the shelf, the one …"). Such a token is a sink the model made
of it, in the residual stream that every layer reads (Sun et al. 2024, "Massive Activations in Large Language
Models"), so heads of several layers park on it together. A query bias that outweighs what each query says acts
on one layer: every query of each of its heads prefers whichever word scores highest against that head's bias,
a word of its own, different in every text (a random query bias × 20 on all-MiniLM-L6-v2's layer 3: 11 of its 12
heads at 0.54-0.78, on "dog", "bicycle", "and"; at most 2 of them on one word). So a word that heads of two
layers or more park on is no ordinary word; ``findings`` names word sinks only where they are most of a layer.
"""

import regex
import torch

from core.extraction.tokens import ESCAPES
from diagnostics.findings import SINK_SCORE
from diagnostics.measure.metrics import sink_keys

# A key is a word when its text holds a letter or a digit ("▁the", "##ing", "1998"); "." "," "⏎" "—" are not, nor
# what a display string escapes ("\x0d", "\u00a0", the bytes "<0xE2><0x9D>" of an emoji).
WORD = regex.compile(r"[\p{L}\p{N}]")


def ordinary_keys(tokens, special=None, padding=None) -> torch.Tensor:
    """Bool ``[k]``: the keys that are words of the text, other than the metrics' sinks (``metrics.sink_keys``: the
    first real token, a sink wherever it is, and the special tokens) and padding."""
    words = torch.tensor([bool(WORD.search(ESCAPES.sub("", token))) for token in tokens], dtype=torch.bool)  # (k,)
    pads = torch.zeros_like(words) if padding is None else torch.as_tensor(padding, dtype=torch.bool)  # (k,)
    return words & ~sink_keys(len(tokens), special, padding) & ~pads


def word_sink_scores(sink_score, sink_key, ordinary) -> torch.Tensor:
    """``[L, H]``: each head's ``sink_score`` where its sink key is an ordinary word (``ordinary_keys``) other than
    one that heads of two layers or more park on (a sink score of ``SINK_SCORE`` or more), else 0."""
    parked = sink_score >= SINK_SCORE  # (L, H)
    layer = torch.arange(sink_key.shape[0], device=sink_key.device).unsqueeze(-1).expand_as(sink_key)  # (L, H)
    seen = torch.zeros(sink_key.shape[0], ordinary.numel(), dtype=torch.bool, device=sink_key.device)  # (L, k)
    seen[layer[parked], sink_key[parked]] = True
    learned = seen.sum(0) >= 2  # (k,): a word heads of two layers or more park on
    words = ordinary.to(sink_key.device) & ~learned  # (k,)
    return sink_score * words[sink_key].to(sink_score.dtype)  # (L, H)
