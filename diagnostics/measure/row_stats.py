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

import math

import torch

from core.extraction.scratch import buffer
from core.extraction.windows import in_window

# Offsets of the diagonals measured: key = query position + offset, so +1 is the
# next token and -1 the previous one (Clark et al. 2019, Sec. 3).
OFFSETS = (-3, -2, -1, 0, 1, 2, 3)
# Device types without float64 (Apple's MPS refuses it): sums over rows are float32 there (``sum_dtype``).
NO_FLOAT64 = ("mps",)


_SPREAD = 2654435761  # Knuth's multiplicative hash: which row of each run of ``stride`` rows is measured


def sampled_rows(positions, stride: int):
    """Indices into ``positions`` of the rows measured when one row in ``stride`` is: one row of each run of
    ``stride`` consecutive positions, which one chosen by a hash of the run, so a text repeating with a period that
    divides the stride is not read at the same place of every repeat (every stride-th row aliased: a block score off
    by 0.18 and JS distances by 0.38 on a repeated line). By absolute position, so chunked and whole maps agree."""
    if stride <= 1:
        return slice(None)
    run = positions // stride
    return torch.nonzero(positions % stride == (run * _SPREAD) % (1 << 32) % stride).flatten()  # (rows',)


def valid_keys(positions, n_keys, causal, key_ok, window=None):
    """Which keys each query row may see: bool ``(qc, k)``.

    positions: long ``(qc,)`` absolute position of each query row.
    key_ok: bool ``(k,)``, False on padding keys.
    window: a local layer's window (``core.extraction.windows``), or None.
    """
    keys = torch.arange(n_keys, device=positions.device)  # (k,)
    valid = key_ok.unsqueeze(0).expand(positions.numel(), n_keys)  # (qc, k)
    distance = positions.unsqueeze(1) - keys.unsqueeze(0)  # (qc, k) query - key
    if causal:
        valid = valid & (distance >= 0)  # (qc, k)
    if window is not None:
        valid = valid & in_window(distance, window, causal)  # (qc, k)
    return valid


def key_audience(weights, positions, key_ok, causal, window=None):
    """``weights @ valid_keys(positions, k, causal, key_ok, window)``: the weight of the rows that see each key.
    ``(..., k)``.

    weights: ``(..., qc)`` per row; positions: ``(qc,)``, consecutive (a chunk of rows). A causal key ``j`` is
    seen by the rows from position ``j`` on, so its audience is a suffix sum of the weights: no ``[qc, k]``
    mask is converted and multiplied (but in a local layer's window).
    """
    qc, ok = weights.shape[-1], key_ok.to(weights.dtype)  # (k,)
    if window is not None:
        return weights @ valid_keys(positions, key_ok.numel(), causal, key_ok, window).to(weights.dtype)  # (..., k)
    if not causal or qc == 0:
        return weights.sum(-1, keepdim=True) * ok  # (..., k)
    suffix = weights.flip(-1).cumsum(-1).flip(-1)  # (..., qc): weight of rows i .. qc - 1
    suffix = torch.cat([suffix, weights.new_zeros(*weights.shape[:-1], 1)], dim=-1)  # (..., qc + 1)
    first_row = (torch.arange(key_ok.numel(), device=weights.device) - positions[0]).clamp(0, qc)  # (k,)
    return suffix[..., first_row] * ok  # (..., k)


def sum_dtype(device) -> torch.dtype:
    """The dtype of sums over rows on ``device``: float64, or float32 where the device has no float64 (the sums of a
    2,048-token map in float32 agree with float64's to ~1e-6)."""
    return torch.float32 if torch.device(device).type in NO_FLOAT64 else torch.float64


def row_weights(valid, query_ok):
    """Weight ``1 - 1/n`` of each row (0 for padded queries): ``(qc,)`` in ``sum_dtype``, and ``n``."""
    n = valid.sum(-1)  # (qc,)
    dtype = sum_dtype(n.device)
    w = (1.0 - 1.0 / n.clamp(min=1).to(dtype)) * query_ok.to(dtype)  # (qc,)
    return w, n


def normalised_entropy(a, n, scratch=None, logits=None, peak=None):
    """Entropy of each row divided by ``log n`` (1 = uniform over the valid keys). ``(..., qc)``.

    ``logits``: the scores whose softmax ``a`` is, shifted so each row's max is
    0 (finite), if the caller has them. Then ``log a = logits - c`` with ``c =
    -log(max a)`` per row, and the entropy is ``c - sum(a * logits)``: no log of
    every weight. Otherwise the logs are taken, with zero weights clamped to the
    dtype's smallest normal so that they contribute 0. ``peak``: ``a.amax(-1)``
    if known. Rows with ``n <= 1`` come out 0; their row weight is 0 anyway.
    """
    temp = buffer(scratch, "temp", a.shape, a)  # (..., qc, k)
    if logits is None:
        a_log_a = torch.clamp(a, min=torch.finfo(a.dtype).tiny, out=temp).log_().mul_(a)  # (..., qc, k)
        h = -a_log_a.sum(-1)  # (..., qc)
    else:
        peak = a.amax(-1) if peak is None else peak  # (..., qc)
        h = -torch.log(peak.clamp(min=torch.finfo(a.dtype).tiny)) - torch.mul(a, logits, out=temp).sum(-1)
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


def top_k_weights(a, k):
    """The k largest weights of each row, largest first. ``(..., qc, k)``.

    Exact, but without sorting whole rows: the k largest weights all lie in the
    k blocks of keys with the largest maxima (or the keys after the last whole
    block). Any weight outside them is exceeded by those k block maxima.
    """
    n_keys = a.shape[-1]
    k = min(k, n_keys)
    size = _block_size(n_keys)
    whole = n_keys // size * size  # keys in whole blocks
    if whole // size <= k:  # too few blocks to leave any out
        return a.topk(k, dim=-1).values  # (..., qc, k)
    blocks = a[..., :whole].unflatten(-1, (-1, size))  # (..., qc, nb, B)
    best = blocks.amax(-1).topk(k, dim=-1).indices  # (..., qc, k)
    picked = blocks.gather(-2, best.unsqueeze(-1).expand(*best.shape, size)).flatten(-2)  # (..., qc, k*B)
    candidates = torch.cat([picked, a[..., whole:]], dim=-1)  # (..., qc, k*B + tail)
    return candidates.topk(k, dim=-1).values  # (..., qc, k)


def mean_distance(a, positions, scratch=None, causal=False):
    """Expected distance ``sum_j a_ij |pos_i - j|`` of each row, in tokens. ``(..., qc)``.

    ``causal``: ``a`` is zero on keys after each row's position, so ``|pos_i - j| = pos_i - j`` wherever it
    is not, and the sum is ``pos_i * sum_j a_ij - sum_j a_ij j``: a row sum and a product with a vector instead
    of a product with a ``[qc, k]`` distance matrix (a third of the time; one ``[k, 2]`` product takes twice
    as long as the two).
    """
    keys = torch.arange(a.shape[-1], device=a.device, dtype=a.dtype)  # (k,)
    if causal:
        return (positions.to(a.dtype) * a.sum(-1) - a @ keys).clamp(min=0)  # (..., qc)
    dist = (positions.unsqueeze(1).to(a.dtype) - keys.unsqueeze(0)).abs()  # (qc, k)
    return torch.mul(a, dist, out=buffer(scratch, "temp", a.shape, a)).sum(-1)  # (..., qc)


def excess(a, valid, baseline, scratch=None, ignore=None):
    """Each row's weights above its baseline on the keys it may see, 0 elsewhere: ``(..., qc, K)``.

    ``K`` is ``n_keys`` padded to whole blocks of ``_Blocks`` (the padding is 0). ``a`` must be 0 on keys
    ``valid`` leaves out, except the keys listed in ``ignore`` (long ``(m,)``), which are zeroed here:
    one fused pass over the chunk instead of building ``valid * baseline`` and subtracting it.
    """
    n_keys = a.shape[-1]
    x = buffer(scratch, "excess", (*a.shape[:-1], _Blocks(n_keys, a.device).padded), a)  # (..., qc, K)
    x[..., n_keys:] = 0  # keys past n_keys count as invalid keys do
    torch.addcmul(a, valid.to(a.dtype), baseline.unsqueeze(-1), value=-1.0, out=x[..., :n_keys])
    if ignore is not None and ignore.numel():
        x.index_fill_(-1, ignore, 0.0)
    return x


def local_run_mass(a, positions, valid, n, scratch=None, baseline=None, peaks=1, causal=False):
    """Excess mass of the best contiguous stretch of keys around each query, beyond its strongest key.

    Excess weight is ``x_ij = a_ij - 1/n`` (above uniform; 0 on keys that are
    not valid, where ``a`` is 0). The stretch ``[lo, hi]`` is the interval of
    keys containing the query's own position p with the largest total excess
    (a maximum subarray constrained to contain p; noise dips inside a segment
    do not cut it); of equally good ones, the shortest. The row's score is that
    total minus the largest single excess inside the stretch, floored at 0: 0
    for a one-hot diagonal or a far-away sink, ``1 - w/n - 1/w + 1/n`` for a
    uniform block of width w. This is the row-local form of a block score:
    inside a segment (phrase, sentence A/B) each token spreads its mass over
    the segment around it. ``causal``: no row sees a key after its own position (``run_score``). ``(..., qc)``.
    """
    if baseline is None:
        baseline = 1.0 / n.clamp(min=1).to(a.dtype)  # (qc,) the uniform share
    return run_score(excess(a, valid, baseline, scratch), positions, a.shape[-1], scratch, peaks, causal)


def run_score(x, positions, n_keys, scratch=None, peaks=1, causal=False):
    """``local_run_mass`` of rows of excess weights ``x [..., qc, K]`` (from ``excess``). ``(..., qc)``.

    The score is linear in ``x``: rows scaled by a positive factor score that factor times as much.

    With prefix sums ``s_j = x_0 + ... + x_j`` (and ``s_-1 = 0``), the total is
    ``max_{j>=p} s_j - min_{-1<=j<p} s_j``; ``hi`` is the first maximum, ``lo``
    one past the last minimum. Keys are cut into blocks so that only per-block
    minima/maxima and the few blocks holding p, lo and hi are searched; see
    ``_Blocks``. ``causal``: every row's excess is 0 after its own key p, so its prefix sums are flat from p
    on and the maximum is ``s_p``, first reached at p: no search.
    """
    p = positions.clamp(0, n_keys - 1)  # (qc,)
    blocks = _Blocks(n_keys, x.device)
    s = torch.cumsum(x, -1, out=buffer(scratch, "prefix", x.shape, x))  # (..., qc, K)
    low, lo = blocks.last_min_before(s, p)  # (..., qc) each
    if causal:
        hi = p.expand(s.shape[:-1])  # (..., qc)
        high = s.gather(-1, hi.unsqueeze(-1)).squeeze(-1)  # (..., qc)
    else:
        high, hi = blocks.first_max_from(s, p)  # (..., qc) each
    lo, hi = lo.clamp(min=0), hi.clamp(min=0)  # a NaN row (a diverged head) matches no block: -1 was an IndexError
    strongest = blocks.max_between(x, lo, hi)  # (..., qc)
    score = (high - low - peaks * strongest.clamp(min=0)).clamp(min=0)  # (..., qc)
    return score * (positions < n_keys)  # (..., qc)


class _Blocks:
    """Searches of each row of ``[..., qc, K]`` prefix sums around a per-row key, block by block.

    Scanning every key with a mask costs a dozen passes over the chunk; instead
    each row's keys are cut into blocks of B (K = blocks × B, the tail padded
    with zeros). A whole block is reduced with one vectorised min/max; only the
    block holding the row's own key and the one block where the answer lies
    are then looked into key by key, ``[..., qc, B]`` at a time. Short rows are
    one block, and the search is a plain masked scan.
    """

    def __init__(self, n_keys, device):
        self.size = _block_size(n_keys)
        self.count = -(-n_keys // self.size)
        self.padded = self.count * self.size
        self.index = torch.arange(self.count, device=device, dtype=torch.int32)  # (nb,)
        self.offset = torch.arange(self.size, device=device, dtype=torch.int32)  # (B,)

    def block(self, v, b):
        """Block ``b`` ``(..., qc)`` of each row of ``v [..., qc, K]``: ``(..., qc, B)``."""
        if self.count == 1:
            return v
        rows = torch.arange(math.prod(v.shape[:-1]), device=v.device).view(v.shape[:-1])  # (..., qc)
        picked = (rows * self.count + b).flatten()  # (rows,) block number in v viewed as (rows * nb, B)
        return v.reshape(-1, self.size).index_select(0, picked).view(*v.shape[:-1], self.size)  # (..., qc, B)

    def reduce(self, v, how):
        return getattr(v.unflatten(-1, (self.count, self.size)), how)(-1)  # (..., qc, nb)

    def last_min_before(self, s, p):
        """``min(0, s_j for j < p)`` and one past the last j where it is reached (0 if only by s_-1)."""
        pb, po = p // self.size, p % self.size  # (qc,)
        part = torch.where(self.offset < po.unsqueeze(1), self.block(s, pb), math.inf)  # (..., qc, B)
        low = part.amin(-1).clamp(max=0)  # (..., qc)
        if self.count > 1:
            full = torch.where(self.index < pb.unsqueeze(1), self.reduce(s, "amin"), math.inf)  # (..., qc, nb)
            low = torch.minimum(low, full.amin(-1))
        j = _last(part == low.unsqueeze(-1), self.offset)  # (..., qc), -1 if absent
        j = torch.where(j >= 0, pb * self.size + j, -1)
        if self.count > 1:
            b = _last(full == low.unsqueeze(-1), self.index)  # (..., qc)
            in_b = _last(self.block(s, b.clamp(min=0)) == low.unsqueeze(-1), self.offset)  # (..., qc)
            j = torch.where((j < 0) & (b >= 0), b * self.size + in_b, j)
        return low, j + 1

    def first_max_from(self, s, p):
        """``max(s_j for j >= p)`` and the first j where it is reached."""
        pb, po = p // self.size, p % self.size  # (qc,)
        part = torch.where(self.offset >= po.unsqueeze(1), self.block(s, pb), -math.inf)  # (..., qc, B)
        high = part.amax(-1)  # (..., qc)
        if self.count > 1:
            full = torch.where(self.index > pb.unsqueeze(1), self.reduce(s, "amax"), -math.inf)  # (..., qc, nb)
            high = torch.maximum(high, full.amax(-1))
        j = _first(part == high.unsqueeze(-1), self.offset)  # (..., qc), -1 if absent
        j = torch.where(j >= 0, pb * self.size + j, -1)
        if self.count > 1:
            b = _first(full == high.unsqueeze(-1), self.index)  # (..., qc)
            in_b = _first(self.block(s, b.clamp(min=0)) == high.unsqueeze(-1), self.offset)  # (..., qc)
            j = torch.where(j < 0, b * self.size + in_b, j)
        return high, j

    def max_between(self, x, lo, hi):
        """``max(x_j for lo <= j <= hi)`` of each row; ``lo <= hi`` ``(..., qc)``."""
        lb, hb = lo // self.size, hi // self.size  # (..., qc)
        best = self._max_in_block(x, lb, lo, hi)  # (..., qc)
        if self.count > 1:
            inner = torch.where((self.index > lb.unsqueeze(-1)) & (self.index < hb.unsqueeze(-1)),
                                self.reduce(x, "amax"), -math.inf)  # (..., qc, nb)
            best = torch.maximum(best, torch.maximum(inner.amax(-1), self._max_in_block(x, hb, lo, hi)))
        return best

    def _max_in_block(self, x, b, lo, hi):
        """``max(x_j for lo <= j <= hi)`` over the keys of block ``b`` of each row (-inf if none)."""
        first, last = (lo - b * self.size).unsqueeze(-1), (hi - b * self.size).unsqueeze(-1)  # (..., qc, 1)
        inside = (self.offset >= first) & (self.offset <= last)  # (..., qc, B)
        return torch.where(inside, self.block(x, b), -math.inf).amax(-1)  # (..., qc)


def _block_size(n_keys):
    """Keys per block: up to 128 keys, one block; beyond, a power of two near sqrt(n_keys), at least 64.

    Blocks shorter than 64 reduce slowly, and with only one or two blocks the
    block-level search costs more than it saves (measured: 12 heads × 512 × 512
    take 27 ms in blocks of 64, 59 ms as one block).
    """
    if n_keys <= 128:
        return -(-max(n_keys, 1) // 64) * 64
    return max(64, 1 << math.ceil(math.log2(math.sqrt(n_keys))))


def _last(hit, index):
    """Largest ``index`` where ``hit [..., m]`` is True, -1 where none is."""
    return torch.where(hit, index, -1).amax(-1)  # (...)


def _first(hit, index):
    """Smallest ``index`` where ``hit [..., m]`` is True, -1 where none is."""
    first = torch.where(hit, index, index.numel()).amin(-1)  # (...)
    return torch.where(first < index.numel(), first, -1)
