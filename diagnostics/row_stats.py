"""Row-local statistics of one chunk of query rows, the building blocks of ``metrics``.

Every function here looks only at the rows it is given (plus which keys each row
may see), so per-head metrics can be accumulated query chunk by query chunk and
give exactly what one pass over the full map gives. Nothing here holds a full
``[q, k]`` map beyond the chunk it was handed.

Row weighting: a row with ``n`` valid keys gets weight ``1 - 1/n``, the share of
its probability that is free to move away from a uniform spread. A row with one
valid key (row 0 of a causal map) is forced onto that key and gets weight 0;
row 1 of a causal map (two keys, one of which must take at least half) counts
half. This is why the first rows of a causal map, which are concentrated by
construction, do not make a head look sharp, diagonal or like a sink.
"""

import torch

# Offsets of the diagonals measured: key = query position + offset, so +1 is the
# next token and -1 the previous one (Clark et al. 2019, Sec. 3).
OFFSETS = (-3, -2, -1, 0, 1, 2, 3)


def valid_keys(positions, n_keys, causal, key_ok):
    """Which keys each query row may see: bool ``(qc, k)``.

    positions: long ``(qc,)`` absolute position of each query row.
    key_ok: bool ``(k,)``, False on padding keys.
    """
    keys = torch.arange(n_keys, device=positions.device)  # (k,)
    valid = key_ok.unsqueeze(0).expand(positions.numel(), n_keys)  # (qc, k)
    if causal:
        valid = valid & (keys.unsqueeze(0) <= positions.unsqueeze(1))  # (qc, k)
    return valid


def row_weights(valid, query_ok):
    """Weight ``1 - 1/n`` of each row (0 for padded queries): float ``(qc,)`` and ``n``."""
    n = valid.sum(-1)  # (qc,)
    w = (1.0 - 1.0 / n.clamp(min=1).double()) * query_ok.double()  # (qc,)
    return w, n


def normalised_entropy(a, n):
    """Entropy of each row divided by ``log n`` (1 = uniform over the valid keys). ``(..., qc)``.

    Rows with ``n <= 1`` come out 0; their row weight is 0 anyway.
    """
    h = torch.special.entr(a).sum(-1)  # (..., qc)
    return h / torch.log(n.clamp(min=2).to(a.dtype))  # (..., qc)


def diagonal_mass(a, positions, valid):
    """Mass of each row on keys ``position + d`` for d in OFFSETS, and where that key is valid.

    Returns mass ``(..., qc, 7)`` and ok bool ``(qc, 7)``.
    """
    n_keys = a.shape[-1]
    offs = torch.tensor(OFFSETS, device=a.device)  # (7,)
    idx = positions.unsqueeze(1) + offs.unsqueeze(0)  # (qc, 7)
    inside = (idx >= 0) & (idx < n_keys)  # (qc, 7)
    idx = idx.clamp(0, n_keys - 1)  # (qc, 7)
    ok = inside & torch.gather(valid, 1, idx)  # (qc, 7)
    mass = torch.gather(a, -1, idx.expand(*a.shape[:-1], len(OFFSETS)))  # (..., qc, 7)
    return mass * ok, ok


def top_k_mass(a, k):
    """Sum of the k largest weights of each row. ``(..., qc)``."""
    k = min(k, a.shape[-1])
    return a.topk(k, dim=-1).values.sum(-1)  # (..., qc)


def mean_distance(a, positions):
    """Expected distance ``sum_j a_ij |pos_i - j|`` of each row, in tokens. ``(..., qc)``."""
    keys = torch.arange(a.shape[-1], device=a.device)  # (k,)
    dist = (positions.unsqueeze(1) - keys.unsqueeze(0)).abs().to(a.dtype)  # (qc, k)
    return torch.einsum("...qk,qk->...q", a, dist)  # (..., qc)


def local_run_mass(a, positions, valid, n):
    """Excess mass of the best contiguous stretch of keys around each query, beyond its strongest key.

    Excess weight is ``a_ij - 1/n`` (above uniform). The stretch is the interval
    of keys containing the query's own position with the largest total excess
    (a maximum-subarray constrained to contain that key, found with prefix sums;
    noise dips inside a segment do not cut it). The row's score is that total
    minus the largest single excess inside the stretch, floored at 0: 0 for a
    one-hot diagonal or a far-away sink, ``1 - w/n - 1/w + 1/n`` for a uniform
    block of width w. This is the row-local form of a block score: inside a
    segment (phrase, sentence A/B) each token spreads its mass over the segment
    around it. ``a`` is zero on keys that are not valid. ``(..., qc)``.

    Only the prefix sums at the query's own key matter, so the best ends are
    masked reductions, not running minima/maxima over every key. Ties go where
    a running scan would put them: the left end to the last minimum, the right
    end to the first maximum.
    """
    n_keys = a.shape[-1]
    keys = torch.arange(n_keys, device=a.device)  # (k,)
    p = positions.clamp(0, n_keys - 1).unsqueeze(1)  # (qc, 1)
    x = a - valid.to(a.dtype) * (1.0 / n.clamp(min=1).to(a.dtype)).unsqueeze(1)  # (..., qc, k), 0 where invalid
    s = x.cumsum(-1)  # (..., qc, k) sum of keys 0..j
    # sums of keys 0..j-1 for j <= p, in reverse key order so that min() finds the *last* minimum
    s_before = torch.where((keys > p).flip(-1), float("inf"), torch.sub(s, x).flip(-1))  # (..., qc, k)
    low, lo = s_before.min(-1, keepdim=True)  # (..., qc, 1)
    lo = n_keys - 1 - lo
    high, hi = _best_right_end(s, p, keys, valid)  # (..., qc, 1) each
    total = (high - low).squeeze(-1)  # (..., qc)
    strongest = torch.where((keys < lo) | (keys > hi), -1.0, x).amax(-1)  # (..., qc)
    score = (total - strongest).clamp(min=0)  # (..., qc)
    return score * (positions < n_keys)  # (..., qc)


def _best_right_end(s, p, keys, valid):
    """Largest prefix sum ``s`` at keys j >= p and its first such j: ``(..., qc, 1)`` each.

    When no key after p is valid (causal rows), every later prefix sum equals
    ``s[p]``, so the answer is p itself (returned as ``(qc, 1)``).
    """
    if not (valid & (keys > p)).any():
        return torch.gather(s, -1, p.expand(*s.shape[:-1], 1)), p
    return torch.where(keys < p, float("-inf"), s).max(-1, keepdim=True)  # first maximum
