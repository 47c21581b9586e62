"""The Compare and Timeline pages under AppTest: good input draws, bad input is one st.error, never an exception."""

import json
from pathlib import Path

import pytest
import torch
from streamlit.testing.v1 import AppTest

from app_runner import started_app
from core.errors import size_text

LOGS = Path(__file__).resolve().parents[2] / "docs" / "training"
TIMEOUT = 180  # two models load on the Compare page


def _page(name: str) -> AppTest:
    at = started_app(TIMEOUT)
    at.switch_page(f"app_pages/{name}.py").run()
    return at


def _errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def _built_in(at: AppTest, side: str, name: str) -> None:
    at.radio(key=f"cmp_{side}_kind").set_value("Known model").run()
    at.selectbox(key=f"cmp_{side}_known").set_value(name).run()


def _demo_bert_with_itself(probes: str) -> AppTest:
    """The Compare page after comparing demo-bert with itself on ``probes`` (a blank line between two), checked free
    of errors."""
    at = _page("compare")
    _built_in(at, "a", "demo-bert")
    _built_in(at, "b", "demo-bert")
    at.text_area(key="cmp_probes").set_value(probes)
    at = at.button(key="cmp_run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    return at


def test_compare_demo_model_with_itself_draws_the_grid_and_three_maps():
    at = _demo_bert_with_itself("The cat sat on the mat.")
    assert at.metric[0].value == "0 / 16"  # heads changed
    notes = [i.value.replace("\\", "") for i in at.info]  # why any finding is capped at info: a short probe
    assert any(n.startswith("Probes (A and B): ") and "64 tokens" in n for n in notes), notes
    assert len(at.get("plotly_chart")) == 4  # distance grid + A, B, B − A
    # one per tab at the page's width (three columns drew a 190-token map 64 px wide), each hover naming its value
    assert [t.label for t in at.tabs] == ["A", "B", "B − A"]
    hovers = [json.loads(c.proto.spec)["data"][0]["hovertemplate"] for c in at.get("plotly_chart")[1:]]
    assert [h.split("<br>")[-1].split(" %")[0] for h in hovers] == ["A", "B", "B − A"]
    assert all(len(c.proto.alt) > 20 for c in at.get("plotly_chart"))  # named for screen readers
    at.selectbox(key="cmp_probe").set_value(0)
    at.selectbox(key="cmp_layer").set_value(3)  # a head picked without a mouse: the grid's points took one
    at.selectbox(key="cmp_head").set_value(2)
    at.run()
    assert not at.exception and at.subheader[-1].value == "Layer 3, head 2"
    assert {b.label for b in at.download_button} == {"Comparison (JSON)", "Comparison (Markdown)", "Comparison (HTML)"}
    stale = "This result is of the checkpoint chosen before"
    assert not any(stale in i.value for i in at.info)
    _built_in(at, "b", "demo-gpt2")  # model B changed: the comparison shown is of the one before
    assert any(stale in i.value for i in at.info)


def test_compare_keeps_only_the_maps_its_budget_allows(monkeypatch):
    """Compare held both models' maps of every probe in its session, outside every budget (6 MiniLM probes of ~500
    tokens: 867 MB): the same probes' maps of both are kept within it, and the distances still cover every one."""
    monkeypatch.setenv("ATTNSCOPE_REPORT_MAPS_BYTES", "1")
    at = _demo_bert_with_itself("The cat sat on the mat.\n\nA dog barked at the moon.")
    report = at.session_state["comparison"]
    assert report.a.samples == [] and report.b.samples == [] and len(report.a.probes) == 2
    infos = [i.value for i in at.info]
    assert any("maps of 2 of the 2 probes are not kept" in i for i in infos), infos
    assert any("larger than this server keeps for one page" in i for i in infos), infos
    assert at.metric[0].value == "0 / 16"  # the distances were measured on both probes


def test_compare_folder_against_upload(bert_folder, bert_zip, monkeypatch):
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(bert_folder.parent))
    at = _page("compare")
    at.radio(key="cmp_a_kind").set_value("Local folder").run()
    at.text_input(key="cmp_a_path").set_value(str(bert_folder))
    at.file_uploader(key="cmp_b_upload_0").upload("tiny-bert.zip", bert_zip).run()
    at = at.button(key="cmp_run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    assert at.metric[0].value == "0 / 8"


def test_a_model_that_fails_to_load_is_named_by_its_side(bert_zip):
    """A broken upload gave the same message on side A as on side B: nothing said which one to fix."""
    for side in ("a", "b"):
        at = _page("compare")
        _built_in(at, "b" if side == "a" else "a", "demo-bert")
        at.radio(key=f"cmp_{side}_kind").set_value("Upload").run()
        at.file_uploader(key=f"cmp_{side}_upload_0").upload("broken.safetensors", b"garbage").run()
        at = at.button(key="cmp_run").click().run()
        assert not at.exception
        errors = _errors(at)
        assert len(errors) == 1 and errors[0].startswith(f"Model {side.upper()} \\(broken.safetensors\\): "), errors


def test_compare_two_bare_weights_files_with_the_heads_field(monkeypatch, tmp_path):
    """The loader's message asked for 'the Heads field', which the Compare page lacked."""
    from safetensors.torch import save_file
    from tiny import tiny_bert

    weights = tmp_path / "bert.safetensors"
    save_file({k: v.contiguous() for k, v in tiny_bert().state_dict().items()}, str(weights))
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    at = _page("compare")
    for side in "ab":
        at.radio(key=f"cmp_{side}_kind").set_value("Local folder").run()
        at.text_input(key=f"cmp_{side}_path").set_value(str(weights))
    at.text_area(key="cmp_probes").set_value("the cat sat on the mat")
    at.number_input(key="cmp_heads").set_value(4)
    at = at.button(key="cmp_run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    assert at.metric[0].value == "0 / 8"
    notes = [i.value for i in at.info]  # the loader's notes, as Diagnose shows them (Compare dropped them)
    assert any(n.startswith("A: ") and "no tokenizer" in n for n in notes), notes
    assert any(n.startswith("B: ") for n in notes) and len(notes) % 2 == 0


def _compare_tiny_bert_with(damage, monkeypatch, tmp_path) -> AppTest:
    """The Compare page after comparing a tiny BERT (A) with a copy whose state dict ``damage`` edited in place (B),
    both bare safetensors files, checked free of errors."""
    from safetensors.torch import save_file
    from tiny import tiny_bert

    state = {k: v.contiguous() for k, v in tiny_bert().state_dict().items()}
    save_file(state, str(tmp_path / "a.safetensors"))
    damage(state)
    save_file(state, str(tmp_path / "b.safetensors"))
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    at = _page("compare")
    for side in "ab":
        at.radio(key=f"cmp_{side}_kind").set_value("Local folder").run()
        at.text_input(key=f"cmp_{side}_path").set_value(str(tmp_path / f"{side}.safetensors"))
    at.text_area(key="cmp_probes").set_value("the quick brown fox jumps over the lazy dog")
    at.number_input(key="cmp_heads").set_value(4)
    at = at.button(key="cmp_run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    return at


def test_compare_says_where_the_changes_begin(monkeypatch, tmp_path):
    """The page gave "36 / 72" heads changed for one damaged layer and its knock-on effects, and no more."""
    def layer_1_q_k_times_30(state):
        for name in ("query.weight", "key.weight"):
            state[f"encoder.layer.1.attention.self.{name}"] *= 30.0

    at = _compare_tiny_bert_with(layer_1_q_k_times_30, monkeypatch, tmp_path)
    assert at.metric[0].value == "4 / 8"
    first = "The first layer whose heads changed is 1. The change is there"
    assert any(m.value.startswith(first) for m in at.markdown)


def test_a_head_whose_map_is_not_finite_reads_n_a_in_the_table(monkeypatch, tmp_path):
    """The reports write "n/a" for a head with no finite distance; the page's table showed an empty cell (or "None")."""
    def one_nan_query_weight(state):  # head 0 of layer 1, and every head after it
        state["encoder.layer.1.attention.self.query.weight"][0, 0] = float("nan")

    at = _compare_tiny_bert_with(one_nan_query_weight, monkeypatch, tmp_path)
    table = at.dataframe[0]
    assert table.value["distance"].isna().any() and table.proto.placeholder == "n/a"
    at.selectbox(key="cmp_layer").set_value(1)  # its B and B − A maps were blank, with no word why
    at.selectbox(key="cmp_head").set_value(0)
    at.run()
    assert len(at.get("plotly_chart")) == 2  # the grid and A's map
    said = [i.value for i in at.info if "NaN or infinite" in i.value]
    assert [s.split(":")[0] for s in said] == ["No map of B", "No map of B − A"], said


def test_compare_refuses_more_probe_text_than_the_server_runs():
    from app.server.sources import MAX_PROBES

    at = _page("compare")
    _built_in(at, "a", "demo-bert")
    _built_in(at, "b", "demo-bert")
    at.text_area(key="cmp_probes").set_value("\n\n".join(["the cat sat on the mat"] * (MAX_PROBES + 1)))
    at = at.button(key="cmp_run").click().run()
    assert not at.exception and "comparison" not in at.session_state
    assert [e for e in _errors(at) if e.startswith(f"Not run: {MAX_PROBES + 1} probe texts")], _errors(at)


def test_compare_different_vocabularies_is_one_error():
    at = _page("compare")
    _built_in(at, "a", "demo-bert")
    _built_in(at, "b", "demo-gpt2")
    at = at.button(key="cmp_run").click().run()
    assert not at.exception
    errors = _errors(at)
    assert len(errors) == 1 and ("vocabular" in errors[0] or "tokenizers differ" in errors[0]), errors
    assert not at.get("plotly_chart")


def _timeline_of(uploads) -> AppTest:
    """The Timeline page after loading ``uploads`` (``(file name, bytes)`` pairs), checked free of errors."""
    at = _page("timeline")
    uploader = at.file_uploader(key="tl_upload_0")
    for name, data in uploads:
        uploader.upload(name, data)
    at = uploader.run().button(key="tl_run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    return at


def _timeline_of_folder(folder, monkeypatch) -> AppTest:
    """The Timeline page after diagnosing the Trainer checkpoints in ``folder``, checked free of errors."""
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(folder))
    at = _page("timeline")
    at.radio(key="tl_kind").set_value("Checkpoints folder").run()
    at.text_input(key="tl_folder").set_value(str(folder))
    at = at.button(key="tl_run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    return at


def _bart_log(tmp_path, tokenizer) -> bytes:
    """Two steps of a monitor log of a tiny BART (``tokenizer`` None: its weights only)."""
    from diagnostics.monitor import AttentionMonitor
    from tiny import tiny_bart

    log = tmp_path / "bart.jsonl"
    monitor = AttentionMonitor(tokenizer, probes=["the quick brown fox jumps over the lazy dog"], every=1, log_path=log)
    for step in (0, 10):
        monitor.on_step(tiny_bart(), step)
    return log.read_bytes()


def test_timeline_refuses_a_log_over_the_cap_by_its_size_and_drops_the_uploads(monkeypatch):
    """Streamlit held every uploaded log in memory for the session, the refused ones too (2 x 300 MB: +0.6 GB), and
    the page copied each on every rerun; a log over the cap is now refused by its size, and Load empties the
    uploader."""
    from diagnostics import timeline

    monkeypatch.setattr(timeline, "MAX_LOG_BYTES", 1000)
    healthy = (LOGS / "healthy.jsonl").read_bytes()
    small = healthy.splitlines()[0][:900] + b"\n"
    at = _page("timeline")
    uploader = at.file_uploader(key="tl_upload_0")
    uploader.upload("big.jsonl", healthy).upload("small.jsonl", small)
    at = uploader.run().button(key="tl_run").click().run()
    assert not at.exception
    assert [e.value for e in at.error][0].startswith("big.jsonl: the log is over 1 kB"), _errors(at)  # was "0 MB"
    assert at.session_state["tl_upload_round"] == 1  # the page is drawn again at once, with a fresh, empty uploader
    assert [u.key for u in at.get("file_uploader")] == ["tl_upload_1"] and at.session_state["timelines"] == {}


def test_the_timeline_upload_box_refuses_a_log_over_the_cap_before_it_is_sent():
    """The box said "2GB per file": a 257 MiB log was sent whole, then refused for being over 256 MiB. The cap is
    256 MB, as docs/app.md says (it was 256 MiB, which the page said as "268 MB")."""
    at = _page("timeline")
    [box] = at.get("file_uploader")
    assert box.proto.max_upload_size_mb == 256  # the box's MB of 10**6 bytes
    assert "Limits: 256 MB per log, 256 MB of logs together." in [c.value for c in at.caption]


def test_timeline_holds_only_the_uploaded_logs_load_would_read(monkeypatch):
    """The page held every uploaded log until Load or Clear, with no bound: 3 logs of 300 MB, each over the cap
    Load refuses by, took 0.9 GB of the server's memory for as long as the tab stayed (stop-51 growth audit).
    Those past the cap are refused as they arrive, and Streamlit's copies of them dropped."""
    from app.server import uploads
    from diagnostics import timeline

    healthy = (LOGS / "healthy.jsonl").read_bytes()
    monkeypatch.setattr(timeline, "MAX_LOG_BYTES", len(healthy) + 10)
    released, release = [], uploads.release
    monkeypatch.setattr(uploads, "release", lambda files: released.extend(f.name for f in files) or release(files))
    at = _page("timeline")
    uploader = at.file_uploader(key="tl_upload_0")
    for name, data in (("big.jsonl", healthy * 2), ("a.jsonl", healthy), ("b.jsonl", healthy),
                       ("big2.jsonl", healthy * 2)):  # over alone, after one held: not "load fewer at a time"
        uploader.upload(name, data)
    at = uploader.run()
    assert not at.exception and [name for name, _ in at.session_state["tl_uploaded"]] == ["a.jsonl"]
    assert released == ["big.jsonl", "b.jsonl", "big2.jsonl"]
    cap = size_text(timeline.MAX_LOG_BYTES)
    assert [e.replace("\\", "") for e in _errors(at)] == [
        f"big.jsonl: the log is over {cap}; log less often (every=...)",
        f"b.jsonl: not loaded: with the logs above it, over {cap} of logs in all; load fewer at a time",
        f"big2.jsonl: the log is over {cap}; log less often (every=...)"]
    at = at.button(key="tl_run").click().run()  # Load reads the one held, and still names the three refused
    assert [h.value for h in at.subheader] == ["a.jsonl"] and len(_errors(at)) == 3


def test_a_refused_log_and_a_loaded_log_of_one_name_stay_apart(monkeypatch):
    """Two attention.jsonl, the first over the cap: it was refused as "attention.jsonl" and the second loaded under
    the same name (it had been "attention.jsonl (2)"; stop-51 review)."""
    from diagnostics import timeline

    healthy = (LOGS / "healthy.jsonl").read_bytes()
    monkeypatch.setattr(timeline, "MAX_LOG_BYTES", len(healthy) + 10)
    at = _page("timeline")
    uploader = at.file_uploader(key="tl_upload_0")
    uploader.upload("attention.jsonl", healthy * 2).upload("attention.jsonl", healthy)
    at = uploader.run()
    assert any(t.value.startswith("Uploaded: attention.jsonl (2) ") for t in at.text)
    at = at.button(key="tl_run").click().run()
    assert [h.value.replace("\\", "") for h in at.subheader] == ["attention.jsonl (2)"]
    assert _errors(at)[0].startswith(f"attention.jsonl: the log is over {size_text(timeline.MAX_LOG_BYTES)}")


def test_timeline_uploads_outlive_a_visit_to_another_page_until_load_or_clear():
    """Diagnose and Compare keep an upload across pages; the Timeline's uploader emptied on a visit to another page
    before Load, with no word."""
    healthy = (LOGS / "healthy.jsonl").read_bytes()
    at = _page("timeline")
    at.file_uploader(key="tl_upload_0").upload("run-a.jsonl", healthy).run()
    assert [t.value for t in at.text if t.value.startswith("Uploaded")] == [
        f"Uploaded: run-a.jsonl ({size_text(len(healthy))})"]
    at.switch_page("app_pages/guide.py").run()
    at.switch_page("app_pages/timeline.py").run()
    at = at.button(key="tl_run").click().run()
    assert not at.exception and [h.value for h in at.subheader] == ["run-a.jsonl"], _errors(at)
    assert "tl_uploaded" not in at.session_state and not any(t.value.startswith("Uploaded") for t in at.text)
    at.file_uploader(key="tl_upload_1").upload("run-b.jsonl", healthy).run()
    at.button(key="tl_clear").click().run()
    assert "tl_uploaded" not in at.session_state and not any(t.value.startswith("Uploaded") for t in at.text)


def test_timeline_keeps_at_most_the_cap_of_logs_in_all(monkeypatch, tmp_path):
    """Each log was capped, but not how many: the session held ~4.6 × their size (3 × 64 MB: 0.9 GB) until it
    ended. Uploads and paths alike keep the logs that fit, in order, and name the others."""
    import shutil

    from diagnostics import timeline

    healthy = (LOGS / "healthy.jsonl").read_bytes()
    monkeypatch.setattr(timeline, "MAX_LOG_BYTES", 2 * len(healthy) + 10)
    small = b"\n".join(healthy.splitlines()[:2]) + b"\n"
    read, parse = [], timeline.parse_log
    monkeypatch.setattr(timeline, "parse_log", lambda data: read.append(len(data)) or parse(data))
    at = _page("timeline")
    uploader = at.file_uploader(key="tl_upload_0")
    for name, data in (("a.jsonl", healthy), ("b.jsonl", healthy), ("c.jsonl", healthy), ("d.jsonl", small)):
        uploader.upload(name, data)
    at = uploader.run().button(key="tl_run").click().run()
    assert not at.exception and [h.value for h in at.subheader] == ["a.jsonl", "b.jsonl"]
    cap = size_text(timeline.MAX_LOG_BYTES)
    assert _errors(at) == [f"c.jsonl: not loaded: with the logs above it, over {cap} of logs in all; load fewer at a "
                           f"time", f"d.jsonl: not loaded: with the logs above it, over {cap} of logs in all; load "
                           "fewer at a time"]
    assert read == [len(healthy)] * 2  # the logs past the cap are refused before they are read
    for name in ("a", "b", "c"):
        shutil.copy(LOGS / "healthy.jsonl", tmp_path / f"{name}.jsonl")
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    at = _page("timeline")
    at.radio(key="tl_kind").set_value("Monitor log paths").run()
    at.text_area(key="tl_paths").set_value("\n".join(f"{tmp_path}/{name}.jsonl" for name in "abc"))
    at = at.button(key="tl_run").click().run()
    assert [h.value for h in at.subheader] == ["a.jsonl", "b.jsonl"] and len(_errors(at)) == 1


def test_timeline_reads_a_log_path_under_the_home_folder(monkeypatch, tmp_path):
    """~/a.jsonl was read, then its size taken from the path as typed: FileNotFoundError, and no run shown."""
    import shutil

    for name in ("a", "b"):
        shutil.copy(LOGS / "healthy.jsonl", tmp_path / f"{name}.jsonl")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    at = _page("timeline")
    at.radio(key="tl_kind").set_value("Monitor log paths").run()
    at.text_area(key="tl_paths").set_value(f"~/a.jsonl\n{tmp_path}/b.jsonl")
    at = at.button(key="tl_run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    assert [h.value for h in at.subheader] == ["a.jsonl", "b.jsonl"]


def test_timeline_shows_two_committed_logs_side_by_side():
    at = _timeline_of([(name, (LOGS / name).read_bytes()) for name in ("healthy.jsonl", "qk_x10.jsonl")])
    assert len(at.get("plotly_chart")) == 4  # per run: the heads × steps heatmap and the layer's lines
    assert all(len(c.proto.alt) > 20 for c in at.get("plotly_chart"))  # named for screen readers
    assert len(at.dataframe) >= 2
    at.radio(key="tl_metric").set_value("sink_score").run()
    at.selectbox(key="tl_layer").set_value(1).run()
    assert not at.exception and not _errors(at)


def test_timeline_widgets_reuse_what_a_load_computed(monkeypatch):
    """Every widget change computed each run's metric grid, findings and pattern changes again: 2 s a rerun on a
    250 MB log, where a layer switch redraws one line chart."""
    from diagnostics import timeline

    calls = []
    for name in ("metric", "first_findings", "pattern_changes"):
        real = getattr(timeline.Timeline, name)
        monkeypatch.setattr(timeline.Timeline, name, lambda self, *a, _real=real, _name=name, **k:
                            calls.append(_name) or _real(self, *a, **k))
    at = _timeline_of([(name, (LOGS / name).read_bytes()) for name in ("healthy.jsonl", "qk_x10.jsonl")])
    assert sorted(calls) == sorted(["metric", "first_findings", "pattern_changes"] * 2)
    calls.clear()
    at.selectbox(key="tl_layer").set_value(1).run()
    assert calls == [] and len(at.get("plotly_chart")) == 4
    at.radio(key="tl_metric").set_value("sink_score").run()
    assert calls == ["metric", "metric"]  # the new metric's grid, once per run
    at.radio(key="tl_metric").set_value("entropy").run()
    assert calls == ["metric", "metric"] and not at.exception and not _errors(at)


def test_timeline_keeps_two_uploads_of_the_same_name_apart():
    """Two runs' attention.jsonl (docs/training.md logs to runs/<name>/attention.jsonl): one run was dropped."""
    at = _timeline_of([("attention.jsonl", (LOGS / name).read_bytes()) for name in ("healthy.jsonl", "qk_x10.jsonl")])
    assert [h.value for h in at.subheader] == ["attention.jsonl", r"attention.jsonl \(2\)"]  # markdown-escaped
    assert len(at.get("plotly_chart")) == 4


def test_timeline_of_an_encoder_decoder_picks_its_part(tmp_path):
    from tiny import wordpiece_tokenizer

    at = _timeline_of([("bart.jsonl", _bart_log(tmp_path, wordpiece_tokenizer()))])
    assert at.radio(key="tl_part").options == ["encoder", "decoder", "cross"]
    at.radio(key="tl_part").set_value("cross").run()
    assert not at.exception and not _errors(at) and len(at.get("plotly_chart")) == 2
    assert at.selectbox(key="tl_layer").options == ["0", "1"]  # the cross part's 2 layers


def test_timeline_part_names_from_a_log_are_plain_text():
    """A part named as a markdown link in one of two logs: the Part picker and the "no … heads" note drew the link."""
    import json

    from app.plain import for_markdown

    evil = "[click me](http://127.0.0.1:9/phish) **bold** :red[red]"
    records = [json.loads(line) for line in (LOGS / "qk_x10.jsonl").read_text().splitlines()[:2]]
    for record in records:
        record["model"]["parts"] = {evil: record["model"]["parts"].pop("self")}
        for head in record["heads"]:
            head["part"] = evil
    at = _timeline_of([("healthy.jsonl", (LOGS / "healthy.jsonl").read_bytes()),
                       ("evil.jsonl", "\n".join(json.dumps(r) for r in records).encode())])
    assert at.radio(key="tl_part").options == ["self", for_markdown(evil)]
    at.radio(key="tl_part").set_value(evil).run()
    assert [i.value for i in at.info] == [f"This run has no {for_markdown(evil)} heads."]


def test_timeline_of_a_weights_only_log_shows_its_findings(tmp_path):
    at = _timeline_of([("bart.jsonl", _bart_log(tmp_path, None))])
    assert any("measured no heads" in i.value for i in at.info) and not at.get("plotly_chart")


def test_timeline_path_outside_the_roots_is_one_error(monkeypatch, tmp_path):
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    at = _page("timeline")
    at.radio(key="tl_kind").set_value("Monitor log paths").run()
    at.text_area(key="tl_paths").set_value(str(LOGS / "healthy.jsonl"))
    at = at.button(key="tl_run").click().run()
    assert not at.exception
    assert len(_errors(at)) == 1 and "outside the folders" in _errors(at)[0]


def test_a_large_file_outside_the_roots_is_told_as_outside_not_by_its_size(monkeypatch, tmp_path):
    """The in-all cap measured a path before the roots were checked: a large file outside them was "not loaded:
    over 256 MB of logs in all" where a missing one was "outside …, or does not exist there"."""
    import shutil

    from diagnostics import timeline

    inside, outside = tmp_path / "inside", tmp_path / "outside"
    inside.mkdir(), outside.mkdir()
    shutil.copy(LOGS / "healthy.jsonl", inside / "a.jsonl")
    (outside / "big.jsonl").write_bytes(b"x" * 200)
    monkeypatch.setattr(timeline, "MAX_LOG_BYTES", (inside / "a.jsonl").stat().st_size + 100)
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(inside))
    at = _page("timeline")
    at.radio(key="tl_kind").set_value("Monitor log paths").run()
    for listed in ("big.jsonl", "missing.jsonl"):
        at.text_area(key="tl_paths").set_value(f"{inside}/a.jsonl\n{outside}/{listed}")
        at = at.button(key="tl_run").click().run()
        assert not at.exception and len(_errors(at)) == 1 and "outside the folders" in _errors(at)[0], _errors(at)


def test_timeline_diagnoses_a_folder_of_trainer_checkpoints(bert_folder, monkeypatch, tmp_path):
    import shutil

    for step in (10, 20):
        shutil.copytree(bert_folder, tmp_path / f"checkpoint-{step}")
    at = _timeline_of_folder(tmp_path, monkeypatch)
    assert len(at.get("plotly_chart")) == 2  # one run: heatmap + lines


def test_timeline_run_names_and_notes_are_plain_text(bert_folder, monkeypatch, tmp_path):
    """A log's file name and a skipped checkpoint's file name (quoted in a note) drew an icon, LaTeX and a link."""
    import shutil

    from app.plain import for_markdown

    name = ":material/warning: $x^2$ :skull:.jsonl"
    at = _timeline_of([(name, (LOGS / "healthy.jsonl").read_bytes())])
    assert [h.value for h in at.subheader] == [for_markdown(name)]

    evil = "[click me](https:evil.example) **bold** :red[x].safetensors"
    shutil.copytree(bert_folder, tmp_path / "checkpoint-10")
    (tmp_path / "checkpoint-20").mkdir()
    (tmp_path / "checkpoint-20" / evil).write_bytes(b"not safetensors")
    at = _timeline_of_folder(tmp_path, monkeypatch)
    notes = [i.value for i in at.info if "checkpoint-20" in i.value]
    assert len(notes) == 1 and for_markdown(evil) in notes[0], notes


def test_timeline_one_unreadable_log_is_named_and_the_others_still_show(monkeypatch, tmp_path):
    """An empty log among three showed nothing, with "the log holds no measurement yet" and no file name; a log
    whose grid was damaged was refused only when drawn, unnamed, and the runs after it were not drawn."""
    healthy = (LOGS / "healthy.jsonl").read_bytes()
    at = _page("timeline")
    uploader = at.file_uploader(key="tl_upload_0")
    damaged = json.loads(healthy.splitlines()[0])  # parses, but its heads fill 9 of 512 × 1024 cells
    damaged["model"]["parts"]["self"] = {"layers": 512, "heads": 1024}
    damaged["heads"].append(dict(damaged["heads"][0], layer=511, head=1023))
    for name, data in (("run-a.jsonl", healthy), ("run-b.jsonl", b""), ("run-c.jsonl", healthy[:50]),
                       ("run-d.jsonl", json.dumps(damaged).encode()), ("run-e.jsonl", healthy)):
        uploader.upload(name, data)
    at = uploader.run().button(key="tl_run").click().run()
    assert not at.exception and [h.value for h in at.subheader] == [r"run-a.jsonl", r"run-e.jsonl"]
    assert [e.value.split(":")[0] for e in at.error] == ["run-b.jsonl", "run-c.jsonl", "run-d.jsonl"], _errors(at)
    at.radio(key="tl_metric").set_value("sink_score").run()  # the problems stay in view with the runs
    assert len(at.error) == 3 and len(at.get("plotly_chart")) == 4


def test_timeline_a_run_that_cannot_be_drawn_is_one_line_and_the_others_still_show(monkeypatch):
    """A log with a lone surrogate ("\\ud800") in a finding's message stopped the page at that run: a
    UnicodeEncodeError, and the runs after it not drawn (timeline audit, stop 59). The log is now refused when read;
    a run that fails when drawn no longer takes the others with it."""
    from app.views import compare_plots

    healthy = (LOGS / "healthy.jsonl").read_bytes()
    at = _page("timeline")
    uploader = at.file_uploader(key="tl_upload_0")
    uploader.upload("bad.jsonl", healthy.replace(b'"message": "', b'"message": "\\ud800 ', 1))
    uploader.upload("good.jsonl", healthy)
    at = uploader.run().button(key="tl_run").click().run()
    assert not at.exception and [h.value for h in at.subheader] == ["good.jsonl"], _errors(at)
    from app.plain import for_markdown

    assert _errors(at) == [for_markdown("bad.jsonl: line 1 of the log holds an unpaired surrogate escape "
                                        "(\\ud800-\\udfff), text that no UTF-8 file holds; the file is damaged")]
    drawn, heatmap = [], compare_plots.steps_heatmap_figure

    def first_fails(*args, **kwargs):
        drawn.append(1)
        if len(drawn) == 1:
            raise ValueError("cannot draw this one")
        return heatmap(*args, **kwargs)

    monkeypatch.setattr(compare_plots, "steps_heatmap_figure", first_fails)
    at = _page("timeline")
    uploader = at.file_uploader(key="tl_upload_0")
    uploader.upload("one.jsonl", healthy)
    uploader.upload("two.jsonl", healthy)
    at = uploader.run().button(key="tl_run").click().run()
    assert not at.exception and [h.value for h in at.subheader] == ["one.jsonl", "two.jsonl"]
    assert len(at.error) == 1 and "cannot draw this one" in at.error[0].value
    assert len(at.get("plotly_chart")) == 2  # two's heatmap and lines


def test_timeline_paths_missing_or_listed_twice(monkeypatch, tmp_path):
    """A missing log was told to give "a model folder, an archive or a weights file"; a path listed twice showed
    the server path as the run's name."""
    import shutil

    shutil.copy(LOGS / "healthy.jsonl", tmp_path / "attention.jsonl")
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    at = _page("timeline")
    at.radio(key="tl_kind").set_value("Monitor log paths").run()
    at.text_area(key="tl_paths").set_value(f"{tmp_path}/attention.jsonl\n{tmp_path}/attention.jsonl\n"
                                           f"{tmp_path}/nope.jsonl")
    at = at.button(key="tl_run").click().run()
    assert not at.exception and [h.value for h in at.subheader] == ["attention.jsonl"]
    from app.plain import for_markdown

    assert _errors(at) == [for_markdown(f"nope.jsonl: {tmp_path}/nope.jsonl does not exist; give the path of the "
                                        ".jsonl written by AttentionMonitor")]


def test_a_difference_map_keeps_each_blocks_largest_change_and_escapes_tokens():
    from app.views import compare_plots
    from app.views.plots import MAX_CELLS

    n = 2 * MAX_CELLS  # pooled in blocks of 2
    change = torch.zeros(n, n)  # (q, k)
    change[0, 0], change[1, 1] = -0.4, 0.1
    tokens = ["<b>x</b>"] + ["t"] * (n - 1)
    heat = compare_plots.map_figure(change, tokens, tokens, "B − A", difference=True).data[0]
    assert heat.z[0][0] == pytest.approx(-0.4) and heat.zmin == pytest.approx(-0.4)
    assert heat.x[0] == heat.y[0] == "0–1 &lt;b&gt;x&lt;/b&gt;…"


def test_timeline_lines_share_one_named_axis_from_0_to_1():
    """Runs side by side had axes of 0.85-1 and 0-2, unnamed: a flat line at 1.0 was drawn mid-axis."""
    import numpy as np

    from app.views import compare_plots

    values = np.full((3, 2, 4), 1.0, dtype=np.float32)  # (steps, layers, heads)
    fig = compare_plots.steps_lines_figure(values, [0, 10, 20], 1, "Layer 1", "Entropy <0-1>")
    assert tuple(fig.layout.yaxis.range) == (-0.02, 1.02) and fig.layout.yaxis.title.text == "Entropy &lt;0-1&gt;"


def test_negative_sink_scores_of_learned_sinks_stay_on_the_axis():
    """A model with learned sinks (GPT-OSS) has rows that sum to less than 1, and sink scores below 0."""
    import numpy as np

    from app.views import compare_plots

    values = np.full((2, 1, 2), -0.027, dtype=np.float32)  # (steps, layers, heads)
    fig = compare_plots.steps_lines_figure(values, [0, 10], 0, "Layer 0", "Sink score")
    assert fig.layout.yaxis.range[0] < -0.027 and fig.layout.yaxis.range[1] == 1.02
    damaged = np.array([[[0.2, -1e30]], [[0.3, 0.1]]], dtype=np.float32)  # a hand-edited log's -1e30
    assert compare_plots.steps_lines_figure(damaged, [0, 10], 0, "Layer 0", "Sink score").layout.yaxis.range[0] == (
        pytest.approx(-1.02))  # the other heads stay readable: no excess mass is below -1
