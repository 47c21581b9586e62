"""The fast row statistics equal their definitions, computed the slow way in float64."""

import numpy as np
import pytest
import torch

from core.extraction.scratch import Scratch
from diagnostics.measure import row_stats


def block_score_by_definition(row, p, valid):
    """``local_run_mass`` of one row from its definition: the best interval of keys [l, r] with l <= p <= r."""
    x = np.where(valid, row.astype(np.float64) - 1.0 / valid.sum(), 0.0)
    prefix = np.concatenate([[0.0], np.cumsum(x)])  # prefix[i] = x[0] + ... + x[i-1]
    before, through = prefix[:p + 1], prefix[p + 1:]  # sums before l (l <= p); sums through r (r >= p)
    lo = int(np.flatnonzero(before == before.min())[-1])  # of equally good intervals, the shortest
    hi = p + int(np.flatnonzero(through == through.max())[0])
    return max(through.max() - before.min() - x[lo:hi + 1].max(), 0.0)


def rows(kind, heads, positions, n_keys, causal, key_ok, generator):
    """Attention rows ``(heads, qc, k)`` of one kind, zero on the keys a row may not see."""
    valid = row_stats.valid_keys(positions, n_keys, causal, key_ok)  # (qc, k)
    if kind == "uniform":  # every prefix sum ties
        logits = torch.zeros(heads, len(positions), n_keys)
    elif kind == "one-hot":
        logits = torch.randn(heads, len(positions), n_keys, generator=generator) * 1e3
    else:  # "peaked": a few strong keys over noise
        logits = torch.randn(heads, len(positions), n_keys, generator=generator) * 3
    attn = logits.masked_fill(~valid, float("-inf")).softmax(-1).nan_to_num(0.0)  # (H, qc, k)
    return attn, valid


@pytest.mark.parametrize("n_keys", [5, 64, 300, 700, 1500])  # one block up to 128 keys, blocks of 64 beyond
@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("kind", ["peaked", "uniform", "one-hot"])
def test_block_score_matches_its_definition(n_keys, causal, kind):
    g = torch.Generator().manual_seed(n_keys)
    key_ok = torch.rand(n_keys, generator=g) > 0.1  # some padding keys: runs of exactly zero excess
    key_ok[0] = True
    positions = torch.unique(torch.randint(0, n_keys, (12,), generator=g))  # (qc,) rows anywhere in the map
    attn, valid = rows(kind, 2, positions, n_keys, causal, key_ok, g)
    _, n = row_stats.row_weights(valid, torch.ones(len(positions), dtype=torch.bool))
    got = row_stats.local_run_mass(attn, positions, valid, n, Scratch(), causal=causal)  # (H, qc)
    for h in range(attn.shape[0]):
        for i, p in enumerate(positions.tolist()):
            want = block_score_by_definition(attn[h, i].numpy(), p, valid[i].numpy())
            assert got[h, i].item() == pytest.approx(want, abs=2e-5), (h, p)


@pytest.mark.parametrize("n_keys", [100, 300])
def test_nan_rows_of_a_diverged_head_leave_the_other_heads_scores_alone(n_keys):
    """Past 128 keys (blocks), NaN prefix sums matched no block: row -1 was indexed (IndexError), so a diverged
    model on a long probe was exit 3 instead of its non_finite_attention error."""
    g = torch.Generator().manual_seed(0)
    positions = torch.arange(0, n_keys, 7)  # (qc,)
    attn, valid = rows("peaked", 2, positions, n_keys, False, torch.ones(n_keys, dtype=torch.bool), g)
    _, n = row_stats.row_weights(valid, torch.ones(len(positions), dtype=torch.bool))
    healthy = row_stats.local_run_mass(attn, positions, valid, n, Scratch())  # (H, qc)
    attn[0] = float("nan")  # head 0 diverged
    got = row_stats.local_run_mass(attn, positions, valid, n, Scratch())  # (H, qc)
    assert torch.equal(got[1], healthy[1])


@pytest.mark.parametrize("n_keys", [2, 100, 700, 2100])
def test_top_k_weights_equal_a_full_sort(n_keys):
    g = torch.Generator().manual_seed(0)
    attn = torch.randn(3, 9, n_keys, generator=g).softmax(-1)  # (H, qc, k)
    attn[0, 0] = 1.0 / n_keys  # ties everywhere
    attn[1, 1] = 0.0
    attn[1, 1, -3:] = 1.0 / 3  # the top three all after the last whole block
    got = row_stats.top_k_weights(attn, 3)
    torch.testing.assert_close(got, attn.topk(min(3, n_keys), dim=-1).values, atol=0, rtol=0)


@pytest.mark.parametrize("causal", [False, True])
def test_entropy_from_shifted_logits_equals_entropy_from_weights(causal):
    g = torch.Generator().manual_seed(0)
    n = 40
    logits = torch.randn(4, n, n, generator=g) * 4  # (H, q, k)
    if causal:
        logits = logits.masked_fill(torch.ones(n, n, dtype=torch.bool).triu(1), torch.finfo(torch.float32).min)
    logits -= logits.amax(-1, keepdim=True)  # each row's max is 0, as core.extraction.streaming hands them on
    attn = logits.softmax(-1)
    valid = row_stats.valid_keys(torch.arange(n), n, causal, torch.ones(n, dtype=torch.bool))
    _, count = row_stats.row_weights(valid, torch.ones(n, dtype=torch.bool))
    from_logs = row_stats.normalised_entropy(attn, count)
    from_logits = row_stats.normalised_entropy(attn, count, logits=logits)
    torch.testing.assert_close(from_logits, from_logs, atol=1e-6, rtol=0)


def test_mean_distance_counts_tokens():
    attn = torch.tensor([[[0.5, 0.0, 0.5], [0.0, 0.0, 1.0]]])  # (1, 2, 3): rows at positions 1 and 2
    torch.testing.assert_close(row_stats.mean_distance(attn, torch.tensor([1, 2])), torch.tensor([[1.0, 0.0]]))


@pytest.mark.parametrize("causal", [False, True])
def test_mean_distance_equals_the_distance_sum_with_or_without_the_causal_shortcut(causal):
    g = torch.Generator().manual_seed(1)
    positions, n_keys = torch.arange(30, 50), 50  # a chunk of rows 30 .. 49 of a 50-key map
    attn, _ = rows("peaked", 3, positions, n_keys, causal, torch.ones(n_keys, dtype=torch.bool), g)
    dist = (positions.unsqueeze(1) - torch.arange(n_keys)).abs().double()  # (qc, k)
    expected = (attn.double() * dist).sum(-1).float()  # (H, qc)
    torch.testing.assert_close(row_stats.mean_distance(attn, positions, causal=causal), expected)


@pytest.mark.parametrize("causal", [False, True])
@pytest.mark.parametrize("start", [0, 7, 40])  # the first chunk, a middle one, rows past the last key
def test_key_audience_equals_the_weighted_sum_of_the_valid_mask(causal, start):
    g = torch.Generator().manual_seed(start)
    n_keys, positions = 45, torch.arange(start, start + 12)  # (qc,)
    key_ok = torch.rand(n_keys, generator=g) > 0.2  # padding keys
    weights = torch.rand(3, 12, generator=g, dtype=torch.float64)  # (H, qc)
    valid = row_stats.valid_keys(positions, n_keys, causal, key_ok)  # (qc, k)
    expected = weights @ valid.double()  # (H, k)
    torch.testing.assert_close(row_stats.key_audience(weights, positions, key_ok, causal), expected)


def test_scratch_reuses_memory_by_name_and_grows():
    scratch, like = Scratch(), torch.zeros(1)
    first = scratch.get("a", (2, 3), like)
    assert scratch.get("a", (3, 2), like).data_ptr() == first.data_ptr()  # same memory, another shape
    assert scratch.get("b", (2, 3), like).data_ptr() != first.data_ptr()
    assert scratch.get("a", (10, 10), like).shape == (10, 10)  # grows when asked for more
    assert scratch.get("a", (2,), torch.zeros(1, dtype=torch.float64)).dtype == torch.float64
