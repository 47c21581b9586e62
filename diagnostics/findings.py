"""Model-level findings: what is wrong (or notable) with which heads, and how bad it is.

A ``Finding`` names its heads as ``[layer, head]`` pairs within one ``part``
("self" for single-stack models; "encoder", "decoder" or "cross" for
encoder-decoders). Its wording comes from ``texts.FINDING_TEXTS``.

Severity scale rule (the issue: "one diffuse head in twelve is information;
most heads saturated or uniform is an error"): the share of the part's heads a
finding covers picks one of three levels, and each code maps the levels to a
severity (``LEVELS``):
- below ``WARNING_SHARE`` (a quarter): a few heads, the model can route around
  them; Michel et al. 2019 prune 20-40% of BERT's heads at no cost;
- from ``WARNING_SHARE``: a sizeable part of the model is affected;
- from ``ERROR_SHARE`` (half): most heads are affected, the model is broken.
Uniform, one-hot, dead, copied or word-parked heads, or heads whose Q/K weights or reachable scores are out of
scale (``LAYER_CODES``; those also out of scale with the other layers, ``LAYER_RATIO``), that are ``LAYER_SHARE``
of one layer's heads (word-parked ones half, ``SHARES``) are at least a warning, however few they are of the
whole: that layer is broken.
Benign or early-warning codes (sinks, positional heads, large reachable
scores) never go above "warning"; positional heads only warn when they are the
majority, and sinks never do: trained models routinely have many (Clark et al.
2019; Gu et al. 2024), healthy SmolLM2-135M 25% of its heads on the default
probes and 60% on a Spanish, German or Russian paragraph. Copies (redundant heads, near-identical weights) covering
half the heads are an error: the model has far fewer heads than it pays for.

A head that is sharp because of a role is not saturated: a previous-token head
puts ~1.0 on one offset (all-MiniLM-L6-v2 L0H2), a dormant head ~1.0 on the first
token (15 of SmolLM2-135M's heads, induction heads among them: they sink on plain
text), an induction head on the token after the earlier copy. Such heads are
reported as positional or sink heads instead, unless near one-hot heads are the
majority of the part: then the whole part is collapsing (Q/K × 8 makes 100% of
the heads of both real models one-hot) and every one of them is named.

Thresholds on the attention metrics (``metrics.head_metrics``, averaged over
the probe texts) are named below with their rationale.
"""

import math
from collections import Counter
from dataclasses import dataclass, field

import torch

from diagnostics.texts import FINDING_TEXTS

SEVERITIES = ("error", "warning", "info")  # most severe first
WARNING_SHARE = 0.25
ERROR_SHARE = 0.5
LEVELS = {  # severity at (share < WARNING_SHARE, < ERROR_SHARE, >= ERROR_SHARE)
    "non_finite_attention": ("error", "error", "error"),  # one NaN head makes every later layer NaN
    "non_finite_weights": ("error", "error", "error"),  # a NaN weight makes the output NaN, if no map
    "diffuse_heads": ("info", "warning", "error"),
    "saturated_heads": ("info", "warning", "error"),
    "dead_heads": ("info", "warning", "error"),
    "qk_scale_small": ("info", "warning", "error"),
    "qk_scale_large": ("info", "warning", "error"),
    "redundant_heads": ("info", "warning", "error"),
    "similar_head_weights": ("info", "warning", "error"),
    "large_qk_scores": ("info", "warning", "warning"),
    "sink_heads": ("info", "info", "info"),  # healthy SmolLM2: 60% of its heads on Spanish, German, Russian
    "word_sink_heads": ("warning", "warning", "error"),  # named only where most of a layer (``measure.word_sinks``)
    "positional_heads": ("info", "info", "warning"),
}
# Most of one layer's heads uniform, one-hot, dead, near copies or parked on an ordinary word: the layer is broken
# (one re-initialised layer of SmolLM2 took its loss from 3.17 to 12.15 and was 9 of 270 heads: information; Q/K
# biases x 30 left 11 of MiniLM layer 3's 12 heads near copies). Healthy MiniLM and SmolLM2 have at most 11% of a
# layer's heads diffuse on any probe measured; demo-bert (4 heads a layer) 50%, 75% on random numbers; none of the
# four healthy models has a near copy on the default probes, 32 one-sentence texts or 6 odd ones. Healthy SmolLM2
# parks up to 7 of a layer's 9 heads on an early "the", but heads of other layers park there too, which makes it
# no ordinary word (``measure.word_sinks``). Q/K weights out of scale, or scores within reach, in most of one layer
# (and ``LAYER_RATIO``): Q/K × 8 in one layer of MiniLM saturated 2-8 of its 12 heads, information, while every
# head's reachable score was 3.6 times its line or more.
LAYER_SHARE = 0.75
# Half a layer's heads parked on ordinary words is already its query bias broken: no head of the four healthy models
# reaches 0.5 on a word on 35 varied texts (SmolLM2 0.496 on a chat transcript, demo-gpt2 0.495, MiniLM 0.31), and a
# random query bias x 20 in MiniLM's layer 5 (mean-pooled output cosine 0.28-0.56 to the healthy one) parks 7-8 of
# its 12 heads there, under 75%.
SHARES = {"word_sink_heads": 0.5}
# A layer's Q/K out of scale (``VALUED``) stands out from the model's other layers: LAYER_SHARE of its heads past the
# line, and the value they reach ``LAYER_RATIO`` times the typical layer's (``outlying_layers``). Healthy SmolLM2's
# layers come within 1.4x of the lines (75% of layer 0's heads at a Q/K scale of 7.0, line 10; a layer's reachable
# score up to 89 on varied texts, line 128), but at most 1.64x their typical layer; its layer 0 Q/K x 1.5 (LM loss
# +0.05) is 2.5x and no longer warns, x 2 (+0.12) is 3.3x. One layer's Q/K x 4 in MiniLM or x 3 in demo-gpt2
# collapses that layer (demo-gpt2's layer 0: entropy 0.85 -> 0.22 of uniform, LM loss +0.26) and is 7x or more;
# twice the line, tried first, missed it.
LAYER_RATIO = 3
LAYER_CODES = ("diffuse_heads", "saturated_heads", "dead_heads", "redundant_heads", "word_sink_heads",
               "qk_scale_small", "qk_scale_large", "large_qk_scores")
# Notes that say probes cannot bear a verdict (too short; out of vocabulary): the findings come from the others or
# are capped (``probes.verdict_cap``).
INPUT_NOTES = ("probes_short", "probes_repetitive", "probes_unfit")
# Notes on what the probes were (those, one cut to the model's limit, no repeated-sequence probe): a comparison
# lists them apart, as both models read the same probes and most are neither appeared nor disappeared.
PROBE_NOTES = (*INPUT_NOTES, "probe_truncated", "repeated_probe_skipped")
# Findings whose message gives each head's number: a weight's scale is read against its threshold (SmolLM2's L0H3 is
# 10.3 against 10); the attention findings' numbers are in ``details`` (their heads' maps show them).
VALUED = ("qk_scale_small", "qk_scale_large", "large_qk_scores")
# Findings naming what healthy heads do: which heads they name moves with any fine-tuning, so a comparison and a
# timeline do not list the heads they gain or lose (a spreading ``dead_heads`` they do).
DESCRIBING = ("sink_heads", "positional_heads")
# Findings those notes do not cap: NaN maps are broken on any probe.
UNCAPPED = ("non_finite_attention", "non_finite_weights")

# KL divergence from uniform, in nats (``metrics.uniform_gap``): Q/K x 0 gives exactly 0. Logits that
# spread by sigma around their mean give ~sigma^2 / 2 at any length, 0.1 for sigma ~0.45: rows that
# barely prefer any key. (Normalised entropy >= 0.95 was the test before; it grows with the text's
# length: on paragraph-long probes it flagged 7 of demo-bert's 16 heads, 2 on one sentence. The gap
# finds the same 2 at 30-200 tokens; the healthy real models' smallest gap on the default probes is 0.13
# nats, MiniLM's.)
DIFFUSE_GAP = 0.1
# Near one-hot: entropy <= 0.1 of uniform and a mean row max >= 0.8. Trained
# previous-token heads come close, so a few such heads are only "info"; entropy
# collapse (Zhai et al. 2023) saturates most heads at once. The row max falls as
# more keys compete: demo-bert with Q/K x 8 keeps 0.9-1.0 on one sentence, 0.82-0.98
# on the paragraph-long default probes (entropy <= 0.1 on both).
SATURATED_ENTROPY = 0.1
SATURATED_CONFIDENCE = 0.8
# A key that receives half the attention of the queries that can see it. On an ordinary word (not the first, a
# special or a punctuation token) the same bar names ``word_sink_heads``, where such heads are most of a layer.
SINK_SCORE = 0.5
# Half or more of the mass on one diagonal offset, the whole row's majority.
POSITIONAL_MASS = 0.5
# Diffuse heads whose median Q/K scale is at least half the part's other heads' median have Q/K weights of
# ordinary scale.
ORDINARY_QK = 0.5
# Fewer other heads than this share of the part are too few to compare with: a Q/K shrunk everywhere leaves a few
# heads not uniform, shrunk alike (a LayerNorm zeroed after MiniLM's layer 1 leaves 24 of 72).
FEW_OTHERS = 0.25


@dataclass
class Finding:
    code: str  # stable identifier, a key of FINDING_TEXTS
    severity: str  # "info", "warning" or "error"
    heads: list  # [[layer, head], ...] within `part`
    message: str  # what was measured, with numbers
    suggestion: str  # what to do
    details: dict = field(default_factory=dict)  # JSON-serialisable numbers behind the finding
    part: str = "self"  # "self", "encoder", "decoder" or "cross"

    @property
    def title(self):
        return FINDING_TEXTS[self.code].title

    @property
    def body(self):
        """The message to show under its title: a note's message starts with the title so that it reads alone (in
        the JSON, a log line), and beside the title it would say it twice."""
        return self.message.removeprefix(f"{self.title}: ")

    def to_dict(self):
        return {"code": self.code, "severity": self.severity, "part": self.part, "heads": self.heads,
                "message": self.message, "suggestion": self.suggestion, "details": self.details}


def severity_for(code, n_heads, total):
    """The severity of ``code`` covering ``n_heads`` of ``total`` heads (see the module docstring)."""
    low, mid, high = LEVELS.get(code, ("info", "info", "info"))
    share = n_heads / max(total, 1)
    return high if share >= ERROR_SHARE else mid if share >= WARNING_SHARE else low


def severity_rank(severity):
    return SEVERITIES.index(severity)


NAMED_HEADS = 12  # a finding's message names this many of its heads; reports list every one beside it


def head_names(heads, part="self", limit=NAMED_HEADS, values=None):
    """``L0H1, L2H3, …`` (prefixed by the part of encoder-decoder models), at most ``limit``; with ``values``
    (``{"L0H1": number}``) each name is followed by its number: ``L0H3 (10.3)``."""
    prefix, values = ("" if part == "self" else f"{part} "), values or {}
    names = [f"L{layer}H{head}" for layer, head in heads[:limit]]
    names = [prefix + name + (f" ({number(values[name])})" if name in values else "") for name in names]
    more = f", … and {len(heads) - limit} more" if len(heads) > limit else ""
    return ", ".join(names) + more


def number(value: float) -> str:
    """A finding's number, precise enough to read against its threshold (10.04 against 10, not "10") and without an
    exponent (4,463.2, not 4.46e+03)."""
    if abs(value) >= 100:
        return f"{value:,.1f}"
    return f"{value:.2f}" if abs(value) >= 1 else f"{value:.2g}"


def percent(count: int, total: int) -> str:
    """``count`` of ``total`` as a whole percentage; "<1%" for a share that would round to 0 but is not."""
    share = 100 * count / max(total, 1)
    return "<1%" if 0 < share < 0.5 else f"{share:.0f}%"


def make_finding(code, heads, total, part="self", details=None, layer_heads=None, layers=None, **fields):
    """A finding on ``heads`` (sorted ``[layer, head]`` lists) out of ``total`` heads; ``layer_heads``: the heads
    of one layer, for the codes a broken layer makes a warning (``LAYER_CODES``); ``layers``: the broken layers of a
    ``VALUED`` code, which its caller finds from every head's value (``outlying_layers``)."""
    heads = sorted([int(layer), int(head)] for layer, head in heads)
    text = FINDING_TEXTS[code]
    numbers = (details or {}).get("values") if code in VALUED else None  # the number each head crossed the line by
    values = {"count": len(heads), "total": total, "percent": percent(len(heads), total),
              "heads": head_names(heads, part, values=numbers), **fields}
    finding = Finding(code, severity_for(code, len(heads), total), heads, text.message.format(**values),
                      text.suggestion, details or {}, part)
    share = SHARES.get(code, LAYER_SHARE)
    if code in VALUED:
        broken = sorted(layers or [])
    else:
        broken = _broken_layers(heads, layer_heads, share) if code in LAYER_CODES else []
    if broken:  # a broken layer: at least a warning, however few heads it is of the whole
        finding.severity = "warning" if finding.severity == "info" else finding.severity
        finding.details["layers"] = broken
        named = ", ".join(str(layer) for layer in broken)
        beyond = f", {_outlying_words(code)}" if code in VALUED else ""
        finding.message += f" {share:.0%} or more of the heads of layer {named} are among them{beyond}."
    return finding


def layer_level(values, small: bool) -> float:
    """The value ``LAYER_SHARE`` of a layer's heads reach (``values``: ``[H]``): at least it, or at most it where
    ``small``."""
    reached = math.ceil(LAYER_SHARE * len(values))
    return float(values.sort(descending=not small).values[reached - 1])


def outlying_layers(levels: dict, line: float, small: bool = False) -> list[int]:
    """The layers whose ``layer_level`` (``levels``: layer -> level) is past ``line`` and ``LAYER_RATIO`` times the
    model's typical layer's (the lower median of the finite levels), beyond it or below it where ``small``."""
    finite = [level for level in levels.values() if math.isfinite(level)]
    if not finite:
        return []
    typical = lower_median(finite)
    if small:
        return sorted(layer for layer, level in levels.items() if level < line and level <= typical / LAYER_RATIO)
    return sorted(layer for layer, level in levels.items() if level > line and level >= typical * LAYER_RATIO)


def lower_median(values) -> float:
    """The median of ``values``, the lower one of an even count: with half the layers grown, the upper one is a
    grown layer's."""
    ordered = sorted(values)
    return ordered[(len(ordered) - 1) // 2]


def _outlying_words(code) -> str:
    """How far a ``VALUED`` finding's broken layer stands from the model's other layers, in words."""
    if code == "qk_scale_small":
        return f"at 1/{LAYER_RATIO:g} of the model's typical layer or less"
    return f"at {LAYER_RATIO:g} times the model's typical layer or more"


def _broken_layers(heads, layer_heads, share) -> list[int]:
    """The layers of which ``heads`` hold at least ``share``."""
    if not layer_heads:
        return []
    count = Counter(layer for layer, _ in heads)
    return sorted(layer for layer, n in count.items() if n / layer_heads >= share)


def note(code, part="self", **fields):
    """An "info" finding that covers no heads (skipped checks, missing tokenizer)."""
    text = FINDING_TEXTS[code]
    return Finding(code, "info", [], text.message.format(**fields), text.suggestion, dict(fields), part)


def _flagged(mask):
    """``[[layer, head], ...]`` where the bool ``[L, H]`` mask is True."""
    return [[int(layer), int(head)] for layer, head in torch.nonzero(mask).tolist()]


def _per_head(values, heads):
    return {f"L{layer}H{head}": round(float(values[layer, head]), 4) for layer, head in heads}


def diffuse_mask(metrics):
    """Bool ``[L, H]``: heads whose rows are near uniform (``uniform_gap`` at most ``DIFFUSE_GAP`` nats)."""
    return metrics["uniform_gap"] <= DIFFUSE_GAP


def saturated_mask(metrics, copying=None):
    """Bool ``[L, H]``: heads near one-hot whose sharpness no role explains (see the module docstring).

    copying: bool ``[L, H]`` of heads with an induction or duplicate-token role (the repeated-sequence probe).
    """
    entropy, confidence = metrics["entropy"], metrics["confidence"]
    one_hot = (entropy <= SATURATED_ENTROPY) & (confidence >= SATURATED_CONFIDENCE)  # (L, H)
    if one_hot.float().mean() >= ERROR_SHARE:
        return one_hot  # most heads one-hot: collapse, whatever each one's role
    role = (metrics["best_offset_mass"] >= POSITIONAL_MASS) | (metrics["sink_score"] >= SINK_SCORE)  # (L, H)
    if copying is not None:
        role = role | copying
    return one_hot & ~role


def attention_findings(metrics, part="self", sink_tokens=None, copying=None, word_tokens=None):
    """Findings read off per-head metrics averaged over the probes (each a ``[L, H]`` tensor).

    ``metrics`` needs ``entropy``, ``uniform_gap``, ``confidence``, ``sink_score`` and
    ``best_offset_mass``/``best_offset``, and may hold ``word_sink_score`` (the sink score where the sink key is
    an ordinary word, ``measure.word_sinks``); ``sink_tokens`` (``[L][H]`` strings)
    names each head's sink key when known, ``word_tokens`` its most frequent sink key among ordinary words;
    ``copying`` (bool ``[L, H]``) marks induction and duplicate-token heads, whose sharpness is their role.
    """
    total = metrics["entropy"].numel()
    entropy = metrics["entropy"]
    broken = ~torch.isfinite(entropy) | ~torch.isfinite(metrics["confidence"])  # (L, H): NaN or inf maps
    out = [make_finding("non_finite_attention", _flagged(broken), total, part)] if broken.any() else []
    saturated = saturated_mask(metrics, copying)  # (L, H)
    word_sink = metrics.get("word_sink_score", torch.zeros_like(entropy))  # (L, H)
    on_word = _most_of_a_layer((word_sink >= SINK_SCORE) & ~saturated, SHARES["word_sink_heads"])  # (L, H)
    checks = [
        ("diffuse_heads", diffuse_mask(metrics), metrics["uniform_gap"], {"threshold": DIFFUSE_GAP}),
        ("saturated_heads", saturated, entropy,
         {"threshold": SATURATED_ENTROPY, "confidence": SATURATED_CONFIDENCE}),
        ("sink_heads", (metrics["sink_score"] >= SINK_SCORE) & ~saturated & ~on_word, metrics["sink_score"],
         {"threshold": SINK_SCORE}),
        ("word_sink_heads", on_word, word_sink, {"threshold": SINK_SCORE}),
        ("positional_heads", (metrics["best_offset_mass"] >= POSITIONAL_MASS) & ~saturated,
         metrics["best_offset_mass"], {"threshold": POSITIONAL_MASS}),
    ]
    for code, mask, values, fields in checks:
        heads = _flagged(mask)
        if not heads:
            continue
        details = {**fields, "values": _per_head(values, heads)}
        if code == "positional_heads":
            details["offsets"] = {f"L{l}H{h}": int(metrics["best_offset"][l, h]) for l, h in heads}
        named = word_tokens if code == "word_sink_heads" and word_tokens is not None else sink_tokens
        if code in ("sink_heads", "word_sink_heads") and named is not None:
            details["sink_tokens"] = {f"L{l}H{h}": named[l][h] for l, h in heads}
        out.append(make_finding(code, heads, total, part, details, layer_heads=entropy.shape[-1], **fields))
    return out


def _most_of_a_layer(mask, share):
    """``mask`` (bool ``[L, H]``) kept in the layers where it holds for ``share`` of the heads or more."""
    return mask & (mask.float().mean(-1, keepdim=True) >= share)  # (L, H)


def explain_diffuse(finding, weight_numbers, random_ids: str = "", copies=(), grown=()):
    """``finding``, its suggestion told by the Q/K weights of its heads if it is a ``diffuse_heads`` above info
    (``weight_numbers``: ``check_weights``'s per-head numbers). As large as the part's other heads': Q/K did not
    make them uniform, what reaches them did (a zeroed norm), and the suggestion says where to look instead of
    "check the Q/K initialisation … candidates for pruning", which pointed at weights of normal scale. Much
    smaller: a re-initialised layer of a trained model, to restore rather than prune. When (nearly) every head is
    uniform there are too few others to compare with (compared with themselves, Q/K x 0.1 everywhere was said to
    be "not Q/K"): the suggestion then names the causes it cannot tell apart, an untrained model first. Zero: to
    restore, as shrunk ones (the suggestion had been "check the Q/K initialisation ... can be pruned"). On random
    ids (``random_ids``: "random_ids" without a tokenizer, "replaced_ids" for unfit default probes replaced) heads
    that read content have nothing to read: healthy demo-bert had been told to restore a norm that was sound, and
    the suggestion now says to diagnose it on text first. Copies
    (``copies``: the ``(layer, head)`` of a ``similar_head_weights`` finding of the part) of one near-uniform
    head are uniform because that head is: every head of SmolLM2 a copy of its layer's head 0 was sent to a norm.
    Q/K grown (half or more of them among ``grown``, the ``(layer, head)`` of the part's ``qk_scale_large`` error)
    and still uniform: training diverged (MiniLM fine-tuned at learning rate 0.1 was told "not Q/K" and sent to a
    sound norm, beside the `qk_scale_large` error on 72 of 72 heads)."""
    if finding.code != "diffuse_heads" or finding.severity == "info":
        return finding
    scale = {(layer, head): n["qk_scale"] for (part, layer, head), n in weight_numbers.items()
             if part == finding.part and "qk_scale" in n}
    flagged = [scale.get((layer, head)) for layer, head in finding.heads]
    if not scale or None in flagged:
        return finding
    marked = {(layer, head) for layer, head in finding.heads}
    others = torch.tensor([value for key, value in scale.items() if key not in marked])
    flagged = torch.tensor(flagged)
    first = min(layer for layer, _ in finding.heads)
    text = FINDING_TEXTS["diffuse_heads"]
    numbers = dict(low=float(flagged.min()), high=float(flagged.max()), layer=first, left=len(others),
                   total=len(scale), before=f"the output norm of layer {first - 1}" if first else
                   "the embeddings' norm")
    few = len(others) < FEW_OTHERS * len(scale)  # Q/K x 0.3 everywhere left MiniLM 4 of 72: "not Q/K", they said
    caveat = getattr(text, random_ids) if random_ids else ""  # the probes, not the model, may flatten the heads
    if flagged.median() <= 0:  # Q/K x 0
        finding.suggestion = text.zeroed
    elif _half_among(finding.heads, grown):  # not those of a part grown elsewhere: MiniLM's layers 4-5 shrank
        finding.suggestion = text.grown.format(**numbers)
    elif few:
        finding.suggestion += " " + text.everywhere.format(**numbers) + (" " + caveat if caveat else "")
    elif flagged.median() < ORDINARY_QK * others.median():  # a layer re-initialised in a trained model: not to prune
        finding.suggestion = text.shrunk.format(**numbers, median=float(others.median()),
                                                ratio=number(float(others.median() / flagged.median())))
    elif _half_among(finding.heads, copies):  # Q/K of ordinary size, but one head's copies
        finding.suggestion = text.copies
    else:  # not Q/K: the advice to check Q/K and prune would point away from the cause
        finding.suggestion = (caveat + " " if caveat else "") + text.upstream.format(**numbers)
    return finding


def explain_redundant(finding, copies=(), weights_read: bool = True):
    """``finding``, if it is a ``redundant_heads`` above info whose heads mostly have Q·Kᵀ weights unlike each
    other's (``copies``: the ``(layer, head)`` of the part's ``similar_head_weights``), told that something they
    share may make them alike: MiniLM's layer 3 Q/K biases x 30 made 11 heads near copies, and the suggestion was
    that they had converged in training, to prune. Not where the part's Q/K weights were not read
    (``weights_read``): there no copy could have been found."""
    if finding.code != "redundant_heads" or finding.severity == "info" or not weights_read:
        return finding
    if not _half_among(finding.heads, copies):
        finding.suggestion = FINDING_TEXTS["redundant_heads"].shared
    return finding


def _half_among(heads, named) -> bool:
    """Whether half or more of ``heads`` (``[layer, head]``) are among ``named`` (``(layer, head)`` of another
    finding's heads: the part's ``similar_head_weights``, or its ``qk_scale_large``)."""
    return 2 * sum(tuple(head) in named for head in heads) >= len(heads)


def qualify_benign(findings):
    """The ``DESCRIBING`` findings ("usually benign", "fine for a few heads") with a sentence added where some of
    their heads lie in a layer that a warning or error names broken (``details["layers"]``): damage there makes
    heads sink or fix on one offset (MiniLM's layer 2 Q/K x 8 made L2H5-L2H7 sinks and L2H8, L2H11 positional),
    and the reassurance had read as being about them too."""
    broken = {}
    for f in findings:
        if f.code not in DESCRIBING and f.severity != "info":
            for layer in f.details.get("layers", []):
                broken.setdefault((f.part, layer), f.title)
    for f in findings:
        inside = [[layer, head] for layer, head in f.heads if (f.part, layer) in broken] if f.code in DESCRIBING else []
        if inside:
            layers = sorted({layer for layer, _ in inside})
            titles = sorted({broken[(f.part, layer)] for layer in layers})
            f.suggestion += " " + FINDING_TEXTS[f.code].in_broken.format(
                heads=head_names(inside, f.part), layers=", ".join(map(str, layers)),
                titles=" and ".join(f'"{title}"' for title in titles), s="s" if len(layers) > 1 else "",
                that="those layers are" if len(layers) > 1 else "that layer is")
    return findings


def cap_severity(findings, worst="warning"):
    """The findings with every severity above ``worst`` lowered to it (findings from unfit or short probes), but
    for ``UNCAPPED``."""
    for f in findings:
        if severity_rank(f.severity) < severity_rank(worst) and f.code not in UNCAPPED:
            f.severity = worst
    return findings


def sort_findings(findings):
    """The notes on the probes first (they qualify every finding after them), then the most severe first, then
    by how many heads they cover."""
    return sorted(findings, key=lambda f: (f.code not in INPUT_NOTES, severity_rank(f.severity), -len(f.heads),
                                           f.code))
