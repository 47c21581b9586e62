"""Weight-only checks: findings read off W_Q, W_K, W_V, W_O without running any text.

Per head h with ``A = W_Q,hᵀ``, ``B = W_K,hᵀ`` (``[d_in, d_k]``), the score of
tokens x_i, x_j is ``scale · x_iᵀ A Bᵀ x_j``; the head's output is ``W_O,h W_V,h x``.
- ``qk_scale_small``/``qk_scale_large``: RMS of the head's Q and K weights
  (geometric mean) times √d_in, i.e. relative to the usual fan-in
  initialisation std 1/√d_in (≈ 1/√d_k per head up to the head count).
  PyTorch's default ``nn.Linear`` init gives 0.58, BERT/GPT-2's std 0.02 gives
  0.1-0.55, trained models stay within a few units.
- ``large_qk_scores``: ``scale · max‖q‖ · max‖k‖`` over the probes' tokens
  (``qk_norms``), the largest score the head can give any pair of such tokens.
  Zhai et al. 2023 ("Stabilizing Transformer Training by Preventing Attention
  Entropy Collapse") show entropy collapse follows the growth of the attention
  logits; the spectral norm of W_Q·W_Kᵀ on unit-RMS inputs, used before, bounded
  scores no input reaches (169–2293 on all-MiniLM-L6-v2, whose realised scores
  stay ≤ 42.5) and warned on every head of every healthy model.
- ``similar_head_weights``: cosine similarity of the heads' bilinear forms
  ``A Bᵀ`` (where they look; heads with equal forms produce equal maps on any
  input), invariant to any rotation inside a head. Computed from d×d Gram
  products (⟨A Bᵀ, C Dᵀ⟩ = Σ (AᵀC) ∘ (BᵀD)) so no d_in×d_in matrix is formed.
- ``dead_heads``: ‖W_O,h W_V,h‖_F below ``DEAD_RATIO`` of the layer's strongest head's, or below
  ``DEAD_LAYER_RATIO`` of the part's median layer's strongest (a whole layer pruned alike).
Under grouped-query attention every check runs per query head (K/V repeated,
``core.extraction.head_weights``), and a ``shared_kv_heads`` note says which query heads share
a key/value head.
"""

import math

import torch

from core.extraction.head_weights import attention_weights
from diagnostics.findings import VALUED, layer_level, lower_median, make_finding, note, outlying_layers
from diagnostics.weights.finite import non_finite_findings
from diagnostics.weights.qk_norms import QKNorms
from diagnostics.measure.redundancy import pairs_finding

# 50x below the usual init: the scores are ~0 and every row near uniform.
QK_SCALE_SMALL = 0.01
# 20x above default init; Q/K x 30 of any sane model lands far beyond it.
QK_SCALE_LARGE = 10.0
# A reachable score this far above a zero score: exp(-104) already underflows to 0 in fp32, so such a head can
# give a row that is exactly one-hot, with no gradient to any other key. 128 is 1.18x the largest bound of the
# healthy real models on the default probes (SmolLM2-135M 108.8, all-MiniLM-L6-v2 64.9, demo-gpt2 36.1) and below
# every head of their Q/K x 8 copies (>= 230.8); see ``qk_norms`` and ``python -m benchmarks.calibration``.
SCORE_LIMIT = 128.0
# Heads whose Q·Kᵀ forms align this closely attend alike on any input;
# independently trained or initialised heads are far below (|cos| < 0.3).
SIMILAR_COSINE = 0.95
# A head writing < 5% of what its layer's strongest head writes. The strongest, not the median: with half a layer
# pruned to near zero (soft gates leave 1e-3, not 0) the median is near zero too, and nothing was found. In the
# healthy real models every head writes at least 0.23 of its layer's strongest (MiniLM 0.24, SmolLM2 0.23,
# demo-bert 0.58, demo-gpt2 0.53).
DEAD_RATIO = 0.05
# A whole layer scaled down alike has no strong head of its own: its strongest head writing < 2% of what the part's
# layers' strongest heads write (their lower median) makes every head of it dead. In the healthy real models every
# layer's strongest head writes at least 0.10 of that median (SmolLM2's layer 0; MiniLM 0.53, demo-bert 0.71,
# demo-gpt2 0.29). Needs three layers or more, fewer than half of them pruned (``_median_strongest``).
DEAD_LAYER_RATIO = 0.02


def _gram_inner(a, b, c, d):
    """⟨A Bᵀ, C Dᵀ⟩_F for batches ``a, c: [H, n, r]``, ``b, d: [H, m, r]`` -> ``[H, H]``."""
    ac = _gram(a, c)  # (H, r, H, r): AᵀC of every pair of heads
    bd = _gram(b, d)  # (H, r, H, r)
    return (ac * bd).sum((1, 3))  # (H, H)


def _gram(x, y):
    """``x_hᵀ y_g`` for every pair of heads, as one matrix product: ``[H, n, r]`` x2 -> ``[H, r, H, r]``."""
    heads, n, r = x.shape
    flat_x = x.permute(1, 0, 2).reshape(n, heads * r)  # (n, H*r)
    flat_y = y.permute(1, 0, 2).reshape(n, heads * r)  # (n, H*r)
    return (flat_x.T @ flat_y).reshape(heads, r, heads, r)  # (H, r, H, r)


def _cosine(a, b):
    inner = _gram_inner(a, b, a, b)  # (H, H)
    norm = inner.diagonal().clamp(min=0).sqrt()  # (H,)
    return inner / (norm[:, None] * norm[None, :]).clamp(min=1e-12), norm


def layer_stats(lw, norms=None):
    """Per-head numbers of one ``LayerWeights``: scale, reachable score (with ``norms``), similarity, OV norm."""
    q, k = lw.heads(lw.w_q), lw.heads(lw.w_k)  # (H, d_k, d_in)
    v, o = lw.heads(lw.w_v), lw.out_heads()  # (H, d_v, d_in), (H, d_out, d_v)
    d_in = q.shape[-1]
    rms = (q.pow(2).mean((-2, -1)) * k.pow(2).mean((-2, -1))).pow(0.25)  # (H,)
    cos_qk, qk_norm = _cosine(q.transpose(1, 2), k.transpose(1, 2))  # (H, H), (H,)
    _, ov_norm = _cosine(o, v.transpose(1, 2))  # (H,): the norm of W_O,h W_V,h (what the head writes)
    stats = {
        "qk_scale": (rms * d_in ** 0.5).float(),
        "similarity": cos_qk.float(),
        "qk_norm": qk_norm.float(),
        "ov_norm": ov_norm.float(),
        "kv_head": torch.tensor([lw.kv_head(h) for h in range(lw.n_heads)]),
    }
    bound = norms.bound(lw) if norms is not None else None
    if bound is not None:
        stats["max_score"] = bound.float()  # (H,)
    return stats


def check_weights(model, norms: QKNorms | None = None, layers=None):
    """``(findings, per_head)`` of every part of ``model``.

    norms: the query/key norms recorded while the probes ran (``qk_norms.record_qk_norms``); without them the
    reachable-score check is skipped. layers: ``attention_weights(model)``, if already read.
    per_head maps ``(part, layer, head)`` to that head's numbers (qk_scale, max_score, ov_norm, kv_head). An
    unknown layout gives one info note and ``{}``.
    """
    layers = attention_weights(model) if layers is None else layers
    broken = non_finite_findings(model, layers)
    if not layers:
        reason = f"no attention layer of {type(model).__name__} matches a known layout"
        return broken + [note("weights_unavailable", reason=reason)], {}
    stats = [layer_stats(lw, norms) for lw in layers]
    per_head = {(lw.part, lw.layer, h): {name: _number(v[h]) for name, v in s.items() if v.dim() == 1}
                for lw, s in zip(layers, stats) for h in range(lw.n_heads)}
    findings = broken
    for part in dict.fromkeys(lw.part for lw in layers):
        chosen = [(lw, s) for lw, s in zip(layers, stats) if lw.part == part]
        findings += _part_findings([lw for lw, _ in chosen], [s for _, s in chosen], part)
        findings += _shared_kv_note([lw for lw, _ in chosen], part)
    return findings, per_head


def _number(value):
    return int(value) if not value.is_floating_point() else round(float(value), 4)


def weight_findings(model, norms=None):
    """Weight-only findings of ``model`` (see ``check_weights``)."""
    return check_weights(model, norms)[0]


def _shared_kv_note(layers, part):
    """A ``shared_kv_heads`` note when query heads share key/value heads (grouped-query attention)."""
    grouped = [lw for lw in layers if lw.kv_heads and lw.kv_heads < lw.n_heads]
    if not grouped:
        return []
    lw = grouped[0]
    groups = [[h for h in range(lw.n_heads) if lw.kv_head(h) == g] for g in range(lw.kv_heads)]
    shown = "; ".join(f"H{heads[0]}–H{heads[-1]} share key/value head {g}" for g, heads in enumerate(groups))
    return [note("shared_kv_heads", part, query_heads=lw.n_heads, kv_heads=lw.kv_heads, groups=shown,
                 kv_groups=groups)]


def _normalised(lw) -> bool:
    """Whether the layer normalises its queries and keys after W_Q and W_K (q_norm, q_layernorm: Qwen3, Gemma 3,
    Persimmon): their weights' scale then reaches no score (Persimmon with Q/K x 100 got a qk_scale_large error)."""
    return any(source is not None and source.feed is not None for source in (lw.q_source, lw.k_source))


def _details(code, threshold, values, norms) -> dict:
    """A finding's details; a dead head's values are norms, its thresholds ratios of the norms ``norms`` gives
    (``reference``, the typical layer's strongest head's, and ``strongest``, each named layer's): "1.85" against
    "threshold 0.05" had read as alive."""
    details = {"threshold": threshold, "values": values}
    return {**details, "layer_threshold": DEAD_LAYER_RATIO, **norms} if code == "dead_heads" else details


def _median_strongest(stats) -> float:
    """The median over layers of each layer's strongest head's ‖W_O W_V‖, the lower one of an even count: with half
    the layers grown (a diverging run), the upper one made every other layer dead. Of two layers, or with half of
    them pruned, nothing tells pruned from grown, and no layer is dead by this rule. 0 when it is not finite."""
    median = lower_median(float(s["ov_norm"].max()) for s in stats)
    return median if math.isfinite(median) else 0.0


def _part_findings(layers, stats, part):
    total = sum(lw.n_heads for lw in layers)
    flagged = {"qk_scale_small": [], "qk_scale_large": [], "large_qk_scores": [], "dead_heads": []}
    values = {code: {} for code in flagged}
    levels = {code: {} for code in VALUED}  # code -> layer -> what LAYER_SHARE of its heads reach
    pairs = []
    reference = _median_strongest(stats)
    norms = {"reference": round(reference, 4), "strongest": {}}  # what the dead heads' thresholds are ratios of
    for lw, s in zip(layers, stats):
        strongest = s["ov_norm"].max()
        norms["strongest"][f"L{lw.layer}"] = round(float(strongest), 4)
        floor = max(DEAD_RATIO * strongest, DEAD_LAYER_RATIO * reference, 1e-8)
        rules = {"dead_heads": (s["ov_norm"] < floor, s["ov_norm"])}
        if not _normalised(lw):  # a q/k norm sets the scores' scale, whatever W_Q and W_K's (max_score reads it)
            rules["qk_scale_small"] = (s["qk_scale"] < QK_SCALE_SMALL, s["qk_scale"])
            rules["qk_scale_large"] = (s["qk_scale"] > QK_SCALE_LARGE, s["qk_scale"])
        if "max_score" in s:
            rules["large_qk_scores"] = (s["max_score"] > SCORE_LIMIT, s["max_score"])
        for code, (mask, vals) in rules.items():
            if code in VALUED:
                levels[code][lw.layer] = layer_level(vals, small=code == "qk_scale_small")
            for h in torch.nonzero(mask).flatten().tolist():
                flagged[code].append([lw.layer, h])
                values[code][f"L{lw.layer}H{h}"] = round(float(vals[h]), 4)
        live = s["qk_norm"] > 1e-8
        for a in range(lw.n_heads):
            for b in range(a + 1, lw.n_heads):
                if live[a] and live[b] and s["similarity"][a, b] > SIMILAR_COSINE:
                    pairs.append((lw.layer, a, b, float(s["similarity"][a, b])))
    thresholds = {"qk_scale_small": QK_SCALE_SMALL, "qk_scale_large": QK_SCALE_LARGE,
                  "large_qk_scores": SCORE_LIMIT, "dead_heads": DEAD_RATIO}
    dead_layers = {f"L{layer}" for layer, _ in flagged["dead_heads"]}  # the layers it names
    norms["strongest"] = {name: norm for name, norm in norms["strongest"].items() if name in dead_layers}
    outlying = {code: outlying_layers(levels[code], thresholds[code], small=code == "qk_scale_small")
                for code in VALUED}
    findings = [make_finding(code, heads, total, part, _details(code, thresholds[code], values[code], norms),
                             layer_heads=layers[0].n_heads, layers=outlying.get(code), threshold=thresholds[code],
                             layer_threshold=DEAD_LAYER_RATIO)
                for code, heads in flagged.items() if heads]
    similar = pairs_finding("similar_head_weights", pairs, total, part, SIMILAR_COSINE)
    return findings + ([similar] if similar else [])

