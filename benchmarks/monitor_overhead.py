"""What ``AttentionMonitor`` costs a small GPT-2-style training run, as a share of the training time.

    python -m benchmarks.monitor_overhead [--steps 20] [--every 200] [--batch 16] [--length 128] [--full]

Model: GPT-2 with 6 layers × 8 heads, d = 256, 512 positions and the demo-gpt2
tokenizer's 4,096 entries (~6 M parameters), trained
with AdamW on random token ids (the step's cost does not depend on the data),
batches of ``--batch`` × ``--length`` tokens, on the CPU. In one process:

1. ``--steps`` training steps are timed (after 2 warm-up steps): the seconds per step;
2. three measurements of ``AttentionMonitor.on_step`` (default probes) are timed: the seconds per measurement;
3. overhead at ``--every`` = seconds per measurement / (every × seconds per step).

``--full`` also trains ``2 × every`` steps with the monitor on and reports the
share of that run's wall time spent in the monitor (slow: minutes).
Both are ratios measured in the same process, so a busy machine slows both
sides alike; the load average is printed with the result.
"""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from benchmarks import positive  # noqa: E402
from diagnostics.monitor import DEFAULT_EVERY, AttentionMonitor  # noqa: E402

SIZES = {"small": dict(n_embd=256, n_layer=6, n_head=8), "tiny": dict(n_embd=32, n_layer=2, n_head=4)}


def build(size: str):
    from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel
    from core import DEMO_MODELS

    tokenizer = AutoTokenizer.from_pretrained(str(DEMO_MODELS["demo-gpt2"]))
    torch.manual_seed(0)
    model = GPT2LMHeadModel(GPT2Config(vocab_size=len(tokenizer), n_positions=512, **SIZES[size]))
    return model.train(), tokenizer


def train_steps(model, optimiser, steps: int, batch: int, length: int, monitor=None, first_step=1) -> float:
    """Seconds for ``steps`` training steps (with ``monitor.on_step`` after each, when given)."""
    generator = torch.Generator().manual_seed(0)
    start = time.perf_counter()
    for step in range(first_step, first_step + steps):
        ids = torch.randint(0, model.config.vocab_size, (batch, length), generator=generator)  # (B, T)
        model(input_ids=ids, labels=ids).loss.backward()
        optimiser.step()
        optimiser.zero_grad(set_to_none=True)
        if monitor is not None:
            monitor.on_step(model, step)
    return time.perf_counter() - start


def measure(size="small", steps=20, every=DEFAULT_EVERY, batch=16, length=128, full=False) -> dict:
    model, tokenizer = build(size)
    optimiser = torch.optim.AdamW(model.parameters(), lr=1e-4)
    train_steps(model, optimiser, 2, batch, length)  # warm-up
    step_s = train_steps(model, optimiser, steps, batch, length) / steps
    monitor = AttentionMonitor(tokenizer=tokenizer, every=1)
    monitor.on_step(model, 0)  # warm-up
    start = time.perf_counter()
    for step in range(1, 4):
        monitor.on_step(model, step)
    measure_s = (time.perf_counter() - start) / 3
    result = {"size": size, "parameters": sum(p.numel() for p in model.parameters()), "step_s": step_s,
              "measure_s": measure_s, "every": every, "overhead": measure_s / (every * step_s),
              "load": os.getloadavg()[0]}
    if full:
        monitor = AttentionMonitor(tokenizer=tokenizer, every=every)
        total = train_steps(model, optimiser, 2 * every, batch, length, monitor)
        result["full_overhead"] = monitor.seconds / (total - monitor.seconds)
    return result


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", choices=SIZES, default="small")
    parser.add_argument("--steps", type=positive, default=20)
    parser.add_argument("--every", type=positive, default=DEFAULT_EVERY)
    parser.add_argument("--batch", type=positive, default=16)
    parser.add_argument("--length", type=positive, default=128)
    parser.add_argument("--full", action="store_true")
    args = parser.parse_args(argv)
    r = measure(args.size, args.steps, args.every, args.batch, args.length, args.full)
    print(f"GPT-2 {args.size} ({r['parameters'] / 1e6:.1f} M parameters), batch {args.batch} × {args.length}, "
          f"torch threads {torch.get_num_threads()}, load average {r['load']:.1f}")
    print(f"training step: {r['step_s'] * 1000:.0f} ms; one measurement: {r['measure_s'] * 1000:.0f} ms "
          f"(= {r['measure_s'] / r['step_s']:.1f} steps)")
    print(f"overhead at every={r['every']}: {100 * r['overhead']:.2f}% of the training time")
    if "full_overhead" in r:
        print(f"full run of {2 * r['every']} steps with the monitor: {100 * r['full_overhead']:.2f}%")
    return 0


if __name__ == "__main__":
    sys.exit(main())
