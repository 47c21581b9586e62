"""The numbers behind the findings' thresholds: healthy real models and their broken copies.

    python -m benchmarks.calibration [--models minilm smollm2 demo-bert demo-gpt2]

For each model, diagnosed with the default probes: the range of the reachable
score bound (``max_score``, ``weights.qk_norms``) and every warning or error,
for the healthy model and for its Q/K × 8, Q/K × 0 and every-head-a-copy
versions (``tests/diagnostics/pathologies.py``, the copies the slow tests use).
"""

from __future__ import annotations

import argparse
import sys
from contextlib import nullcontext
from pathlib import Path

from benchmarks import MODELS, rows_or_exit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "diagnostics"))  # pathologies


def summarise(name: str) -> list[str]:
    import core
    from diagnostics import diagnose
    from pathologies import copied_heads, scaled_qk

    model, tokenizer = core.load_model(name)
    rows = []
    cases = {"healthy": nullcontext(), "Q/K × 8": scaled_qk(model, 8), "Q/K × 0": scaled_qk(model, 0),
             "copies": copied_heads(model)}
    for case, edit in cases.items():
        with edit:
            report = diagnose((model, tokenizer))
        scores = [h.metrics["max_score"] for h in report.heads if "max_score" in h.metrics]
        bound = f"{min(scores):.1f}–{max(scores):.1f}" if scores else "–"
        severe = ", ".join(f"{f.code} {f.severity} {len(f.heads)}/{len(report.heads)}" for f in report.findings
                           if f.severity in ("error", "warning")) or "none"
        rows.append(f"| {name} | {case} | {bound} | {severe} |")
    return rows


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=MODELS, help="names, Hub ids or folders core.load_model reads")
    args = parser.parse_args(argv)
    print("| model | copy | reachable score bound (min–max over heads) | warnings and errors |\n|---|---|---|---|",
          flush=True)
    for name in args.models:
        rows_or_exit(parser, name, summarise)
    return 0


if __name__ == "__main__":
    sys.exit(main())
