"""``compare``: which heads differ between two models of one vocabulary (fine-tuning, two checkpoints).

Both models are diagnosed (``diagnose``) on the same probes, tokenized by one
tokenizer, so their maps line up token for token. Per head: the Jensen–Shannon
distance between the two maps (``redundancy.PairedJS``: the row distance of the
redundancy check, between head h of A and head h of B, averaged over rows and
probes), the pattern and roles before and after, and the entropy and sink-score
deltas. Findings that appear in B or disappear from A are listed.

Long probes are streamed as in ``diagnose``: when the diagnosis streams, the
distances come from ``paired_stream.stream_paired_js`` (both models in
lockstep, one query chunk of each alive at a time); otherwise from the two
diagnoses' own maps, so short probes run each model once.

A head is ``changed`` when (thresholds measured in docs/compare.md):
- its distance is at least ``CHANGED_JS``; or
- its pattern label or its set of roles differs *and* its distance is at least
  ``LABEL_CHANGE_JS``: a label that flips while the map stayed put is a head
  sitting on a classifier threshold, not a change of behaviour; or
- its map is finite in one model and not in the other (a diverged head: no
  distance, reason ``non_finite``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace

import torch

from core.cancel import progress_span
from core.errors import InputError
from core.extraction.encode import encode, max_positions
from core.extraction.streaming import can_stream
from core.extraction.text_config import config_size, is_encoder_decoder, vocab_size
from diagnostics.diagnose import _resolve, check_device_used, diagnose
from diagnostics.findings import DESCRIBING, PROBE_NOTES, SEVERITIES, head_names, severity_rank
from diagnostics.measure.redundancy import paired_js_distance
from diagnostics.paired_stream import stream_paired_js
from diagnostics.probes import as_probes, user_texts
from diagnostics.reports import compare_report
from diagnostics.reports.exports import Exports
from diagnostics.reports.report import Report

SCHEMA = "attnscope.compare/1"
# MiniLM against itself with every weight scaled by (1 + eps·N(0, 1)), on the default
# probes: the largest head distance is 0.0025 at eps = 1e-3 and 0.023-0.031 at eps = 1e-2
# (seeds 0-4; no label flips); layer 2's Q/K scaled by 1.5 moves its heads 0.29-0.55
# (scripts/measure_compare_noise.py, docs/compare.md). 0.05 is 1.6x the largest 1% noise.
CHANGED_JS = 0.05
# Below this distance two maps are the same head, whatever the labels say: a
# label that flips while the map moved less than 1% noise moves it (0.031) is a
# head on a classifier threshold.
LABEL_CHANGE_JS = 0.035


@dataclass
class HeadChange:
    part: str
    layer: int
    head: int
    js_distance: float  # mean JS distance between the head's maps in A and in B (0 = same, 1 = disjoint)
    changed: bool
    reasons: list[str]  # of "distance", "pattern", "roles", "non_finite"
    before: dict  # pattern, confidence, roles, entropy, sink_score of the head in A
    after: dict  # the same in B

    @property
    def entropy_delta(self):
        return round(self.after["entropy"] - self.before["entropy"], 4)

    @property
    def sink_delta(self):
        return round(self.after["sink_score"] - self.before["sink_score"], 4)

    def to_dict(self):
        return {"part": self.part, "layer": self.layer, "head": self.head, "js_distance": self.js_distance,
                "changed": self.changed, "reasons": self.reasons, "entropy_delta": self.entropy_delta,
                "sink_delta": self.sink_delta, "before": self.before, "after": self.after}


@dataclass
class CompareReport(Exports):
    a: Report  # the diagnosis of model A (its samples: maps per probe, when not streamed)
    b: Report
    heads: list[HeadChange]
    appeared: list  # findings of B whose code (and part) A lacks, that got more severe, or name new heads
    disappeared: list  # findings of A that B lacks, or has on fewer heads
    streamed: bool
    thresholds: dict = field(default_factory=lambda: {"changed_js": CHANGED_JS, "label_change_js": LABEL_CHANGE_JS})
    render_markdown = staticmethod(compare_report.render_markdown)
    render_html = staticmethod(compare_report.render_html)

    @property
    def changed(self):
        return [h for h in self.heads if h.changed]

    @property
    def has_new_errors(self):
        """B has an error finding A lacks, or has at a lower severity (``details["severity_in_a"]``; the CLI exits
        1); not one A has as an error on other heads (``details["new_heads"]`` alone): a fine-tune that moved one
        head of a layer-wide error failed a CI gate."""
        return any(f.severity == "error" and ("new_heads" not in f.details or "severity_in_a" in f.details)
                   for f in self.appeared)

    @property
    def first_changed_layers(self) -> dict[str, int]:
        """``{part: layer}``: the first layer of each part with a changed head. Every later layer reads its output,
        so their heads may change with it: MiniLM with layer 3's Q/K × 8 changes 36 of 72 heads, none before layer
        3 (the change may also be before it: a layer's values, output projection or MLP show only in later maps)."""
        first = {}
        for h in self.changed:
            first[h.part] = min(first.get(h.part, h.layer), h.layer)
        return first

    def distance_grid(self, part=None):
        """``[layers][heads]`` JS distances of ``part`` (default: the first)."""
        parts = list(dict.fromkeys(h.part for h in self.heads))
        part = part or (parts[0] if parts else "self")
        chosen = [h for h in self.heads if h.part == part]
        if not chosen:
            raise InputError(f"this comparison has no part {part!r}; it has {parts}")
        grid = [[0.0] * (max(h.head for h in chosen) + 1) for _ in range(max(h.layer for h in chosen) + 1)]
        for h in chosen:
            grid[h.layer][h.head] = h.js_distance
        return grid

    @property
    def notes(self) -> list[tuple[str, object]]:
        """``[(models, note)]``: A's and B's notes on the probes (``findings.PROBE_NOTES``), ``models`` "A and B"
        where both have it. Short probes cap every finding at info; the same note in both had shown nowhere."""
        found = {}
        for side, report in (("A", self.a), ("B", self.b)):
            for f in report.findings:
                if f.code in PROBE_NOTES:
                    found.setdefault((f.code, f.part, f.message), [[], f])[0].append(side)
        return [(" and ".join(sides), f) for sides, f in found.values()]

    def to_dict(self):
        return {
            "schema": SCHEMA,
            "a": self.a.model, "b": self.b.model, "probes": self.a.probes, "streamed": self.streamed,
            "thresholds": self.thresholds,
            "summary": {"heads": len(self.heads), "changed": len(self.changed),
                        "first_changed_layers": self.first_changed_layers,
                        "appeared": len(self.appeared), "disappeared": len(self.disappeared),
                        "new_errors": self.has_new_errors},
            "heads": [h.to_dict() for h in self.heads],
            "findings": {"appeared": [f.to_dict() for f in self.appeared],
                         "disappeared": [f.to_dict() for f in self.disappeared]},
            "notes": [{"models": models, **f.to_dict()} for models, f in self.notes],
        }


def compare(a, b, texts=None, device=None, progress=None, n_heads=None) -> CompareReport:
    """Compare model ``b`` with model ``a`` head by head; each is anything ``diagnose`` takes.

    Both need the same vocabulary (``InputError`` otherwise, naming the
    difference); A's tokenizer is used for both. progress: optional
    ``callable(fraction, message)``; n_heads: heads per layer of a bare state dict (as ``diagnose``).
    """
    tell = progress or (lambda fraction, message: None)
    texts = user_texts(texts)  # once: a generator would feed A's diagnosis and leave B the default probes
    check_device_used(device, a, b)  # for the one loaded by name, if either is
    loading = [progress_span(tell, start, start + 0.05, f"model {side}") if progress else None
               for side, start in (("A", 0.0), ("B", 0.05))]
    model_a, tok_a, name_a = _resolve(a, device, n_heads, loading[0])
    model_b, tok_b, name_b = _resolve(b, device, n_heads, loading[1])
    tokenizer = shared_tokenizer(tok_a, tok_b, model_a, model_b)
    _check_limits(model_a, model_b)
    source_a, source_b = ((model_a, tokenizer), (model_b, tokenizer)) if tokenizer else (model_a, model_b)
    both_stream = can_stream(model_a) and can_stream(model_b)  # lockstep distances need both; else whole maps
    report_a = diagnose(source_a, texts, progress=progress_span(tell, 0.1, 0.45, "model A"),
                        stream=None if both_stream else False)
    streamed = bool(report_a.model.get("streamed"))
    report_b = diagnose(source_b, texts, progress=progress_span(tell, 0.45, 0.8, "model B"),
                        stream=streamed if tokenizer else None)
    report_a.model["name"], report_b.model["name"] = name_a, name_b
    _check_shapes(report_a, report_b)
    tell(0.8, "measuring distances")
    if model_a is model_b:  # one model object cannot stream twice at once; its distance to itself is 0
        distances = {part: torch.zeros(s["layers"], s["heads"]) for part, s in report_a.model["parts"].items()}
    elif streamed:
        probes = [(p["text"], p["text_pair"]) for p in report_a.probes]  # what A read: its defaults if texts is None
        distances = {"self": _streamed_distances(model_a, model_b, tokenizer, probes,
                                                 progress_span(tell, 0.8, 1.0, "measuring distances"))}
    else:
        distances = _map_distances(report_a.samples, report_b.samples)
    heads = [head_change(ha, hb, float(distances[ha.part][ha.layer, ha.head]))
             for ha, hb in zip(report_a.heads, report_b.heads)]
    appeared, disappeared = finding_changes(report_a.findings, report_b.findings, *unmeasured_heads(heads))
    tell(1.0, "done")
    return CompareReport(report_a, report_b, heads, appeared, disappeared, streamed)


def shared_tokenizer(tok_a, tok_b, model_a, model_b):
    """The tokenizer both models read (A's), after checking they share one vocabulary."""
    size_a, size_b = vocab_size(model_a), vocab_size(model_b)
    if size_a is not None and size_b is not None and size_a != size_b:
        raise InputError(f"the models have different vocabularies: A has {size_a} token embeddings, B has {size_b}; "
                         "compare needs two checkpoints of one model family")
    if tok_a is None or tok_b is None:
        return tok_a or tok_b
    vocab_a, vocab_b = tok_a.get_vocab(), tok_b.get_vocab()
    if vocab_a != vocab_b:
        only_a = sorted(set(vocab_a) - set(vocab_b))
        moved = sorted(t for t in set(vocab_a) & set(vocab_b) if vocab_a[t] != vocab_b[t])
        only_b = sorted(set(vocab_b) - set(vocab_a))
        example = (f"{only_a[0]!r} is only in A" if only_a else f"{only_b[0]!r} is only in B" if only_b
                   else f"{moved[0]!r} has id {vocab_a[moved[0]]} in A, {vocab_b[moved[0]]} in B")
        raise InputError(f"the tokenizers differ: A has {len(vocab_a)} tokens, B has {len(vocab_b)} ({example}); "
                         "compare needs the same vocabulary")
    return tok_a


def _check_limits(model_a, model_b) -> None:
    """InputError, before either model runs, when they read different lengths: the whole maps of a long probe
    would differ in shape (refused only after both diagnoses), while the streamed path cut both to the shorter."""
    pairs = [is_encoder_decoder(m) for m in (model_a, model_b)]
    if pairs[0] != pairs[1]:  # it was told after both diagnoses, as "one model is causal and the other is not"
        which, other = ("A", "B") if pairs[0] else ("B", "A")
        raise InputError(f"{which} is an encoder-decoder and {other} is not (its heads are one stack, not encoder, "
                         "decoder and cross parts); compare needs two models of the same kind")
    limits = [max_positions(m) for m in (model_a, model_b)]
    if limits[0] != limits[1]:
        shown = [f"{n:,} tokens" if n else "no limit" for n in limits]
        raise InputError(f"the models take inputs of different lengths (A: {shown[0]}, B: {shown[1]}); compare needs "
                         "the same input limit")
    shapes = [_config_shape(m) for m in (model_a, model_b)]
    if None not in shapes and shapes[0] != shapes[1]:  # from the configs: both diagnoses ran before this was told
        shown = [f"{layers} layers × {heads} heads" for layers, heads in shapes]
        raise InputError(f"the models have different shapes (A: {shown[0]}, B: {shown[1]}); compare needs the same "
                         "layers and heads")


def _config_shape(model) -> tuple[int, int] | None:
    """``(layers, heads)`` as the model's config gives them (transformers maps n_layer, encoder_layers, ...)."""
    shape = config_size(model, "num_hidden_layers"), config_size(model, "num_attention_heads")
    return shape if None not in shape else None


def _check_shapes(report_a, report_b):
    if not report_a.heads or not report_b.heads:
        raise InputError("no head could be measured (a model without its tokenizer that cannot read random token "
                         "ids, e.g. an encoder-decoder): give each model's tokenizer to compare their heads")
    if report_a.model.get("causal") != report_b.model.get("causal"):
        raise InputError("one model is causal and the other is not; compare needs the same kind of attention")
    shape_a = {part: tuple(s.values()) for part, s in report_a.model["parts"].items()}
    shape_b = {part: tuple(s.values()) for part, s in report_b.model["parts"].items()}
    if shape_a != shape_b:
        raise InputError(f"the models have different shapes (A: {_shape_text(shape_a)}, B: {_shape_text(shape_b)}); "
                         "compare needs the same layers and heads")


def _shape_text(shape):
    parts = [f"{part} {layers} layers × {heads} heads" for part, (layers, heads) in shape.items()]
    return ", ".join(parts) or "no heads"


def _map_distances(samples_a, samples_b):
    """``{part: [L, H]}`` mean over probes of the distance between A's and B's maps."""
    per_part = {}
    for sa, sb in zip(samples_a, samples_b):
        for part in (("encoder", "decoder", "cross") if sa.encoder is not None else ("self",)):
            ra, rb = sa.part(part), sb.part(part)
            if ra.attentions.shape != rb.attentions.shape:
                raise InputError(f"the models read a probe differently ({tuple(ra.attentions.shape)} against "
                                 f"{tuple(rb.attentions.shape)}); compare needs the same input limit")
            k = ra.attentions.shape[-1]
            distance = paired_js_distance(ra.attentions[..., :k, :], rb.attentions[..., :k, :], ra.causal,
                                          ra.keys_padding)  # (L, H); a diverged head's copy: 0
            per_part.setdefault(part, []).append(distance)
    return {part: torch.stack(ds).mean(0) for part, ds in per_part.items()}


def _streamed_distances(model_a, model_b, tokenizer, texts, tell):
    """``[L, H]`` mean over probes of the lockstep-streamed distance; ``tell(fraction, message)`` as each probe and
    each of its layers starts."""
    limit = max_positions(model_a, tokenizer)  # model_b's too (_check_limits)
    distances, probes = [], as_probes(texts)
    for i, probe in enumerate(probes):
        step = f"probe {i + 1}/{len(probes)}"
        tell(i / len(probes), step)
        enc = encode(tokenizer, probe.text, probe.text_pair, limit, vocab_size=vocab_size(model_a))
        layers = progress_span(tell, i / len(probes), (i + 1) / len(probes), step)
        distances.append(stream_paired_js(model_a, model_b, enc.input_ids, token_type_ids=enc.token_type_ids,
                                          progress=layers))  # (L, H)
    return torch.stack(distances).mean(0)


def head_change(before, after, distance) -> HeadChange:
    """A ``HeadChange`` from the same head's ``HeadReport`` in A and in B."""
    fields_a, fields_b = head_fields(before), head_fields(after)
    if math.isnan(distance):  # a non-finite map on one side (or both): no distance
        finite = [math.isfinite(fields["entropy"]) for fields in (fields_a, fields_b)]
        reasons = ["non_finite"] if finite[0] != finite[1] else []
        return HeadChange(before.part, before.layer, before.head, distance, bool(reasons), reasons, fields_a, fields_b)
    reasons = ["distance"] if distance >= CHANGED_JS else []
    if distance >= LABEL_CHANGE_JS:
        reasons += [name for name in ("pattern", "roles") if fields_a[name] != fields_b[name]]
    return HeadChange(before.part, before.layer, before.head, round(distance, 4), bool(reasons), reasons,
                      fields_a, fields_b)


def head_fields(head) -> dict:
    """What ``compare`` shows of a head: pattern, confidence, roles (when the diagnosis gives them), entropy, sink."""
    return {"pattern": head.pattern, "confidence": head.confidence, "roles": role_names(head),
            "entropy": head.metrics["entropy"], "sink_score": head.metrics["sink_score"]}


def role_names(head) -> list[str]:
    """Sorted role names of a ``HeadReport`` or a report's head dict; [] when the diagnosis has no roles."""
    roles = head.get("roles") if isinstance(head, dict) else getattr(head, "roles", None)
    names = []
    for role in roles or []:
        name = role if isinstance(role, str) else (role.get("role") or role.get("name")) if isinstance(role, dict) \
            else getattr(role, "role", None) or getattr(role, "name", None)
        if name:
            names.append(str(name))
    return sorted(set(names))


def unmeasured_heads(heads) -> tuple[set, set]:
    """``(part, layer, head)`` of the ``HeadChange``s whose maps are not finite in A, and in B."""
    return tuple({(h.part, h.layer, h.head) for h in heads if not math.isfinite(getattr(h, side)["entropy"])}
                 for side in ("before", "after"))


def finding_changes(findings_a, findings_b, unmeasured_a=frozenset(), unmeasured_b=frozenset()):
    """``(appeared, disappeared)``: B's findings A lacks, has less severe, or has on fewer heads; A's findings B
    lacks, or has on fewer heads. A finding listed for its heads names them (``details["new_heads"]`` in B,
    ``"cleared_heads"`` in A) at the end of its message: two more dead heads in a layer of their own had changed
    neither the code nor the severity, and the comparison named neither. Heads the other model could not measure
    (``unmeasured_a`` / ``_b``: ``(part, layer, head)`` of maps not finite there) neither appear nor disappear:
    demo-bert's near-uniform L3H0 and L3H3, NaN in a copy with one NaN query weight, had "disappeared"."""
    worst_a = {}
    for f in findings_a:
        key = (f.code, f.part)
        worst_a[key] = min(worst_a.get(key, 9), severity_rank(f.severity))
    codes_b = {(f.code, f.part) for f in findings_b}
    appeared = [_appeared(f, findings_a, worst_a.get((f.code, f.part), 9), unmeasured_a) for f in findings_b]
    disappeared = [f if (f.code, f.part) not in codes_b and not _touches(f, unmeasured_b) else
                   _with_heads(f, findings_b, "cleared_heads", "No longer in B", unmeasured_b) for f in findings_a]
    return [f for f in appeared if f is not None], [f for f in disappeared if f is not None]


def _appeared(finding, findings_a, rank_a: int, unmeasured_a=frozenset()):
    """B's ``finding`` as the comparison lists it, or None: whole when A lacks its code (``rank_a`` 9) and measured
    its heads; also when A has it less severe, then naming its heads A's do not name (a layer's Q/K × 0 raised
    demo-bert's diffuse heads to a warning, and the two heads diffuse in A too read as part of the damage) and A's
    severity (``details["severity_in_a"]``); else only for new heads."""
    if rank_a == 9:  # new in B: whole (the CLI's gate counts it), unless A measured none of its heads
        return None if _touches(finding, unmeasured_a, every=True) else finding
    named = _with_heads(finding, findings_a, "new_heads", "New in B", unmeasured_a)
    if severity_rank(finding.severity) >= rank_a:
        return named
    raised = named or finding  # A's severity kept: an error raised from a warning is a new error (the CLI exits 1)
    return replace(raised, details={**raised.details, "severity_in_a": SEVERITIES[rank_a]})


# Findings read from the weights: a head whose maps are NaN still has them measured
FROM_WEIGHTS = ("qk_scale_small", "qk_scale_large", "dead_heads", "similar_head_weights", "non_finite_weights")


def _touches(finding, unmeasured, every: bool = False) -> bool:
    """Whether ``finding`` names a head of ``unmeasured`` (``(part, layer, head)``; ``every``: only such heads),
    where its code reads maps (not ``FROM_WEIGHTS``, nor ``DESCRIBING``)."""
    if finding.code in FROM_WEIGHTS or finding.code in DESCRIBING or not finding.heads:
        return False
    return (all if every else any)((finding.part, *head) in unmeasured for head in finding.heads)


def _with_heads(finding, others, key: str, words: str, unmeasured=frozenset()):
    """A copy of ``finding`` naming its heads that ``others``' findings of its code and part do not name and the
    other model measured (not in ``unmeasured``), or None when there are none (or it describes, ``DESCRIBING``)."""
    named = {tuple(h) for f in others if (f.code, f.part) == (finding.code, finding.part) for h in f.heads}
    unmeasured = () if finding.code in FROM_WEIGHTS else unmeasured
    heads = [h for h in finding.heads if tuple(h) not in named and (finding.part, *h) not in unmeasured]
    if not heads or finding.code in DESCRIBING:
        return None
    return replace(finding, details={**finding.details, key: heads},
                   message=f"{finding.message} {words}: {head_names(heads, finding.part)}.")
