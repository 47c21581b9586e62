"""Head roles: the behaviours a head shows, each with a score, beside its one pattern label.

A head can have several roles (a previous-token head that also parks mass on
token 0 is ``previous_token`` and ``sink``). The vocabulary, ``ROLES``:

- ``previous_token`` / ``next_token`` / ``self``: share of the non-sink mass on
  key ``i - 1`` / ``i + 1`` / ``i`` (``metrics.rest_diag_mass``): Clark et al.
  2019's positional heads, scored as TransformerLens's detector with the sink
  column excluded.
- ``sink``: mass on the first token (Xiao et al. 2023) and on [CLS]/[SEP]
  (Clark et al. 2019), carried to a text of 20 tokens (``metrics.sink_level``: a
  head parks less on its sink in a longer text); Gu et al. 2024's ε = 0.3.
- ``induction`` / ``duplicate_token``: on the repeated-sequence probe
  (``probes.repeated_probe``), the second copy's non-sink share on the token
  after the previous occurrence / on the previous occurrence (Olsson et al.
  2022; TransformerLens's detectors). Induction for causal models only.
- ``local``: the non-sink mass within ``LOCAL_DISTANCE`` tokens of the query on
  average, spread over them (no single offset reaches ``OFFSET_MIN``); the score
  is that mean distance in tokens (``rest_mean_distance``), the number the
  threshold reads.
- ``broad``: the non-sink mass close to uniform over the keys
  (``rest_entropy`` >= ``BROAD_MIN``; Clark et al. 2019's broad heads), and
  not within ``LOCAL_DISTANCE`` tokens on average (a short map's uniform rest is).

Text roles come from metrics that ``metrics.MetricAccumulator`` accumulates, so
the streamed path gives them too; the repeated probe is short and read whole.
The thresholds of the roles that have a behavioural ground truth equal that
ground truth's (``real_truth``), and docs/classifier.md shows precision and
recall on the held-out half of the real-model set.
"""

import math
from dataclasses import dataclass

import torch

from diagnostics.measure.row_stats import OFFSETS

ROLES = ("previous_token", "next_token", "self", "induction", "duplicate_token", "sink", "local", "broad")
# TransformerLens's detector (ARENA 1.2 "finding induction heads") flags a head above 0.4: most of
# its free mass follows the template. On the tuning half of the real-model set the accumulated
# score reproduces every previous/next-token head at this threshold (docs/classifier.md).
OFFSET_MIN = 0.4
INDUCTION_MIN = 0.4
DUPLICATE_MIN = 0.4
# Gu et al. 2024: a head is a sink when more than 0.3 of its attention goes to the first token; the ground
# truth applies it to texts of ~20 tokens, hence ``sink_level`` (the mass at 20 tokens) as the score.
SINK_MIN = 0.3
# Local: the rest within LOCAL_DISTANCE tokens of the query on average (``rest_mean_distance``), and no
# single offset holding OFFSET_MIN (that is positional). A uniform head over 20 tokens averages ~7;
# the window mass itself is no test on short texts, where +-3 tokens are a third of the keys (on the
# default probes most MiniLM heads hold 0.35-0.5 there and would flip from probe to probe).
LOCAL_DISTANCE = 2.5
# Broad: the non-sink mass close to uniform, also the diffuse pattern's test (patterns.DIFFUSE_MIN is this).
# Normalised entropy: near-uniform rows score > 0.95 even at 25% noise, sparse and vertical heads < 0.9 (a
# sparse row of 3 peaks over 4096 keys with 30% background spread is ~0.6); 0.92 sits in the gap. A second
# threshold just below it on the same score (0.9 before) only made heads flip between probes: MiniLM's rest
# entropies crowd 0.75-0.95 (docs/classifier.md).
BROAD_MIN = 0.92
# Rows whose non-sink mass is below this count for nothing in the repeated-probe scores (see real_truth).
REST_MIN = 0.05
# Inputs of ``role_scores``: averaged or per-probe metrics under these names.
ROLE_METRICS = ("sink_level", "sink_mass", "rest_diag_mass", "rest_entropy", "rest_mean_distance")


@dataclass(frozen=True)
class Role:
    role: str  # one of ROLES
    score: float  # the score its threshold was compared with (local: a distance in tokens, the others a share)

    def to_dict(self):
        return {"role": self.role, "score": self.score}


def role_scores(values, repeated=None) -> dict:
    """``{role: tensor [...]}`` from metric ``values`` (``ROLE_METRICS``: a ``HeadMetrics`` or a dict),
    plus ``_near``: whether the non-sink mass stays within ``LOCAL_DISTANCE`` tokens (for ``local``).

    repeated: ``repeated_scores(...)`` of the same heads, or None (no induction / duplicate roles).
    """
    get = values.get if isinstance(values, dict) else lambda name: getattr(values, name)
    diag = get("rest_diag_mass").float()  # (..., 7)
    # a head with < REST_MIN of its mass off the sinks has no role of that rest, as in the ground truth: a pure
    # sink head's rest (none) read as within 0 tokens of the query, "local"
    rest = 1.0 - get("sink_mass").float() >= REST_MIN  # (...)
    scores = {"previous_token": diag[..., OFFSETS.index(-1)], "next_token": diag[..., OFFSETS.index(1)],
              "self": diag[..., OFFSETS.index(0)], "broad": get("rest_entropy").float()}
    scores = {role: torch.where(rest, score, 0.0) for role, score in scores.items()}
    scores |= {"sink": get("sink_level").float(),
               "local": torch.where(rest, get("rest_mean_distance").float(), math.inf)}
    near = scores["local"] <= LOCAL_DISTANCE
    return scores | {"_near": near} | (repeated or {})


def head_roles(scores, causal) -> list:
    """Roles of every head: nested lists shaped like the scores (e.g. ``[L][H]``) of ``Role`` lists,
    strongest share first, ``local`` (scored by a distance) last."""
    held = {role: _holds(role, score, scores, causal) for role, score in scores.items() if role in ROLES}
    shape = next(iter(scores.values())).shape
    flat = [[] for _ in range(int(torch.tensor(shape).prod()) if shape else 1)]
    for role in ROLES:
        if role not in scores:
            continue
        for i in held[role].reshape(-1).nonzero().flatten().tolist():
            flat[i].append(Role(role, round(float(scores[role].reshape(-1)[i]), 4)))
    flat = [sorted(roles, key=lambda r: (r.role == "local", -r.score)) for roles in flat]
    return nest(flat, shape)


def _holds(role, score, scores, causal):
    if role == "sink":
        return score >= SINK_MIN
    if role == "broad":
        return (score >= BROAD_MIN) & ~scores["_near"]
    if role == "local":
        positional = torch.stack([scores[r] for r in ("previous_token", "next_token", "self")]).amax(0)
        return scores["_near"] & (positional < OFFSET_MIN)
    if role == "induction":
        return (score >= INDUCTION_MIN) & bool(causal)
    if role == "duplicate_token":
        return score >= DUPLICATE_MIN
    return score >= OFFSET_MIN


def repeated_scores(probe) -> dict:
    """``{"induction", "duplicate_token": [L, H]}`` on a ``probes.RepeatedProbe``.

    Share of the non-sink mass of the second copy's queries on key ``i - half + 1`` (induction) and
    ``i - half`` (duplicate), rows weighted by their non-sink mass; rows whose target is a sink key
    are left out. The sinks: the first token and the special tokens.
    """
    r = probe.result
    attn = r.attentions  # (L, H, q, k)
    sinks = torch.tensor(r.keys_special, dtype=torch.bool)  # (k,)
    sinks[0] = True
    rows = torch.tensor(list(probe.second_copy))  # (r,)
    free = 1.0 - attn[..., rows, :][..., sinks].sum(-1)  # (L, H, r)
    out = {}
    for role, shift in (("induction", 1 - probe.half), ("duplicate_token", -probe.half)):
        targets = rows + shift  # (r,)
        ok = ~sinks[targets]  # (r,)
        on_target = attn[..., rows, targets]  # (L, H, r)
        total = (free * ok).sum(-1)  # (L, H)
        score = (on_target * ok).sum(-1) / total.clamp(min=1e-9)
        out[role] = torch.where(total / ok.sum().clamp(min=1) >= REST_MIN, score, 0.0)
    return out


def nest(flat, shape):
    """``flat``, a list in row-major order, as nested lists shaped like ``shape`` (``[L][H]`` for ``(L, H)``)."""
    if not shape:
        return flat[0]
    step = len(flat) // shape[0]
    return [nest(flat[i * step:(i + 1) * step], shape[1:]) for i in range(shape[0])]
