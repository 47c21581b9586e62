"""``diagnostics.compare``: a model against itself changes nothing, Q/K × 8 changes every head; streaming agrees."""

import copy
import importlib

import pytest
import torch
from transformers import GPTNeoConfig, GPTNeoModel

from core.errors import InputError
from diagnostics.compare import (
    CHANGED_JS, LABEL_CHANGE_JS, CompareReport, HeadChange, compare, finding_changes, head_change,
)
from diagnostics.findings import Finding
from diagnostics.reports.report import HeadReport
from tiny import bpe_tokenizer, long_bpe_tokenizer, tiny_bert, tiny_gpt2, wordpiece_tokenizer

BUILDS = {"bert": (tiny_bert, wordpiece_tokenizer), "gpt2": (tiny_gpt2, bpe_tokenizer)}


def qk_scaled(model, factor):
    """A copy of ``model`` with every Q and K weight and bias multiplied by ``factor``."""
    scaled = copy.deepcopy(model)
    with torch.no_grad():
        for name, p in scaled.named_parameters():
            if ".query." in name or ".key." in name:
                p.mul_(factor)
            elif "c_attn" in name:
                width = p.shape[-1] // 3  # Conv1D columns Q | K | V
                p[..., : 2 * width] *= factor
    return scaled


@pytest.mark.parametrize("arch", BUILDS)
def test_a_model_against_itself_and_its_copy_changes_nothing(arch):
    build, tok = BUILDS[arch]
    model, tokenizer = build(), tok()
    for other in (model, copy.deepcopy(model)):
        report = compare((model, tokenizer), (other, tokenizer))
        assert not report.changed and not report.appeared and not report.disappeared
        assert max(h.js_distance for h in report.heads) < 1e-4
        assert all(h.before == h.after for h in report.heads)


@pytest.mark.parametrize("arch", BUILDS)
def test_qk_times_8_changes_every_head(arch):
    build, tok = BUILDS[arch]
    model, tokenizer = build(), tok()
    report = compare((model, tokenizer), (qk_scaled(model, 8.0), tokenizer))
    assert len(report.changed) == len(report.heads) == 8
    assert all("distance" in h.reasons and h.js_distance >= CHANGED_JS for h in report.heads)
    assert all(h.entropy_delta < 0 for h in report.heads)  # larger scores: sharper rows
    data = report.to_dict()
    assert data["schema"] == "attnscope.compare/1" and data["summary"]["changed"] == 8
    first = data["heads"][0]
    assert {"layer", "head", "js_distance", "changed", "before", "after"} <= set(first)
    assert {"pattern", "roles", "entropy", "sink_score"} <= set(first["before"])


@pytest.mark.slow
def test_long_probes_are_streamed_in_lockstep_and_agree_with_the_maps(monkeypatch):
    model, tokenizer = tiny_gpt2(), bpe_tokenizer()
    other = qk_scaled(model, 3.0)
    texts = ["the quick brown fox jumps over the lazy dog " * 3, "attention is all you need, said the paper"]
    from_maps = compare((model, tokenizer), (other, tokenizer), texts)
    monkeypatch.setattr(importlib.import_module("diagnostics.diagnose"), "STREAM_ABOVE_TOKENS", 4)
    streamed = compare((model, tokenizer), (other, tokenizer), texts)
    assert streamed.streamed and not from_maps.streamed and not streamed.a.samples
    for a, b in zip(from_maps.heads, streamed.heads):
        assert a.js_distance == pytest.approx(b.js_distance, abs=1e-4)


def test_models_sharing_one_config_or_one_model_twice_stream_and_are_switched_back():
    """Each thread switched the attention implementation and switched it back: a model built with
    AutoModel.from_config(a.config) shares a's config, so the first thread to finish undid the other's switch
    (a false 'ran more attention layers') or left the config switched (30 of 30 runs)."""
    from transformers import AutoModel

    from core import AttnScopeTransformer, TransformerConfig
    from diagnostics.paired_stream import stream_paired_js

    a = tiny_bert()
    b = AutoModel.from_config(a.config, add_pooling_layer=False).eval()
    b.load_state_dict(a.state_dict(), strict=False)
    implementation, ids = a.config._attn_implementation, torch.arange(1, 13).unsqueeze(0)  # (1, T)
    assert a.config is b.config and stream_paired_js(a, b, ids, chunk_rows=3).abs().max() == 0
    assert a.config._attn_implementation == implementation
    custom = AttnScopeTransformer(TransformerConfig(vocab_size=50, d_model=16, n_heads=2, n_layers=2, d_ff=32)).eval()
    assert stream_paired_js(custom, custom, ids, chunk_rows=3).abs().max() == 0
    assert not any("attention_fn" in vars(m) for m in custom.modules())
    a.train()  # each thread set eval mode and restored what it found: the later one restored eval (5 of 20 runs)
    for _ in range(10):
        stream_paired_js(a, a, ids, chunk_rows=3)
        assert a.training and all(m.training for m in a.modules())



def test_a_stopped_lockstep_stream_stops_model_a_too(monkeypatch):
    """Once model B's side stopped, model A's hand-off returned without a word and A computed every layer left
    before the stop returned (6-9 s for two SmolLM2 on 2,201 tokens)."""
    from transformers import GPT2Config, GPT2Model

    from core import Cancelled
    from diagnostics import paired_stream

    torch.manual_seed(0)
    model = GPT2Model(GPT2Config(vocab_size=300, n_embd=32, n_layer=8, n_head=4, n_positions=64)).eval()
    sent, real = [], paired_stream._Sender.update
    counted = lambda self, *args: sent.append(self.layer) or real(self, *args)  # noqa: E731
    monkeypatch.setattr(paired_stream._Sender, "update", counted)

    def stop_at_layer_3(fraction, message):
        if message.startswith("layer 3/"):
            raise Cancelled("stopped")
    with pytest.raises(Cancelled):
        paired_stream.stream_paired_js(model, model, torch.arange(64).unsqueeze(0), chunk_rows=2,
                                       progress=stop_at_layer_3)
    assert max(sent) <= 2 and len(sent) <= 2 * 32 + 2  # 32 chunks a layer: A ran at most a chunk past B

def test_default_probes_are_streamed_as_the_diagnoses_read_them(monkeypatch):
    """A decoder's default probes are ``CAUSAL_PROBES``: the lockstep distances read them too, not the shorter
    ones, so they equal the distances between the whole maps."""
    tokenizer, model = long_bpe_tokenizer(), tiny_gpt2(1024)
    other = qk_scaled(model, 3.0)
    from_maps = compare((model, tokenizer), (other, tokenizer))
    monkeypatch.setattr(importlib.import_module("diagnostics.diagnose"), "STREAM_ABOVE_TOKENS", 4)
    streamed = compare((model, tokenizer), (other, tokenizer))
    assert streamed.streamed and streamed.a.probes == from_maps.a.probes and len(from_maps.a.samples) == 7
    for a, b in zip(from_maps.heads, streamed.heads):
        assert a.js_distance == pytest.approx(b.js_distance, abs=1e-4)


def test_a_model_that_cannot_stream_is_compared_on_whole_maps(monkeypatch):
    """GPT-Neo computes attention in its own code; with GPT-2 (same vocabulary) both are read on whole maps."""
    torch.manual_seed(0)
    config = GPTNeoConfig(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, max_position_embeddings=64,
                          attention_types=[[["global"], 2]])
    neo = GPTNeoModel(config).eval()
    monkeypatch.setattr(importlib.import_module("diagnostics.diagnose"), "STREAM_ABOVE_TOKENS", 4)
    report = compare((tiny_gpt2(), bpe_tokenizer()), (neo, bpe_tokenizer()), ["the quick brown fox jumps"])
    assert not report.streamed and len(report.a.samples) == len(report.b.samples) == 1  # before: "streaming covers"
    assert all(0 < head.js_distance <= 1 for head in report.heads)


def test_different_vocabularies_are_one_line_errors():
    bert, gpt2 = tiny_bert(), tiny_gpt2()
    with pytest.raises(InputError, match="different vocabularies: A has 200 token embeddings, B has 300"):
        compare((bert, wordpiece_tokenizer()), (gpt2, bpe_tokenizer()))
    with pytest.raises(InputError, match="the tokenizers differ") as err:
        compare((bert, wordpiece_tokenizer()), (bert, wordpiece_tokenizer(vocab_size=150)))
    assert "\n" not in str(err.value) and "is only in A" in str(err.value)
    grown = copy.deepcopy(wordpiece_tokenizer())
    grown.add_tokens(["zzznew"])
    with pytest.raises(InputError, match=r"\('zzznew' is only in B\)"):  # "B has 1 more" named no token before
        compare((bert, wordpiece_tokenizer()), (bert, grown))


def test_a_causal_model_against_a_bidirectional_one_is_refused():
    """Before, whole maps gave a distance that depended on which model was A (0.528 against 0.485)."""
    from transformers import GPT2Config, GPT2Model

    torch.manual_seed(0)
    gpt2 = GPT2Model(GPT2Config(vocab_size=200, n_embd=32, n_layer=2, n_head=4, n_positions=64))  # BERT's vocab size
    for a, b in ((tiny_bert(), gpt2), (gpt2, tiny_bert())):
        with pytest.raises(InputError, match="one model is causal and the other is not"):
            compare((a, wordpiece_tokenizer()), (b, wordpiece_tokenizer()), ["the cat sat on the mat"])


def test_the_first_changed_layer_is_named_where_later_layers_change_with_it():
    """MiniLM with layer 3's Q/K × 8 changed 36 of 72 heads, none before layer 3 (compare audit, stop 59): the count
    read as 36 damaged heads, and nothing said where the change begins."""
    model, tokenizer, texts = tiny_bert(), wordpiece_tokenizer(), ["the quick brown fox jumps over the lazy dog"]
    damaged = copy.deepcopy(model)
    with torch.no_grad():
        for weights in (damaged.encoder.layer[1].attention.self.query, damaged.encoder.layer[1].attention.self.key):
            weights.weight.mul_(30.0)  # layer 1, the last of its 2
    report = compare((model, tokenizer), (damaged, tokenizer), texts)
    assert report.changed and {h.layer for h in report.changed} == {1}
    assert report.first_changed_layers == {"self": 1} and report.to_dict()["summary"]["first_changed_layers"] == {
        "self": 1}
    sentence = "The first layer whose heads changed is 1. The change is there or in what comes before it"
    assert sentence in report.to_markdown() and sentence in report.to_html()
    same = compare((model, tokenizer), (copy.deepcopy(model), tokenizer), texts)
    assert same.first_changed_layers == {} and "first layer" not in same.to_markdown() + same.to_html()
    heads = [HeadChange(part, layer, 0, 0.5, changed, ["distance"], {}, {}) for part, layer, changed in (
        ("decoder", 3, True), ("decoder", 1, True), ("decoder", 0, False), ("cross", 2, True))]
    assert CompareReport(None, None, heads, [], [], streamed=False).first_changed_layers == {"decoder": 1, "cross": 2}


def test_a_diverged_head_is_changed_and_a_copy_of_it_is_not():
    """A NaN map's distance is NaN, and NaN >= CHANGED_JS was False: the head passed as unchanged."""
    model = tiny_bert()
    diverged = copy.deepcopy(model)
    with torch.no_grad():
        diverged.encoder.layer[1].attention.self.query.weight[0, 0] = float("nan")  # head L1H0's scores
    tokenizer, texts = wordpiece_tokenizer(), ["the quick brown fox jumps over the lazy dog"]
    report = compare((model, tokenizer), (diverged, tokenizer), texts)
    assert [(h.layer, h.head, h.reasons) for h in report.changed] == [(1, 0, ["non_finite"])]
    assert "| L1H0 | n/a | non_finite |" in report.to_markdown() and '"js_distance": null' in report.to_json()
    assert " → no label | " in report.to_markdown() and " → no label</td>" in report.to_html()  # NaN: no pattern
    rule = "or a map finite in one model only)"  # the line's rule had not covered the heads it counted
    assert f"{rule}; probes: 1." in report.to_markdown() and f"{rule}. The first layer" in report.to_html()
    assert "finite in one model" not in compare((model, tokenizer), (qk_scaled(model, 8.0), tokenizer),
                                                texts).to_markdown()
    same = compare((diverged, tokenizer), (copy.deepcopy(diverged), tokenizer), texts)
    assert not same.changed and max(h.js_distance for h in same.heads) == 0.0


def test_findings_on_heads_one_model_could_not_measure_neither_appear_nor_disappear():
    """demo-bert with one NaN in layer 2's queries: its NaN reaches L3H0 and L3H3, whose near-uniform maps (info in
    A) were listed as "disappeared from A", as if mended, and "appeared in B" the other way round."""
    import core

    model, tokenizer = core.load_model("demo-bert")
    broken = copy.deepcopy(model)
    with torch.no_grad():
        broken.encoder.layer[2].attention.self.query.weight[0, 0] = float("nan")
    forward = compare((model, tokenizer), (broken, tokenizer))
    unmeasured = {(h.layer, h.head) for h in forward.heads if "non_finite" in h.reasons}
    assert {(3, 0), (3, 3)} <= unmeasured
    nan = ["non_finite_attention", "non_finite_weights"]
    assert sorted(f.code for f in forward.appeared) == nan and not forward.disappeared
    backward = compare((broken, tokenizer), (model, tokenizer))
    assert not backward.appeared and sorted(f.code for f in backward.disappeared) == nan
    zeroed = copy.deepcopy(model)  # new errors beside the NaN heads still fail the gate, and name every head
    with torch.no_grad():
        for layer in zeroed.encoder.layer:
            layer.attention.self.query.weight.zero_()
            layer.attention.self.query.bias.zero_()
    gate = compare((broken, tokenizer), (zeroed, tokenizer))
    assert gate.has_new_errors and {"diffuse_heads", "qk_scale_small"} <= {f.code for f in gate.appeared}
    assert len(next(f for f in gate.appeared if f.code == "qk_scale_small").heads) == 16  # weights: all measured


def test_a_copy_of_a_diverged_model_is_at_zero_when_streamed_too(monkeypatch):
    """The streamed path had no "same maps, NaN included" step: the copy's diverged head was at null / n/a."""
    tokenizer, model = long_bpe_tokenizer(), tiny_gpt2(1024)
    with torch.no_grad():
        model.h[1].attn.c_attn.weight[0, 0] = float("nan")  # head L1H0's queries
    monkeypatch.setattr(importlib.import_module("diagnostics.diagnose"), "STREAM_ABOVE_TOKENS", 4)
    same = compare((model, tokenizer), (copy.deepcopy(model), tokenizer), ["the quick brown fox jumps over the dog"])
    assert same.streamed and not same.changed and max(h.js_distance for h in same.heads) == 0.0


def test_models_of_different_input_limits_are_refused_before_either_runs(monkeypatch):
    """Whole maps refused them after both diagnoses ('the models read a probe differently'); streamed, both were cut
    to the shorter limit and compared."""
    ran = []
    monkeypatch.setattr(importlib.import_module("diagnostics.compare"), "diagnose", lambda *a, **k: ran.append(1))
    tokenizer = long_bpe_tokenizer()
    with pytest.raises(InputError, match=r"^the models take inputs of different lengths \(A: 64 tokens, B: 128"):
        compare((tiny_gpt2(64), tokenizer), (tiny_gpt2(128), tokenizer), ["the quick brown fox " * 30])
    assert not ran


def test_models_of_different_shapes_are_refused_before_either_runs(monkeypatch):
    """Both diagnoses ran (minutes on large models) before 'different shapes' was told."""
    from transformers import BertConfig, BertModel

    ran = []
    monkeypatch.setattr(importlib.import_module("diagnostics.compare"), "diagnose", lambda *a, **k: ran.append(1))
    small = BertModel(BertConfig(**{**tiny_bert().config.to_dict(), "num_hidden_layers": 1}))
    with pytest.raises(InputError, match=r"^the models have different shapes \(A: 2 layers × 4 heads, B: 1 layers"):
        compare((tiny_bert(), wordpiece_tokenizer()), (small, wordpiece_tokenizer()), ["the quick brown fox"])
    assert not ran


def test_an_encoder_decoder_against_a_model_of_one_stack_is_refused_before_either_runs(monkeypatch):
    """BART against GPT-2 or BERT was refused only after both diagnoses, as "one model is causal and the other is
    not" (a report calls an encoder-decoder not causal; its decoder is) or as "different shapes"."""
    from tiny import tiny_bart

    ran = []
    monkeypatch.setattr(importlib.import_module("diagnostics.compare"), "diagnose", lambda *a, **k: ran.append(1))
    for a, b, which in ((tiny_bart(), tiny_bert(), "A"), (tiny_bert(), tiny_bart(), "B")):
        with pytest.raises(InputError, match=f"^{which} is an encoder-decoder and {'AB'[which == 'A']} is not"):
            compare((a, wordpiece_tokenizer()), (b, wordpiece_tokenizer()), ["the quick brown fox"])
    assert not ran


def test_texts_may_be_any_iterable():
    """A generator fed A's diagnosis and left B the default probes ('the models read a probe differently')."""
    model, tokenizer = tiny_bert(), wordpiece_tokenizer()
    report = compare((model, tokenizer), (copy.deepcopy(model), tokenizer), (t for t in ["the cat", "a dog ran"]))
    assert len(report.a.probes) == len(report.b.probes) == 2 and not report.changed


def test_models_whose_heads_cannot_be_measured_are_one_error():
    """Two encoder-decoders without tokenizers: '0 of 0 heads changed' and exit 0 before (the page: IndexError)."""
    from tiny import tiny_bart

    with pytest.raises(InputError, match="no head could be measured"):
        compare(tiny_bart(), tiny_bart())


def _head(pattern="diffuse", roles=None):
    head = HeadReport("self", 0, 1, pattern, 0.9, None, {"entropy": 0.5, "sink_score": 0.1})
    if roles is not None:
        head.roles = roles  # what issue 11's roles add; compare reads them generically
    return head


def test_pattern_and_role_changes_count_only_beyond_the_noise_floor():
    assert head_change(_head("diffuse"), _head("sparse"), LABEL_CHANGE_JS / 2).changed is False
    flipped = head_change(_head("diffuse"), _head("sparse"), LABEL_CHANGE_JS)
    assert flipped.changed and flipped.reasons == ["pattern"]
    roles = head_change(_head(roles=["sink"]), _head(roles=[{"role": "previous_token", "score": 0.8}]), LABEL_CHANGE_JS)
    assert roles.reasons == ["roles"]
    assert roles.before["roles"] == ["sink"] and roles.after["roles"] == ["previous_token"]


def _finding(code, severity, part="self"):
    return Finding(code, severity, [[0, 0]], "m", "s", {}, part)


def test_findings_that_appear_worsen_or_disappear():
    a = [_finding("diffuse_heads", "warning"), _finding("sink_heads", "info")]
    b = [_finding("diffuse_heads", "error"), _finding("saturated_heads", "error")]
    appeared, disappeared = finding_changes(a, b)
    assert [f.code for f in appeared] == ["diffuse_heads", "saturated_heads"]
    assert [f.code for f in disappeared] == ["sink_heads"]
    assert finding_changes(b, b) == ([], [])


def test_a_finding_that_spreads_to_new_heads_names_them_and_one_that_recedes_names_the_heads_it_left():
    """Two more dead heads (a layer of their own, their maps unchanged) changed neither the code nor the severity of
    ``dead_heads``: the comparison listed nothing, and nothing on the page named them."""
    a = [Finding("dead_heads", "info", [[1, 1], [1, 3]], "2 heads", "s"), Finding("sink_heads", "info", [[0, 0]],
                                                                                   "1 head", "s")]
    b = [Finding("dead_heads", "info", [[1, 1], [1, 3], [4, 0], [4, 5]], "4 heads", "s"),
         Finding("sink_heads", "info", [[0, 1]], "1 head", "s")]  # sinks move with any fine-tuning: not listed
    appeared, disappeared = finding_changes(a, b)
    assert [(f.code, f.details["new_heads"], f.message) for f in appeared] == [
        ("dead_heads", [[4, 0], [4, 5]], "4 heads New in B: L4H0, L4H5.")]
    assert disappeared == [] and b[0].message == "4 heads" and b[0].details == {}  # B's own report is untouched
    appeared, disappeared = finding_changes(b, a)
    assert appeared == [] and [(f.code, f.details["cleared_heads"]) for f in disappeared] == [
        ("dead_heads", [[4, 0], [4, 5]])]
    assert disappeared[0].message.endswith("No longer in B: L4H0, L4H5.")
    errors = [Finding("dead_heads", "error", [[0, h] for h in range(4)], "4 heads", "s")]
    moved = [Finding("dead_heads", "error", [[0, 1], [0, 2], [0, 3], [1, 0]], "4 heads", "s")]
    report = CompareReport(None, None, [], *finding_changes(errors, moved), streamed=False)
    assert report.appeared[0].details["new_heads"] == [[1, 0]] and not report.has_new_errors  # no new error: exit 0
    report = CompareReport(None, None, [], *finding_changes(errors[:0], moved), streamed=False)
    assert report.has_new_errors



def test_a_finding_that_grows_more_severe_names_its_new_heads():
    """demo-bert with layer 1's Q/K × 0: ``diffuse_heads`` went from info on L3H0, L3H3 to a warning on those and
    layer 1's four, listed whole: the two heads diffuse in A (distance ≤ 0.012) read as part of the damage."""
    a = [Finding("diffuse_heads", "info", [[3, 0], [3, 3]], "2 heads", "s")]
    b = [Finding("diffuse_heads", "warning", [[1, 0], [1, 1], [1, 2], [1, 3], [3, 0], [3, 3]], "6 heads", "s")]
    appeared, _ = finding_changes(a, b)
    assert [(f.severity, f.details["new_heads"], f.message) for f in appeared] == [
        ("warning", [[1, 0], [1, 1], [1, 2], [1, 3]], "6 heads New in B: L1H0, L1H1, L1H2, L1H3.")]
    assert appeared[0].details["severity_in_a"] == "info"
    same = [Finding("diffuse_heads", "warning", [[3, 0], [3, 3]], "2 heads", "s")]  # raised on the same heads
    assert [(f.heads, f.message, f.details) for f in finding_changes(a, same)[0]] == [
        ([[3, 0], [3, 3]], "2 heads", {"severity_in_a": "info"})]  # listed whole
    worse = [Finding("diffuse_heads", "error", b[0].heads, "6 heads", "s")]  # an error, on new heads too (review)
    report = CompareReport(None, None, [], *finding_changes([Finding("diffuse_heads", "warning", a[0].heads, "2",
                                                                     "s")], worse), streamed=False)
    assert report.appeared[0].details["new_heads"] and report.has_new_errors  # a new error: the CLI exits 1

def test_a_raised_finding_shows_the_severity_it_had_in_a():
    """A warning in A raised to an error in B read "Error" on the page and in the reports, as if A had none."""
    model, tokenizer = tiny_bert(), wordpiece_tokenizer()
    report = compare((model, tokenizer), (model, tokenizer))
    a = [Finding("diffuse_heads", "warning", [[0, 0]], "1 head", "s")]
    b = [Finding("diffuse_heads", "error", [[0, 0], [0, 1]], "2 heads", "s")]
    report.appeared.extend(finding_changes(a, b)[0])
    assert "- **Error (warning in A)**: " in report.to_markdown()
    assert "<li><strong>Error (warning in A)</strong>: " in report.to_html()


def test_renderings_escape_names():
    model, tokenizer = tiny_bert(), wordpiece_tokenizer()
    report = compare((model, tokenizer), (qk_scaled(model, 8.0), tokenizer))
    report.a.model["name"] = "<script>alert(1)</script>"
    report.b.model["name"] = "[x](http://evil) *b*"
    html, markdown = report.to_html(), report.to_markdown()
    assert "<script>" not in html and "&lt;script&gt;" in html
    assert "[x](http" not in markdown and "\\[x\\]" in markdown
    assert "L1H3" in markdown and "Changed heads" in html


def test_a_vision_language_model_is_compared_and_probed_as_its_language_model():
    """Its config's top level has no layers, heads or vocabulary (they are under text_config): Compare skipped its
    shape and vocabulary checks and streamed chunks 4 × too large (heads read as 1), and without a tokenizer its
    random-id probe was refused, leaving a report of 0 heads."""
    from core.extraction.text_config import vocab_size
    from diagnostics import diagnose
    from diagnostics.paired_stream import _chunk_rows
    from tiny import tiny_gemma3_pair

    compare_module = importlib.import_module("diagnostics.compare")
    both, alone = tiny_gemma3_pair()
    assert compare_module._config_shape(both) == compare_module._config_shape(alone) == (3, 4)
    assert vocab_size(both) == vocab_size(alone) == 320  # what Compare's vocabulary check reads
    assert _chunk_rows(both, 1000) == _chunk_rows(alone, 1000)
    heads = [(h.layer, h.head, h.pattern) for h in diagnose(both).heads]
    assert len(heads) == 12 and heads == [(h.layer, h.head, h.pattern) for h in diagnose(alone).heads]


def test_streamed_distances_move_the_progress_bar_probe_by_probe_and_layer_by_layer(monkeypatch):
    """After both diagnoses the lockstep streams ran with the bar at "measuring distances" until the end; then they
    told once a probe (two SmolLM2 on a probe of 4,000 tokens sat at 80 % for 170 s)."""
    model, tokenizer = tiny_gpt2(), bpe_tokenizer()
    monkeypatch.setattr(importlib.import_module("diagnostics.diagnose"), "STREAM_ABOVE_TOKENS", 4)
    calls = []
    report = compare((model, tokenizer), (qk_scaled(model, 3.0), tokenizer), ["the cat sat", "a dog barked"],
                     progress=lambda fraction, message: calls.append((fraction, message)))
    assert report.streamed
    steps = [(round(f, 3), m.removeprefix("measuring distances: ")) for f, m in calls
             if m.startswith("measuring distances:")]
    assert steps == [(0.8, "probe 1/2"), (0.8, "probe 1/2: layer 1/2"), (0.85, "probe 1/2: layer 2/2"),
                     (0.9, "probe 2/2"), (0.9, "probe 2/2: layer 1/2"), (0.95, "probe 2/2: layer 2/2")]
    assert [f for f, _ in calls] == sorted(f for f, _ in calls)  # the bar only moves forward


def test_the_distance_grid_of_a_part_the_comparison_lacks_is_an_input_error():
    """Report.pattern_grid names the parts there are; distance_grid was a bare ValueError (or IndexError)."""
    from diagnostics.compare import CompareReport, HeadChange

    change = HeadChange("self", 1, 2, 0.25, True, ["distance"], {}, {})
    report = CompareReport(None, None, heads=[change], appeared=[], disappeared=[], streamed=False)
    assert report.distance_grid() == [[0.0] * 3, [0.0, 0.0, 0.25]]
    with pytest.raises(InputError, match=r"no part 'decoder'; it has \['self'\]"):
        report.distance_grid("decoder")
    with pytest.raises(InputError, match=r"no part 'self'; it has \[\]"):
        CompareReport(None, None, heads=[], appeared=[], disappeared=[], streamed=False).distance_grid()


def test_models_loaded_by_name_report_their_loading_and_loaded_ones_do_not():
    """compare loaded A and B with no word of it (SmolLM2's GGUF: 10 s each at 0 % and 5 %), then said "model A:
    loading the model" of a model it had loaded."""
    seen = []
    compare("demo-bert", "demo-bert", ["the quick brown fox jumps over the lazy dog"],
            progress=lambda f, m: seen.append((f, m)))
    said = [m for _, m in seen]
    assert said[0] == "model A: loading the model" and "model B: loading the model" in said
    probing = said.index("model A: probe 1/1")
    assert "model B: loading the model" in said[:probing] and not any("loading" in m for m in said[probing:])
    assert [f for f, _ in seen] == sorted(f for f, _ in seen)
