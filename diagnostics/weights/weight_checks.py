"""Weight-only checks: findings read off W_Q, W_K, W_V, W_O without running any text.

Per head h with ``A = W_Q,hᵀ``, ``B = W_K,hᵀ`` (``[d_in, d_k]``), the score of
tokens x_i, x_j is ``scale · x_iᵀ A Bᵀ x_j``; the head's output is ``W_O,h W_V,h x``.
- ``qk_scale_small``/``qk_scale_large``: RMS of the head's Q and K weights
  (geometric mean) times √d_in, i.e. relative to the usual fan-in
  initialisation std 1/√d_in (≈ 1/√d_k per head up to the head count).
  PyTorch's default ``nn.Linear`` init gives 0.58, BERT/GPT-2's std 0.02 gives
  0.1-0.55, trained models stay within a few units.
- ``qk_spectral_norm``: ``scale · σ_max(A Bᵀ) · d_in``, the largest score two
  unit-RMS tokens (‖x‖ = √d_in, as after LayerNorm) can reach. Zhai et al. 2023
  ("Stabilizing Transformer Training by Preventing Attention Entropy Collapse")
  show entropy collapse follows the growth of this spectral norm.
- ``similar_head_weights``: cosine similarity of the heads' bilinear forms
  ``A Bᵀ`` (where they look; heads with equal forms produce equal maps on any
  input), invariant to any rotation inside a head. Computed from d×d Gram
  products (⟨A Bᵀ, C Dᵀ⟩ = Σ (AᵀC) ∘ (BᵀD)) so no d_in×d_in matrix is formed.
  The same cosine of ``W_O,h W_V,h`` (what they write) is kept in the details.
- ``dead_heads``: ‖W_O,h W_V,h‖_F below ``DEAD_RATIO`` of the layer median.
"""

import torch

from diagnostics.findings import make_finding, note
from diagnostics.weights.head_weights import attention_weights
from diagnostics.measure.redundancy import pairs_finding

# 50x below the usual init: the scores are ~0 and every row near uniform.
QK_SCALE_SMALL = 0.01
# 20x above default init; Q/K x 30 of any sane model lands far beyond it.
QK_SCALE_LARGE = 10.0
# A score gap of 50 makes exp(-50) ≈ 2e-22: a reachable one-hot softmax in fp32.
SPECTRAL_LIMIT = 50.0
# Heads whose Q·Kᵀ forms align this closely attend alike on any input;
# independently trained or initialised heads are far below (|cos| < 0.3).
SIMILAR_COSINE = 0.95
# A head writing < 5% of what its layer's median head writes.
DEAD_RATIO = 0.05


def _gram_inner(a, b, c, d):
    """⟨A Bᵀ, C Dᵀ⟩_F for batches ``a, c: [H, n, r]``, ``b, d: [H, m, r]`` -> ``[H, H]``."""
    ac = torch.einsum("hnr,gns->hgrs", a, c)  # (H, H, r, r)
    bd = torch.einsum("hmr,gms->hgrs", b, d)  # (H, H, r, r)
    return (ac * bd).sum((-2, -1))  # (H, H)


def _cosine(a, b):
    inner = _gram_inner(a, b, a, b)  # (H, H)
    norm = inner.diagonal().clamp(min=0).sqrt()  # (H,)
    return inner / (norm[:, None] * norm[None, :]).clamp(min=1e-12), norm


def layer_stats(lw):
    """Per-head numbers of one ``LayerWeights``: scale, spectral bound, similarity, OV norm."""
    q, k = lw.heads(lw.w_q).double(), lw.heads(lw.w_k).double()  # (H, d_k, d_in)
    v, o = lw.heads(lw.w_v).double(), lw.out_heads().double()  # (H, d_v, d_in), (H, d_out, d_v)
    d_in = q.shape[-1]
    rms = (q.pow(2).mean((-2, -1)) * k.pow(2).mean((-2, -1))).pow(0.25)  # (H,)
    a, b = q.transpose(1, 2), k.transpose(1, 2)  # (H, d_in, d_k)
    ra, rb = torch.linalg.qr(a).R, torch.linalg.qr(b).R  # (H, d_k, d_k)
    sigma = torch.linalg.matrix_norm(ra @ rb.transpose(1, 2), ord=2)  # (H,)
    cos_qk, qk_norm = _cosine(a, b)  # (H, H), (H,)
    cos_ov, ov_norm = _cosine(o, v.transpose(1, 2))  # (H, H), (H,)
    return {
        "qk_scale": (rms * d_in ** 0.5).float(),
        "max_score": (sigma * abs(lw.scale) * d_in).float(),
        "similarity": cos_qk.float(),
        "similarity_ov": cos_ov.float(),
        "qk_norm": qk_norm.float(),
        "ov_norm": ov_norm.float(),
    }


def check_weights(model):
    """``(findings, per_head)`` of every part of ``model``.

    per_head maps ``(part, layer, head)`` to that head's numbers (qk_scale,
    max_score, ov_norm). An unknown layout gives one info note and ``{}``.
    """
    layers = attention_weights(model)
    if not layers:
        reason = f"no attention layer of {type(model).__name__} matches a known layout"
        return [note("weights_unavailable", reason=reason)], {}
    stats = [layer_stats(lw) for lw in layers]
    per_head = {(lw.part, lw.layer, h): {name: round(float(v[h]), 4) for name, v in s.items() if v.dim() == 1}
                for lw, s in zip(layers, stats) for h in range(lw.n_heads)}
    findings = []
    for part in dict.fromkeys(lw.part for lw in layers):
        chosen = [(lw, s) for lw, s in zip(layers, stats) if lw.part == part]
        findings += _part_findings([lw for lw, _ in chosen], [s for _, s in chosen], part)
    return findings, per_head


def weight_findings(model):
    """Weight-only findings of ``model`` (see ``check_weights``)."""
    return check_weights(model)[0]


def _part_findings(layers, stats, part):
    total = sum(lw.n_heads for lw in layers)
    flagged = {"qk_scale_small": [], "qk_scale_large": [], "qk_spectral_norm": [], "dead_heads": []}
    values = {code: {} for code in flagged}
    pairs = []
    for lw, s in zip(layers, stats):
        median = s["ov_norm"].median()
        rules = {
            "qk_scale_small": (s["qk_scale"] < QK_SCALE_SMALL, s["qk_scale"]),
            "qk_scale_large": (s["qk_scale"] > QK_SCALE_LARGE, s["qk_scale"]),
            "qk_spectral_norm": (s["max_score"] > SPECTRAL_LIMIT, s["max_score"]),
            "dead_heads": ((s["ov_norm"] < DEAD_RATIO * median) | (s["ov_norm"] < 1e-8), s["ov_norm"]),
        }
        for code, (mask, vals) in rules.items():
            for h in torch.nonzero(mask).flatten().tolist():
                flagged[code].append([lw.layer, h])
                values[code][f"L{lw.layer}H{h}"] = round(float(vals[h]), 4)
        live = s["qk_norm"] > 1e-8
        for a in range(lw.n_heads):
            for b in range(a + 1, lw.n_heads):
                if live[a] and live[b] and s["similarity"][a, b] > SIMILAR_COSINE:
                    pairs.append((lw.layer, a, b, float(s["similarity"][a, b])))
    thresholds = {"qk_scale_small": QK_SCALE_SMALL, "qk_scale_large": QK_SCALE_LARGE,
                  "qk_spectral_norm": SPECTRAL_LIMIT, "dead_heads": DEAD_RATIO}
    findings = [make_finding(code, heads, total, part, {"threshold": thresholds[code], "values": values[code]},
                             threshold=thresholds[code])
                for code, heads in flagged.items() if heads]
    similar = pairs_finding("similar_head_weights", pairs, total, part, SIMILAR_COSINE)
    return findings + ([similar] if similar else [])

