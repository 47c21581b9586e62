"""The classifier holds its macro-F1 on synthetic maps from seeds its thresholds were not tuned on.

The thresholds in ``diagnostics.classify.patterns`` were set on ``TUNING_SEEDS``; these
maps come from ``HELDOUT_SEEDS``. Maps of 4-6 tokens are genuinely ambiguous (a
weak sink on 4 keys looks like random peaks), so they get their own, lower floor;
docs/classifier.md reports the full numbers.
"""

from diagnostics.classify.eval_classifier import evaluate_synthetic, macro_f1
from diagnostics.classify.synthetic import HELDOUT_SEEDS, TUNING_SEEDS

FLOOR = 0.95  # the target, from 8 tokens on
TINY_FLOOR = 0.9  # everything from 4 tokens on


def test_tuning_and_heldout_seeds_are_disjoint():
    assert not set(TUNING_SEEDS) & set(HELDOUT_SEEDS)


def test_macro_f1_floor_from_8_tokens():
    cm, errors = evaluate_synthetic(HELDOUT_SEEDS, lengths=(8, 12, 16, 24, 32, 64, 128), big_lengths=())
    assert macro_f1(cm) >= FLOOR, (cm, errors)


def test_macro_f1_floor_with_tiny_maps():
    cm, errors = evaluate_synthetic(HELDOUT_SEEDS, lengths=(4, 5, 6, 8, 12, 16, 24, 32, 48, 64, 128), big_lengths=())
    assert macro_f1(cm) >= TINY_FLOOR, (cm, errors)
