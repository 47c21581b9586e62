"""How long a probe must be for the findings' thresholds to hold (``probe_texts.MIN_JUDGED_TOKENS``).

    python -m benchmarks.short_probes [--models minilm smollm2 demo-bert demo-gpt2] [--lengths 8 16 ...]
                                      [--half heldout|tuning] [--random]

For each model and length n, one diagnosis per probe of n tokens, with the cap
on short probes switched off, so the table shows what the findings would say:
- "tuning": the first n tokens of each of the seven default probes (the cap's
  threshold was read off these);
- "held-out": one half of the real-model texts (``real_truth.HELDOUT``, or
  ``--half tuning``: ``real_truth.TUNING``), run together and cut into windows of
  n tokens (up to twelve, as many as they fill). They start anywhere in a sentence.
A cell counts the probes that gave the healthy model a warning or an error,
with the codes; "Q/K × 8" counts the probes on which its copy with Q/K weights
× 8 gets its ``saturated_heads`` error: what the cap hides below the threshold.
``--random`` lists instead the warnings and errors of AttnScope's own
random-token probes at each length (``probes.RANDOM_LENGTH``).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections import Counter
from contextlib import contextmanager, nullcontext
from pathlib import Path

from benchmarks import MODELS, positive, rows_or_exit

sys.path.insert(0, str(Path(__file__).resolve().parent.parent / "tests" / "diagnostics"))  # pathologies

WINDOWS = 12


def probe_texts(tokenizer, n: int, half: str) -> dict[str, list[str]]:
    """The tuning and held-out probes of ``n`` tokens (before the tokenizer's special tokens), as text."""
    from diagnostics.classify.real_truth import HELDOUT, TEXTS, TUNING
    from diagnostics.probe_texts import DEFAULT_PROBES

    def ids(text):
        return tokenizer(text, add_special_tokens=False, verbose=False)["input_ids"]

    held_out = ids(" ".join(TEXTS[i] for i in (HELDOUT if half == "heldout" else TUNING)))
    windows = min(WINDOWS, len(held_out) // n)
    return {"tuning": [tokenizer.decode(ids(p.text)[:n]) for p in DEFAULT_PROBES],
            "held-out": [tokenizer.decode(held_out[i * n: (i + 1) * n]) for i in range(windows)]}


def alarms(report) -> list[str]:
    return [f"{f.code} {f.severity}" for f in report.findings if f.severity in ("warning", "error")]


@contextmanager
def uncapped():
    """Findings of short probes at the severity their thresholds give (the cap switched off)."""
    fit = importlib.import_module("diagnostics.probes")
    saved = fit.MIN_JUDGED_TOKENS, fit.MIN_DISTINCT_TOKENS
    fit.MIN_JUDGED_TOKENS = fit.MIN_DISTINCT_TOKENS = 0  # a probe of a few tokens has few distinct ones too
    try:
        yield importlib.import_module("diagnostics.diagnose").diagnose  # the module's function
    finally:
        fit.MIN_JUDGED_TOKENS, fit.MIN_DISTINCT_TOKENS = saved


def summarise(name: str, lengths: list[int], half: str) -> list[str]:
    import core
    from pathologies import scaled_qk

    model, tokenizer = core.load_model(name)
    rows = []
    with uncapped() as diagnose:
        for n in lengths:
            cells = []
            for texts in probe_texts(tokenizer, n, half).values():
                healthy = [alarms(diagnose((model, tokenizer), texts=[t])) for t in texts]
                codes = Counter(code for a in healthy for code in a)
                with scaled_qk(model, 8):
                    broken = sum("saturated_heads error" in alarms(diagnose((model, tokenizer), texts=[t]))
                                 for t in texts)
                listed = ", ".join(f"{code} ×{count}" for code, count in sorted(codes.items()))
                cells += [f"{sum(bool(a) for a in healthy)}/{len(texts)}" + (f" ({listed})" if listed else ""),
                          f"{broken}/{len(texts)}"]
            rows.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    return rows


def random_rows(name: str, lengths: list[int]) -> list[str]:
    """The warnings and errors of AttnScope's own random-token probes of each length: without the tokenizer
    (random ids) and with it (random in-vocabulary tokens, as when the default probes do not fit)."""
    import core
    from pathologies import scaled_qk

    diagnose_module = importlib.import_module("diagnostics.diagnose")
    model, tokenizer = core.load_model(name)
    rows = []
    for n in lengths:
        cells = []
        for copy in (nullcontext(), scaled_qk(model, 8)):  # healthy, then Q/K x 8
            with copy, random_length(n), no_text_fits():
                found = [alarms(diagnose_module.diagnose(source)) for source in (model, (model, tokenizer))]
            cells += [", ".join(a) or "none" for a in found]
        rows.append(f"| {name} | {n} | " + " | ".join(cells) + " |")
    return rows


@contextmanager
def random_length(n: int):
    """AttnScope's random-token probes ``n`` tokens long (``probes.RANDOM_LENGTH``)."""
    probes = importlib.import_module("diagnostics.probes")
    saved = probes.random_probe.__defaults__, probes.vocabulary_probe.__defaults__
    probes.random_probe.__defaults__ = probes.vocabulary_probe.__defaults__ = (n,)
    try:
        yield
    finally:
        probes.random_probe.__defaults__, probes.vocabulary_probe.__defaults__ = saved


@contextmanager
def no_text_fits():
    """Every default probe counted as unfit, so the diagnosis uses random in-vocabulary tokens instead."""
    fit = importlib.import_module("diagnostics.probes")
    saved, fit.MIN_COVERAGE = fit.MIN_COVERAGE, 1.01
    try:
        yield
    finally:
        fit.MIN_COVERAGE = saved


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--models", nargs="+", default=MODELS, help="names, Hub ids or folders core.load_model reads")
    parser.add_argument("--lengths", nargs="+", type=positive, default=[4, 8, 16, 24, 32, 40, 48, 64, 96])
    parser.add_argument("--half", choices=["heldout", "tuning"], default="heldout",
                        help="the half of the real-model texts cut into windows")
    parser.add_argument("--random", action="store_true",
                        help="instead: AttnScope's random-token probes of each length (no tokenizer; unfit texts)")
    args = parser.parse_args(argv)
    if args.random:
        print("| model | tokens | healthy, random ids | healthy, random vocabulary | Q/K × 8, random ids "
              "| Q/K × 8, random vocabulary |\n|---|---|---|---|---|---|", flush=True)
        for name in args.models:
            rows_or_exit(parser, name, lambda m: random_rows(m, args.lengths))
        return 0
    print("| model | tokens | tuning: healthy with a warning or error | tuning: Q/K × 8 saturated error "
          "| held-out: healthy with a warning or error | held-out: Q/K × 8 saturated error |\n"
          "|---|---|---|---|---|---|", flush=True)
    for name in args.models:
        rows_or_exit(parser, name, lambda m: summarise(m, args.lengths, args.half))
    return 0


if __name__ == "__main__":
    sys.exit(main())
