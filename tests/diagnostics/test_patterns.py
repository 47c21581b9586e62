"""The head classifier on clear examples of every label, causal and bidirectional, 4 to 4096 tokens."""

import math

import numpy as np
import pytest
import torch

from core.errors import InputError
from diagnostics import PATTERNS, HeadPattern, classify_head, classify_heads
from diagnostics.measure.metrics import head_metrics
from diagnostics.classify.patterns import classify_metrics, infer_causal
from diagnostics.classify.synthetic import make_map


def causal_uniform(n):
    m = torch.tril(torch.ones(n, n))  # (n, n)
    return m / m.sum(-1, keepdim=True)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("label", PATTERNS)
def test_clear_synthetic_examples(label, causal):
    weights, _ = make_map(label, 64, causal, 0.1, np.random.default_rng(7))
    result = classify_head(weights, causal=causal)
    assert isinstance(result, HeadPattern)
    assert result.label == label, result.scores
    assert 0.0 <= result.confidence <= 1.0


def test_diagonal_carries_its_offset():
    weights, _ = make_map("diagonal", 32, False, 0.0, np.random.default_rng(0), offset=2)
    result = classify_head(weights)
    assert (result.label, result.offset) == ("diagonal", 2)
    assert classify_head(causal_uniform(16)).offset is None


def test_causal_row_zero_alone_does_not_make_a_head_vertical():
    assert classify_head(causal_uniform(32)).label == "diffuse"
    # sparse peaks everywhere, while row 0 can only put everything on key 0
    weights, _ = make_map("sparse", 32, True, 0.0, np.random.default_rng(3))
    assert classify_head(weights, causal=True).label == "sparse"


def test_causality_is_inferred_from_the_upper_triangle():
    assert infer_causal(causal_uniform(8))
    assert not infer_causal(torch.full((8, 8), 1 / 8))


def test_numpy_and_torch_inputs_agree():
    weights, _ = make_map("vertical", 24, False, 0.1, np.random.default_rng(1))
    a, b = classify_head(weights), classify_head(torch.from_numpy(weights))
    assert a.label == b.label == "vertical"
    assert a.scores == b.scores


def test_batched_form_returns_nested_lists():
    rng = np.random.default_rng(2)
    maps = [[make_map(label, 16, False, 0.0, rng)[0] for label in ("diagonal", "vertical", "diffuse")]] * 2
    attn = torch.from_numpy(np.array(maps))  # (2, 3, 16, 16)
    labels = [[p.label for p in layer] for layer in classify_heads(attn, causal=False)]
    assert labels == [["diagonal", "vertical", "diffuse"]] * 2


def test_classify_metrics_matches_classify_head():
    weights, _ = make_map("block", 40, True, 0.1, np.random.default_rng(4))
    from_metrics = classify_metrics(head_metrics(torch.from_numpy(weights), causal=True))
    assert from_metrics == classify_head(weights, causal=True)


@pytest.mark.parametrize("label, options",
                         [("diagonal", {"offset": -1}), ("vertical", {"sinks": [3]}), ("diffuse", {})])
def test_four_tokens(label, options):
    weights, _ = make_map(label, 4, False, 0.0, np.random.default_rng(5), **options)
    assert classify_head(weights).label == label


def test_4096_tokens_previous_token_head():
    n = 4096
    attn = torch.zeros(n, n)
    rows = torch.arange(n)
    attn[rows, (rows - 1).clamp(min=0)] = 1.0  # (n, n) causal previous-token head
    result = classify_head(attn)
    assert (result.label, result.offset) == ("diagonal", -1)


def test_bad_input_names_the_shape():
    with pytest.raises(InputError, match="one map"):
        classify_head(np.ones((2, 4, 4)) / 4)
    with pytest.raises(InputError, match="NaN"):
        classify_head(np.full((4, 4), np.nan))
    with pytest.raises(InputError, match="numpy array or torch tensor"):
        classify_head([[1.0]])


@pytest.mark.parametrize("weights", [torch.zeros(0, 4), torch.zeros(0, 4, 4), torch.zeros(4, 4),
                                     torch.full((4, 4), 2.5), -torch.eye(4)],
                         ids=["no rows", "no maps", "all zero", "scores", "negative"])
def test_maps_that_are_not_attention_are_refused(weights):
    """Empty maps were an IndexError or a ZeroDivisionError; an all-zero map was labelled sparse, scores of 2.5
    vertical at confidence 1.0."""
    with pytest.raises(InputError, match="Attention"):
        classify_heads(weights) if weights.dim() == 3 else classify_head(weights)


def test_padding_rows_half_precision_and_learned_sinks_still_pass():
    rows = torch.softmax(torch.randn(6, 6), -1)  # (q, k)
    rows[-1] = 0  # a padding query
    assert classify_head(rows.half()).label in PATTERNS
    assert classify_head(rows * 0.6).label in PATTERNS  # GPT-OSS: its learned sink column took 0.4 of each row
    with pytest.raises(InputError, match="Expected attention"):
        head_metrics(torch.zeros(2, 0, 4))


def test_a_learned_sink_s_share_is_sink_mass_and_the_rest_is_read_as_it_is():
    """GPT-OSS's rows sum below 1: a uniform map at half weight was 'sparse' with the 'local' role (entropy 0.625,
    the rest's mean distance halved), and Q/K x 0 GPT-OSS got no diffuse head at all."""
    uniform = torch.full((16, 16), 1 / 16)  # (q, k)
    whole, half = head_metrics(uniform).scalars(), head_metrics(uniform * 0.5).scalars()
    for name in ("rest_entropy", "rest_mean_distance", "block_score", "rest_sink2_score"):
        assert half[name] == pytest.approx(whole[name], abs=1e-5), name
    assert half["sink_mass"] == pytest.approx(0.5 + 0.5 / 16) and half["confidence"] == pytest.approx(0.5)
    entropy = (0.5 * math.log(32) + 0.5 * math.log(2)) / math.log(16)  # the learned sink is one more key
    assert half["entropy"] == pytest.approx(entropy, abs=1e-5)
    head = classify_head(uniform * 0.5)
    assert head.label == "diffuse" and {r.role for r in head.roles} == {"broad", "sink"}
    even = head_metrics(torch.full((8, 8), 1 / 9)).scalars()  # its 8 keys and the sink 1/9 each: was entropy 1.16
    assert even["entropy"] == pytest.approx(1.0) and even["uniform_gap"] == pytest.approx(0.0, abs=1e-6)


def test_weight_a_window_leaves_out_is_not_taken_for_a_learned_sink():
    """A window read wrongly (here: 8 on a global causal map) zeroes the weight outside it; that weight counted as a
    learned sink (a hybrid model's full-attention layer got sink mass 0.66 instead of 0.04)."""
    n = 64
    uniform = torch.ones(n, n).tril() / torch.arange(1, n + 1).unsqueeze(1)  # (q, k) causal, no sink
    assert head_metrics(uniform, causal=True, window=8).sink_mass.item() < 0.05
    with pytest.raises(InputError, match="Expected attention"):
        head_metrics(torch.zeros(2, 0, 4))


def test_classify_heads_reads_each_local_layer_within_its_window():
    """An AttentionResult's windows reach the labels: a head uniform within a window of 8 was labelled from every
    key (a sharp 'block' head) by classify_heads, which had no windows to take."""
    n, window = 96, 8
    distance = torch.arange(n).unsqueeze(1) - torch.arange(n).unsqueeze(0)  # (q, k)
    seen = (distance >= 0) & (distance < window)  # (q, k)
    local = seen.float() / seen.sum(-1, keepdim=True)  # (q, k)
    attn = torch.stack([local, local]).unsqueeze(1)  # (layers, heads, q, k)
    read_globally = classify_heads(attn, causal=True)
    windowed = classify_heads(attn, causal=True, windows=[window, None])
    assert windowed[0][0].label == "diffuse" and read_globally[0][0].label != "diffuse"
    assert windowed[1][0] == read_globally[1][0]  # a global layer is read as before
    with pytest.raises(InputError, match="one window per layer"):
        classify_heads(attn, causal=True, windows=[window])
