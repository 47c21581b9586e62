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

import torch

from diagnostics import row_stats
from diagnostics.findings import make_finding

# JS distance 0.1 = JS divergence 0.01 bits: e.g. two rows that split the same
# mass 0.5/0.5 versus 0.6/0.4 are ~0.07 apart. Clearly distinct heads are > 0.3.
REDUNDANT_JS = 0.1


def js_distance(attn, causal=False, padding=None):
    """Mean JS distance between every pair of heads of each layer: ``[L, H, H]``.

    attn: ``[L, H, q, k]`` (queries are the last q keys, as in ``metrics``).
    """
    attn = torch.as_tensor(attn).double()
    n_layers, n_heads, q, k = attn.shape
    pos = torch.arange(q) + (k - q)  # (q,)
    key_ok = torch.ones(k, dtype=torch.bool) if padding is None else ~torch.as_tensor(padding, dtype=torch.bool)
    valid = row_stats.valid_keys(pos, k, causal, key_ok)  # (q, k)
    w, _ = row_stats.row_weights(valid, key_ok[pos.clamp(max=k - 1)])  # (q,)
    out = torch.zeros(n_layers, n_heads, n_heads, dtype=torch.float64)
    for layer in range(n_layers):
        p = attn[layer].unsqueeze(1)  # (H, 1, q, k)
        r = attn[layer].unsqueeze(0)  # (1, H, q, k)
        m = (p + r) / 2  # (H, H, q, k)
        kl_p = (torch.special.xlogy(p, p) - torch.special.xlogy(p, m)).sum(-1)  # (H, H, q)
        kl_r = (torch.special.xlogy(r, r) - torch.special.xlogy(r, m)).sum(-1)  # (H, H, q)
        jsd = ((kl_p + kl_r) / (2 * torch.log(torch.tensor(2.0)))).clamp(min=0)  # (H, H, q) bits
        out[layer] = (jsd.sqrt() * w).sum(-1) / w.sum().clamp(min=1e-12)  # (H, H)
    return out.float()


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
