"""``diagnose``: run probe texts through a model, label every head, and collect findings.

Per part of the model ("self", or "encoder"/"decoder"/"cross" of an
encoder-decoder) and per probe text: the metrics of ``metrics.head_metrics``,
the labels of ``patterns.classify_metrics`` and the pairwise head distances of
``redundancy.js_distance``. Metrics and distances are averaged over the texts;
a head's pattern is the label most texts gave it (ties go to the higher mean
confidence); every text's label and roles are counted (``metrics["votes"]``,
``metrics["role_votes"]``), and a head they disagree on is borderline. Findings
come from the averaged metrics (``findings``) and from the weights alone
(``weight_checks``).

Long probes (over ``STREAM_ABOVE_TOKENS``) are streamed: the same numbers come
from ``streaming.stream_statistics`` without holding every attention map, and
the report then carries no maps (``Report.samples`` is empty).
"""

import time
from collections import Counter
from dataclasses import dataclass, field, replace
from pathlib import Path

import torch
from torch import nn

import core
from core.checkpoints.paths import readable
from core.cancel import progress_span
from core.checkpoints.registry import canonical_name
from core.checkpoints.tokenizer import borrowed_from
from core.device import model_device
from core.extraction.encode import TRUNCATED, max_positions
from core.extraction.extract import check_tokenizer, check_weights_loaded
from core.extraction.maps_budget import (
    ENV_MAX_MAPS, NO_TOKEN_FITS, maps_budget, maps_over_budget, over_text, whole_maps_bytes,
)
from core.extraction.head_weights import attention_weights
from core.extraction.offload import parameter_count
from core.errors import InputError, counted
from core.extraction.streaming import can_stream
from core.extraction.text_config import is_encoder_decoder
from diagnostics.findings import (
    UNCAPPED, Finding, attention_findings, cap_severity, diffuse_mask, explain_diffuse, explain_redundant, note,
    qualify_benign, sort_findings,
)
from diagnostics.measure.metrics import HeadMetrics, finite_head, layer_metrics
from diagnostics.classify.patterns import classify_metrics
from diagnostics.classify.roles import DUPLICATE_MIN, INDUCTION_MIN, head_roles, repeated_scores, role_scores
from diagnostics.probes import (
    RANDOM_PROBES, VOCABULARY_PROBES, RepeatedProbe, default_probes, fitting_probes, is_plain_module, module_run,
    random_probe, read_lengths, probe_variety, repeated_probe, unfit_defaults_note, user_texts, verdict_cap,
    vocabulary_probe,
)
from diagnostics.measure.redundancy import REDUNDANT_JS, js_distance, pairs_finding, redundant_pairs
from diagnostics.reports.report import HeadReport, Report
from diagnostics.measure.row_stats import OFFSETS
from diagnostics.measure.word_sinks import ordinary_keys, word_sink_scores
from diagnostics.streaming import stream_statistics
from diagnostics.texts import FINDING_TEXTS
from diagnostics.weights.qk_norms import record_qk_norms
from diagnostics.weights.weight_checks import check_weights

SCALAR_METRICS = ("entropy", "uniform_gap", "confidence", "topk_mass", "block_score", "special_mass",
                  "mean_distance", "sink_score", "sink2_score", "sink_mass", "sink_level", "rest_entropy",
                  "rest_mean_distance", "rest_sink2_score")
# Seeds of the repeated-sequence probes behind the induction / duplicate-token roles. One random sequence
# scores induction heads up to 0.1 lower or higher than another (SmolLM2 L23H0: 0.25 on seed 0, 0.36
# averaged over seeds 1-3); three ~100-token forwards cost little. Seeds 100-119 are the ground truth's
# (diagnostics.classify.real_truth), hence others here.
ROLE_SEEDS = (0, 10, 11)
# The progress bar: loading to LOADED, the probes to PROBES_TO (whole maps are measured from MEASURING_FROM; a
# streamed probe is measured as it streams), then the repeated-sequence probe, the labels and the weight checks.
LOADED, MEASURING_FROM, PROBES_TO = 0.05, 0.5, 0.85
# Probes longer than this (in tokens) are streamed: their maps would take layers × heads × n² floats.
STREAM_ABOVE_TOKENS = 1024
# Whole maps of every probe are held until the report is made: at most this many bytes of them (the app's attention
# results share 2 GB). Past it, a model that can be streamed (``core.extraction.streaming.can_stream``) is streamed;
# one that cannot is refused with a message.
WHOLE_MAPS_MAX_BYTES = 2 * 1024**3


@dataclass
class Measured:
    """What one probe gives one part of the model."""

    metrics: HeadMetrics  # every tensor [L, H]
    patterns: list  # [L][H] HeadPattern
    distances: torch.Tensor  # [L, H, H] pairwise JS distances
    sinks: list  # [L][H] display string of each head's strongest sink key
    causal: bool
    word_sinks: torch.Tensor  # [L, H] sink score of the heads whose sink key is an ordinary word, else 0


@dataclass
class Repeated:
    """The repeated-sequence probe and its ``Measured`` (whole maps: it is ~100 tokens long)."""

    probe: RepeatedProbe
    measured: Measured
    more: list = field(default_factory=list)  # RepeatedProbe of ROLE_SEEDS[1:]: the roles average over all


def diagnose(source, texts=None, device=None, progress=None, n_heads=None, stream=None) -> Report:
    """Diagnose ``source``: a ``(model, tokenizer)`` pair, a module, or anything ``core.load_model`` takes.

    texts: probe strings or ``(text, text_pair)`` tuples (default: ``probes.default_probes``: the 7 default
    paragraphs, each twice as long for a decoder-only model).
    device: where a model loaded by name goes (default: the best here); a loaded model stays where it is, and
    giving one a device is an InputError.
    progress: optional ``callable(fraction, message)``, called as the work advances.
    n_heads: heads per layer, for a bare state dict whose weights do not say it.
    stream: stream the probes (``diagnostics.streaming``) instead of extracting whole maps; None (default)
    streams when a probe is longer than ``STREAM_ABOVE_TOKENS`` tokens (of those the model accepts) and the
    model can be streamed; True on a model with a tokenizer that cannot be (an encoder-decoder, attention computed
    in the model's own code) is an InputError. Probes cut to the model's limit get a ``probe_truncated`` note.
    """
    start = time.perf_counter()
    tell = progress or (lambda fraction, message: None)
    check_device_used(device, source)
    model, tokenizer, name = _resolve(source, device, n_heads, progress_span(tell, 0.0, LOADED) if progress else None)
    texts = user_texts(texts)  # [] means the defaults, as None: they are judged as the defaults
    run = module_run(model, tokenizer) if tokenizer is not None and is_plain_module(model) else None  # once
    probes, coverage, fit_notes = fitting_probes(tokenizer, texts, default_probes(model, tokenizer, run),
                                                 max_positions(model, tokenizer))
    replaced = bool(fit_notes)  # unfit default probes, replaced by in-vocabulary ones
    lengths, limit = read_lengths(model, tokenizer, probes)  # tokens the model reads of each probe
    variety = probe_variety(tokenizer, probes, limit) if texts is not None else []  # the defaults are varied
    worst, judged, short_notes = verdict_cap(lengths, limit, coverage if texts is not None else None, variety)
    streamed = not replaced and _streams(model, tokenizer, lengths, stream)
    if not streamed:
        _check_whole_maps(model, lengths)
    layers = _in_call_order(attention_weights(model), run)
    with record_qk_norms(layers) as norms:  # the queries and keys the probes produce, for the weight checks
        if streamed:
            results = [_stream_probe(model, tokenizer, probe, i, len(probes), tell) for i, probe in enumerate(probes)]
            samples, parts, notes = [], {"self": [_measured(r) for r in results]}, []
        else:
            samples, notes = _run_probes(model, tokenizer, probes, tell, fit_notes or None,
                                         unread=len(texts or []), weights_known=bool(layers))
            fit_notes = [n for n in fit_notes if n.code not in {m.code for m in notes}]  # the later note says more
            results = samples
            parts = _measured_parts(samples, progress_span(tell, MEASURING_FROM, PROBES_TO), tokenizer is not None)
    # After the recording: the bound is about the inputs the model reads, and the repeated probe's random tokens
    # include ones no text uses ([unused*] among MiniLM's; with them its bound reached 127.7, on its texts 47.0).
    repeated, repeat_notes = _repeated(model, tokenizer, tell)
    heads, findings = [], fit_notes + short_notes + notes + repeat_notes + _truncation_notes(results)
    tell(0.9, "labelling heads")
    for part, measured in parts.items():
        part_heads, part_findings = _judged_part(part, measured, repeated if part == "self" else None, judged)
        heads += part_heads
        findings += cap_severity(part_findings, worst)
    tell(0.95, "checking weights")
    weight_findings, weight_numbers = check_weights(model, norms, layers)
    findings = _explained(findings, weight_findings, weight_numbers,
                          "random_ids" if tokenizer is None else "replaced_ids" if replaced else "")
    for head in heads:
        head.metrics.update(weight_numbers.get((head.part, head.layer, head.head), {}))
    summary = _model_summary(model, tokenizer, name, parts, weight_numbers, time.perf_counter() - start)
    summary["streamed"] = streamed
    tell(1.0, "done")
    vocabulary = samples[len(probes):] if tokenizer is not None else []  # in-vocabulary probes, if any
    return Report(summary, heads, sort_findings(qualify_benign(findings + weight_findings)), samples,
                  [p.to_dict() for p in probes] + [_ids_probe(r) for r in vocabulary])


def check_device_used(device, *sources) -> None:
    """InputError for a ``device`` that no source would use: it places models loaded by name (it had been ignored
    without a word for a model already loaded)."""
    if device is not None and not any(isinstance(source, (str, Path)) for source in sources):
        raise InputError(f"device={device!r} places a model AttnScope loads by name; yours is loaded already: move "
                         "it first (model.to(device)) and leave device out")


def _resolve(source, device, n_heads=None, progress=None):
    """``(model, tokenizer, name)`` of a diagnose source; ``progress(fraction, message)``: how loading one by name
    advances."""
    if isinstance(source, (tuple, list)):
        if len(source) != 2 or not isinstance(source[0], nn.Module):
            raise InputError("source must be a (model, tokenizer) pair, a model, or a model name or folder")
        model, tokenizer = source
        check_weights_loaded(model)
        if tokenizer is not None:  # a nanoGPT-style encode/decode object: a raw TypeError in the probes' check
            check_tokenizer(tokenizer)
        return model, tokenizer, _name(model)
    if isinstance(source, nn.Module):
        check_weights_loaded(source)
        return source, None, _name(source)
    if not isinstance(source, (str, Path)):
        raise InputError(f"cannot diagnose a {type(source).__name__}; pass a model name, a folder or "
                         "(model, tokenizer)")
    if progress:  # a model given loaded is not said to be loading
        progress(0.0, "loading the model")
    model, tokenizer = core.load_model(source, device=device, n_heads=n_heads, progress=progress)
    return model, tokenizer, readable(canonical_name(source))  # an alias: its Hub id; not UTF-8: with U+FFFD


def _in_call_order(layers, run):
    """A plain module's weight layers numbered as its maps are: by the order it calls its nn.MultiheadAttention
    modules, one layer per call. One it never calls has no map (its weights were checked as a layer the maps did
    not have: "L2H0" of a 2-layer model); ``layers`` as they are without a run (``run`` None: no plain module, no
    tokenizer, or the run failed)."""
    if run is None:
        return layers
    by_name = {layer.name: layer for layer in layers}
    return [replace(by_name[name], layer=i) for i, name in enumerate(run.called) if name in by_name]


def _name(model):
    return readable(getattr(getattr(model, "config", None), "name_or_path", "") or type(model).__name__)


def _run_probes(model, tokenizer, probes, tell, unfit_notes=None, unread=0, weights_known=True):
    """``(samples, notes)``: one ``AttentionResult`` per probe, then ``VOCABULARY_PROBES`` in-vocabulary ones
    in place of unfit default probes (``unfit_notes``, ``fitting_probes``'s; a note in place of its own if they
    cannot run); random-id probes without a tokenizer (``unread``: the caller's texts it could not read). Where
    those cannot run either and no attention layer has a known weight layout (``weights_known``), ExtractionError:
    an empty report with no error would pass for a clean bill of health."""
    if tokenizer is not None:
        samples = []
        for i, probe in enumerate(probes):
            tell(LOADED + (MEASURING_FROM - LOADED) * i / len(probes), f"probe {i + 1}/{len(probes)}")
            samples.append(core.extract_attention(model, tokenizer, probe.text, probe.text_pair))
        if unfit_notes:  # seeds from 1: seed 0 draws the repeated-sequence probe's tokens
            try:
                samples += [vocabulary_probe(model, tokenizer, seed) for seed in range(1, VOCABULARY_PROBES + 1)]
            except core.ExtractionError as err:
                return samples, [unfit_defaults_note(unfit_notes, err)]
        return samples, []
    texts = "the probe text given was not used: reading it" if unread == 1 else (
        f"the {unread} probe texts given were not used: reading them")
    unused = f"; {texts} needs the tokenizer" if unread else ""
    try:
        samples = [random_probe(model, seed) for seed in range(RANDOM_PROBES)]
    except core.ExtractionError as err:
        if not weights_known:
            raise core.ExtractionError(f"{err}, and none of its layers has an attention weight layout AttnScope "
                                       "knows: nothing of it can be diagnosed (docs/diagnostics.md lists the layouts)"
                                       ) from None
        return [], [note("no_tokenizer", detail=f"only the weights were checked ({err}){unused}")]
    return samples, [note("no_tokenizer", detail=f"probed with random token ids; text views are unavailable{unused}")]


def _ids_probe(result):
    """The report's entry for an in-vocabulary probe: its tokens as text, and their ids."""
    return {"text": " ".join(result.tokens), "text_pair": None, "token_ids": list(result.token_ids)}


def _streams(model, tokenizer, lengths, stream) -> bool:
    """Whether to stream the probes: asked for, or (``stream=None``) one probe is long or their maps too big."""
    if stream is False or tokenizer is None:
        return False
    streamable = can_stream(model) and not is_encoder_decoder(model)
    if stream:
        if not streamable:
            raise InputError(f"streaming covers Hugging Face and AttnScope encoders and decoders whose attention "
                             f"runs through transformers' attention functions, not {type(model).__name__}; "
                             "diagnose it with stream=False")
        return True
    if not streamable:
        return False
    longest = max(lengths, default=0)
    too_big = whole_maps_bytes(model, lengths) > _whole_maps_budget()
    return longest > STREAM_ABOVE_TOKENS or too_big or _over_device(model, longest)


def _explained(findings, weight_findings, weight_numbers, random_ids):
    """The findings with their suggestions told by the weights (``explain_diffuse``, ``explain_redundant``):
    ``similar_head_weights`` names the copies, ``weight_numbers`` the parts whose Q/K weights were read."""
    copies = {f.part: {tuple(head) for head in f.heads} for f in weight_findings if f.code == "similar_head_weights"}
    read = {part for (part, _, _), numbers in weight_numbers.items() if "qk_scale" in numbers}
    grown = {f.part: {tuple(head) for head in f.heads} for f in weight_findings
             if f.code == "qk_scale_large" and f.severity == "error"}
    return [explain_redundant(explain_diffuse(f, weight_numbers, random_ids, copies.get(f.part, ()),
                                              grown.get(f.part, ())), copies.get(f.part, ()), f.part in read)
            for f in findings]


def _whole_maps_budget() -> int:
    """``WHOLE_MAPS_MAX_BYTES``, or less on a machine whose memory gives less (``core``'s ``maps_budget``): every
    probe's maps are held, on the CPU, until the report is made."""
    return min(WHOLE_MAPS_MAX_BYTES, maps_budget() or WHOLE_MAPS_MAX_BYTES)


def _over_device(model, tokens: int) -> bool:
    """Whether one probe's maps would not fit the model's GPU (``extract_attention`` holds each probe to its free
    memory, the maps being there until the forward ends; then they go to the CPU): such a probe is streamed."""
    device_budget = maps_budget(model_device(model))
    return device_budget is not None and whole_maps_bytes(model, [tokens]) > device_budget


def _check_whole_maps(model, lengths):
    """Refuse probes whose whole maps would take over ``_whole_maps_budget``, before any is computed."""
    over = maps_over_budget(model, lengths, _whole_maps_budget())
    if over is None:
        return
    needed, fits = over  # every probe cut to fits tokens fits
    name = type(model).__name__
    if is_encoder_decoder(model):
        why = f"{name} is an encoder-decoder, which AttnScope does not stream"
    elif can_stream(model):
        why = "whole maps were asked for (stream=False)"
    else:
        why = f"{name} computes attention in its own code, which AttnScope cannot stream"
    limit = _whole_maps_budget()
    set_by = "" if limit == WHOLE_MAPS_MAX_BYTES else f" ({ENV_MAX_MAPS}, by default half this process's memory)"
    raise InputError(f"{why}, and the whole attention maps of these probes ({max(lengths):,} tokens at most) would "
                     f"take {over_text(needed, limit, binary=True)} limit{set_by}; "
                     + (f"give shorter or fewer probes (these would fit cut to {counted(fits, 'token')} at most)"
                        if fits else NO_TOKEN_FITS))


def _stream_probe(model, tokenizer, probe, i, count, tell):
    """A probe's ``StreamResult``, streamed layer by layer with pairwise distances (no maps kept); its layers move
    the progress bar (a probe of 8,192 tokens streams for minutes)."""
    step = f"probe {i + 1}/{count} (streamed)"
    start, stop = (LOADED + (PROBES_TO - LOADED) * n / count for n in (i, i + 1))
    tell(start, step)
    return stream_statistics(model, tokenizer, probe.text, probe.text_pair, redundancy=True,
                             progress=progress_span(tell, start, stop, step))


def _measured(r) -> Measured:
    """A ``StreamResult`` as the ``Measured`` of its probe."""
    words = _word_sinks(r.metrics, r.tokens, r.special, r.padding)  # (L, H); no tokens: ids alone, no tokenizer
    return Measured(r.metrics, r.patterns, r.distances, r.sink_tokens, r.causal, words)


def _repeated(model, tokenizer, tell) -> "tuple[Repeated | None, list[Finding]]":
    """``(repeated, notes)``: the repeated-sequence probe (induction, duplicate-token; ``probes.repeated_probe``),
    or None where it does not apply (no tokenizer, an encoder-decoder: no note, the schema says so) or cannot run
    (too few positions or ordinary tokens, attention not readable from token ids: a note says why)."""
    if tokenizer is None or is_encoder_decoder(model):
        return None, []
    tell(0.86, "repeated-sequence probe")
    try:
        probe = repeated_probe(model, tokenizer, seed=ROLE_SEEDS[0])
        more = [repeated_probe(model, tokenizer, seed=s) for s in ROLE_SEEDS[1:]]
    except core.ExtractionError as err:
        return None, [note("repeated_probe_skipped", detail=str(err))]
    return Repeated(probe, measure(probe.result), more), []


def _truncation_notes(results):
    """One ``probe_truncated`` note for the probes whose text was cut to the model's limit (an encoder-decoder's
    probe has a warning for its encoder and one for its decoder: a probe counts once)."""
    cut = [[w for w in r.warnings if TRUNCATED in w] for r in results]
    cut = [warnings for warnings in cut if warnings]
    if not cut:
        return []
    return [note("probe_truncated", detail=f"{len(cut)} of {len(results)} probes; {cut[0][0]}")]


def _measured_parts(samples, tell, named=True) -> dict[str, list[Measured]]:
    """``{part: [Measured per probe]}``, one probe after another under the bar (SmolLM2's seven took 12 s of its 33
    at one value). ``named``: the tokens are the text's (False: random ids, ``#id``)."""
    parts, count = _parts(samples), len(samples)
    measured = {part: [] for part in parts}
    for i, probes_parts in enumerate(zip(*parts.values())):
        tell(i / count, f"measuring heads ({i + 1}/{count})")
        for part, r in zip(parts, probes_parts):
            measured[part].append(measure(r, named))
    return measured


def _parts(samples):
    """``{part: [AttentionResult per probe]}``; encoder-decoders split into their three parts."""
    if not samples:
        return {}
    if samples[0].encoder is not None:
        return {part: [s.part(part) for s in samples] for part in ("encoder", "decoder", "cross")}
    return {"self": samples}


def measure(r, named=True) -> Measured:
    """The metrics, labels, distances and sink tokens of one ``AttentionResult`` (one part of one probe);
    ``named``: its keys are the text's tokens, not random ids (whose words are unknown: no word sinks)."""
    attn = r.attentions[..., : r.attentions.shape[-1], :]  # cross-attention: at most k query rows
    m = layer_metrics(attn, causal=r.causal, special=r.keys_special, padding=r.keys_padding, windows=r.windows)
    sinks = [[r.keys[int(k)] for k in row] for row in m.sink_key.tolist()]
    words = _word_sinks(m, r.keys if named else [], r.keys_special, r.keys_padding)  # (L, H)
    return Measured(m, classify_metrics(m), js_distance(attn, r.causal, r.keys_padding), sinks, r.causal, words)


def _word_sinks(metrics, tokens, special, padding):
    """``word_sink_scores`` of a probe whose keys read ``tokens``; 0 everywhere without them (random ids, whose
    words are unknown)."""
    if not tokens:
        return torch.zeros_like(metrics.sink_score)  # (L, H)
    ordinary = ordinary_keys(tokens, special, padding)  # (k,)
    return word_sink_scores(metrics.sink_score, metrics.sink_key, ordinary)  # (L, H)


def diagnose_part(part, measured, repeated=None):
    """``(heads, findings)`` of one part from its ``Measured`` probes (and the repeated-sequence probe)."""
    per_text = [m.metrics for m in measured]
    labels = [m.patterns for m in measured]
    distances = [m.distances for m in measured]  # each (L, H, H)
    sinks = [m.sinks for m in measured]
    avg = _average(per_text)
    avg["word_sink_score"] = torch.stack([m.word_sinks for m in measured]).mean(0)  # (L, H)
    n_layers, n_heads = avg["entropy"].shape
    sink_tokens = [[_most_common(s[l][h] for s in sinks) for h in range(n_heads)] for l in range(n_layers)]
    word_tokens = [[_most_common(m.sinks[l][h] for m in measured if m.word_sinks[l, h] > 0) for h in range(n_heads)]
                   for l in range(n_layers)]  # a word sink's own word: the same head sinks on "," in other texts
    causal = measured[0].causal
    copy_scores = _repeated_roles(repeated)
    findings = attention_findings(avg, part, sink_tokens, _copying(copy_scores, causal), word_tokens)
    redundant = _redundancy(torch.stack(distances).mean(0), avg, repeated, part)
    roles = head_roles(role_scores(avg, copy_scores), causal)
    probe_roles = [head_roles(role_scores(m, copy_scores), causal) for m in per_text]  # per probe, [L][H]
    heads = [_head_report(part, l, h, avg, [t[l][h] for t in labels], sink_tokens[l][h], roles[l][h],
                          Counter(r.role for p in probe_roles for r in p[l][h]))
             for l in range(n_layers) for h in range(n_heads)]
    return heads, findings + ([redundant] if redundant else [])


def _most_common(tokens):
    """The most frequent of ``tokens`` (the first seen of the ties), or None when there are none."""
    counted = Counter(tokens).most_common(1)
    return counted[0][0] if counted else None


def _judged_part(part, measured, repeated, judged):
    """``diagnose_part``, its findings from the probes ``verdict_cap`` judges by (``judged``; None: all), its heads
    labelled by every probe; non-finite maps are broken on any probe."""
    heads, findings = diagnose_part(part, measured, repeated)
    if judged is not None:
        judged_findings = diagnose_part(part, [m for m, ok in zip(measured, judged) if ok], repeated)[1]
        findings = [f for f in findings if f.code in UNCAPPED] + [f for f in judged_findings if f.code not in UNCAPPED]
    return heads, [_with_role_count(f, heads) for f in findings]


# Roles that measure a finding's behaviour by a bar of their own: the finding says how many heads have them.
ROLE_BARS = {"sink_heads": ("sink",), "positional_heads": ("previous_token", "next_token", "self")}


def _with_role_count(finding, heads):
    """``finding``, its message saying how many of ``heads`` have the roles of its behaviour (``ROLE_BARS``): a
    report naming 3 of MiniLM's heads attention sinks showed the sink role on 52, with nothing to say why."""
    roles = ROLE_BARS.get(finding.code)
    if roles is None:
        return finding
    count = sum(any(name in roles for name in h.role_names) for h in heads)
    finding.details["role_heads"] = count
    finding.message += " " + FINDING_TEXTS[finding.code].roles.format(count=count, total=len(heads))
    return finding


def _repeated_roles(repeated):
    """Induction and duplicate-token scores averaged over the repeated probes, or None without them."""
    if repeated is None:
        return None
    scores = [repeated_scores(p) for p in [repeated.probe] + repeated.more]
    return {role: torch.stack([s[role] for s in scores]).mean(0) for role in scores[0]}


def _copying(copy_scores, causal):
    """Bool ``[L, H]``: heads with the induction or duplicate-token role (None without the repeated probe)."""
    if copy_scores is None:
        return None
    induction = (copy_scores["induction"] >= INDUCTION_MIN) & causal  # induction is for causal models only
    return induction | (copy_scores["duplicate_token"] >= DUPLICATE_MIN)


def _redundancy(distance, avg, repeated, part):
    """The ``redundant_heads`` finding: same-layer pairs close on the probes and on the repeated-sequence probe.

    Heads alike on ordinary text can still do different things: previous-token and induction heads both sink
    on text and separate on a repeated random sequence (SmolLM2: JS distance 0.28-0.92), so a pair counts only
    where both agree. Its distance is the larger of the two.
    """
    if repeated is not None:
        distance = torch.maximum(distance, repeated.measured.distances)  # (L, H, H)
    pairs = redundant_pairs(distance, exclude=diffuse_mask(avg))
    n_layers, n_heads = avg["entropy"].shape
    return pairs_finding("redundant_heads", pairs, n_layers * n_heads, part, REDUNDANT_JS, layer_heads=n_heads)


def _average(per_text):
    """Mean over texts of each scalar metric (``[L, H]``) and of the diagonal masses."""
    avg = {name: torch.stack([getattr(m, name) for m in per_text]).mean(0) for name in SCALAR_METRICS}
    diag = torch.stack([m.diag_mass for m in per_text]).mean(0)  # (L, H, 7)
    best_mass, best_idx = diag.max(-1)  # (L, H)
    avg.update(diag_mass=diag, best_offset_mass=best_mass, best_offset=torch.tensor(OFFSETS)[best_idx])
    rest = torch.stack([m.rest_diag_mass for m in per_text]).mean(0)  # (L, H, 7)
    rest_mass, rest_idx = rest.max(-1)  # (L, H)
    avg.update(rest_diag_mass=rest, rest_best_offset_mass=rest_mass, rest_best_offset=torch.tensor(OFFSETS)[rest_idx])
    return avg


def _head_report(part, layer, head, avg, patterns, sink_token, roles, role_votes):
    metrics = _head_metrics(avg, layer, head, sink_token)
    if not finite_head(metrics):  # NaN or infinite maps (the non_finite_attention finding): no label, no roles,
        # and no offset or sink token (where argmax and the most common sink land on NaN rows, not measurements)
        metrics.update(agreement=None, votes={}, role_votes={}, best_offset=None, rest_best_offset=None,
                       sink_token=None)
        return HeadReport(part, layer, head, None, None, None, metrics)
    votes = Counter(p.label for p in patterns)
    top = max(votes.values())
    mean_conf = {label: sum(p.confidence for p in patterns if p.label == label) / n for label, n in votes.items()}
    label = max((l for l, n in votes.items() if n == top), key=lambda l: mean_conf[l])
    metrics.update(agreement=round(top / len(patterns), 4),
                   votes=dict(sorted(votes.items(), key=lambda item: (item[0] != label, -item[1]))),
                   role_votes=dict(role_votes.most_common()))
    offset = metrics["rest_best_offset"] if label == "diagonal" else None
    return HeadReport(part, layer, head, label, round(mean_conf[label], 4), offset, metrics, roles)


def _head_metrics(avg, layer, head, sink_token) -> dict:
    """One head's averaged metrics, as plain numbers."""
    metrics = {name: round(float(avg[name][layer, head]), 4) for name in SCALAR_METRICS}
    metrics.update(best_offset=int(avg["best_offset"][layer, head]),
                   best_offset_mass=round(float(avg["best_offset_mass"][layer, head]), 4),
                   diag_mass={str(d): round(float(v), 4) for d, v in zip(OFFSETS, avg["diag_mass"][layer, head])},
                   rest_best_offset=int(avg["rest_best_offset"][layer, head]),
                   rest_diag_mass={str(d): round(float(v), 4)
                                   for d, v in zip(OFFSETS, avg["rest_diag_mass"][layer, head])},
                   sink_token=sink_token)
    return metrics


def _model_summary(model, tokenizer, name, measured, weight_numbers, elapsed):
    config = getattr(model, "config", None)
    parts = {part: dict(zip(("layers", "heads"), ms[0].metrics.shape)) for part, ms in measured.items()}
    if not parts and weight_numbers:
        for part, layer, head in weight_numbers:
            shape = parts.setdefault(part, {"layers": 0, "heads": 0})
            shape["layers"], shape["heads"] = max(shape["layers"], layer + 1), max(shape["heads"], head + 1)
    first = next(iter(parts.values()), {"layers": 0, "heads": 0})
    return {
        "name": name,
        "architecture": type(model).__name__,
        "model_type": getattr(config, "model_type", None),
        "layers": first["layers"],
        "heads": first["heads"],
        "parts": parts,
        "parameters": parameter_count(model),
        "causal": bool(measured["self"][0].causal) if "self" in measured else False,
        "device": str(model_device(model)),
        "tokenizer": tokenizer is not None,
        "borrowed_tokenizer": borrowed_from(tokenizer),
        "elapsed_s": round(elapsed, 3),
    }
