"""Whether probes fit the model and can bear a verdict: their vocabulary coverage and their length.

``fitting_probes`` keeps the probes whose tokens the vocabulary holds (``probes.MIN_COVERAGE``) and
says which did not; ``verdict_cap`` is the highest severity the attention findings from the probes may
have: "info" when a probe is too short to judge (``probes.MIN_JUDGED_TOKENS``), "warning" for a
caller's unfit texts, else "error" (no cap). Both return the notes that say so.
"""

from core.extraction.encode import max_positions
from diagnostics.findings import note
from diagnostics.probes import (
    MIN_COVERAGE, MIN_JUDGED_TOKENS, VOCABULARY_PROBES, as_probes, probe_coverage, probe_tokens,
)


def fitting_probes(tokenizer, texts):
    """``(probes, unfit, notes)``: the probes to run, whether some did not fit the vocabulary, and a note saying so.

    Default probes below ``MIN_COVERAGE`` are dropped (``diagnose`` adds in-vocabulary probes in their
    place); the caller's own texts are kept, and the findings they give are capped at "warning".
    """
    if tokenizer is None:
        return [], False, []
    probes = as_probes(texts)
    coverage = [probe_coverage(tokenizer, p) for p in probes]
    low = [c for c in coverage if c < MIN_COVERAGE]
    if not low:
        return probes, False, []
    if texts is None:
        probes = [p for p, c in zip(probes, coverage) if c >= MIN_COVERAGE]
        action = f"they were replaced by {VOCABULARY_PROBES} sequences of random in-vocabulary tokens"
    else:
        action = "they were kept, and no finding from them is called an error"
    detail = (f"{len(low)} of {len(coverage)} probes have fewer than {MIN_COVERAGE:.0%} of their tokens in the "
              f"vocabulary (lowest {min(low):.0%}); {action}")
    return probes, True, [note("probes_unfit", detail=detail, coverage=[round(c, 4) for c in coverage],
                               threshold=MIN_COVERAGE)]


def verdict_cap(model, tokenizer, probes, unfit_kept):
    """``(worst, notes)``: the highest severity the probes' attention findings may have, and a note if capped.

    A probe shorter than ``MIN_JUDGED_TOKENS`` (or than the model's position limit, if that is less: no
    probe can be longer) caps them at "info", for the thresholds do not hold on it (the default probes are
    longer); caller's probes that do not fit the vocabulary cap them at "warning" (``fitting_probes``).
    """
    if tokenizer is None:
        return "error", []
    lengths, limit = read_lengths(model, tokenizer, probes)
    needed = min(MIN_JUDGED_TOKENS, limit or MIN_JUDGED_TOKENS)
    short = sum(n < needed for n in lengths)
    if short:
        detail = (f"{short} of {len(lengths)} probes have fewer than {needed} tokens (shortest {min(lengths)}), "
                  "too few for the thresholds, so no finding from them goes above info")
        return "info", [note("probes_short", detail=detail, tokens=lengths, threshold=needed)]
    return ("warning" if unfit_kept else "error"), []


def read_lengths(model, tokenizer, probes):
    """``(lengths, limit)``: the tokens the model reads of each probe (cut to its position limit), and the limit
    (None: no fixed limit)."""
    limit = max_positions(getattr(model, "config", None), tokenizer)
    return [min(probe_tokens(tokenizer, p), limit or float("inf")) for p in probes], limit
