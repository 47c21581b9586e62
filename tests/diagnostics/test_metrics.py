"""Metrics on hand-built maps whose values are known, causal and padded ones included."""

import math

import pytest
import torch

from core.errors import InputError
from diagnostics.measure.metrics import MetricAccumulator, head_metrics
from diagnostics.measure import row_stats
from diagnostics.measure.row_stats import OFFSETS

N = 8


def causal_uniform(n):
    m = torch.tril(torch.ones(n, n))  # (n, n)
    return m / m.sum(-1, keepdim=True)


def shifted(n, offset):
    """One-hot diagonal at ``offset``; rows whose target is out of range keep themselves."""
    rows = torch.arange(n)
    cols = rows + offset
    cols = torch.where((cols >= 0) & (cols < n), cols, rows)
    m = torch.zeros(n, n)
    m[rows, cols] = 1.0
    return m


def test_identity_map_is_sharp_and_on_offset_zero():
    m = head_metrics(torch.eye(N))
    assert m.entropy.item() == pytest.approx(0.0, abs=1e-6)
    assert m.confidence.item() == pytest.approx(1.0)
    assert m.best_offset.item() == 0
    assert m.best_offset_mass.item() == pytest.approx(1.0)
    assert m.diag_mass[OFFSETS.index(1)].item() == pytest.approx(0.0)
    assert m.block_score.item() == pytest.approx(0.0, abs=1e-6)
    assert m.mean_distance.item() == pytest.approx(0.0)


def test_uniform_bidirectional_has_entropy_one_and_no_sink():
    m = head_metrics(torch.full((N, N), 1.0 / N))
    assert m.entropy.item() == pytest.approx(1.0, abs=1e-6)
    assert m.confidence.item() == pytest.approx(1.0 / N)
    assert m.sink_score.item() == pytest.approx(0.0, abs=1e-6)
    assert m.topk_mass.item() == pytest.approx(3.0 / N)


def test_causal_uniform_has_entropy_one():
    m = head_metrics(causal_uniform(N), causal=True)
    assert m.entropy.item() == pytest.approx(1.0, abs=1e-6)
    assert m.sink_score.item() == pytest.approx(0.0, abs=1e-6)
    assert m.diag_mass[OFFSETS.index(1)].item() == 0.0  # the next token is never visible


def test_previous_token_causal_head_has_offset_minus_one():
    m = head_metrics(shifted(N, -1), causal=True)  # row 0 keeps key 0
    assert m.best_offset.item() == -1
    assert m.best_offset_mass.item() == pytest.approx(1.0)


def test_next_token_bidirectional_head_has_offset_plus_one():
    m = head_metrics(shifted(N, 1))
    assert m.best_offset.item() == 1
    assert m.mean_distance.item() == pytest.approx((N - 1) / N)


def test_all_mass_on_first_key_is_a_sink_on_key_zero():
    attn = torch.zeros(N, N)
    attn[:, 0] = 1.0
    for causal in (False, True):
        m = head_metrics(attn, causal=causal)
        assert m.sink_key.item() == 0
        assert m.sink_score.item() > 0.7
        assert m.column_mass[0].item() == pytest.approx(1.0)


def test_last_causal_key_seen_by_one_query_is_not_a_sink():
    m = head_metrics(torch.eye(N), causal=True)  # the last key gets 1 from its only query
    assert m.sink_score.item() < 0.3


def test_block_score_of_two_uniform_halves():
    seg = torch.arange(N) // (N // 2)
    attn = (seg[:, None] == seg[None, :]).float()  # (N, N)
    attn = attn / attn.sum(-1, keepdim=True)
    w, n = N // 2, N - 1  # the first token is a sink key: factored out, the rest renormalised

    def uniform_block(width):  # keys count above max(1/n, half a key of the row's width); short rows: one peak off
        level = max(1 / n, 1 / (2 * width))
        return (1 - width * level) - (1 / width - level)

    first_weight, second_weight = (1 - 1 / n) * (1 - 1 / w), 1 - 1 / n  # row weight x non-sink mass
    want = (first_weight * uniform_block(w - 1) + second_weight * uniform_block(w)) / (first_weight + second_weight)
    assert head_metrics(attn).block_score.item() == pytest.approx(want, abs=1e-6)


def test_special_mass_counts_the_marked_keys():
    special = torch.zeros(N, dtype=torch.bool)
    special[[0, N - 1]] = True
    m = head_metrics(torch.full((N, N), 1.0 / N), special=special)
    assert m.special_mass.item() == pytest.approx(2.0 / N)
    assert head_metrics(torch.eye(N)).special_mass.item() == 0.0


def test_padding_keys_and_queries_are_excluded():
    real = 5
    attn = torch.zeros(N, N)
    attn[:, :real] = 1.0 / real  # pad rows too, as some models leave them
    padding = torch.arange(N) >= real
    m = head_metrics(attn, padding=padding)
    assert m.entropy.item() == pytest.approx(1.0, abs=1e-6)  # log(5), not log(8)
    assert m.confidence.item() == pytest.approx(1.0 / real)
    assert m.sink_score.item() == pytest.approx(0.0, abs=1e-6)


def test_a_left_padded_map_s_sink_is_its_first_real_token():
    """Key 0 was the sink whatever it was: with left padding the first token's mass went into the rest."""
    pad, n = 6, 64
    real = torch.zeros(n, n)  # (q, k): 0.8 on the first token, the rest uniform, causal
    for i in range(n):
        real[i, 0] = 0.8 if i else 1.0
        real[i, 1:i + 1] = 0.2 / i if i else 0.0
    padded = torch.zeros(pad + n, pad + n)
    padded[pad:, pad:] = real
    plain = head_metrics(real, causal=True)
    left = head_metrics(padded, causal=True, padding=torch.arange(pad + n) < pad)
    for name in ("sink_mass", "sink_level", "rest_entropy", "rest_sink_score"):
        assert getattr(left, name).item() == pytest.approx(getattr(plain, name).item(), abs=1e-5), name
    assert left.sink_mass.item() == pytest.approx(0.8, abs=0.01)


@pytest.mark.parametrize("causal", [True, False])
def test_a_head_uniform_within_its_window_is_uniform(causal):
    """A local layer's rows see only their window: its keys beyond it counted as valid, so a head uniform within
    it read as sharp (entropy 0.53, a uniform_gap of 2.08 nats, 'block') and Q/K x 0 Mistral got no diffuse head."""
    n, window = 96, 8
    distance = torch.arange(n).unsqueeze(1) - torch.arange(n).unsqueeze(0)  # (q, k)
    seen = ((distance >= 0) & (distance < window)) if causal else distance.abs() <= window  # (q, k)
    uniform = seen.float() / seen.sum(-1, keepdim=True)  # (q, k)
    m = head_metrics(uniform, causal=causal, window=window)
    assert m.entropy.item() == pytest.approx(1.0, abs=1e-5) and m.uniform_gap.item() == pytest.approx(0, abs=1e-5)
    assert m.rest_entropy.item() == pytest.approx(1.0, abs=1e-5) and m.block_score.item() < 0.01
    assert m.sink_score.item() == pytest.approx(0, abs=1e-5) and m.rest_sink2_score.item() == pytest.approx(0, abs=1e-5)
    assert head_metrics(uniform, causal=causal).uniform_gap.item() > 1  # read as global: far from uniform


def test_normalised_entropy_of_a_two_key_row():
    attn = torch.zeros(4, 4)
    attn[:, :2] = 0.5
    assert head_metrics(attn).entropy.item() == pytest.approx(math.log(2) / math.log(4), abs=1e-6)


@pytest.mark.parametrize("causal", [False, True])
def test_chunked_accumulation_equals_one_pass(causal):
    g = torch.Generator().manual_seed(0)
    n = 37
    logits = torch.randn(2, 3, n, n, generator=g) * 3  # (L, H, q, k)
    if causal:
        logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    attn = logits.softmax(-1)
    special = torch.zeros(n, dtype=torch.bool)
    special[0] = True
    full = head_metrics(attn, causal=causal, special=special)
    acc = MetricAccumulator(n, causal, special=special)
    for start in (20, 0, 7, 33):  # uneven chunks, out of order
        stop = {20: 33, 0: 7, 7: 20, 33: n}[start]
        acc.update(attn[..., start:stop, :], start)
    chunked = acc.finalize()
    for name in ("entropy", "confidence", "topk_mass", "block_score", "special_mass", "mean_distance",
                 "diag_mass", "best_offset_mass", "column_mass", "sink_score", "sink2_score"):
        torch.testing.assert_close(getattr(chunked, name), getattr(full, name), atol=1e-6, rtol=0)
    assert torch.equal(chunked.best_offset, full.best_offset)
    assert torch.equal(chunked.sink_key, full.sink_key)


@pytest.mark.parametrize("causal", [False, True])
def test_block_score_and_top_k_mass_of_a_long_map_are_measured_on_one_row_of_each_run(causal):
    g = torch.Generator().manual_seed(4)
    n = 37
    segment = torch.bucketize(torch.arange(n), torch.tensor([3, 9, 14, 22, 30]), right=True)  # (k,): 6 segments
    same = (segment.unsqueeze(1) == segment.unsqueeze(0)).float()  # (q, k)
    logits = torch.randn(2, n, n, generator=g) + 3 * same * torch.rand(2, n, 1, generator=g)  # (H, q, k)
    logits[..., 0] += 2  # a sink, factored out of the block score
    if causal:
        logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    attn = logits.softmax(-1)
    every_row = head_metrics(attn, causal=causal)
    rows = row_stats.sampled_rows(torch.arange(n), 5).tolist()  # 37 keys, at most 8 rows: one of every 5
    assert len({r // 5 for r in rows}) == len(rows) >= 7 and len({r % 5 for r in rows}) > 1  # not one place in each
    only_those = MetricAccumulator(n, causal)
    for i in rows:
        only_those.update(attn[:, i:i + 1], i)
    acc = MetricAccumulator(n, causal, block_rows=8)
    for start, stop in ((20, 33), (0, 7), (7, 20), (33, n)):  # chunks that do not start on a measured row
        acc.update(attn[:, start:stop], start)
    sampled, those = acc.finalize(), only_those.finalize()
    for name in ("block_score", "topk_mass"):
        torch.testing.assert_close(getattr(sampled, name), getattr(those, name), atol=1e-6, rtol=0)
        assert not torch.allclose(getattr(sampled, name), getattr(every_row, name), atol=1e-3)
    for name in ("entropy", "confidence", "rest_entropy", "sink_mass", "rest_diag_mass", "rest_sink2_score",
                 "column_mass"):
        torch.testing.assert_close(getattr(sampled, name), getattr(every_row, name), atol=1e-6, rtol=0)


def test_causal_chunks_may_stop_at_the_last_visible_key():
    g = torch.Generator().manual_seed(1)
    n = 23
    logits = torch.randn(3, n, n, generator=g).masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), float("-inf"))
    attn = logits.softmax(-1)  # (H, q, k)
    full = head_metrics(attn, causal=True)
    acc = MetricAccumulator(n, True)
    for start, stop in ((0, 5), (5, 16), (16, n)):
        acc.update(attn[:, start:stop, :stop], start)  # keys after the chunk's last row are all zero
    narrow = acc.finalize()
    for name in ("entropy", "block_score", "mean_distance", "diag_mass", "column_mass", "sink_score"):
        torch.testing.assert_close(getattr(narrow, name), getattr(full, name), atol=1e-6, rtol=0)
    with pytest.raises(InputError, match="chunk"):
        MetricAccumulator(n, True).update(attn[:, 5:16, :15], 5)  # row 15 sees key 15


def test_batch_shape_and_indexing():
    attn = torch.full((2, 3, N, N), 1.0 / N)
    m = head_metrics(attn)
    assert m.shape == (2, 3)
    assert m.column_mass.shape == (2, 3, N)
    assert m[1, 2].shape == ()
    assert m[1, 2].scalars()["entropy"] == pytest.approx(1.0, abs=1e-6)


def test_bad_shapes_raise_input_errors():
    with pytest.raises(InputError, match="q <= k"):
        head_metrics(torch.ones(5, 3))
    with pytest.raises(InputError, match="padding"):
        head_metrics(torch.eye(4), padding=torch.zeros(3, dtype=torch.bool))
    with pytest.raises(InputError, match="chunk"):
        MetricAccumulator(4, False).update(torch.ones(2, 5), 0)


def test_maps_of_other_shapes_are_an_input_error_not_fewer_layers():
    """zip() stopped at the shorter input: two layers measured of four, without a word."""
    from diagnostics.measure.metrics import layer_metrics
    from diagnostics.measure.redundancy import js_distance, paired_js_distance

    maps = torch.softmax(torch.randn(4, 3, 6, 6), -1)  # (L, H, q, k)
    with pytest.raises(InputError, match="one window per layer: 2 for 4 layers"):
        layer_metrics(maps, windows=[2, None])
    with pytest.raises(InputError, match=r"maps of one shape, not \[4, 3, 6, 6\] and \[2, 3, 6, 6\]"):
        paired_js_distance(maps, maps[:2])
    with pytest.raises(InputError, match=r"js_distance takes maps \[layers, heads, q, k\]"):
        js_distance(maps[0])  # a RuntimeError of torch's before
    assert paired_js_distance(maps, maps).shape == (4, 3) and js_distance(maps).shape == (4, 3, 3)
