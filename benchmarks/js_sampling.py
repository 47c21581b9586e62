"""Error of the row-subsampled head-similarity (JS distance) against every row, on real models.

    python -m benchmarks.js_sampling [--models minilm smollm2] [--tokens 512 1024] [--rows 128]

Streams one long probe (the default texts repeated) through the model layer by
layer; every chunk feeds two ``redundancy.PairwiseJS``: one over every query
row (exact), one over at most ``--rows`` evenly spaced rows (what diagnose
uses, ``redundancy.JS_ROWS``). Prints, over every same-layer pair of heads, the
largest and the mean absolute difference of the two distances, and the pairs
whose side of ``REDUNDANT_JS`` differs. ``--tokens`` pairs with ``--models``.
"""

from __future__ import annotations

import argparse
import sys

from benchmarks.diagnose import long_probe, smollm2_model
from diagnostics.cli import positive_int


def minilm_model():
    import core

    return core.load_model("minilm")


def sampling_model(name: str):
    """The ``(model, tokenizer)`` a row-sampling benchmark runs on: "minilm" or "smollm2"."""
    return minilm_model() if name == "minilm" else smollm2_model()


class _Both:
    """One layer's consumer: every chunk to an exact and a sampled accumulator (the logits too, ``with_logits``)."""

    def __init__(self, exact, sampled, with_logits):
        self.exact, self.sampled, self.with_logits = exact, sampled, with_logits

    def update(self, chunk, q_start, logits=None):
        extra = (logits,) if self.with_logits else ()
        self.exact.update(chunk, q_start, *extra)
        self.sampled.update(chunk, q_start, *extra)


def stream_exact_and_sampled(model, ids, make, with_logits=False):
    """Stream ``ids`` through ``model`` into ``make(keys, exact=True)`` and ``make(keys, exact=False)`` per layer.

    Returns the two lists of finalized results, one item a layer: ``(exact, sampled)``.
    """
    from core.extraction.streaming import stream_attention

    factory = lambda layer, heads, keys: _Both(make(keys, True), make(keys, False), with_logits)
    consumers = stream_attention(model, ids, factory).consumers
    return [c.exact.finalize() for c in consumers], [c.sampled.finalize() for c in consumers]


def compare(name: str, tokens: int, rows: int) -> str:
    import torch

    from diagnostics.measure.redundancy import REDUNDANT_JS, PairwiseJS
    from core.extraction.extract import model_is_causal

    model, tokenizer = sampling_model(name)
    ids = tokenizer(long_probe(tokenizer, tokens), return_tensors="pt")["input_ids"][:, :tokens]  # (1, T)
    causal, n = model_is_causal(model), ids.shape[1]
    make = lambda keys, exact: PairwiseJS(keys, causal, max_rows=10**9 if exact else rows)
    exact, sampled = (torch.stack(m) for m in stream_exact_and_sampled(model, ids, make))  # (L, H, H) each
    upper = torch.ones_like(exact[0], dtype=torch.bool).triu(1).expand_as(exact)  # each pair once
    diff = (sampled - exact).abs()[upper]
    flipped = ((exact < REDUNDANT_JS) != (sampled < REDUNDANT_JS))[upper].sum()
    below = (exact < REDUNDANT_JS)[upper].sum()
    return (f"| {name} | {n} | {rows} | {int(upper.sum())} | {diff.max():.4f} | {diff.mean():.4f} "
            f"| {int(below)} | {int(flipped)} |")


def main(argv=None) -> int:
    from diagnostics.measure.redundancy import JS_ROWS

    header = ("| model | tokens | rows sampled | pairs | max abs. error | mean abs. error | pairs < 0.1 (exact) "
              "| pairs on the other side of 0.1 |\n|---|---|---|---|---|---|---|---|")
    return sampling_main(argv, __doc__, compare, ["minilm", "smollm2"], [512, 1024], JS_ROWS, header)


def sampling_main(argv, doc: str, compare, models: list, tokens: list, rows: int, header: str) -> int:
    """The command line of a row-sampling benchmark: ``compare(model, tokens, rows)`` row by row under ``header``."""
    parser = argparse.ArgumentParser(description=doc.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=models, choices=["minilm", "smollm2"])
    parser.add_argument("--tokens", nargs="+", type=positive_int, default=tokens, help="one per model")
    parser.add_argument("--rows", type=positive_int, default=rows, help=f"rows sampled per map (default: {rows})")
    args = parser.parse_args(argv)
    if len(args.tokens) != len(args.models):  # zip dropped the models without a length
        parser.error(f"give one --tokens per model: {len(args.models)} models, {len(args.tokens)} lengths")
    print(header, flush=True)
    for name, length in zip(args.models, args.tokens):
        print(compare(name, length, args.rows), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
