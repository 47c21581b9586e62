"""Sinks on ordinary words: heads whose strongest sink key is a word of the text, not where trained models park.

Trained models park unused attention on the first token, on [CLS]/[SEP] and on punctuation (Clark et al. 2019;
Xiao et al. 2023; Gu et al. 2024), and some on a frequent word: healthy SmolLM2-135M, which has no BOS token,
parks on an early "the" with up to 4 of a layer's 9 heads (0.5-0.6 of their attention on one sentence that
begins "Of all the books"). A query bias that outweighs what each query says makes every query of a head prefer
the same key, whichever word scores highest against that bias, a different word in every text, and it does so
for every head of its layer (a random query bias × 20 on all-MiniLM-L6-v2's layer 3: 11 of its 12 heads at
0.54-0.78, on "dog", "bicycle", "and"). ``findings`` names word sinks only where they are most of a layer.
"""

import regex
import torch

from core.extraction.tokens import ESCAPES

# A key is a word when its text holds a letter or a digit ("▁the", "##ing", "1998"); "." "," "⏎" "—" are not, nor
# what a display string escapes ("\x0d", "\u00a0", the bytes "<0xE2><0x9D>" of an emoji).
WORD = regex.compile(r"[\p{L}\p{N}]")


def ordinary_keys(tokens, special=None, padding=None) -> torch.Tensor:
    """Bool ``[k]``: the keys that are words of the text, other than the first real token (a sink wherever it
    is) and special or padding tokens."""
    ordinary = torch.tensor([bool(WORD.search(ESCAPES.sub("", token))) for token in tokens], dtype=torch.bool)  # (k,)
    for flags in (special, padding):
        if flags is not None and len(flags):
            ordinary &= ~torch.as_tensor(flags, dtype=torch.bool)
    real = [i for i, pad in enumerate(padding or []) if not pad]
    ordinary[real[0] if real else 0] = False
    return ordinary


def word_sink_scores(sink_score, sink_key, ordinary) -> torch.Tensor:
    """``[L, H]``: each head's ``sink_score`` where its sink key is an ordinary word (``ordinary_keys``), else
    0."""
    return sink_score * ordinary.to(sink_key.device)[sink_key].to(sink_score.dtype)  # (L, H)
