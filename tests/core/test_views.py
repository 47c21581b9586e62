"""core.views: head average, rollout, hiding positions, pooling, top links."""

import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from core.errors import InputError
from core.views import attention_rollout, head_average, hide_positions, pool_map, top_links


def _random_attention(layers=2, heads=3, t=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(layers, heads, t, t, generator=g).softmax(-1)  # (L, H, t, t)


def test_head_average_is_mean_over_heads():
    attn = _random_attention()
    avg = head_average(attn)
    assert avg.shape == (2, 5, 5)
    torch.testing.assert_close(avg[1], attn[1].mean(0))


def test_rollout_first_layer_and_recursion():
    attn = _random_attention(layers=3)
    rolled = attention_rollout(attn)
    eye = torch.eye(5)
    a = [(attn[i].mean(0) + eye) / 2 for i in range(3)]  # rows of mean + I sum to 2
    torch.testing.assert_close(rolled[0], a[0])
    torch.testing.assert_close(rolled[2], a[2] @ a[1] @ a[0])
    torch.testing.assert_close(rolled.sum(-1), torch.ones(3, 5))


def test_rollout_rejects_cross_attention():
    with pytest.raises(InputError, match="cross-attention"):
        attention_rollout(torch.rand(1, 1, 3, 4))


def test_hide_positions_renormalises_rows():
    attn = _random_attention()[0, 0]
    hidden = [True, False, False, False, True]
    w, kept_q, kept_k = hide_positions(attn, hidden, hidden)
    assert kept_q == kept_k == [1, 2, 3]
    torch.testing.assert_close(w.sum(-1), torch.ones(3))
    expected = attn[1, 1:4] / attn[1, 1:4].sum()
    torch.testing.assert_close(w[0], expected)


def test_hide_positions_everything_hidden_is_an_input_error():
    with pytest.raises(InputError, match="every token is special"):
        hide_positions(torch.eye(2), [True, True], [True, True])


def test_pool_map_keeps_one_token_wide_diagonal():
    pooled, bq, bk = pool_map(torch.eye(10), max_cells=4)
    assert (bq, bk) == (3, 3) and pooled.shape == (4, 4)
    torch.testing.assert_close(pooled.diagonal(), torch.ones(4))
    batch, _, _ = pool_map(torch.eye(10).expand(2, 3, 10, 10), max_cells=4)
    assert batch.shape == (2, 3, 4, 4) and torch.equal(batch[1, 2], pooled)
    small, b1, b2 = pool_map(torch.eye(3), max_cells=4)
    assert (b1, b2) == (1, 1) and torch.equal(small, torch.eye(3))


def test_pool_map_of_ragged_blocks_is_the_largest_weight_of_what_each_block_holds():
    w = torch.rand(2, 3, 11, 7, generator=torch.Generator().manual_seed(0))  # (L, H, q, k)
    w[1, 2, 10, 6] = float("nan")
    pooled, bq, bk = pool_map(w, max_cells=4)
    assert (bq, bk) == (3, 2) and pooled.shape == (2, 3, 4, 4)
    for i in range(4):
        for j in range(4):
            block = w[..., i * bq:(i + 1) * bq, j * bk:(j + 1) * bk]  # (L, H, <=bq, <=bk): the edges hold less
            torch.testing.assert_close(pooled[..., i, j], block.amax(dim=(-2, -1)), equal_nan=True)


def test_pool_map_does_not_copy_the_maps():
    """Padding the maps to whole blocks copied them all: the overview of SmolLM2 at 1,086 tokens took +1.2 GiB."""
    code = ("import resource, torch; from core.views import pool_map; w = torch.rand(50, 1, 1001, 1001); "
            "before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss; pool_map(w, 40); "
            "print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)")
    grown_kb = int(subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True,
                                  env={**os.environ, "PYTHONPATH": str(Path(__file__).parents[2])}).stdout)
    assert grown_kb < 50_000  # the maps are 200 MB; the pooled ones 0.3 MB


def test_top_links_per_query():
    w = torch.tensor([[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]])
    q, k, v = top_links(w, 1)
    assert q.tolist() == [0, 1] and k.tolist() == [0, 2]
    torch.testing.assert_close(v, torch.tensor([0.7, 0.8]))
    q, k, v = top_links(w, 2, min_weight=0.15)
    assert list(zip(q.tolist(), k.tolist())) == [(0, 0), (0, 1), (1, 2)]
    q, k, v = top_links(w, 2, min_weight=0.9)  # below the floor, each query keeps its strongest key
    assert list(zip(q.tolist(), k.tolist())) == [(0, 0), (1, 2)]


def test_a_diverged_head_s_weights_are_never_links():
    """topk ranks NaN first, so each query's 'strongest' link of a NaN head was NaN."""
    w = torch.tensor([[float("nan")] * 3, [0.1, float("inf"), 0.8], [0.2, 0.3, 0.5]])
    q, k, v = top_links(w, 3, min_weight=0.15)
    assert v.isfinite().all() and list(zip(q.tolist(), k.tolist())) == [(1, 2), (2, 2), (2, 1), (2, 0)]


def test_hide_positions_divides_each_row_by_its_own_sum_however_small():
    """A clamp at 1e-12 left a row of tinier remaining mass short of 1 (0.4); a row of none stays 0, not NaN."""
    w, _, _ = hide_positions(torch.tensor([[1.0, 2e-13, 2e-13], [1.0, 0.0, 0.0]]), [False, False],
                             [True, False, False])  # (q, k) float32, as maps are
    torch.testing.assert_close(w, torch.tensor([[0.5, 0.5], [0.0, 0.0]]))


def test_sizes_of_nothing_are_an_input_error():
    """pool_map(m, 0) was a ZeroDivisionError, top_links(w, 0) an IndexError."""
    w = torch.softmax(torch.randn(4, 4), -1)
    for call in (lambda: pool_map(w, 0), lambda: top_links(w, 0), lambda: top_links(w, -1)):
        with pytest.raises(InputError, match="of at least 1"):
            call()


def test_signed_changes_pool_to_the_largest_with_its_sign():
    """A block where one weight fell by 0.4 and another rose by 0.1 shows -0.4, not +0.1 or 0.4."""
    from core.views import pool_signed

    change = torch.zeros(4, 4)  # (q, k)
    change[0, 0], change[1, 1] = -0.4, 0.1  # block (0, 0)
    change[2, 3], change[3, 2] = 0.3, -0.2  # block (1, 1)
    pooled, bq, bk = pool_signed(change, 2)
    assert (bq, bk) == (2, 2)
    torch.testing.assert_close(pooled, torch.tensor([[-0.4, 0.0], [0.0, 0.3]]))
    assert pool_signed(change, 4)[0].equal(change)  # nothing to pool
