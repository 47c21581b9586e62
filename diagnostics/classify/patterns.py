"""Label each attention head as diagonal, block, diffuse, sparse or vertical.

The labels follow Kovaleva et al. 2019 ("Revealing the Dark Secrets of BERT",
Sec. 3: vertical, diagonal, vertical+diagonal, block, heterogeneous) and Clark et
al. 2019 ("What Does BERT Look At?": positional heads, heads on [CLS]/[SEP] and
punctuation, broad heads). The decision is a short ordered list of rules on the
metrics of ``diagnostics.measure.metrics``, so it works from a map or from metrics that
were accumulated chunk by chunk (``classify_metrics``).

The label describes what a head does *besides its sink*: the mass on the first
token and the special tokens ([CLS], [SEP]) is factored out and the rest
renormalised (``metrics``: ``sink_mass`` and the ``rest_*`` metrics), so a
previous-token head that also parks mass on token 0 is diagonal (Kovaleva et
al.'s "vertical + diagonal"); a head that is almost all sink stays vertical.
The sink itself is a role (``diagnostics.classify.roles``).

1. vertical  sink_mass             >= PURE_SINK        almost all mass on the sink
2. diagonal  rest_best_offset_mass >= diagonal_min(k)  one offset carries most of the rest
3. block     block_score           >= block_min(k)     the rest spreads over its own segment
4. vertical  rest_sink2_score      >= vertical_min(k)  one or two other keys draw most queries
5. diffuse   rest_entropy          >= DIFFUSE_MIN      the rest close to uniform
6. sparse    otherwise                                 a few content-dependent peaks

Thresholds were set on the synthetic maps of ``TUNING_SEEDS`` (see
``diagnostics.classify.synthetic``) and on the tuning half of the real-model set
(``diagnostics.classify.real_truth``), and checked on ``HELDOUT_SEEDS`` and the
held-out half; docs/classifier.md has the numbers.
"""

from dataclasses import dataclass, field

import math

import numpy as np
import torch

from core.errors import InputError
from diagnostics.classify.roles import BROAD_MIN, head_roles, nest, role_scores
from diagnostics.measure.metrics import HeadMetrics, layer_metrics

PATTERNS = ("diagonal", "block", "diffuse", "sparse", "vertical")

# A head whose rows put this much on the sink keys does nothing else worth a label: what is left is
# at most a tenth of its mass, noise on short texts (SmolLM2's induction heads park 0.78-1.0 of
# their mass on token 0 on plain text).
PURE_SINK = 0.9
# Diagonal: Clark et al. 2019 call a head positional when most of its mass sits
# on one offset; synthetic diagonals with 25% noise keep ~0.6 on theirs, while
# sinks and blocks of 4-8 tokens reach ~0.5-0.6 on some offset by coincidence.
# A diagonal smeared onto its neighbours would pass as a narrow block, hence
# before the block rule. Measured on the rest (previous-token + sink is diagonal).
DIAGONAL_MIN = 0.6
# Without the sink key a causal row of a short map has only a few keys, and random peaks or a narrow
# block land on one offset by chance: short maps need more, diagonal_min(k) = DIAGONAL_MIN +
# DIAGONAL_SHORT / k (0.8 at 4 tokens, 0.7 at 8, 0.63 at 24).
DIAGONAL_SHORT = 0.8
# Block: the best contiguous stretch around the query holds mass beyond its two
# strongest keys (``row_stats.local_run_mass``): a flat segment of width w scores
# 1/2 - 1/w, a previous-token or decaying local window ~0, two adjacent peaks 0.
# The score of broad heads still grows with length (a long row has long stretches
# slightly above its mean): on the real models at ~20 tokens every head is below
# 0.06, at 512-1160 tokens 99% are below 0.21-0.27, while synthetic blocks score
# 0.02-0.08 at 8 tokens, 0.2-0.46 at 64 and 0.29-0.52 at 512 (docs/classifier.md).
# Hence a threshold that rises by BLOCK_PER_DECADE per tenfold length from BLOCK_MIN
# at 8 tokens (0.13 at 64, 0.22 at 512, 0.31 at 4096).
BLOCK_MIN = 0.04
BLOCK_PER_DECADE = 0.1
# Excess mass (above uniform) the one or two strongest non-sink keys draw, per
# query that sees them. Vertical heads keep >= 0.45 from 12 tokens on, even with the sink
# split over two keys and 25% noise; random peaks of sparse heads coincide on
# the same keys by chance in short maps (0.37 at 8-12 tokens, 0.05 at 128), so
# short maps need more: vertical_min(k) = VERTICAL_MIN + VERTICAL_SHORT / sqrt(k)
# (0.35 at 16 tokens, 0.33 at 64).
VERTICAL_MIN = 0.3
VERTICAL_SHORT = 0.2
# Normalised entropy of the rest: one test for "near uniform", the broad role's (roles.BROAD_MIN, 0.92: see its
# rationale there; this module imports roles, not the other way round).
DIFFUSE_MIN = BROAD_MIN
# Confidence is 0.5 at a threshold and 1 this far beyond it (see _confidence).
MARGIN_SCALE = 0.2
# An upper triangle this close to 0 means the map is causal (when not told).
CAUSAL_ATOL = 1e-6


@dataclass
class HeadPattern:
    """The label of one head, how sure the rule is, and the scores behind it."""

    label: str
    confidence: float
    scores: dict = field(default_factory=dict)
    offset: int | None = None  # the diagonal's offset (+1 = next token), diagonal only
    roles: list = field(default_factory=list)  # text roles (``roles.Role``), strongest first; no induction


def classify_metrics(metrics: HeadMetrics):
    """Label every head of precomputed metrics; a ``HeadPattern`` or nested lists of them."""
    labels, conf = _decide(metrics)  # [...], [...]
    names = _SCORES + ("best_offset", "sink_key", "rest_best_offset")
    columns = {name: getattr(metrics, name).reshape(-1).tolist() for name in names}
    roles = _flat(head_roles(role_scores(metrics), causal=False), metrics.shape)
    flat = [_pattern({name: values[i] for name, values in columns.items()}, label, c, roles[i])
            for i, (label, c) in enumerate(zip(labels.reshape(-1).tolist(), conf.reshape(-1).tolist()))]
    return nest(flat, metrics.shape)


def classify_head(weights, causal=None):
    """Label one map ``[q, k]`` (numpy or torch, rows summing to 1); ``causal=None`` infers it."""
    attn = _as_tensor(weights)
    if attn.dim() != 2:
        raise InputError(f"classify_head takes one map [q, k]; got shape {tuple(attn.shape)}. "
                         "Use classify_heads for batches.")
    return classify_heads(attn, causal=causal)


def classify_heads(attn, causal=None, special=None, padding=None, windows=None):
    """Label every head of ``attn [..., q, k]``: nested lists of ``HeadPattern`` shaped like ``[...]``.

    ``causal=None`` infers causality from the whole batch (all upper triangles ~0). ``windows``: one per layer of
    ``attn [layers, heads, q, k]``, None for a global layer (``AttentionResult.windows``), so a local layer's rows
    are read within their window (Mistral, Gemma 2).
    """
    attn = _as_tensor(attn)
    if causal is None:
        causal = infer_causal(attn)
    if windows is not None and (attn.dim() != 4 or len(windows) != attn.shape[0]):
        raise InputError(f"windows gives one window per layer of attention [layers, heads, q, k]; got {len(windows)} "
                         f"windows for shape {tuple(attn.shape)}. Pass AttentionResult.windows with its attentions.")
    return classify_metrics(layer_metrics(attn, causal=causal, special=special, padding=padding, windows=windows))


def infer_causal(attn):
    """True when every map's strict upper triangle is ~0 (queries are the last q keys)."""
    q, k = attn.shape[-2:]
    upper = torch.ones(q, k, dtype=torch.bool).triu(k - q + 1)  # (q, k)
    return bool((attn[..., upper].abs() <= CAUSAL_ATOL).all())


def _decide(m):
    """Label index into PATTERNS and confidence of every head, vectorised over ``[...]``.

    Each rule gives a margin (how far past its threshold, in units of MARGIN_SCALE); the first rule
    with a margin >= 0 wins.
    """
    n_keys = m.column_mass.shape[-1]
    sink = m.sink_mass.cpu().float()
    rules = [  # (label, margin) in priority order
        ("vertical", (sink - PURE_SINK) / MARGIN_SCALE),
        ("diagonal", (m.rest_best_offset_mass.cpu().float() - diagonal_min(n_keys)) / MARGIN_SCALE),
        ("block", (m.block_score.cpu().float() - block_min(n_keys)) / MARGIN_SCALE),
        ("vertical", (m.rest_sink2_score.cpu().float() - vertical_min(n_keys)) / MARGIN_SCALE),
        ("diffuse", (m.rest_entropy.cpu().float() - DIFFUSE_MIN) / MARGIN_SCALE),
    ]
    labels = torch.full(m.shape, PATTERNS.index("sparse"), dtype=torch.long)
    decided = torch.zeros(m.shape, dtype=torch.bool)
    conf = torch.ones(m.shape)
    for name, margin in rules:
        fires = (margin >= 0) & ~decided
        # confidence: how far past its own threshold the winner is, and how far
        # below theirs the earlier rules were
        conf = torch.where(fires, torch.minimum(conf, _confidence(margin)), conf)
        conf = torch.where(~decided & ~fires, torch.minimum(conf, _confidence(-margin)), conf)
        labels = torch.where(fires, PATTERNS.index(name), labels)
        decided |= fires
    return labels, conf


def diagonal_min(n_keys):
    """The rest_best_offset_mass a map of ``n_keys`` keys needs to be diagonal."""
    return DIAGONAL_MIN + DIAGONAL_SHORT / n_keys


def vertical_min(n_keys):
    """The rest_sink2_score a map of ``n_keys`` keys needs to be vertical."""
    return VERTICAL_MIN + VERTICAL_SHORT / n_keys**0.5


def block_min(n_keys):
    """The block_score a map of ``n_keys`` keys needs to be block (see BLOCK_MIN)."""
    return BLOCK_MIN + BLOCK_PER_DECADE * math.log10(max(n_keys, 8) / 8)


def _confidence(margin):
    return (0.5 + 0.5 * margin).clamp(0.0, 1.0)


_SCORES = ("block_score", "best_offset_mass", "sink2_score", "sink_score", "entropy", "confidence", "topk_mass",
           "sink_mass", "rest_best_offset_mass", "rest_sink2_score", "rest_entropy")


def _pattern(scores, label_idx, conf, roles):
    """One head's ``HeadPattern`` from its plain-number ``scores`` (``_SCORES``, best_offset, sink_key)."""
    scores = {name: float(scores[name]) for name in _SCORES} | {
        name: int(scores[name]) for name in ("best_offset", "sink_key", "rest_best_offset")}
    label = PATTERNS[label_idx]
    return HeadPattern(label, conf, scores, scores["rest_best_offset"] if label == "diagonal" else None, roles)


def _flat(nested, shape):
    return [nested] if not shape else [x for part in nested for x in _flat(part, shape[1:])]


ROW_SUM_ATOL = 0.01  # a half-precision softmax row sums to 1 within ~1e-3


def _as_tensor(weights):
    if isinstance(weights, np.ndarray):
        weights = torch.from_numpy(weights)
    if not isinstance(weights, torch.Tensor):
        raise InputError(f"Attention must be a numpy array or torch tensor, got {type(weights).__name__}.")
    if weights.dim() < 2 or not 1 <= weights.shape[-2] <= weights.shape[-1] or weights.shape[-1] < 2 \
            or weights.numel() == 0:
        raise InputError("Attention must be [..., q, k] with 1 <= q <= k and k >= 2; "
                         f"got shape {tuple(weights.shape)}.")
    weights = weights.detach().float().cpu()
    if not torch.isfinite(weights).all():
        raise InputError("Attention contains NaN or infinite values; check the model's dtype and masks.")
    sums = weights.sum(-1)  # (..., q): 1 for a softmax row, less where a learned sink (GPT-OSS) took some, 0 padding
    if (weights < -ROW_SUM_ATOL).any() or (sums > 1 + ROW_SUM_ATOL).any() or not (sums > ROW_SUM_ATOL).any():
        raise InputError(f"Attention rows must be probabilities (non-negative, each summing to at most 1, some to "
                         f"more than 0); row sums range from {sums.min():.3g} to {sums.max():.3g}. Pass softmax "
                         "weights, not scores.")
    return weights
