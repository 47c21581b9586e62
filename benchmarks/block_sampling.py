"""Error of the row-subsampled block score against every row, on real models.

    python -m benchmarks.block_sampling [--models smollm2 minilm] [--tokens 2048 512] [--rows 512]

Streams one long probe (the default texts repeated) through the model layer by
layer; every chunk feeds two ``metrics.MetricAccumulator``: one that measures
the block score on every query row (exact), one on at most ``--rows`` evenly
spaced rows (what diagnose uses, ``metrics.BLOCK_ROWS``). Prints, over every
head, the largest and the mean absolute difference of the two block scores, and
the heads whose pattern label differs. ``--tokens`` pairs with ``--models``.
"""

from __future__ import annotations

import sys

from benchmarks.diagnose import long_probe, smollm2_model
from benchmarks.js_sampling import minilm_model, sampling_main


class _Both:
    def __init__(self, exact, sampled):
        self.exact, self.sampled = exact, sampled

    def update(self, chunk, q_start, logits=None):
        self.exact.update(chunk, q_start, logits)
        self.sampled.update(chunk, q_start, logits)


def compare(name: str, tokens: int, rows: int) -> str:
    from core.extraction.streaming import stream_attention
    from diagnostics.classify.patterns import classify_metrics
    from diagnostics.measure.metrics import MetricAccumulator
    from diagnostics.streaming import model_is_causal, stack_metrics

    model, tokenizer = minilm_model() if name == "minilm" else smollm2_model()
    enc = tokenizer(long_probe(tokenizer, tokens), return_tensors="pt", return_special_tokens_mask=True)
    ids, special = enc["input_ids"][:, :tokens], enc["special_tokens_mask"][0, :tokens].bool()  # (1, T), (T,)
    causal, n = model_is_causal(model), ids.shape[1]
    factory = lambda layer, heads, keys: _Both(MetricAccumulator(keys, causal, special, block_rows=10**9),
                                               MetricAccumulator(keys, causal, special, block_rows=rows))
    consumers = stream_attention(model, ids, factory).consumers
    exact = stack_metrics([c.exact.finalize() for c in consumers])
    sampled = stack_metrics([c.sampled.finalize() for c in consumers])
    diff = (sampled.block_score - exact.block_score).abs()
    labels = [[p.label for row in classify_metrics(m) for p in row] for m in (exact, sampled)]
    changed = sum(a != b for a, b in zip(*labels))
    return (f"| {name} | {n} | {-(-n // rows)} | {diff.numel()} | {diff.max():.4f} | {diff.mean():.5f} "
            f"| {exact.block_score.min():.3f}-{exact.block_score.max():.3f} | {changed} |")


def main(argv=None) -> int:
    from diagnostics.measure.metrics import BLOCK_ROWS

    header = ("| model | tokens | every n-th row | heads | max abs. error | mean abs. error | exact scores "
              "| labels changed |\n|---|---|---|---|---|---|---|---|")
    return sampling_main(argv, __doc__, compare, ["smollm2", "minilm"], [2048, 512], BLOCK_ROWS, header)


if __name__ == "__main__":
    sys.exit(main())
