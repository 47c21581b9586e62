"""Measure patterns and roles on real models against the behavioural ground truth of ``real_truth``.

For each model of the evaluation set (all-MiniLM-L6-v2, SmolLM2-135M-Instruct, demo-bert, demo-gpt2):

- roles: the diagnosis pipeline (``diagnose.measure`` + ``diagnose_part``, with its own
  repeated-sequence probes, ``diagnose.ROLE_SEEDS``) on the texts of one half of ``real_truth.TEXTS``; each
  head's roles against the ground truth of the same half (``data/real_truth.json``, repeated
  seeds 1-3). Precision and recall pooled over the models.
- stability: every head's pattern and role set on each of the 7 ``probes.DEFAULT_PROBES``
  alone; a head is stable when all 7 agree (also: the mean share of probes giving the head's
  majority label). And the diagnosis itself: pattern and roles from the 16 tuning texts against
  those from the 16 held-out texts.
- block: how many heads are block on one long text (the 32 texts joined, twice).

Run: ``python -m diagnostics.classify.eval_real [--half heldout|tuning] [--models ...] [--long]``
(ground truth: ``python -m diagnostics.classify.real_truth``).
"""

import argparse
import json
from collections import Counter

import core
from diagnostics.classify.real_truth import DATA, HELDOUT, TEXTS, TUNING, real_models, truth_roles
from diagnostics.classify.roles import head_roles, role_scores
from diagnostics.diagnose import _repeated, _repeated_roles, diagnose_part, measure
from diagnostics.probes import DEFAULT_PROBES

TARGET_ROLES = ("previous_token", "next_token", "induction", "sink")
REPORTED_ROLES = TARGET_ROLES + ("self", "duplicate_token")


def evaluate_model(model, tokenizer, entry, half="heldout", long=False):
    """``{"counts": {role: [tp, fp, fn]}, "stable": {...}, "patterns": Counter, ...}`` for one model."""
    repeated = _repeated(model, tokenizer, lambda *_: None)
    heads, other = (_diagnosed(model, tokenizer, idx, repeated) for idx in
                    ((HELDOUT, TUNING) if half == "heldout" else (TUNING, HELDOUT)))
    truth = truth_roles(entry, half)
    counts = {}
    for role in REPORTED_ROLES:
        predicted = {(h.layer, h.head) for h in heads if role in h.role_names}
        actual = {tuple(i) for i in truth[role].nonzero().tolist()}
        counts[role] = [len(predicted & actual), len(predicted - actual), len(actual - predicted)]
    same = [a.pattern == b.pattern and set(a.role_names) == set(b.role_names) for a, b in zip(heads, other)]
    out = {"counts": counts, "heads": len(heads), "halves_agree": sum(same), **stability(model, tokenizer, repeated)}
    if long:
        result = core.extract_attention(model, tokenizer, " ".join(TEXTS * 2))
        out["long"] = {"tokens": result.attentions.shape[-1],
                       "patterns": Counter(p.label for row in measure(result).patterns for p in row)}
    return out


def _diagnosed(model, tokenizer, indices, repeated):
    """The ``HeadReport``s of a diagnosis whose probes are the texts ``indices``."""
    measured = [measure(core.extract_attention(model, tokenizer, TEXTS[i])) for i in indices]
    return diagnose_part("self", measured, repeated)[0]


def stability(model, tokenizer, repeated):
    """Share of heads whose pattern / role set / both are the same on all default probes alone."""
    rep = _repeated_roles(repeated)
    labels, roles = [], []
    for probe in DEFAULT_PROBES:
        m = measure(core.extract_attention(model, tokenizer, probe.text, probe.text_pair))
        labels.append([p.label for row in m.patterns for p in row])
        roles.append([frozenset(r.role for r in rs) for row in head_roles(role_scores(m.metrics, rep), m.causal)
                      for rs in row])
    n = len(labels[0])
    same_label = [len({probe[i] for probe in labels}) == 1 for i in range(n)]
    same_roles = [len({probe[i] for probe in roles}) == 1 for i in range(n)]
    pattern_counts = Counter(label for probe in labels for label in probe)
    majority = lambda values: Counter(values).most_common(1)[0][1] / len(values)  # noqa: E731
    return {"stable": {"pattern": sum(same_label), "roles": sum(same_roles),
                       "both": sum(a and b for a, b in zip(same_label, same_roles))},
            "agreement": {"pattern": sum(majority([p[i] for p in labels]) for i in range(n)),
                          "roles": sum(majority([p[i] for p in roles]) for i in range(n))},
            "probe_patterns": dict(pattern_counts)}


def precision_recall(tp, fp, fn):
    return tp / max(tp + fp, 1), tp / max(tp + fn, 1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", choices=("heldout", "tuning"), default="heldout")
    parser.add_argument("--models", nargs="*", default=list(real_models()))
    parser.add_argument("--long", action="store_true", help="also count block heads on one long text")
    args = parser.parse_args(argv)
    truth = json.loads(DATA.read_text())
    pooled, results = {role: [0, 0, 0] for role in REPORTED_ROLES}, {}
    for name in args.models:
        model, tokenizer = real_models()[name]()
        results[name] = evaluate_model(model, tokenizer, truth[name], args.half, args.long)
        for role, c in results[name]["counts"].items():
            pooled[role] = [a + b for a, b in zip(pooled[role], c)]
        print(name, json.dumps(results[name], default=dict), flush=True)
    print(f"\n{args.half} half, pooled over {', '.join(args.models)}\n")
    print("| role | true heads | tp | fp | fn | precision | recall |\n|---|---|---|---|---|---|---|")
    for role, (tp, fp, fn) in pooled.items():
        p, r = precision_recall(tp, fp, fn)
        print(f"| {role} | {tp + fn} | {tp} | {fp} | {fn} | {p:.3f} | {r:.3f} |")
    print("\n| model | heads | same pattern on all 7 probes | same roles | both | mean pattern agreement "
          "| mean roles agreement |\n|---|---|---|---|---|---|---|")
    rows = list(results.items()) + [("all", _total(results))]
    for name, res in rows:
        s, a, n = res["stable"], res["agreement"], res["heads"]
        print(f"| {name} | {n} | {s['pattern'] / n:.3f} | {s['roles'] / n:.3f} | {s['both'] / n:.3f} | "
              f"{a['pattern'] / n:.3f} | {a['roles'] / n:.3f} |")
    agree = sum(r["halves_agree"] for r in results.values())
    print(f"\nSame pattern and roles from the 16 tuning texts as from the 16 held-out texts: {agree} of "
          f"{_total(results)['heads']} heads ({agree / _total(results)['heads']:.3f}); per model: "
          + ", ".join(f"{name} {r['halves_agree']}/{r['heads']}" for name, r in results.items()))
    for name, res in results.items():
        if "long" in res:
            print(f"{name}, one text of {res['long']['tokens']} tokens: {dict(res['long']['patterns'])}")


def _total(results):
    add = lambda key: {k: sum(r[key][k] for r in results.values()) for k in next(iter(results.values()))[key]}  # noqa: E731
    return {"heads": sum(r["heads"] for r in results.values()), "stable": add("stable"), "agreement": add("agreement")}


if __name__ == "__main__":
    main()
