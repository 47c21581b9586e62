"""Long-input benchmark: naive attention extraction vs streamed statistics vs a plain forward pass.

    python -m benchmarks.long_inputs [--models gpt2 bert] [--lengths 128 256 ...] [--skip-naive-above N]

Randomly initialised GPT-2-small-sized (12 layers × 12 heads, d=768) and
BERT-base-sized models (``max_position_embeddings=4096``), one fresh process
per measurement so that each peak RSS (``ru_maxrss``) is its own. Modes:

- ``plain``: SDPA forward, no attention output: the floor;
- ``naive``: eager forward with ``output_attentions=True`` (every map held at
  once, as bertviz/Inseq do), then ``head_metrics`` + ``classify_metrics``
  layer by layer (no stacking, so naive's peak is its forward's);
- ``weights``: the streaming forward with a consumer that drops each chunk:
  the cost of recomputing softmax(QKᵀ) chunk by chunk, without metrics;
- ``stream``: ``diagnostics.streaming.stream_token_statistics``, i.e. the
  streamed forward + every head's metrics + classification.

Time is the wall time of the measured call (model construction excluded);
memory is the process's peak RSS, model included. The last column is the time
the streamed call spent on metrics and labels (``StreamResult.metrics_s``,
timed around that work) over the plain forward's time: timed directly, since
the difference of two whole runs is within their noise at short lengths.
See docs/streaming.md.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

from benchmarks import positive

ROOT = Path(__file__).resolve().parent.parent
MODES = ("plain", "naive", "weights", "stream")
LENGTHS = (128, 256, 512, 1024, 2048, 4096)
SIZES = {  # (layers, heads, hidden): "base" is GPT-2 small / BERT-base
    "base": (12, 12, 768),
    "tiny": (2, 4, 64),
}


def build_model(name: str, size: str, max_length: int):
    """A randomly initialised model in eval mode, loaded with the SDPA implementation."""
    import torch
    from transformers import BertConfig, BertModel, GPT2Config, GPT2Model

    layers, heads, hidden = SIZES[size]
    torch.manual_seed(0)
    if name == "gpt2":
        config = GPT2Config(n_layer=layers, n_head=heads, n_embd=hidden, n_positions=max(max_length, 1024))
        model = GPT2Model(config)
    elif name == "bert":
        config = BertConfig(num_hidden_layers=layers, num_attention_heads=heads, hidden_size=hidden,
                            intermediate_size=4 * hidden, max_position_embeddings=max(max_length, 512))
        model = BertModel(config, add_pooling_layer=False)
    else:
        raise SystemExit(f"unknown model {name!r}; choose gpt2 or bert")
    model.set_attn_implementation("sdpa")
    return model.eval()


def run_plain(model, ids):
    import torch

    with torch.inference_mode():
        model(input_ids=ids, use_cache=False) if hasattr(model.config, "use_cache") else model(input_ids=ids)


def run_naive(model, ids, causal):
    import torch
    from diagnostics.measure.metrics import head_metrics
    from diagnostics.classify.patterns import classify_metrics

    model.set_attn_implementation("eager")
    with torch.inference_mode():
        out = model(input_ids=ids, output_attentions=True)
        for layer in out.attentions:
            classify_metrics(head_metrics(layer[0], causal=causal))


class _Drop:
    def update(self, chunk, q_start, logits):
        pass


def run_weights(model, ids):
    from core.extraction.streaming import stream_attention

    stream_attention(model, ids, lambda layer, heads, keys: _Drop())


def run_stream(model, ids):
    from diagnostics.streaming import stream_token_statistics

    return stream_token_statistics(model, ids).metrics_s


def measure(name: str, size: str, mode: str, length: int) -> dict:
    """One measurement, in this process: ``{"seconds", "peak_gb"}``."""
    import torch

    model = build_model(name, size, length)
    ids = torch.randint(0, model.config.vocab_size, (1, length), generator=torch.Generator().manual_seed(0))
    causal = name == "gpt2"
    runs = {"plain": lambda: run_plain(model, ids), "naive": lambda: run_naive(model, ids, causal),
            "weights": lambda: run_weights(model, ids), "stream": lambda: run_stream(model, ids)}
    # short runs: a warm-up, then the best of five; long ones: the best of two (naive above 2048 tokens: one)
    repeats = 5 if length <= 512 else 1 if mode == "naive" and length > 2048 else 2
    if length <= 512:
        runs[mode]()
    best = {"seconds": float("inf")}
    for _ in range(repeats):
        start = time.perf_counter()
        metrics_s = runs[mode]()
        seconds = time.perf_counter() - start
        if seconds < best["seconds"]:
            best = {"seconds": seconds} | ({"metrics_s": metrics_s} if metrics_s is not None else {})
    peak_kb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss  # KiB on Linux
    return best | {"peak_gb": peak_kb / 1024**2}


def measure_in_subprocess(name: str, size: str, mode: str, length: int) -> dict:
    """``measure`` in a fresh Python process, so its peak RSS is this measurement's alone."""
    cmd = [sys.executable, "-m", "benchmarks.long_inputs", "--worker", json.dumps([name, size, mode, length])]
    done = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
    if done.returncode != 0:
        return {"error": (done.stderr.strip().splitlines() or ["killed"])[-1][:120]}
    return json.loads(done.stdout.strip().splitlines()[-1])


def machine() -> str:
    import torch

    cpu = platform.processor() or platform.machine()
    return (f"{platform.system()} {cpu}, {os.cpu_count()} CPUs, torch {torch.__version__} "
            f"({torch.get_num_threads()} threads), Python {platform.python_version()}")


def format_row(name, length, results) -> str:
    cells = [name, str(length)]
    for mode in MODES:
        r = results.get(mode)
        if r is None:
            cells.append("skipped")
        elif "error" in r:
            cells.append(f"failed ({r['error']})")
        else:
            cells.append(f"{r['seconds']:.2f} s / {r['peak_gb']:.2f} GB")
    plain, stream = results.get("plain"), results.get("stream")
    if _ok(plain, stream):  # the last cell: time spent on the metrics and labels, against the forward pass
        cells.append(f"{stream['seconds'] / plain['seconds']:.2f}× / {stream['peak_gb'] / plain['peak_gb']:.2f}×")
        cells.append(f"{stream['metrics_s'] / plain['seconds']:.0%}")
    else:
        cells += ["–", "–"]
    return "| " + " | ".join(cells) + " |"


def _ok(*results) -> bool:
    return all(r is not None and "error" not in r for r in results)


HEADER = ("| model | tokens | plain SDPA forward | naive (eager + output_attentions) | streamed weights only "
          "| streamed statistics | statistics ÷ plain (time / memory) | metrics ÷ plain time |\n"
          "|---|---|---|---|---|---|---|---|")


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=["gpt2", "bert"], choices=["gpt2", "bert"])
    parser.add_argument("--lengths", nargs="+", type=positive, default=list(LENGTHS))
    parser.add_argument("--modes", nargs="+", default=list(MODES), choices=MODES)
    parser.add_argument("--skip-naive-above", type=int, default=None, metavar="N",
                        help="skip the naive path above N tokens (it needs layers × heads × N² × 4 bytes)")
    parser.add_argument("--size", default="base", choices=sorted(SIZES), help="'tiny' is for smoke tests")
    parser.add_argument("--worker", help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.worker:
        print(json.dumps(measure(*json.loads(args.worker))))
        return 0
    print(f"machine: {machine()}\n\n{HEADER}", flush=True)
    for name in args.models:
        for length in args.lengths:
            results = {}
            for mode in args.modes:
                if mode == "naive" and args.skip_naive_above is not None and length > args.skip_naive_above:
                    continue
                results[mode] = measure_in_subprocess(name, args.size, mode, length)
            print(format_row(name, length, results), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
