"""Measure patterns and roles on real models against the behavioural ground truth of ``real_truth``.

For each model of the evaluation set (all-MiniLM-L6-v2, SmolLM2-135M-Instruct, demo-bert, demo-gpt2):

- roles: the diagnosis pipeline (``diagnose.measure`` + ``diagnose_part``, with its own
  repeated-sequence probes, ``diagnose.ROLE_SEEDS``) on the texts of one half of ``real_truth.TEXTS``; each
  head's roles against the ground truth of the same half (``data/real_truth.json``, repeated
  seeds 100-119). Precision and recall pooled over the models.
- stability: every head's pattern and role set on each of the model's 7 default probes
  (``probes.default_probes``: ``CAUSAL_PROBES`` for the decoders) alone; a head is stable when all
  7 agree (also: the mean share of probes giving the head's majority label, and the share of probe
  pairs that agree). Beside it, the four roles the ground truth reads off one text (previous/next token,
  self, sink), by ``real_truth``'s own definitions on each probe alone, against the diagnosis's same four:
  how steady the roles are by definition, before any classifier. The same on texts the probes were
  never chosen on: the 8 paragraphs of 4 consecutive texts of each half (``text_groups``; a decoder reads
  them after ``probe_texts.DECODER_OPENER``, as it reads its default probes). And the
  diagnosis itself: pattern and roles from the 16 tuning texts against those from the 16 held-out
  texts.
- block: how many heads are block on one long text (the 32 texts joined, twice).
- sink at any length (``--sink-lengths``): the texts of one half joined 1, 2, 4, 8 and 16 at a time
  (~20 to ~300 tokens); on each paragraph alone, the share of heads whose ``sink`` role (``sink_level``
  >= 0.3) matches the ground truth, against the raw ``sink_mass`` >= 0.3.

Run: ``python -m diagnostics.classify.eval_real [--half heldout|tuning] [--models ...] [--long]
[--sink-lengths]``
(ground truth: ``python -m diagnostics.classify.real_truth``).
"""

import argparse
import json
from collections import Counter
from itertools import combinations

import core
from diagnostics.classify.real_truth import (
    DATA, HELDOUT, OFFSET_ROLES, TEXTS, TUNING, has_role, real_models, text_scores, truth_roles,
)
from diagnostics.classify.roles import SINK_MIN, head_roles, role_scores
from diagnostics.diagnose import _repeated, _repeated_roles, diagnose_part, measure
from diagnostics.measure.metrics import head_metrics
from diagnostics.probe_texts import Probe, decoder_probe
from diagnostics.probes import default_probes, reads_as_decoder

TARGET_ROLES = ("previous_token", "next_token", "induction", "sink")
REPORTED_ROLES = TARGET_ROLES + ("self", "duplicate_token")
TEXT_ROLES = (*OFFSET_ROLES, "sink")  # the roles the ground truth reads off one ordinary text


def evaluate_model(model, tokenizer, entry, half="heldout", long=False):
    """``{"counts": {role: [tp, fp, fn]}, "stable": {...}, "patterns": Counter, ...}`` for one model."""
    repeated, _ = _repeated(model, tokenizer, lambda *_: None)
    heads, other = (_diagnosed(model, tokenizer, idx, repeated) for idx in
                    ((HELDOUT, TUNING) if half == "heldout" else (TUNING, HELDOUT)))
    truth = truth_roles(entry, half)
    counts = {}
    for role in REPORTED_ROLES:
        predicted = {(h.layer, h.head) for h in heads if role in h.role_names}
        actual = {tuple(i) for i in truth[role].nonzero().tolist()}
        counts[role] = [len(predicted & actual), len(predicted - actual), len(actual - predicted)]
    same = [a.pattern == b.pattern and set(a.role_names) == set(b.role_names) for a, b in zip(heads, other)]
    out = {"counts": counts, "heads": len(heads), "halves_agree": sum(same),
           "probes": stability(model, tokenizer, repeated),
           "groups": stability(model, tokenizer, repeated, text_groups(decoder=reads_as_decoder(model, tokenizer)))}
    if long:
        result = core.extract_attention(model, tokenizer, " ".join(TEXTS * 2))
        out["long"] = {"tokens": result.attentions.shape[-1],
                       "patterns": Counter(p.label for row in measure(result).patterns for p in row)}
    return out


def _diagnosed(model, tokenizer, indices, repeated):
    """The ``HeadReport``s of a diagnosis whose probes are the texts ``indices``."""
    measured = [measure(core.extract_attention(model, tokenizer, TEXTS[i])) for i in indices]
    return diagnose_part("self", measured, repeated)[0]


def text_groups(size=4, decoder=False):
    """Probes of ``size`` consecutive texts of each half joined: paragraphs about as long as the default probes; a
    ``decoder`` reads them as it reads its default probes (``probe_texts.decoder_probe``: after ``DECODER_OPENER``)."""
    groups = [Probe(" ".join(TEXTS[i] for i in half[start:start + size]))
              for half in (TUNING, HELDOUT) for start in range(0, len(half), size)]
    return [decoder_probe(p) for p in groups] if decoder else groups


def stability(model, tokenizer, repeated, probes=None):
    """Share of heads whose pattern / role set / both are the same on all ``probes`` alone (None: the defaults)."""
    probes = probes or default_probes(model, tokenizer)
    rep = _repeated_roles(repeated)
    labels, roles, truths = [], [], []
    for probe in probes:
        result = core.extract_attention(model, tokenizer, probe.text, probe.text_pair)
        m = measure(result)
        labels.append([p.label for row in m.patterns for p in row])
        roles.append([frozenset(r.role for r in rs) for row in head_roles(role_scores(m.metrics, rep), m.causal)
                      for rs in row])
        scores = text_scores(result)  # the ground truth's definitions, on this probe alone: {role: [L, H]}
        held = {role: has_role(role, scores[role]).flatten().tolist() for role in TEXT_ROLES}
        truths.append([frozenset(role for role in TEXT_ROLES if held[role][i]) for i in range(len(labels[-1]))])
    n = len(labels[0])
    same = lambda per_probe: [len({probe[i] for probe in per_probe}) == 1 for i in range(n)]  # noqa: E731
    same_label, same_roles = same(labels), same(roles)
    ours = [[r & frozenset(TEXT_ROLES) for r in probe] for probe in roles]
    pattern_counts = Counter(label for probe in labels for label in probe)
    majority = lambda values: Counter(values).most_common(1)[0][1] / len(values)  # noqa: E731
    pairs = list(combinations(range(len(probes)), 2))
    pair_agree = sum(labels[a][i] == labels[b][i] and roles[a][i] == roles[b][i] for a, b in pairs for i in range(n))
    return {"stable": {"pattern": sum(same_label), "roles": sum(same_roles),
                       "both": sum(a and b for a, b in zip(same_label, same_roles)),
                       "text_roles": sum(same(ours)), "truth_text_roles": sum(same(truths))},
            "agreement": {"pattern": sum(majority([p[i] for p in labels]) for i in range(n)),
                          "roles": sum(majority([p[i] for p in roles]) for i in range(n)),
                          "pairs": pair_agree / len(pairs)},
            "probe_patterns": dict(pattern_counts)}


def sink_lengths(model, tokenizer, entry, half="heldout", sizes=(1, 2, 4, 8, 16)):
    """``{size: (mean keys, share matching the truth with sink_level, with sink_mass)}`` per paragraph alone."""
    truth = truth_roles(entry, half)["sink"]  # (L, H)
    texts = [TEXTS[i] for i in (HELDOUT if half == "heldout" else TUNING)]
    out = {}
    for size in sizes:
        rows = []
        for start in range(0, len(texts), size):
            r = core.extract_attention(model, tokenizer, " ".join(texts[start:start + size]))
            m = head_metrics(r.attentions, causal=r.causal, special=r.keys_special, padding=r.keys_padding)
            rows.append((r.attentions.shape[-1], ((m.sink_level >= SINK_MIN) == truth).float().mean().item(),
                         ((m.sink_mass >= SINK_MIN) == truth).float().mean().item()))
        out[size] = tuple(sum(col) / len(rows) for col in zip(*rows))
    return out


def precision_recall(tp, fp, fn):
    return tp / max(tp + fp, 1), tp / max(tp + fn, 1)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--half", choices=("heldout", "tuning"), default="heldout")
    parser.add_argument("--models", nargs="+", default=list(real_models()), choices=list(real_models()))
    parser.add_argument("--long", action="store_true", help="also count block heads on one long text")
    parser.add_argument("--sink-lengths", action="store_true", help="only the sink role at 20-300 tokens")
    args = parser.parse_args(argv)
    truth = json.loads(DATA.read_text())
    if args.sink_lengths:
        return _sink_length_table(args.models, truth, args.half)
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
    _stability_table("the 7 default probes", results, "probes")
    _stability_table("the 8 paragraphs of 4 texts (text_groups)", results, "groups")
    agree, heads = sum(r["halves_agree"] for r in results.values()), sum(r["heads"] for r in results.values())
    print(f"\nSame pattern and roles from the 16 tuning texts as from the 16 held-out texts: {agree} of "
          f"{heads} heads ({agree / heads:.3f}); per model: "
          + ", ".join(f"{name} {r['halves_agree']}/{r['heads']}" for name, r in results.items()))
    for name, res in results.items():
        if "long" in res:
            print(f"{name}, one text of {res['long']['tokens']} tokens: {dict(res['long']['patterns'])}")


def _sink_length_table(models, truth, half):
    print(f"Sink role on paragraphs of the {half} half's texts joined 1-16 at a time: share of heads matching the "
          "ground truth\n\n| model | texts joined | mean tokens | sink_level >= 0.3 | sink_mass >= 0.3 |\n"
          "|---|---|---|---|---|")
    for name in models:
        for size, (keys, level, mass) in sink_lengths(*real_models()[name](), truth[name], half).items():
            print(f"| {name} | {size} | {keys:.0f} | {level:.3f} | {mass:.3f} |", flush=True)


def _stability_table(title, results, key):
    print(f"\nEach of {title} alone:\n\n| model | heads | same pattern on all | same roles | both | mean pattern "
          "agreement | mean roles agreement | probe pairs agreeing on both |\n|---|---|---|---|---|---|---|---|")
    for name, res in list(results.items()) + [("all", _total(results, key))]:
        s, a, n = res[key]["stable"], res[key]["agreement"], res["heads"]
        print(f"| {name} | {n} | {s['pattern'] / n:.3f} | {s['roles'] / n:.3f} | {s['both'] / n:.3f} | "
              f"{a['pattern'] / n:.3f} | {a['roles'] / n:.3f} | {a['pairs'] / n:.3f} |")
    print("\nThe four text roles (previous/next token, self, sink) the same on all, the ground truth's definitions "
          "(real_truth, thresholds 0.4 / 0.3 on each probe alone) against the diagnosis's: " + ", ".join(
              f"{name} {res[key]['stable']['truth_text_roles'] / res['heads']:.3f} / "
              f"{res[key]['stable']['text_roles'] / res['heads']:.3f}"
              for name, res in list(results.items()) + [("all", _total(results, key))]))


def _total(results, key):
    first = next(iter(results.values()))[key]
    add = lambda part: {k: sum(r[key][part][k] for r in results.values()) for k in first[part]}  # noqa: E731
    return {"heads": sum(r["heads"] for r in results.values()),
            key: {"stable": add("stable"), "agreement": add("agreement")}}


if __name__ == "__main__":
    main()
