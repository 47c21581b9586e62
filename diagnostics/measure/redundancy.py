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
        key_ok = self.key_ok.to(a.device)
        pos = torch.arange(a.shape[-2], device=a.device) + q_start  # (qc,)
        valid = row_stats.valid_keys(pos, self.n_keys, self.causal, key_ok)  # (qc, k)
        w, _ = row_stats.row_weights(valid, key_ok[pos.clamp(max=self.n_keys - 1)])  # (qc,)
        if self.sums is None:
            self.sums = torch.zeros(a.shape[0], a.shape[0], dtype=torch.float64, device=a.device)  # (H, H)
            self.weight = torch.zeros((), dtype=torch.float64, device=a.device)
        self_info = torch.special.xlogy(a, a).sum(-1)  # (H, qc)
        for h in range(a.shape[0]):
            m = (a[h:h + 1] + a) / 2  # (H, qc, k)
            cross = torch.special.xlogy(a[h:h + 1], m).sum(-1) + torch.special.xlogy(a, m).sum(-1)  # (H, qc)
            jsd = ((self_info[h:h + 1] + self_info - cross) / (2 * math.log(2.0))).clamp(min=0)  # (H, qc) bits
            self.sums[h] += (jsd.sqrt() * w).sum(-1)  # (H,)
        self.weight += w.sum()

    def finalize(self):
        return (self.sums / self.weight.clamp(min=1e-12)).float().cpu()  # (H, H)


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
