"""Redundant heads: pairs of heads in one layer whose attention maps nearly coincide.

The distance between two heads is the Jensen–Shannon distance (square root of
the JS divergence, base 2, so it lies in [0, 1] and is a metric) between their
rows, averaged over the query rows with the row weights of ``row_stats`` (rows
forced onto one key by causality count nothing), then averaged over the probe
texts by the caller. Heads that nearly coincide are the ones Michel et al. 2019
and Voita et al. 2019 prune at no cost.

Only heads of the same layer are compared: they read the same input and are
concatenated into the same output projection, so one can stand in for the
other; heads in different layers read different inputs.

``PairedJS`` / ``paired_js_distance`` use the same row distance between the
same head of two models (``diagnostics.compare``): how far fine-tuning moved it.
"""

import math

import torch

from diagnostics.measure import row_stats
from diagnostics.findings import make_finding

# JS distance 0.1 = JS divergence 0.01 bits: e.g. two rows that split the same
# mass 0.5/0.5 versus 0.6/0.4 are ~0.07 apart. Clearly distinct heads are > 0.3.
REDUNDANT_JS = 0.1


class PairwiseJS:
    """``js_distance`` of one layer, accumulated over query-row chunks ``[H, qc, k]``.

    Mean over rows (weighted as in ``row_stats``) of the Jensen–Shannon distance
    (base 2) between every two heads' rows; ``finalize`` gives ``[H, H]``.
    """

    def __init__(self, n_keys, causal, padding=None):
        self.n_keys, self.causal = n_keys, bool(causal)
        padding = torch.zeros(n_keys, dtype=torch.bool) if padding is None else torch.as_tensor(padding, dtype=torch.bool)
        self.key_ok = ~padding  # (k,)
        self.sums, self.weight = None, None

    def update(self, chunk, q_start):
        a = chunk.detach().double()  # (H, qc, k)
        w = _chunk_row_weights(a, q_start, self.n_keys, self.causal, self.key_ok)  # (qc,)
        if self.sums is None:
            self.sums = torch.zeros(a.shape[0], a.shape[0], dtype=torch.float64, device=a.device)  # (H, H)
            self.weight = torch.zeros((), dtype=torch.float64, device=a.device)
        self_info = torch.special.xlogy(a, a).sum(-1)  # (H, qc)
        for h in range(a.shape[0]):
            distance = row_js(a[h:h + 1], a, self_info[h:h + 1], self_info)  # (H, qc)
            self.sums[h] += (distance * w).sum(-1)  # (H,)
        self.weight += w.sum()

    def finalize(self):
        return (self.sums / self.weight.clamp(min=1e-12)).float().cpu()  # (H, H)


class PairedJS:
    """The JS distance between head h of one model and head h of another, over query-row chunks.

    Both models read the same tokens; ``update`` takes the same rows of one layer
    of each, ``[H, qc, k]``, and ``finalize`` gives ``[H]``: the mean over rows
    (weighted as in ``row_stats``) of the row distance, as ``PairwiseJS``.
    """

    def __init__(self, n_keys, causal, padding=None):
        self.n_keys, self.causal = n_keys, bool(causal)
        padding = torch.zeros(n_keys, dtype=torch.bool) if padding is None else torch.as_tensor(padding, dtype=torch.bool)
        self.key_ok = ~padding  # (k,)
        self.sums, self.weight = None, None

    def update(self, chunk_a, chunk_b, q_start):
        a, b = chunk_a.detach().double(), chunk_b.detach().double().to(chunk_a.device)  # (H, qc, k) each
        w = _chunk_row_weights(a, q_start, self.n_keys, self.causal, self.key_ok)  # (qc,)
        distance = row_js(a, b)  # (H, qc)
        if self.sums is None:
            self.sums = torch.zeros(a.shape[0], dtype=torch.float64, device=a.device)  # (H,)
            self.weight = torch.zeros((), dtype=torch.float64, device=a.device)
        self.sums += (distance * w).sum(-1)  # (H,)
        self.weight += w.sum()

    def finalize(self):
        return (self.sums / self.weight.clamp(min=1e-12)).float().cpu()  # (H,)


def row_js(a, b, a_info=None, b_info=None):
    """Jensen–Shannon distance (base 2, in [0, 1]) between matching rows of ``a`` and ``b``: ``(..., qc)``.

    ``a``, ``b``: broadcastable ``(..., qc, k)`` float64 rows that each sum to 1;
    ``a_info``/``b_info``: their ``sum(x log x)`` if already known.
    """
    a_info = torch.special.xlogy(a, a).sum(-1) if a_info is None else a_info  # (..., qc)
    b_info = torch.special.xlogy(b, b).sum(-1) if b_info is None else b_info  # (..., qc)
    m = (a + b) / 2  # (..., qc, k)
    cross = torch.special.xlogy(a, m).sum(-1) + torch.special.xlogy(b, m).sum(-1)  # (..., qc)
    return ((a_info + b_info - cross) / (2 * math.log(2.0))).clamp(min=0).sqrt()  # (..., qc)


def _chunk_row_weights(a, q_start, n_keys, causal, key_ok):
    """``row_stats`` weight of each row of a chunk ``(H, qc, k)`` that starts at query ``q_start``: ``(qc,)``."""
    key_ok = key_ok.to(a.device)
    pos = torch.arange(a.shape[-2], device=a.device) + q_start  # (qc,)
    valid = row_stats.valid_keys(pos, n_keys, causal, key_ok)  # (qc, k)
    w, _ = row_stats.row_weights(valid, key_ok[pos.clamp(max=n_keys - 1)])  # (qc,)
    return w


def js_distance(attn, causal=False, padding=None):
    """Mean JS distance between every pair of heads of each layer: ``[L, H, H]``.

    attn: ``[L, H, q, k]`` (queries are the last q keys, as in ``metrics``).
    One ``PairwiseJS`` per layer, fed the whole layer as one chunk.
    """
    attn = torch.as_tensor(attn)
    q, k = attn.shape[-2:]
    out = []
    for layer_maps in attn:  # (H, q, k)
        js = PairwiseJS(k, causal, padding)
        js.update(layer_maps, k - q)
        out.append(js.finalize())  # (H, H)
    return torch.stack(out)  # (L, H, H)


def paired_js_distance(attn_a, attn_b, causal=False, padding=None):
    """JS distance between head h of ``attn_a`` and head h of ``attn_b``, both ``[L, H, q, k]``: ``[L, H]``."""
    attn_a, attn_b = torch.as_tensor(attn_a), torch.as_tensor(attn_b)
    q, k = attn_a.shape[-2:]
    out = []
    for layer_a, layer_b in zip(attn_a, attn_b):  # (H, q, k) each
        js = PairedJS(k, causal, padding)
        js.update(layer_a, layer_b, k - q)
        out.append(js.finalize())  # (H,)
    return torch.stack(out)  # (L, H)


def redundant_pairs(distance, exclude=None, threshold=REDUNDANT_JS):
    """``[(layer, head_a, head_b, distance)]`` with distance < threshold, a < b.

    exclude: bool ``[L, H]`` of heads left out (diffuse heads all coincide with
    the uniform map, and are reported as diffuse already).
    """
    pairs = []
    n_layers, n_heads, _ = distance.shape
    for layer in range(n_layers):
        for a in range(n_heads):
            for b in range(a + 1, n_heads):
                skip = exclude is not None and bool(exclude[layer, a] or exclude[layer, b])
                if not skip and distance[layer, a, b] < threshold:
                    pairs.append((layer, a, b, float(distance[layer, a, b])))
    return pairs


def pairs_finding(code, pairs, total, part, threshold):
    """One finding naming ``pairs`` ``(layer, a, b, value)``; None when there are none."""
    if not pairs:
        return None
    heads = sorted({(l, a) for l, a, _, _ in pairs} | {(l, b) for l, _, b, _ in pairs})
    prefix = "" if part == "self" else f"{part} "
    named = [f"{prefix}L{l}H{a}~L{l}H{b} ({v:.3f})" for l, a, b, v in pairs]
    shown = ", ".join(named[:10]) + (f", … and {len(named) - 10} more" if len(named) > 10 else "")
    details = {"threshold": threshold, "pairs": [[[l, a], [l, b], round(v, 4)] for l, a, b, v in pairs]}
    return make_finding(code, heads, total, part, details, threshold=threshold, n_pairs=len(pairs), pairs=shown)
