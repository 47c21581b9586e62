"""``diagnose`` and ``Report``: schema, pattern grid, Markdown, standalone HTML, encoder-decoders, no tokenizer."""

import json
import re
from dataclasses import replace

import pytest

from broken_checkpoints import structured_bert
from diagnostics import PATTERN_TEXTS, ROLE_TEXTS, ROLES, Report, diagnose
from diagnostics.classify.patterns import PATTERNS
from diagnostics.probe_texts import DEFAULT_PROBES
import core
from tiny import tiny_bart, tiny_gpt2, wordpiece_tokenizer
from tiny import tiny_bert as tiny_bert_model


@pytest.fixture(scope="module")
def report(tmp_path_factory):
    folder = structured_bert(tmp_path_factory.mktemp("bert") / "bert")
    calls = []
    result = diagnose(str(folder), progress=lambda fraction, message: calls.append((fraction, message)))
    result.progress_calls = calls
    return result


def test_report_shape_and_progress(report):
    assert isinstance(report, Report)
    assert report.model["layers"] == 2 and report.model["heads"] == 4 and report.model["causal"] is False
    assert report.model["parameters"] > 0 and report.model["tokenizer"] is True
    assert len(report.heads) == 8 and len(report.samples) == len(DEFAULT_PROBES)
    assert all(h.pattern in PATTERNS and 0 <= h.confidence <= 1 for h in report.heads)
    fractions = [f for f, _ in report.progress_calls]
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] == 1.0
    # each probe's maps measured in turn (SmolLM2's seven sat 12 s at "measuring heads", 36 % of the diagnosis)
    measuring = [(round(f, 3), m) for f, m in report.progress_calls if m.startswith("measuring heads")]
    assert [m for _, m in measuring] == [f"measuring heads ({i}/7)" for i in range(1, 8)]
    assert len({f for f, _ in measuring}) == 7


def test_pattern_grid(report):
    grid = report.pattern_grid()
    assert len(grid) == 2 and all(len(row) == 4 for row in grid)
    assert grid[1][2] == report.head(1, 2).pattern
    with pytest.raises(core.InputError, match="no part 'cross'"):
        report.pattern_grid("cross")


def test_to_dict_follows_schema(report):
    data = json.loads(report.to_json())
    assert data["schema"] == "attnscope.report/2"
    assert set(data) == {"schema", "model", "summary", "probes", "heads", "findings"}
    assert data["model"]["streamed"] is False  # short probes: whole maps
    head = data["heads"][0]
    assert set(head) == {"part", "layer", "head", "pattern", "confidence", "offset", "roles", "metrics"}
    for h in data["heads"]:
        assert all(set(r) == {"role", "score"} and r["role"] in ROLES for r in h["roles"])
        scores = [r["score"] for r in h["roles"]]
        assert scores == sorted(scores, reverse=True)
    for name in ("entropy", "confidence", "sink_score", "best_offset", "diag_mass", "qk_scale", "max_score", "ov_norm"):
        assert name in head["metrics"], name
    assert sum(data["summary"]["patterns"]["self"].values()) == 8
    assert "samples" not in data and data["probes"][5]["text_pair"]


def test_markdown_and_html_render_from_texts(report):
    markdown = report.to_markdown()
    assert "## Pattern map" in markdown and PATTERN_TEXTS["vertical"].reading in markdown
    assert "## Roles" in markdown and ROLE_TEXTS["induction"].meaning in markdown
    html = report.to_html()
    assert html.startswith("<!DOCTYPE html>") and PATTERN_TEXTS["diffuse"].color in html
    assert "<script" not in html and not re.search(r"(src|href)=['\"]?https?:", html)


def test_votes_count_every_probe(report):
    for h in report.heads:
        votes = h.metrics["votes"]
        assert sum(votes.values()) == len(DEFAULT_PROBES) and next(iter(votes)) == h.pattern
        assert h.metrics["agreement"] == pytest.approx(votes[h.pattern] / len(DEFAULT_PROBES), abs=1e-4)
        assert all(0 < n <= len(DEFAULT_PROBES) for n in h.metrics["role_votes"].values())
        torn_roles = any(n < len(DEFAULT_PROBES) for n in h.metrics["role_votes"].values())
        assert h.borderline == (len(votes) > 1 or torn_roles)
    assert report.borderline_heads() == [h for h in report.heads if h.borderline]


def test_borderline_heads_are_listed_with_their_votes(report):
    unanimous = lambda h: {**h.metrics, "votes": {h.pattern: 7}, "role_votes": {"sink": 7}}  # noqa: E731
    steady = replace(report, heads=[replace(h, metrics=unanimous(h)) for h in report.heads])
    assert not steady.borderline_heads()
    assert "Borderline" not in steady.to_markdown() and "Borderline" not in steady.to_html()
    heads = list(steady.heads)
    heads[1] = replace(heads[1], pattern="sparse", metrics={**heads[1].metrics, "votes": {"sparse": 4, "vertical": 3}})
    heads[2] = replace(heads[2], metrics={**heads[2].metrics, "role_votes": {"sink": 4, "previous_token": 7}})
    torn = replace(steady, heads=heads)
    assert torn.borderline_heads() == [heads[1], heads[2]]
    markdown = torn.to_markdown()
    assert "**Borderline heads (2, marked ? in the map).**" in markdown
    assert "- L0H1: sparse 4/7, vertical 3/7\n" in markdown
    grid_row = next(line for line in markdown.splitlines() if line.startswith("| L0 |")).split(" | ")
    assert grid_row[2].startswith("sparse?") and not grid_row[1].split(" ")[0].endswith("?")
    assert f"- L0H2: {heads[2].pattern} 7/7; roles: sink 4/7\n" in markdown  # only the roles some probes lack
    html = torn.to_html()
    assert "<li>L0H1: sparse 4/7, vertical 3/7</li>" in html and "borderline: sparse 4/7, vertical 3/7" in html
    assert ">sparse?" in html and "marked ? in the map" in html


def test_html_shows_heatmaps_of_finding_heads():
    model = tiny_gpt2()
    report = diagnose((model, None))  # random heads are diffuse: an error finding with heads
    assert report.finding("diffuse_heads").severity == "error"
    html = report.to_html()
    assert html.count("<svg") == 4 and "<figcaption>L0H0</figcaption>" in html


def test_encoder_decoder_parts():
    report = diagnose((tiny_bart(), wordpiece_tokenizer()), texts=["The cat sat on the mat.", "A dog barked."])
    assert report.parts == ["encoder", "decoder", "cross"]
    assert set(report.model["parts"]) == {"encoder", "decoder", "cross"}
    assert len(report.pattern_grid("cross")) == 2
    assert {f.part for f in report.findings if f.heads} <= {"encoder", "decoder", "cross"}
    assert "encoder L0H0" in report.finding("diffuse_heads").message
    assert "Pattern map: cross" in report.to_markdown()


def test_model_without_tokenizer_uses_random_ids():
    report = diagnose(tiny_gpt2())
    assert report.finding("no_tokenizer").severity == "info" and report.probes == []
    assert len(report.heads) == 8 and report.samples[0].tokens[0].startswith("#")
    assert report.model["causal"] is True


def test_random_ids_fit_a_model_with_few_positions():
    """A tokenizer-less model that takes fewer tokens than a random probe's 24 gets probes of its own length;
    one that takes too few to say anything gets the weight checks and a note, not a crash."""
    report = diagnose(tiny_gpt2(max_positions=16))
    assert [len(s.tokens) for s in report.samples] == [16] * 4 and report.heads
    tiny = core.AttnScopeTransformer(core.TransformerConfig(max_positions=3))
    report = diagnose(tiny)
    assert report.samples == [] and "takes 3 tokens" in report.finding("no_tokenizer").message


def test_bad_sources():
    with pytest.raises(core.InputError):
        diagnose(42)
    with pytest.raises(core.ModelLoadError):
        diagnose("/definitely/not/a/model/folder")


def test_markdown_shows_names_and_messages_as_text(report):
    """A folder or upload may be named like markup; the report's heading, table and findings keep it as text."""
    hostile = "x <img src=x onerror=alert(1)> [click](https://evil.example) | col"
    finding = replace(report.findings[0], message=f"sinks on '{hostile}'") if report.findings else None
    named = replace(report, model={**report.model, "name": hostile, "architecture": "**Bert**"},
                    findings=[finding] if finding else [])
    markdown = named.to_markdown()
    assert hostile not in markdown and not re.search(r"(?<!\\)<img", markdown) and "](https" not in markdown
    assert r"# AttnScope diagnosis: x \<img src=x onerror=alert\(1\)\> \[click\]\(https\://evil.example\) \| col" \
        in markdown  # "\:" also keeps GitHub from making the bare address a link
    assert r"| architecture | \*\*Bert\*\* (" in markdown


def test_markdown_and_html_list_every_head_of_a_finding_the_message_cuts_short(report):
    """The message names 12 heads, "… and 4 more": a reader of the Markdown or HTML could not find which (the JSON
    and the app list them all; stop-51 schema audit)."""
    from diagnostics.findings import Finding, head_names

    heads = [[layer, head] for layer in range(4) for head in range(4)]
    many = Finding("diffuse_heads", "error", heads, f"{head_names(heads)} are near uniform.", "Look.")
    few = Finding("sink_heads", "info", heads[:12], f"{head_names(heads[:12])} sink.", "Nothing.")
    shown = replace(report, findings=[many, few])
    every = ", ".join(f"L{layer}H{head}" for layer, head in heads)
    assert many.message.endswith("… and 4 more are near uniform.")
    assert f"*All 16 heads:* {every}" in shown.to_markdown() and f"<em>All 16 heads:</em> {every}" in shown.to_html()
    assert shown.to_markdown().count("*All ") == 1  # not for a finding whose message names every head


def test_a_diverged_checkpoint_gets_an_error_and_a_report_any_json_parser_reads():
    """One infinite query weight makes head 0's maps NaN, and every later layer's: the report says so in an error
    finding, and its JSON writes those heads' metrics as null (bare NaN, before, which JSON.parse rejects)."""
    import torch

    model = tiny_bert_model()
    with torch.no_grad():
        model.encoder.layer[0].attention.self.query.weight[0, 0] = float("inf")
    report = diagnose((model, wordpiece_tokenizer()), ["the quick brown fox jumps over the lazy dog"])
    broken = next(f for f in report.findings if f.code == "non_finite_attention")
    assert broken.severity == "error" and [0, 0] in broken.heads and [1, 3] in broken.heads
    data = json.loads(report.to_json(), parse_constant=lambda name: pytest.fail(f"bare {name} in the JSON"))
    assert "non_finite_attention" in [f["code"] for f in data["findings"]]
    assert any(h["metrics"]["entropy"] is None for h in data["heads"])


def test_heads_with_nan_attention_get_no_pattern_and_no_advice():
    """Their maps are NaN: they were labelled sparse ('Nothing to do', confidence nan%) and counted as sparse."""
    import torch

    model = tiny_bert_model()
    with torch.no_grad():
        model.encoder.layer[0].attention.self.query.weight[:8] = float("nan")  # head 0 of layer 0, then all of layer 1
    report = diagnose((model, wordpiece_tokenizer()), ["the quick brown fox jumps over the lazy dog"])
    nan_heads = [(h.layer, h.head) for h in report.heads if h.pattern is None]
    assert nan_heads == [tuple(h) for h in report.finding("non_finite_attention").heads]
    head = report.head(0, 0)
    assert head.confidence is None and head.offset is None and head.roles == [] and not head.borderline
    assert head.metrics["votes"] == {} and head.metrics["agreement"] is None
    # where argmax and the most common sink fall on NaN rows: "best_offset: -3", a sink token, as if measured
    assert head.metrics["best_offset"] is head.metrics["rest_best_offset"] is head.metrics["sink_token"] is None
    assert report.pattern_grid()[0][0] is None and report.head(0, 1).pattern in PATTERNS
    data = json.loads(report.to_json())
    assert sum(data["summary"]["patterns"]["self"].values()) == len(report.heads) - len(nan_heads)
    assert data["heads"][0]["pattern"] is None and data["heads"][0]["confidence"] is None
    assert "| L0 | no label |" in report.to_markdown()
    assert ">no label</td>" in report.to_html() and "title='no label: NaN or infinite attention'" in report.to_html()


def test_an_encoder_decoder_without_tokenizer_was_not_probed_and_says_so():
    """Its summaries said 'probes: random token ids' though nothing was probed; a tokenizer-less decoder is."""
    report = diagnose((tiny_bart(), None))
    assert report.parts == [] and report.finding("no_tokenizer")
    assert "| probes | none (weights only) |" in report.to_markdown()
    assert "<th>probes</th><td>none (weights only)</td>" in report.to_html()
    assert "| probes | random token ids |" in diagnose(tiny_gpt2()).to_markdown()


def test_an_encoder_decoder_probe_cut_to_the_limit_counts_once():
    """Its encoder and decoder each warn of the cut: '2 of 2 probes' when one of two was cut."""
    report = diagnose((tiny_bart(), wordpiece_tokenizer()), ["the cat sat", "the cat sat on the mat " * 30])
    assert report.finding("probe_truncated").message.startswith("Probe text truncated: 1 of 2 probes; ")


def test_every_note_that_opens_with_its_title_has_a_body_without_it():
    """"Weight checks were skipped: …" under the title "Weight checks skipped" said it twice."""
    from diagnostics.findings import note
    from diagnostics.texts import FINDING_TEXTS

    for code, text in FINDING_TEXTS.items():
        fields = dict.fromkeys(re.findall(r"{(\w+)", text.message), "x")
        assert note(code, **fields).body[:10].lower() != text.title[:10].lower(), code


def test_a_note_s_title_is_said_once_beside_its_message():
    """Reports read "### Information: Probe text truncated …" then "Probe text truncated: 1 of 2 probes"; the
    JSON keeps the whole message, which reads alone."""
    report = diagnose((tiny_bart(), wordpiece_tokenizer()), ["the cat sat", "the cat sat on the mat " * 30])
    note = report.finding("probe_truncated")
    assert note.message.startswith("Probe text truncated: ") and note.body.startswith("1 of 2 probes; ")
    assert report.to_markdown().count("Probe text truncated") == 1
    assert report.to_html().count("Probe text truncated") == 1
    assert any(f["message"] == note.message for f in report.to_dict()["findings"])


@pytest.mark.parametrize("bad, why", [("\u200b", "its text gives no tokens besides the tokenizer's own"),
                                      ("  ", "its text is empty")])
def test_a_probe_the_model_cannot_read_is_named(bad, why):
    """'the text gives no tokens …; type a sentence with words in it' (Inspect's words) did not say which probe."""
    with pytest.raises(core.InputError, match=f"^probe 3 of 3: {why}") as caught:
        diagnose((tiny_bert_model(), wordpiece_tokenizer()), ["the cat sat on the mat", "the dog ran", bad])
    assert "type a sentence" not in str(caught.value) and "\n" not in str(caught.value)


def test_a_one_token_probe_is_refused_not_labelled():
    """A decoder reads "a" as one token: its 1 x 1 maps were labelled sparse at 60 % confidence on every head."""
    from tiny import bpe_tokenizer, tiny_gpt2

    with pytest.raises(core.InputError, match="^probe 2 of 2: the model reads it as one token, and a one-token map"):
        diagnose((tiny_gpt2(), bpe_tokenizer()), ["the cat sat on the mat", "a"])


def test_a_healthy_model_has_no_non_finite_finding(report):
    assert "non_finite_attention" not in {f.code for f in report.findings}


def test_markdown_escapes_ampersands_and_shows_control_characters():
    """A name or token ``&amp;`` rendered as ``&``, and an ESC sequence from a path reached the report raw."""
    from diagnostics.reports.markdown_report import md

    assert md("&amp; & &#60;img&#62;") == r"&amp;amp; &amp; &amp;\#60;img&amp;\#62;"
    assert md("m\x1b[31m\x9b\x7f\x00") == r"m\\x1b\[31m\\x9b\\x7f\\x00"
    assert md("a\tb\nc") == "a b c"  # whitespace still folds to one line, not to escapes
    assert not re.search(r"[\x00-\x1f\x7f-\x9f]", md("".join(map(chr, range(0xa0)))))


def test_compare_markdown_escapes_ampersands_and_controls_in_names(report):
    from diagnostics.compare import CompareReport

    a = replace(report, model={**report.model, "name": "a&amp;\x1b]0;title\x07"})
    markdown = CompareReport(a, report, heads=[], appeared=[], disappeared=[], streamed=False).to_markdown()
    assert markdown.startswith(r"# AttnScope comparison: a&amp;amp;\\x1b\]0;title\\x07 → ")


def test_the_markdown_and_html_reports_say_the_probes_were_streamed(monkeypatch):
    """Only the JSON said so: the HTML report of a streamed diagnosis had no heatmaps and no word why."""
    import importlib

    monkeypatch.setattr(importlib.import_module("diagnostics.diagnose"), "STREAM_ABOVE_TOKENS", 4)
    report = diagnose((tiny_gpt2(), wordpiece_tokenizer()), ["the quick brown fox jumps over the lazy dog"])
    assert report.model["streamed"] is True
    assert "| probes | 1, streamed (no attention maps kept) |" in report.to_markdown()
    assert "<th>probes</th><td>1, streamed (no attention maps kept)</td>" in report.to_html()


def test_the_html_reports_write_control_characters_out():
    """A model named with terminal escapes (a folder name) reached the HTML's title and heading raw: printed to a
    terminal, ESC ] 0 ; … BEL set its title. Markdown and JSON wrote them out already."""
    from diagnostics.compare import compare

    report = diagnose((tiny_gpt2(), wordpiece_tokenizer()), ["the quick brown fox"])
    report.model["name"] = "evil\x1b]0;pwned\x07\x1b[31m"
    html = report.to_html()
    assert "\x1b" not in html and "\x07" not in html and "evil\\x1b]0;pwned\\x07\\x1b[31m" in html
    both = compare((tiny_gpt2(), wordpiece_tokenizer()), (tiny_gpt2(), wordpiece_tokenizer()), ["the quick brown fox"])
    both.a.model["name"] = report.model["name"]
    assert "\x1b" not in both.to_html()


def test_a_right_to_left_override_in_a_name_is_written_out(report):
    """A model uploaded as "base\u202egpj.zip" turned the rest of the comparison's title around in the Markdown and
    HTML reports ("A → B" read as another pair of names); the tokens' escapes did not cover names."""
    from app.names import display_name
    from diagnostics.compare import CompareReport

    name = display_name("/uploads/base\u202egpj.zip")
    assert name == "base\\u202egpj.zip"
    a = replace(report, model={**report.model, "name": "base\u202egpj.zip"})
    both = CompareReport(a, report, heads=[], appeared=[], disappeared=[], streamed=False)
    for markdown in (both.to_markdown(), a.to_markdown()):
        assert "\u202e" not in markdown and r"base\\u202egpj.zip" in markdown  # its backslash escaped
    for html in (both.to_html(), a.to_html()):
        assert "\u202e" not in html and r"base\u202egpj.zip" in html


def test_findings_are_counted_in_words():
    """The headings said "0 error, 1 warning"; the refusal of special-token-only text "(1 special tokens)"."""
    from types import SimpleNamespace

    from diagnostics.reports.markdown_report import severity_counts

    counts = {"error": 0, "warning": 1, "info": 2}
    assert severity_counts(SimpleNamespace(count=counts.get)) == "0 errors, 1 warning, 2 info"
    with pytest.raises(core.InputError, match=r"\(1 special token\); type a sentence"):
        core.extract_attention(tiny_bert_model(), wordpiece_with_cls_only(), "\u200b")  # BERT drops the U+200B


def wordpiece_with_cls_only():
    """The tiny WordPiece tokenizer adding one special token, [CLS], before every text (no [SEP])."""
    import copy

    from tokenizers.processors import TemplateProcessing

    tokenizer = copy.deepcopy(wordpiece_tokenizer())
    cls = tokenizer.cls_token
    tokenizer._tokenizer.post_processor = TemplateProcessing(single=f"{cls} $A", special_tokens=[
        (cls, tokenizer.cls_token_id)])
    return tokenizer
