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
    h = -torch.special.xlogy(a, a).sum(-1)  # (..., qc)
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
    return (a * dist).sum(-1)  # (..., qc)


def local_run_mass(a, positions, valid, n, rel, uniform_factor):
    """Mass of the contiguous run of strong keys around each query, beyond its strongest key.

    A key is strong when its weight is at least ``rel`` x the row maximum and at
    least ``uniform_factor`` x the uniform weight ``1/n``. The run is the maximal
    interval of strong keys that contains the query's own position (empty when
    that key is not strong). The row's score is the run's mass minus its largest
    weight: 0 for a one-hot diagonal, ``1 - 1/w`` for a uniform block of width w.
    This is the row-local form of a block score: inside a segment (phrase,
    sentence A/B) each token spreads its mass over the segment around it.
    ``(..., qc)``.
    """
    n_keys = a.shape[-1]
    row_max = a.amax(-1, keepdim=True)  # (..., qc, 1)
    floor = (uniform_factor / n.clamp(min=1).to(a.dtype)).unsqueeze(1)  # (qc, 1)
    strong = (a >= torch.maximum(rel * row_max, floor)) & valid  # (..., qc, k)
    weak = (~strong).to(torch.int32)  # (..., qc, k)
    cum = weak.cumsum(-1)  # (..., qc, k)
    p = positions.clamp(0, n_keys - 1).unsqueeze(1)  # (qc, 1)
    p_idx = p.expand(*a.shape[:-1], 1)  # (..., qc, 1)
    cum_p = torch.gather(cum, -1, p_idx)  # (..., qc, 1)
    weak_p = torch.gather(weak, -1, p_idx)  # (..., qc, 1)
    keys = torch.arange(n_keys, device=a.device)  # (k,)
    left = keys.unsqueeze(0) <= p  # (qc, k)
    no_gap = torch.where(left, cum_p - cum + weak, cum - cum_p + weak_p) == 0  # (..., qc, k)
    in_run = no_gap & (positions < n_keys).unsqueeze(1)  # (..., qc, k)
    run = a * in_run  # (..., qc, k)
    return run.sum(-1) - run.amax(-1)  # (..., qc)
