"""Per-head attention metrics over ``[..., q, k]`` maps, computable query chunk by query chunk.

Every metric is a weighted mean of a row-local quantity, or built from column
sums, so ``MetricAccumulator`` can take the map in query-row chunks (layer by
layer, never the whole map) and ``finalize`` gives exactly what one pass gives.
Rows are weighted by ``1 - 1/n`` (``n`` = the row's valid keys, see
``row_stats``): rows forced onto few keys by causality count little or nothing.

Metrics (each shaped ``[...]``, one value per head, unless noted):
- ``entropy``: mean row entropy divided by ``log n`` of that row; 1 = uniform,
  0 = one-hot. Clark et al. 2019 ("What Does BERT Look At?", Sec. 3.2) use raw
  row entropy; normalising makes rows of different lengths comparable.
- ``uniform_gap``: mean KL divergence of a row from uniform over its keys, in
  nats (``log n - H``). Normalised entropy creeps towards 1 as a text grows
  (a row whose logits spread by sigma around their mean keeps ``H ~ log n -
  sigma^2 / 2``, so ``H / log n`` rises with n); the gap stays put, and is 0 for
  uniform rows at any length.
- ``confidence``: mean row maximum (Voita et al. 2019, "Analyzing Multi-Head
  Self-Attention", Sec. 4: a head's confidence).
- ``diag_mass`` ``[..., 7]``: mean mass on key ``i + d`` for d = -3..+3 (+1 = next
  token, -1 = previous), over rows where that key is valid (at least
  ``MIN_AUDIENCE`` of all rows, so offset +3 of a 4-token map, which exists for
  one row, cannot reach 1 from that row alone); ``best_offset`` and
  ``best_offset_mass`` are its argmax and max. Positional heads in Clark et al.
  2019 Sec. 3 and Voita et al. 2019 Sec. 4.2.
- ``column_mass`` ``[..., k]``: mass each key receives, divided by the (weighted)
  number of queries that can see it, floored at ``MIN_AUDIENCE`` of all
  queries so a key seen by a handful of late causal queries is not a sink.
  ``sink_score``/``sink_key``: the largest *excess* column mass (received mass
  minus what a uniform head would give that key, same normalisation) and its
  key; ``sink2_score``: the sum of the two largest excesses. The excess keeps
  short maps, where every key gets ~1/n anyway, from looking like sinks.
  Attention sinks: Clark et al. 2019 ([CLS]/[SEP]/punctuation),
  Kovaleva et al. 2019 ("Revealing the Dark Secrets of BERT", vertical pattern),
  Gu et al. 2024 ("When Attention Sink Emerges in Language Models").
- ``topk_mass``: mean mass of the ``top_k`` largest weights of a row, over rows
  with more than ``top_k`` valid keys (sparse, focused heads); on the block
  score's rows (below): sorting out the top k costs five times a row maximum.
- ``block_score``: mean excess mass (above uniform) of the best contiguous
  stretch of keys around the query, beyond its two strongest keys (one in
  rows of at most ``SHORT_ROW`` non-sink keys; ``row_stats.local_run_mass``), on the sink-factored rows (below);
  Kovaleva et al. 2019's "block" pattern (attention within a segment). With
  ``topk_mass``, the metrics read off a sample of rows: maps of more than ``BLOCK_ROWS`` keys
  are measured on one query row in ``ceil(n / BLOCK_ROWS)`` (``row_stats.sampled_rows``: the same
  rows chunked or whole).
- ``special_mass``: mean mass on keys marked special ([CLS], [SEP], ...); 0 when
  none are marked. Clark et al. 2019 Sec. 3.2.
- ``mean_distance``: mean expected |query - key| in tokens (Vig & Belinkov 2019,
  "Analyzing the Structure of Attention in a Transformer Language Model").

A local (sliding-window) layer's rows see only the keys in their window
(``window``, ``core.extraction.windows``): those are its valid keys.

A row that sums to less than 1 gave the rest to a learned sink outside the
text (GPT-OSS's per-head sink logit): that share is one more key of the row's
``entropy`` and ``confidence``, and sink mass below.

Sink-factored metrics (Kovaleva et al. 2019's "vertical + diagonal": what a
head does besides its sink). The sink keys are the first token (Xiao et al.
2023, "Efficient Streaming Language Models with Attention Sinks"; Gu et al.
2024) and the special tokens ([CLS], [SEP]; Clark et al. 2019), known before
any row is read, so the factoring is row-local:
- ``sink_mass``: mean row mass on the sink keys.
- ``sink_level``: ``sink_mass`` carried to a map of ``SINK_REFERENCE_KEYS`` keys (``sink_level``
  below): the same head parks less on its sink in a longer text, so a fixed threshold on the mass
  means a different thing at every length.
- each row's non-sink mass renormalised to 1 ("the rest"), and the row weighted
  by ``(1 - 1/n') * (1 - sink mass)`` (``n'`` = its valid non-sink keys): a row
  that is almost all sink says little about the rest. On the rest:
  ``rest_entropy``, ``rest_diag_mass`` ``[..., 7]`` (the share of the non-sink
  mass on key ``i + d``, over rows where that key is valid and no sink: the
  TransformerLens detector score with the BOS column excluded),
  ``rest_best_offset`` / ``rest_best_offset_mass``, ``rest_sink_score`` /
  ``rest_sink2_score`` (the column excess of the non-sink keys: a vertical head
  on "." or a recurring word), ``rest_mean_distance``, and ``block_score``.
"""

import math
from dataclasses import dataclass, fields

import torch

from core.errors import InputError
from core.extraction.scratch import Scratch
from diagnostics.measure import row_stats
from diagnostics.measure.row_stats import OFFSETS

# A key (or a diagonal) counts by the mass it gets from *most* queries: its mass
# is divided by at least half of all (weighted) queries. Without this floor the
# last key of a causal map, seen only by the last query, scores 1 for any head
# that attends to itself, and offset +3 of a 4-token map is one row's choice.
MIN_AUDIENCE = 0.5
# Rows are processed in chunks of about this many floats by ``head_metrics``.
CHUNK_FLOATS = 1 << 24
DEFAULT_TOP_K = 3

_ROW_METRICS = ("entropy", "uniform_gap", "confidence", "topk_mass", "special_mass", "mean_distance")
# Sums over rows weighted by their non-sink mass (``sink_mass``: by the plain row weight).
_REST_METRICS = ("sink_mass", "block_score", "rest_entropy", "rest_mean_distance")
# A row's non-sink mass is divided by at least this, so a row that is all sink stays finite (its
# weight, that same mass, is then ~0 anyway).
REST_FLOOR = 1e-6
# The sink mass of one head falls with the length of the text: on the real models' texts joined into
# maps of ~20, 40, 75, 150 and 300 keys, the threshold that best reproduces the heads that are sinks at
# ~20 keys (Gu et al.'s 0.3 on the ground truth's texts, ``classify.real_truth``) falls from 0.3 to
# 0.2, 0.15, 0.12 and 0.07 (MiniLM and SmolLM2 alike). The odds of the sink mass scale as
# (k / SINK_REFERENCE_KEYS) ** SINK_LENGTH_POWER across those lengths (fitted on the tuning half's
# texts; docs/classifier.md), so ``sink_level`` is the mass a head would put on its sink at 20 keys.
SINK_REFERENCE_KEYS = 20
SINK_LENGTH_POWER = 0.5
# Rows with at most this many non-sink keys take a block's strongest key off once, longer rows twice
# (``row_stats.local_run_mass``): synthetic blocks of 4-8 tokens are segments of 2-4 keys.
SHORT_ROW = 8
# The block score is measured on at most about this many query rows of a map, evenly spaced (every
# ``ceil(n_keys / BLOCK_ROWS)``-th position, as the head similarity's ``JS_ROWS``): maps up to this long
# are measured on every row. Its search is half the cost of all the metrics; the error of the subsample
# is in docs/streaming.md. ``topk_mass`` is read off the same rows.
BLOCK_ROWS = 512


@dataclass
class HeadMetrics:
    """Metrics of a batch of heads; every tensor is ``[...]`` unless noted."""

    entropy: torch.Tensor
    uniform_gap: torch.Tensor  # nats
    confidence: torch.Tensor
    topk_mass: torch.Tensor
    block_score: torch.Tensor
    special_mass: torch.Tensor
    mean_distance: torch.Tensor
    diag_mass: torch.Tensor  # [..., 7], offsets OFFSETS
    best_offset: torch.Tensor  # [...] long, one of OFFSETS
    best_offset_mass: torch.Tensor
    column_mass: torch.Tensor  # [..., k]
    sink_score: torch.Tensor
    sink_key: torch.Tensor  # [...] long
    sink2_score: torch.Tensor
    sink_mass: torch.Tensor  # mass on the first token and the special tokens
    sink_level: torch.Tensor  # sink_mass at SINK_REFERENCE_KEYS keys
    rest_entropy: torch.Tensor  # the metrics below: of the non-sink mass, renormalised
    rest_diag_mass: torch.Tensor  # [..., 7]
    rest_best_offset: torch.Tensor  # [...] long
    rest_best_offset_mass: torch.Tensor
    rest_sink_score: torch.Tensor
    rest_sink2_score: torch.Tensor
    rest_mean_distance: torch.Tensor

    @property
    def shape(self):
        return tuple(self.entropy.shape)

    def __getitem__(self, index):
        """The metrics of a sub-batch, e.g. ``m[layer]`` or ``m[layer, head]``."""
        return HeadMetrics(**{f.name: getattr(self, f.name)[index] for f in fields(self)})

    def scalars(self):
        """Plain floats/ints of one head (``shape == ()``), without the per-key column."""
        if self.shape != ():
            raise InputError(f"scalars() needs the metrics of one head; these have shape {self.shape}.")
        out = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "column_mass"}
        for name in ("diag_mass", "rest_diag_mass"):
            out[name] = {d: float(v) for d, v in zip(OFFSETS, out[name].tolist())}
        return {k: v if isinstance(v, dict) else v.item() for k, v in out.items()}


class MetricAccumulator:
    """Accumulates the metrics of ``[..., q, k]`` maps fed as query-row chunks.

    causal: row at position p sees keys 0..p. special/padding: bool ``[k]``.
    query_offset: absolute position of query row 0 (``k - q`` when the queries
    are the last q tokens). Chunks may come in any order, each row once.
    scratch: where chunk-sized temporaries live (``core.extraction.scratch.Scratch``); the
    accumulators of one computation may share one, e.g. every layer's.
    block_rows: the block score and top-k mass are measured on one query row of each run of
    ``ceil(n_keys / block_rows)`` positions (``row_stats.sampled_rows``).
    window: a local layer's window (``core.extraction.windows``): a row's valid keys are the keys in it.
    """

    def __init__(self, n_keys, causal, special=None, padding=None, query_offset=0, top_k=DEFAULT_TOP_K,
                 scratch=None, block_rows=BLOCK_ROWS, window=None):
        self.n_keys, self.causal, self.query_offset, self.top_k = n_keys, bool(causal), query_offset, top_k
        self.window = window
        self.block_stride = max(1, math.ceil(n_keys / block_rows))
        self.scratch = Scratch() if scratch is None else scratch
        self.special = _key_mask(special, n_keys, "special")
        self.padding = _key_mask(padding, n_keys, "padding")
        self.sinks = sink_keys(n_keys, self.special, self.padding)  # (k,)
        self._sums = None

    def update(self, chunk, q_start, logits=None):
        """Add rows ``q_start .. q_start + qc - 1`` given as ``chunk [..., qc, k]``.

        A causal chunk may stop after the last key its last row sees (the keys
        after it are zero): ``k`` is then less than ``n_keys``. ``logits``: the
        finite scores whose softmax the chunk is, shifted so that each row's
        maximum is 0, when the caller has them; they spare the entropy a log of
        every weight (see ``row_stats.normalised_entropy``).
        """
        qc = chunk.shape[-2] if chunk.dim() >= 2 else 0
        last = q_start + self.query_offset + qc  # keys a causal chunk can see
        width = min(self.n_keys, last) if self.causal else self.n_keys
        if chunk.dim() < 2 or not width <= chunk.shape[-1] <= self.n_keys or (
                not self.causal and chunk.shape[-1] != self.n_keys):
            raise InputError(f"Expected a chunk [..., q, {self.n_keys}], got shape {tuple(chunk.shape)}.")
        dev = chunk.device
        pos = torch.arange(qc, device=dev) + q_start + self.query_offset  # (qc,)
        no_padding = self.padding is None
        padding = torch.zeros(self.n_keys, dtype=torch.bool, device=dev) if no_padding else self.padding.to(dev)
        # Keys after ``width`` are invalid for every row of a causal chunk: leave them out of every reduction.
        key_ok = ~padding[:width]  # (width,)
        valid = row_stats.valid_keys(pos, width, self.causal, key_ok, self.window)  # (qc, width)
        query_ok = ~padding[pos.clamp(max=self.n_keys - 1)] & (pos < self.n_keys)  # (qc,)
        w, n = row_stats.row_weights(valid, query_ok)  # (qc,), (qc,)
        a = chunk.detach()[..., :width].float()  # (..., qc, width)
        logits = None if logits is None else logits.detach()[..., :width].float()  # (..., qc, width)
        total = a.sum(-1)  # (..., qc) before any weight is zeroed: what a row gives the text (the rest: a learned sink)
        if _has_hidden_mass(a, valid):  # e.g. padded queries: zero what they may not see; the logits no longer fit
            a, logits = torch.where(valid, a, 0.0), None  # (..., qc, width)
        self._add(a, pos, (valid, query_ok, key_ok), w, n, logits, total)

    def _add(self, a, pos, rows, w, n, logits, total):
        """Per-row metrics are float32 (reductions over one row's keys); sums over rows are float64 (float32 on
        a device without float64: ``row_stats.sum_dtype``).

        rows: which keys each row may see ``(qc, width)``, which rows count ``(qc,)``, which keys are not
        padding ``(width,)``. total: each row's sum as given ``(..., qc)``."""
        s = self._sums or self._zeros(a)
        dt = s["w"].dtype  # float64, or float32 on a device without it (row_stats.sum_dtype)
        valid, _, key_ok = rows
        width = a.shape[-1]
        special = self.special[:width].to(a) if self.special is not None else None
        peak = a.amax(-1)  # (..., qc)
        entropy = row_stats.normalised_entropy(a, n, self.scratch, logits, peak=peak)  # (..., qc)
        learned = torch.where(total > 0, 1.0 - total, 0.0).clamp(min=0)  # (..., qc) a learned sink's share (GPT-OSS);
        # an all-zero row is a padded query, not a row given whole to a sink. It is one more key: a row even over
        # its keys and the sink would pass 1 (log n, not log(n + 1)); it is as even as a row can be
        entropy = (entropy - _a_log_a(learned) / torch.log(n.clamp(min=2).to(a.dtype))).clamp(max=1)  # (..., qc)
        per_row = {
            "entropy": entropy,
            "uniform_gap": (1.0 - entropy) * torch.log(n.clamp(min=1).to(a.dtype)) + 0.0,  # + 0.0: no -0.0
            "confidence": torch.maximum(peak, learned),
            "special_mass": a @ special if special is not None else a.new_zeros(a.shape[:-1]),
            "mean_distance": row_stats.mean_distance(a, pos, self.scratch, self.causal),
        }  # each (..., qc)
        for name, x in per_row.items():
            s[name] += x.to(dt) @ w  # (...)
        s["w"] += w.sum()
        # on the block score's rows: sorting out the top k costs five times a row maximum
        pick = row_stats.sampled_rows(pos, self.block_stride)  # the block score's rows
        w_topk = (w * (n > self.top_k))[pick]  # (qc',)
        s["topk_mass"] += row_stats.top_k_weights(a[..., pick, :], self.top_k).sum(-1).to(dt) @ w_topk  # (...)
        s["w_topk"] += w_topk.sum()
        diag, ok = row_stats.diagonal_mass(a, pos, valid)  # (..., qc, 7), (qc, 7)
        s["diag"] += (diag.to(dt) * w.unsqueeze(1)).sum(-2)  # (..., 7)
        s["diag_w"] += (ok.to(dt) * w.unsqueeze(1)).sum(0)  # (7,)
        s["col"][..., :width] += (w.to(a.dtype) @ a).to(dt)  # (..., width)
        audience = row_stats.key_audience(torch.stack([w, w / n.clamp(min=1)]), pos, key_ok, self.causal,
                                          self.window)
        s["audience"][:width] += audience[0]  # (width,)
        s["col_uniform"][:width] += audience[1]  # (width,)
        self._add_rest(s, a, pos, rows, w, n, per_row, learned)
        self._sums = s

    def _add_rest(self, s, a, pos, rows, w, n, per_row, learned):
        """The sink-factored sums: each row's non-sink mass renormalised, weighted by that mass. ``learned``
        ``(..., qc)``: the share a learned sink took before the row reached the text, sink mass too."""
        width, (valid, query_ok, key_ok) = a.shape[-1], rows  # (qc, width), (qc,), (width,)
        dt = s["w"].dtype
        sinks = self.sinks[:width].to(a.device)  # (width,)
        on_sinks = a[..., sinks]  # (..., qc, S)
        sink = on_sinks.sum(-1) + learned  # (..., qc)
        keep = (1.0 - sink).clamp(min=REST_FLOOR)  # (..., qc)
        valid_r = valid & ~sinks  # (qc, width)
        base, n_r = row_stats.row_weights(valid_r, query_ok)  # (qc,), (qc,)
        w_r = base * keep.to(dt)  # (..., qc)
        s["sink_mass"] += sink.to(dt) @ w
        s["w_rest"] += w_r.sum(-1)
        # entropy of the rest from the row's entropy: H' = (H + sum_sinks a log a) / keep + log keep
        h = per_row["entropy"] * torch.log(n.clamp(min=2).to(a.dtype))  # (..., qc)
        h_r = (h + _a_log_a(on_sinks).sum(-1) + _a_log_a(learned)) / keep + keep.log()
        s["rest_entropy"] += ((h_r / torch.log(n_r.clamp(min=2).to(a.dtype))).clamp(0, 1)).to(dt).mul(w_r).sum(-1)
        sink_keys = torch.nonzero(sinks).flatten()  # (S,)
        dist = (pos.unsqueeze(1) - sink_keys.unsqueeze(0)).abs().to(a.dtype)  # (qc, S)
        far = (per_row["mean_distance"] - (on_sinks * dist).sum(-1)) / keep  # (..., qc)
        s["rest_mean_distance"] += far.to(dt).mul(w_r).sum(-1)
        diag, ok = row_stats.diagonal_mass(a, pos, valid_r)  # (..., qc, 7), (qc, 7)
        s["rest_diag"] += (diag.to(dt) * base.unsqueeze(1)).sum(-2)  # (..., 7)
        s["rest_diag_w"] += w_r.unsqueeze(-2) @ ok.to(dt)  # (..., 1, 7)
        s["rest_col"][..., :width] += (base.to(a.dtype) @ a).to(dt)  # (..., width)
        audience = row_stats.key_audience(torch.stack([w_r, w_r / n_r.clamp(min=1)], dim=-2), pos,
                                          key_ok & ~sinks, self.causal, self.window)  # (..., 2, width)
        s["rest_audience"][..., :width] += audience[..., :1, :]  # (..., 1, width)
        s["rest_uniform"][..., :width] += audience[..., 1:, :]  # (..., 1, width)
        self._add_block(s, a, pos, valid_r, (base, keep, n_r, h_r), sink_keys)

    def _add_block(self, s, a, pos, valid_r, rest_rows, sink_keys):
        """The block score of the rest, the costliest row statistic (a maximum-subarray search), on one row of
        each run of ``block_stride`` (``row_stats.sampled_rows``). rest_rows: each row's ``base`` weight ``(qc,)``,
        non-sink mass ``keep`` ``(..., qc)``, non-sink keys ``n_r`` ``(qc,)`` and rest entropy in nats ``h_r``
        ``(..., qc)``."""
        pick = row_stats.sampled_rows(pos, self.block_stride)  # one row of each run of block_stride
        dt = s["w"].dtype
        base, keep, n_r, h_r = (x[..., pick] for x in rest_rows)  # (qc',) / (..., qc')
        # a key belongs to a segment when it gets at least half the weight of a key of the row's
        # effective width exp(H'); 1/n' (uniform) when that is more
        baseline = torch.maximum(0.5 * torch.exp(-h_r), 1.0 / n_r.clamp(min=1).to(a.dtype))  # (..., qc')
        # a segment must be flat: take the strongest key off twice, except in rows of at most
        # SHORT_ROW keys, where two or three keys are all a segment can be
        peaks = torch.where(n_r > SHORT_ROW, 2.0, 1.0).to(a)  # (qc',)
        # the block score of the rest (a / keep off the sinks) is that of ``a`` off the sinks, scaled by
        # 1 / keep (``run_score`` is linear), and its weight is base * keep: no renormalised copy of the chunk;
        # ``block`` is that score times keep
        x = row_stats.excess(a[..., pick, :], valid_r[pick], baseline * keep, self.scratch, ignore=sink_keys)
        block = row_stats.run_score(x, pos[pick], a.shape[-1], self.scratch, peaks, self.causal)  # (..., qc')
        s["block_score"] += block.to(dt) @ base
        s["w_block"] += keep.to(dt) @ base

    def _zeros(self, a):
        batch, dev = a.shape[:-2], a.device
        dt = row_stats.sum_dtype(dev)
        z = {name: torch.zeros(batch, dtype=dt, device=dev)
             for name in _ROW_METRICS + _REST_METRICS + ("w_rest", "w_block")}
        for name in ("w", "w_topk"):
            z[name] = torch.zeros((), dtype=dt, device=dev)
        z["diag"] = torch.zeros(*batch, len(OFFSETS), dtype=dt, device=dev)
        z["diag_w"] = torch.zeros(len(OFFSETS), dtype=dt, device=dev)
        z["col"] = torch.zeros(*batch, self.n_keys, dtype=dt, device=dev)
        z["audience"] = torch.zeros(self.n_keys, dtype=dt, device=dev)
        z["col_uniform"] = torch.zeros(self.n_keys, dtype=dt, device=dev)
        z["rest_diag"] = torch.zeros(*batch, len(OFFSETS), dtype=dt, device=dev)
        z["rest_diag_w"] = torch.zeros(*batch, 1, len(OFFSETS), dtype=dt, device=dev)
        for name in ("rest_col", "rest_audience", "rest_uniform"):
            z[name] = torch.zeros(*batch, 1, self.n_keys, dtype=dt, device=dev)
        z["rest_col"] = z["rest_col"].squeeze(-2)
        return z

    def finalize(self):
        """The metrics of every head so far, as a ``HeadMetrics`` of float32 tensors."""
        if self._sums is None:
            raise InputError("No rows were added; call update() with at least one chunk first.")
        s = self._sums
        out = {name: s[name] / s["w"].clamp(min=1e-12) for name in _ROW_METRICS}
        out["topk_mass"] = s["topk_mass"] / s["w_topk"].clamp(min=1e-12)
        floor = max(MIN_AUDIENCE * float(s["w"]), 1e-12)
        diag = s["diag"] / s["diag_w"].clamp(min=floor)  # (..., 7)
        best_mass, best_idx = diag.max(-1)  # (...), (...)
        # a key's audience: at least half of the widest any key has (all rows; in a local layer, a window's)
        seen = max(MIN_AUDIENCE * float(s["audience"].max()), 1e-12)
        col = s["col"] / s["audience"].clamp(min=seen)  # (..., k)
        excess = col - s["col_uniform"] / s["audience"].clamp(min=seen)  # (..., k)
        top2 = excess.topk(min(2, self.n_keys), dim=-1)  # (..., 2)
        out = {k: v.float() for k, v in out.items()}
        return HeadMetrics(
            **out,
            diag_mass=diag.float(),
            best_offset=torch.tensor(OFFSETS, device=diag.device)[best_idx],
            best_offset_mass=best_mass.float(),
            column_mass=col.float(),
            sink_score=top2.values[..., 0].float(),
            sink_key=top2.indices[..., 0],
            sink2_score=top2.values.sum(-1).float(),
            **self._finalize_rest(s),
        )

    def _finalize_rest(self, s):
        w_r = s["w_rest"].clamp(min=1e-12)  # (...)
        out = {name: (s[name] / w_r).float() for name in _REST_METRICS if name != "sink_mass"}
        out["block_score"] = (s["block_score"] / s["w_block"].clamp(min=1e-12)).float()
        out["sink_mass"] = (s["sink_mass"] / s["w"].clamp(min=1e-12)).float()
        n_valid = self.n_keys - (0 if self.padding is None else int(self.padding.sum()))
        out["sink_level"] = sink_level(out["sink_mass"], n_valid)
        floor = (MIN_AUDIENCE * s["w_rest"]).clamp(min=1e-12).unsqueeze(-1)  # (..., 1)
        diag = s["rest_diag"] / s["rest_diag_w"].squeeze(-2).clamp(min=floor)  # (..., 7)
        best_mass, best_idx = diag.max(-1)  # (...), (...)
        widest = s["rest_audience"].squeeze(-2).amax(-1, keepdim=True)  # (..., 1) all rows' weight, or a window's
        audience = s["rest_audience"].squeeze(-2).clamp(min=(MIN_AUDIENCE * widest).clamp(min=1e-12))  # (..., k)
        excess = (s["rest_col"] - s["rest_uniform"].squeeze(-2)) / audience  # (..., k)
        excess = excess.masked_fill(self.sinks.to(excess.device), -1.0)
        top2 = excess.topk(min(2, self.n_keys), dim=-1).values.clamp(min=0)  # (..., 2)
        offsets = torch.tensor(OFFSETS, device=diag.device)
        return dict(out, rest_diag_mass=diag.float(), rest_best_offset=offsets[best_idx],
                    rest_best_offset_mass=best_mass.float(), rest_sink_score=top2[..., 0].float(),
                    rest_sink2_score=top2.sum(-1).float())


def finite_head(scalars: dict) -> bool:
    """Whether one head's metrics (``HeadMetrics.scalars()`` or a report's) come from finite maps: NaN or infinite
    attention (a diverged run) makes its mean entropy or row max non-finite, and its label and roles meaningless."""
    return math.isfinite(scalars["entropy"]) and math.isfinite(scalars["confidence"])


def sink_level(sink_mass, n_keys):
    """``sink_mass`` of a map of ``n_keys`` keys, carried to ``SINK_REFERENCE_KEYS`` keys: its odds times
    ``(n_keys / SINK_REFERENCE_KEYS) ** SINK_LENGTH_POWER``; equal to it at 20 keys."""
    mass = torch.as_tensor(sink_mass, dtype=torch.float32).clamp(1e-7, 1 - 1e-7)
    odds = mass / (1 - mass) * (max(n_keys, 1) / SINK_REFERENCE_KEYS) ** SINK_LENGTH_POWER
    return odds / (1 + odds)


def layer_metrics(attn, causal=False, special=None, padding=None, windows=None):
    """``head_metrics`` of ``attn [layers, heads, q, k]`` whose layers may attend within windows (``windows``: one
    per layer, None for a global layer; ``AttentionResult.windows``): each local layer is measured on its own."""
    if windows is None or all(w is None for w in windows):
        return head_metrics(attn, causal, special, padding)
    if len(windows) != len(attn):  # zip measured the layers that had a window
        raise InputError(f"layer_metrics needs one window per layer: {len(windows)} for {len(attn)} layers")
    per_layer = [head_metrics(layer, causal, special, padding, window=w) for layer, w in zip(attn, windows)]
    return stack_metrics(per_layer)


def stack_metrics(per_layer: list[HeadMetrics]) -> HeadMetrics:
    """Per-layer ``HeadMetrics`` ``[H]`` (possibly on different devices) -> one ``[L, H]`` on CPU."""
    return HeadMetrics(**{
        f.name: torch.stack([getattr(m, f.name).cpu() for m in per_layer]) for f in fields(HeadMetrics)
    })


def head_metrics(attn, causal=False, special=None, padding=None, top_k=DEFAULT_TOP_K, window=None):
    """Metrics of every head of ``attn [..., q, k]`` (e.g. ``[layers, heads, q, k]``).

    Same as one ``MetricAccumulator`` fed every row; rows go in chunks only to
    bound temporary memory. The queries are taken to be the last q keys.
    ``causal`` is not inferred (unlike ``classify_heads``): pass the result's, with its special tokens and padding
    (``head_metrics(r.attentions, r.causal, r.keys_special, r.keys_padding)``), or a decoder's maps are read as
    bidirectional. ``window``: the window every map's rows attend within (one local layer), or None.
    The maps are read as given (NaN heads are measured, as NaN): ``classify_heads`` checks them.
    """
    if hasattr(attn, "attentions") and hasattr(attn, "causal"):  # an AttentionResult: a raw RuntimeError before
        raise InputError("head_metrics takes the maps, not the result: head_metrics(r.attentions, r.causal, "
                         "r.keys_special, r.keys_padding), or diagnostics.classify_heads for labels")
    attn = torch.as_tensor(attn)
    if attn.dim() < 2 or not 1 <= attn.shape[-2] <= attn.shape[-1] or attn.numel() == 0:
        raise InputError(f"Expected attention [..., q, k] with 1 <= q <= k, got shape {tuple(attn.shape)}.")
    q, k = attn.shape[-2:]
    acc = MetricAccumulator(k, causal, special, padding, query_offset=k - q, top_k=top_k, window=window)
    batch = max(1, attn[..., 0, 0].numel())
    rows = max(1, CHUNK_FLOATS // (batch * k))
    for start in range(0, q, rows):
        acc.update(attn[..., start:start + rows, :], start)
    return acc.finalize()


def _a_log_a(a):
    """``a log a``, 0 where ``a`` is 0."""
    return a * a.clamp(min=torch.finfo(a.dtype).tiny).log()


def _has_hidden_mass(a, valid):
    """Whether ``a [..., qc, k]`` puts any weight on keys its rows may not see.

    Streamed chunks are already zero there, and the hidden keys of a causal
    chunk are its last few columns: checking from the first hidden column on
    is cheaper than masking all. A sum of absolute values (NaN included) is nonzero exactly when some
    value is, and takes half the time of ``any`` on floats.
    """
    hidden = ~valid  # (qc, k)
    cols = hidden.any(0).nonzero()  # (c, 1)
    if cols.numel() == 0:
        return False
    first = int(cols[0])
    return bool(torch.mul(a[..., first:], hidden[:, first:]).abs_().sum() != 0)


def sink_keys(n_keys, special=None, padding=None) -> torch.Tensor:
    """Bool ``[k]``: the keys the metrics factor out as sinks, the first token (Xiao et al. 2023: the first key that
    is not padding, as left padding puts pads before it) and the special ones ([CLS]/[SEP]; Clark et al. 2019)."""
    special, padding = _key_mask(special, n_keys, "special"), _key_mask(padding, n_keys, "padding")
    sinks = torch.zeros(n_keys, dtype=torch.bool) if special is None else special.clone()  # (k,)
    real = (~padding).nonzero() if padding is not None else None
    sinks[int(real[0]) if real is not None and real.numel() else 0] = True
    return sinks


def _key_mask(mask, n_keys, name):
    if mask is None:
        return None
    mask = torch.as_tensor(mask, dtype=torch.bool).flatten()
    if mask.numel() != n_keys:
        raise InputError(f"`{name}` must be a bool mask of {n_keys} keys, got {mask.numel()} values.")
    return mask
