"""Measure the head classifier: macro-F1 and confusion matrix on labelled maps.

Two sources of labelled maps:
- held-out synthetic maps (``diagnostics.classify.synthetic``, ``HELDOUT_SEEDS``: seeds the
  thresholds were never tuned on);
- hand-labelled heads of the demo models, listed in ``REAL_LABELS`` as
  ``[{"model", "text", "layer", "head", "label"}, ...]``; evaluated when that file
  and the models exist.

Run: ``python -m diagnostics.classify.eval_classifier [--seeds 1000 1001 1002] [--no-big]``
"""

import argparse
import json
from pathlib import Path

import numpy as np
import torch

from diagnostics.measure.metrics import head_metrics
from diagnostics.classify.patterns import PATTERNS, classify_metrics
from diagnostics.classify.synthetic import HELDOUT_SEEDS, make_dataset

ROOT = Path(__file__).resolve().parents[2]
REAL_LABELS = Path(__file__).resolve().parent / "data" / "real_labels.json"
DEMO_MODELS = ROOT / "core" / "demo_models"


def confusion_matrix(truth, predicted, labels=PATTERNS):
    """``[true, predicted]`` counts as an int array indexed like ``labels``."""
    cm = np.zeros((len(labels), len(labels)), dtype=int)
    for t, p in zip(truth, predicted):
        cm[labels.index(t), labels.index(p)] += 1
    return cm


def macro_f1(cm):
    """Mean F1 over the labels that occur in the truth or the predictions."""
    tp = np.diag(cm).astype(float)
    precision = tp / np.maximum(cm.sum(0), 1)
    recall = tp / np.maximum(cm.sum(1), 1)
    f1 = 2 * precision * recall / np.maximum(precision + recall, 1e-12)
    present = (cm.sum(0) + cm.sum(1)) > 0
    return float(f1[present].mean())


def classify_samples(samples):
    """(true labels, predicted labels, samples' info) for an iterable of ``synthetic.Sample``."""
    truth, predicted, info = [], [], []
    for s in samples:
        m = head_metrics(torch.from_numpy(s.weights), causal=s.causal)
        truth.append(s.label)
        predicted.append(classify_metrics(m).label)
        info.append({"n": s.weights.shape[0], "causal": s.causal, "noise": s.noise, **s.info})
    return truth, predicted, info


def evaluate_synthetic(seeds=HELDOUT_SEEDS, **dataset_options):
    """Confusion matrix over the synthetic maps of ``seeds``, plus the misclassified samples."""
    truth, predicted, info = [], [], []
    for seed in seeds:
        t, p, i = classify_samples(make_dataset(seed, **dataset_options))
        truth, predicted, info = truth + t, predicted + p, info + i
    errors = [(t, p, i) for t, p, i in zip(truth, predicted, info) if t != p]
    return confusion_matrix(truth, predicted), errors


def evaluate_real(path=REAL_LABELS):
    """Confusion matrix over the hand-labelled demo-model heads, or None when unavailable."""
    if not path.exists():
        return None
    from diagnostics.classify.real_maps import load_head_maps  # needs transformers and the demo models

    entries = json.loads(path.read_text())
    maps = load_head_maps(entries, DEMO_MODELS)
    if maps is None:
        return None
    predicted = [classify_metrics(head_metrics(w, causal=c)).label for w, c in maps]
    return confusion_matrix([e["label"] for e in entries], predicted)


def format_confusion(cm, labels=PATTERNS):
    """Markdown table: rows are true labels, columns predicted."""
    lines = ["| true \\ predicted | " + " | ".join(labels) + " |", "|---" * (len(labels) + 1) + "|"]
    lines += [f"| {t} | " + " | ".join(str(v) for v in row) + " |" for t, row in zip(labels, cm)]
    return "\n".join(lines)


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=list(HELDOUT_SEEDS))
    parser.add_argument("--no-big", action="store_true", help="skip the 1024/4096-token maps")
    parser.add_argument("--errors", action="store_true", help="list misclassified synthetic maps")
    args = parser.parse_args(argv)
    options = {"big_lengths": ()} if args.no_big else {}
    cm, errors = evaluate_synthetic(args.seeds, **options)
    print(f"Synthetic held-out maps (seeds {args.seeds}): {cm.sum()} maps, macro-F1 = {macro_f1(cm):.4f}\n")
    print(format_confusion(cm))
    if args.errors:
        for t, p, i in errors:
            print(f"  {t} -> {p}: {i}")
    real = evaluate_real()
    if real is None:
        print(f"\nNo hand-labelled real maps evaluated ({REAL_LABELS.relative_to(ROOT)} or demo models missing).")
    else:
        print(f"\nHand-labelled demo-model heads: {real.sum()} heads, macro-F1 = {macro_f1(real):.4f}\n")
        print(format_confusion(real))


if __name__ == "__main__":
    main()
