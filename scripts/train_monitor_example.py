"""Train a tiny GPT-2 with the attention monitor on: healthy, and with Q/K initialised × 0 and × 10.

The corpus is the demo models' (``train_demo_models.gather_corpus``: standard
library docstrings, offline), tokenized with the demo-gpt2 tokenizer. The model
is 2 layers × 4 heads, width 64, 128 positions; AdamW at 3e-3, batches of
8 × 64 tokens. Run ``qk_zero`` multiplies the Q and K weights (and biases) by 0
at initialisation: every score is 0, every head exactly uniform, and since
dL/dW_q is proportional to K and dL/dW_k to Q, no gradient ever reaches them, so
the heads stay uniform for good; ``qk_x10`` multiplies them by 10 (std 0.2).
The monitor logs every ``--every`` steps (and at step 0, before any update) to
``OUT/<run>.jsonl``; docs/training.md shows both logs on the Timeline page.

    python scripts/train_monitor_example.py --out docs/training [--runs healthy qk_zero qk_x10] \
        [--steps 300] [--every 25]
"""

import argparse
import logging
import sys
import time
from pathlib import Path

import torch
from transformers import AutoTokenizer, GPT2Config, GPT2LMHeadModel

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "scripts")]

from core import DEMO_MODELS  # noqa: E402
from diagnostics.monitor import AttentionMonitor  # noqa: E402
from train_demo_models import gather_corpus  # noqa: E402

SEED = 0
BATCH, LENGTH = 8, 64
PEAK_LR = 3e-3
RUNS = {"healthy": 1.0, "qk_zero": 0.0, "qk_x10": 10.0}  # run name: factor on the initial Q/K weights


def build_model(vocab_size: int, qk_factor: float) -> GPT2LMHeadModel:
    torch.manual_seed(SEED)
    config = GPT2Config(vocab_size=vocab_size, n_embd=64, n_layer=2, n_head=4, n_positions=128, resid_pdrop=0.0,
                        embd_pdrop=0.0, attn_pdrop=0.0)
    model = GPT2LMHeadModel(config)
    with torch.no_grad():
        for block in model.transformer.h:
            width = block.attn.c_attn.weight.shape[-1] // 3  # c_attn: (d, 3d) = [Q | K | V]
            block.attn.c_attn.weight[:, : 2 * width] *= qk_factor
            block.attn.c_attn.bias[: 2 * width] *= qk_factor
    return model


def token_stream(tokenizer) -> torch.Tensor:
    docs = gather_corpus()
    ids = tokenizer(f" {tokenizer.eos_token} ".join(docs), verbose=False)["input_ids"]
    return torch.tensor(ids)


def train(model, stream, steps: int, monitor: AttentionMonitor) -> float:
    """Train ``steps`` steps on random windows of ``stream``; returns the seconds spent training (not measuring)."""
    generator = torch.Generator().manual_seed(SEED)
    optimiser = torch.optim.AdamW(model.parameters(), lr=PEAK_LR, weight_decay=0.01)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimiser, lambda s: min(1.0, (s + 1) / 50))
    model.train()
    monitor.on_step(model, 0)
    start, measuring = time.perf_counter(), monitor.seconds
    for step in range(1, steps + 1):
        starts = torch.randint(0, len(stream) - LENGTH - 1, (BATCH,), generator=generator)
        batch = torch.stack([stream[s: s + LENGTH] for s in starts.tolist()])  # (B, T)
        loss = model(input_ids=batch, labels=batch).loss
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimiser.step()
        schedule.step()
        optimiser.zero_grad(set_to_none=True)
        record = monitor.on_step(model, step)
        if record is not None:
            print(f"step {step}: loss {loss.item():.3f}, {_summary(record)}", flush=True)
    return time.perf_counter() - start - (monitor.seconds - measuring)


def _summary(record) -> str:
    entropies = [h["metrics"]["entropy"] for h in record["heads"]]
    errors = [f["code"] for f in record["findings"] if f["severity"] == "error"]
    return f"mean entropy {sum(entropies) / len(entropies):.3f}, errors {errors or 'none'}"


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "training")
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--every", type=int, default=25)
    parser.add_argument("--runs", nargs="+", choices=list(RUNS), default=list(RUNS))
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    tokenizer = AutoTokenizer.from_pretrained(str(DEMO_MODELS["demo-gpt2"]))
    stream = token_stream(tokenizer)
    for run in args.runs:
        log_path = args.out / f"{run}.jsonl"
        log_path.unlink(missing_ok=True)
        monitor = AttentionMonitor(tokenizer=tokenizer, every=args.every, log_path=log_path,
                                   uniform_after=args.steps // 4)
        print(f"== {run}: Q/K × {RUNS[run]:g}", flush=True)
        seconds = train(build_model(len(tokenizer), RUNS[run]), stream, args.steps, monitor)
        print(f"{run}: {seconds:.1f} s training, {monitor.seconds:.1f} s measuring -> {log_path}", flush=True)


if __name__ == "__main__":
    main()
