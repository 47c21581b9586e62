"""Error of the row-subsampled block score and top-k mass against every row, on real models.

    python -m benchmarks.block_sampling [--models smollm2 minilm] [--tokens 2048 512] [--rows 512]

Streams one long probe (the default texts repeated) through the model layer by
layer; every chunk feeds two ``metrics.MetricAccumulator``: one that measures
the block score and ``topk_mass`` on every query row (exact), one on at most ``--rows``
evenly spaced rows (what diagnose uses, ``metrics.BLOCK_ROWS``). Prints, over every
head, the largest and the mean absolute difference of the two block scores, the
heads whose pattern label differs, and the same differences of ``topk_mass``. ``--tokens`` pairs with ``--models``.
"""

from __future__ import annotations

import sys

from benchmarks.diagnose import long_probe
from benchmarks.js_sampling import sampling_main, sampling_model, stream_exact_and_sampled


def compare(name: str, tokens: int, rows: int) -> str:
    from diagnostics.classify.patterns import classify_metrics
    from diagnostics.measure.metrics import MetricAccumulator
    from core.extraction.extract import model_is_causal
    from diagnostics.measure.metrics import stack_metrics

    model, tokenizer = sampling_model(name)
    enc = tokenizer(long_probe(tokenizer, tokens), return_tensors="pt", return_special_tokens_mask=True)
    ids, special = enc["input_ids"][:, :tokens], enc["special_tokens_mask"][0, :tokens].bool()  # (1, T), (T,)
    causal, n = model_is_causal(model), ids.shape[1]
    make = lambda keys, exact: MetricAccumulator(keys, causal, special, block_rows=10**9 if exact else rows)
    exact, sampled = (stack_metrics(m) for m in stream_exact_and_sampled(model, ids, make, with_logits=True))
    diff = (sampled.block_score - exact.block_score).abs()
    labels = [[p.label for row in classify_metrics(m) for p in row] for m in (exact, sampled)]
    changed = sum(a != b for a, b in zip(*labels))
    top = (sampled.topk_mass - exact.topk_mass).abs()
    return (f"| {name} | {n} | {-(-n // rows)} | {diff.numel()} | {diff.max():.4f} | {diff.mean():.5f} "
            f"| {exact.block_score.min():.3f}-{exact.block_score.max():.3f} | {changed} "
            f"| {top.max():.4f} | {top.mean():.5f} | {exact.topk_mass.min():.3f}-{exact.topk_mass.max():.3f} |")


def main(argv=None) -> int:
    from diagnostics.measure.metrics import BLOCK_ROWS

    header = ("| model | tokens | one row in | heads | max abs. error | mean abs. error | exact scores "
              "| labels changed | top-k mass: max abs. error | mean abs. error | exact |\n"
              "|---|---|---|---|---|---|---|---|---|---|---|")
    return sampling_main(argv, __doc__, compare, ["smollm2", "minilm"], [2048, 512], BLOCK_ROWS, header)


if __name__ == "__main__":
    sys.exit(main())
