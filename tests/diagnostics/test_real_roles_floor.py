"""Roles and patterns on the real models hold the targets of docs/classifier.md (held-out half).

Loads all-MiniLM-L6-v2, SmolLM2-135M-Instruct (model wheels) and the demo models; the ground truth
is the committed ``diagnostics/classify/data/real_truth.json``.
"""

import json

import pytest

from diagnostics import diagnose
from diagnostics.classify.eval_real import TARGET_ROLES, evaluate_model, precision_recall, sink_lengths
from diagnostics.classify.real_truth import DATA, real_models

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def results():
    truth = json.loads(DATA.read_text())
    return {name: evaluate_model(*load(), truth[name], "heldout", long=(name == "smollm2"))
            for name, load in real_models().items()}


def test_role_precision_and_recall_on_the_heldout_half(results):
    for role in TARGET_ROLES:
        tp, fp, fn = (sum(r["counts"][role][i] for r in results.values()) for i in range(3))
        precision, recall = precision_recall(tp, fp, fn)
        assert tp + fn > 0, role
        assert precision >= 0.9 and recall >= 0.9, (role, tp, fp, fn)


def test_block_is_not_the_default_bin_on_a_long_text(results):
    long = results["smollm2"]["long"]
    assert long["tokens"] > 1000
    assert long["patterns"]["block"] <= 0.05 * results["smollm2"]["heads"]  # 247 of 270 before the fix


def test_labels_agree_across_the_default_probes_at_least_as_measured(results):
    # regression floors just under the measured level (docs/classifier.md: 0.826 of heads keep pattern and
    # roles on all 7 probes, 0.927 of probe pairs agree; 0.802 and 0.919 before the decoders' fixed opening
    # sentence, 0.765 and 0.900 before their longer probes); the target of 0.9 on all 7 is not met
    heads = sum(r["heads"] for r in results.values())
    stable = sum(r["probes"]["stable"]["both"] for r in results.values()) / heads
    pairs = sum(r["probes"]["agreement"]["pairs"] for r in results.values()) / heads
    assert stable >= 0.82 and pairs >= 0.92, (stable, pairs)


def test_text_roles_are_at_least_as_steady_as_the_ground_truth_definitions_on_each_probe(results):
    # previous/next token, self and sink by real_truth's definitions on each probe alone: 0.813 of heads the same
    # on all 7, the diagnosis's 0.944 (its sink_level is read at any length, the truth's raw 0.3 at ~20 tokens)
    for name, r in results.items():
        stable = r["probes"]["stable"]
        assert stable["text_roles"] >= stable["truth_text_roles"], (name, stable)


def test_the_report_names_every_head_the_default_probes_disagree_on(results):
    # the diagnosis's borderline heads are the complement of the stability measure above (65 of 374 heads)
    for name, load in real_models().items():
        probes = results[name]["probes"]["stable"]
        assert len(diagnose(load()).borderline_heads()) == results[name]["heads"] - probes["both"], name


def test_the_sink_role_matches_the_truth_on_short_and_long_paragraphs():
    # docs/classifier.md, "The sink role at any length": MiniLM 0.936 at ~21 tokens, 0.847 at ~299, where the
    # raw sink mass >= 0.3 matches 0.361
    name = "minilm"
    shares = sink_lengths(*real_models()[name](), json.loads(DATA.read_text())[name], sizes=(1, 16))
    assert shares[16][0] > 250 and all(level >= 0.8 for _, level, _ in shares.values()), shares
