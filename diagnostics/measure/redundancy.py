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

Cost. Every pair of heads is compared on every key of every measured row, so
the work is heads²/2 × rows × keys per layer, against heads × rows × keys for
the attention itself. Two things keep it near the cost of one more pass over
the maps (docs/streaming.md):
- the divergence is computed as ``(Σ a log a + Σ b log b)/2 − Σ m log m`` with
  ``m = (a + b)/2``: one log per pair and key (the entropies once per head), in
  float32. Its error against the float64 definition is below 2e-7 on distinct
  heads; near-identical heads come out up to ~1e-4 apart instead of ~4e-5 (the
  rounding of a difference of entropies), far below the 0.1 that matters;
- at most ``JS_ROWS`` query rows per layer are measured, one of each run of ``stride``
  (``row_stats.sampled_rows``, by absolute position, so a streamed and a whole map pick the same rows).
  Probes up to ``JS_ROWS`` tokens (the repeated-sequence probe, MiniLM's
  default probes) are measured on every row, SmolLM2's default probes (216-229
  tokens) on one of every two; on long
  probes the mean over an even subsample of rows estimates the mean over all rows. Measured against every
  row (``python -m benchmarks.js_sampling``): see docs/streaming.md.

``PairedJS`` / ``paired_js_distance`` use the same row distance between the
same head of two models (``diagnostics.compare``): how far fine-tuning moved it
(the float64 definition on every row, ``row_js``).
"""

import math

import torch

from core.errors import InputError
from core.extraction.scratch import Scratch
from diagnostics.measure import row_stats
from diagnostics.findings import make_finding

# JS distance 0.1 = JS divergence 0.01 bits: e.g. two rows that split the same
# mass 0.5/0.5 versus 0.6/0.4 are ~0.07 apart. Clearly distinct heads are > 0.3.
REDUNDANT_JS = 0.1
# Query rows measured per layer (evenly spaced); the error of the subsample is in docs/streaming.md.
JS_ROWS = 128
_TINY = 1e-30  # x log x at 0 is 0: log of a clamped zero times the zero itself


def _keys_ok(n_keys: int, padding) -> torch.Tensor:
    """``(k,)`` True for the keys that are not padding (all of them when ``padding`` is None)."""
    if padding is None:
        return torch.ones(n_keys, dtype=torch.bool)
    return ~torch.as_tensor(padding, dtype=torch.bool)


class PairwiseJS:
    """``js_distance`` of one layer, accumulated over query-row chunks ``[H, qc, k]``.

    Mean over rows (weighted as in ``row_stats``) of the Jensen–Shannon distance
    (base 2) between every two heads' rows; ``finalize`` gives ``[H, H]``.
    n_rows: query rows of the whole map (default ``n_keys``); one row of each run of
    ``ceil(n_rows / max_rows)`` positions is measured (``row_stats.sampled_rows``).
    """

    def __init__(self, n_keys, causal, padding=None, n_rows=None, max_rows=JS_ROWS, scratch=None):
        self.n_keys, self.causal = n_keys, bool(causal)
        self.key_ok = _keys_ok(n_keys, padding)  # (k,)
        self.stride = max(1, math.ceil((n_keys if n_rows is None else n_rows) / max_rows))
        self.scratch = Scratch() if scratch is None else scratch  # chunk-sized temporaries, reused
        self.sums, self.weight = None, None

    def update(self, chunk, q_start):
        a = chunk.detach()  # (H, qc, k)
        pos = torch.arange(a.shape[-2], device=a.device) + q_start  # (qc,)
        if self.stride > 1:
            pos = pos[row_stats.sampled_rows(pos, self.stride)]  # (qc',)
            picked = self.scratch.get("js_rows", (a.shape[0], len(pos), a.shape[-1]), a)  # (H, qc', k)
            a = torch.index_select(a, 1, pos - q_start, out=picked)
        if self.sums is None:
            dtype = row_stats.sum_dtype(a.device)  # float64, or float32 on a device without it
            self.sums = torch.zeros(a.shape[0], a.shape[0], dtype=dtype, device=a.device)  # (H, H)
            self.weight = torch.zeros((), dtype=dtype, device=a.device)
        if pos.numel() == 0:
            return
        key_ok = self.key_ok.to(a.device)
        valid = row_stats.valid_keys(pos, self.n_keys, self.causal, key_ok)  # (qc, k)
        w, _ = row_stats.row_weights(valid, key_ok[pos.clamp(max=self.n_keys - 1)])  # (qc,)
        self._add(a.float(), w)
        self.weight += w.sum()

    def _add(self, a, w):
        """Add the weighted JS distances of rows ``a [H, qc, k]`` between every two heads (one log per pair and key).

        With s = a + b: Σ m log m = (Σ s log s − log 2 · Σ s) / 2, so JSD = (Σ a log a + Σ b log b
        − Σ s log s + log 2 · Σ s) / 2 nats.
        """
        heads = a.shape[0]
        total = a.sum(-1)  # (H, qc): 1 on rows that see any key
        entropy = self._sum_x_log_x(a, "js_log")  # (H, qc): Σ a log a
        mixed = self.scratch.get("js_mix", (heads - 1, *a.shape[1:]), a)  # (H-1, qc, k)
        for h in range(heads - 1):
            s = torch.add(a[h:h + 1], a[h + 1:], out=mixed[: heads - h - 1])  # (H-h-1, qc, k)
            jsd = (entropy[h:h + 1] + entropy[h + 1:] - self._sum_x_log_x(s, "js_log")
                   + math.log(2.0) * (total[h:h + 1] + total[h + 1:])) / (2 * math.log(2.0))  # (H-h-1, qc) bits
            row_sums = jsd.clamp(min=0).sqrt().to(w.dtype) @ w  # (H-h-1,)
            self.sums[h, h + 1:] += row_sums
            self.sums[h + 1:, h] += row_sums

    def _sum_x_log_x(self, x, name):
        """Σ x log x over the last dim (0 log 0 = 0), through one reused buffer."""
        log = torch.clamp(x, min=_TINY, out=self.scratch.get(name, x.shape, x)).log_()  # (..., k)
        return log.mul_(x).sum(-1)  # (...)

    def finalize(self):
        return (self.sums / self.weight.clamp(min=1e-12)).float().cpu()  # (H, H)


class PairedJS:
    """The JS distance between head h of one model and head h of another, over query-row chunks.

    Both models read the same tokens; ``update`` takes the same rows of one layer
    of each, ``[H, qc, k]``, and ``finalize`` gives ``[H]``: the mean over rows
    (weighted as in ``row_stats``) of the row distance, as ``PairwiseJS``. A head whose rows are the same in
    both, NaN included, is at 0 (the same diverged head in both: NaN rows have no distance of their own).
    """

    def __init__(self, n_keys, causal, padding=None):
        self.n_keys, self.causal = n_keys, bool(causal)
        self.key_ok = _keys_ok(n_keys, padding)  # (k,)
        self.sums, self.weight, self.same = None, None, None

    def update(self, chunk_a, chunk_b, q_start):
        dtype = row_stats.sum_dtype(chunk_a.device)  # float64, or float32 on a device without it
        a, b = chunk_a.detach().to(dtype), chunk_b.detach().to(chunk_a.device, dtype)  # (H, qc, k) each
        w = _chunk_row_weights(a, q_start, self.n_keys, self.causal, self.key_ok)  # (qc,)
        distance = row_js(a, b)  # (H, qc)
        if self.sums is None:
            self.sums = torch.zeros(a.shape[0], dtype=dtype, device=a.device)  # (H,)
            self.weight = torch.zeros((), dtype=dtype, device=a.device)
        self.sums += (distance * w).sum(-1)  # (H,)
        self.weight += w.sum()
        same = torch.isclose(a, b, equal_nan=True).flatten(1).all(-1)  # (H,)
        self.same = same if self.same is None else self.same & same

    def finalize(self):
        return (self.sums / self.weight.clamp(min=1e-12)).masked_fill(self.same, 0.0).float().cpu()  # (H,)


def row_js(a, b):
    """Jensen–Shannon distance (base 2, in [0, 1]) between matching rows of ``a`` and ``b``: ``(..., qc)``.

    ``a``, ``b``: broadcastable ``(..., qc, k)`` rows that each sum to 1 (float64, or float32 on a device without it).
    """
    a_info = torch.special.xlogy(a, a).sum(-1)  # (..., qc)
    b_info = torch.special.xlogy(b, b).sum(-1)  # (..., qc)
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


def js_distance(attn, causal=False, padding=None, max_rows=JS_ROWS):
    """Mean JS distance between every pair of heads of each layer: ``[L, H, H]``.

    attn: ``[L, H, q, k]`` (queries are the last q keys, as in ``metrics``).
    One ``PairwiseJS`` per layer, fed the whole layer as one chunk; ``max_rows`` as there.
    """
    attn = _maps(attn, "js_distance")
    q, k = attn.shape[-2:]
    out = []
    for layer_maps in attn:  # (H, q, k)
        js = PairwiseJS(k, causal, padding, n_rows=k, max_rows=max_rows)
        js.update(layer_maps, k - q)
        out.append(js.finalize())  # (H, H)
    return torch.stack(out)  # (L, H, H)


def paired_js_distance(attn_a, attn_b, causal=False, padding=None):
    """JS distance between head h of ``attn_a`` and head h of ``attn_b``, both ``[L, H, q, k]``: ``[L, H]``."""
    attn_a, attn_b = _maps(attn_a, "paired_js_distance"), _maps(attn_b, "paired_js_distance")
    if attn_a.shape != attn_b.shape:  # zip dropped the layers one of them lacked
        raise InputError(f"paired_js_distance compares maps of one shape, not {list(attn_a.shape)} and "
                         f"{list(attn_b.shape)}")
    q, k = attn_a.shape[-2:]
    out = []
    for layer_a, layer_b in zip(attn_a, attn_b):  # (H, q, k) each
        js = PairedJS(k, causal, padding)
        js.update(layer_a, layer_b, k - q)
        out.append(js.finalize())  # (H,)
    return torch.stack(out)  # (L, H)


def _maps(attn, what) -> torch.Tensor:
    """``attn`` as a ``[L, H, q, k]`` tensor with no more queries than keys, or InputError."""
    attn = torch.as_tensor(attn)
    if attn.dim() != 4 or attn.shape[-2] > attn.shape[-1]:
        raise InputError(f"{what} takes maps [layers, heads, q, k] with q <= k; got shape {tuple(attn.shape)}")
    return attn


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


def pairs_finding(code, pairs, total, part, threshold, layer_heads=None):
    """One finding naming ``pairs`` ``(layer, a, b, value)``; None when there are none. ``layer_heads``: the heads
    of one layer, for ``findings.LAYER_CODES``' rule (near copies that are most of one layer)."""
    if not pairs:
        return None
    heads = sorted({(l, a) for l, a, _, _ in pairs} | {(l, b) for l, _, b, _ in pairs})
    prefix = "" if part == "self" else f"{part} "
    named = [f"{prefix}L{l}H{a}~L{l}H{b} ({v:.3f})" for l, a, b, v in pairs]
    shown = ", ".join(named[:10]) + (f", … and {len(named) - 10} more" if len(named) > 10 else "")
    details = {"threshold": threshold, "pairs": [[[l, a], [l, b], round(v, 4)] for l, a, b, v in pairs]}
    return make_finding(code, heads, total, part, details, layer_heads, threshold=threshold, n_pairs=len(pairs),
                        pairs=shown)
