"""``diagnostics.timeline``: monitor logs and Trainer checkpoint folders as metrics over steps, changes, findings."""

import json
import re
import time

import numpy as np
import pytest
import torch

from core.errors import AttnScopeError, InputError
from diagnostics import diagnose
from diagnostics.monitor import AttentionMonitor, record_of
from diagnostics.timeline import MAX_CELLS, Timeline, checkpoint_folders, from_checkpoints, parse_log, read_log
from tiny import bpe_tokenizer, tiny_bert, tiny_gpt2, wordpiece_tokenizer

PROBES = ["The quick brown fox jumps over the lazy dog. Attention is all you need, said the paper. The dog slept in "
          "the sun while the fox ran off into the woods."]  # 99 tokens: long enough to judge (MIN_JUDGED_TOKENS)


@pytest.fixture(scope="module")
def log_text(tmp_path_factory):
    """A monitor log of 4 steps of a tiny GPT-2 whose Q/K are scaled × 100 at step 2."""
    path = tmp_path_factory.mktemp("log") / "attention.jsonl"
    model = tiny_gpt2()
    monitor = AttentionMonitor(tokenizer=bpe_tokenizer(), probes=PROBES, every=1, log_path=path)
    for step in range(4):
        if step == 2:
            with torch.no_grad():
                for block in model.h:
                    block.attn.c_attn.weight[:, :64] *= 100.0
        monitor.on_step(model, step * 10)
    return path.read_text()


def test_log_gives_metrics_over_steps_pattern_changes_and_first_findings(log_text):
    timeline = parse_log(log_text)
    assert timeline.steps == [0, 10, 20, 30] and timeline.shape() == (2, 4)
    entropy = timeline.metric("entropy")
    assert entropy.shape == (4, 2, 4)
    assert (entropy[:2] > 0.9).all() and (entropy[2:] < 0.1).all()
    assert timeline.metric("sink_score").shape == (4, 2, 4)
    changes = timeline.pattern_changes()
    assert changes and {c["step"] for c in changes} == {20}
    first = {f["code"]: f for f in timeline.first_findings()}
    assert first["saturated_heads"]["first_step"] == 20 and first["saturated_heads"]["first_error_step"] == 20
    assert first["diffuse_heads"]["first_step"] == 0 and first["diffuse_heads"]["last_step"] == 10


def test_a_finding_that_spreads_names_the_step_and_the_heads_it_reached(log_text):
    """The findings table kept the first step's message: two heads that died later were named nowhere."""
    first, *_ = (json.loads(line) for line in log_text.splitlines())
    records = []
    for step, dead, sinks in ((1, [[1, 1]], [[0, 0]]), (2, [[1, 1], [1, 3]], [[0, 1]]), (5, [[1, 3]], []),
                              (9, [[0, 2], [1, 1], [1, 3]], [[0, 0]])):
        findings = [{"code": "dead_heads", "severity": "info", "part": "self", "heads": dead, "message": "m"},
                    {"code": "sink_heads", "severity": "info", "part": "self", "heads": sinks, "message": "m"}]
        records.append(json.dumps({**first, "step": step, "findings": findings}))
    timeline = parse_log("\n".join(records))
    rows = {f["code"]: f for f in timeline.first_findings()}
    assert rows["dead_heads"]["new_heads"] == "step 2: L1H3; step 9: L0H2"
    assert rows["sink_heads"]["new_heads"] == ""  # which heads sink moves with any training step
    twice = [{"code": "dead_heads", "severity": "info", "part": "self", "heads": heads, "message": "m"}
             for heads in ([[0, 0]], [[1, 1]])]  # one code twice in one record: both are its first heads
    once = parse_log(json.dumps({**first, "findings": twice}) + "\n" + json.dumps({**first, "step": 7,
                                                                                  "findings": twice[1:]}))
    assert [f["new_heads"] for f in once.first_findings()] == [""]
    bad = {**first, "findings": [{"code": "dead_heads", "severity": "info", "part": "self", "heads": "L1H1",
                                  "message": "m"}]}
    with pytest.raises(InputError, match="line 1 of the log has a finding whose heads are not"):
        parse_log(json.dumps(bad))


def test_repeated_steps_keep_the_later_measurement(log_text):
    lines = log_text.splitlines()
    timeline = parse_log("\n".join(lines + [lines[0]]).encode())
    assert timeline.steps == [0, 10, 20, 30]
    assert timeline.notes == ["1 repeated step: the later measurement is shown"]
    twice = parse_log("\n".join(lines + lines[:2]).encode())
    assert twice.notes == ["2 repeated steps: the later measurements are shown"]


@pytest.mark.parametrize("text, message", [
    ("not json\n", "line 1 of the log is not JSON"),
    ('{"schema": "attnscope.report/1"}\n', "not an AttnScope monitor record"),
    ("\n", "holds no measurement"),
])
def test_bad_logs_are_one_line_errors(text, message):
    with pytest.raises(InputError, match=message):
        parse_log(text)


@pytest.mark.parametrize("field", ['"message": "', '"part": "', '"code": "'])
def test_a_lone_surrogate_escape_is_damage_and_a_pair_is_a_character(log_text, field):
    """JSON reads "\\ud800" as text no UTF-8 holds: a log with one in a finding's message stopped the Timeline
    page with a UnicodeEncodeError, and the runs after it were not drawn."""
    with pytest.raises(InputError, match="line 1 of the log holds an unpaired surrogate escape"):
        parse_log(log_text.replace(field, field + "\\ud800", 1))
    paired = parse_log(log_text.replace('"message": "', '"message": "\\ud83d\\ude00 \\\\ud800 ', 1))
    assert paired.records[0]["findings"][0]["message"].startswith("\U0001F600 \\ud800 ")  # the emoji; "\\ud800"


def test_a_deeply_nested_line_with_an_escaped_pair_still_reads(log_text):
    """The surrogate check re-encoded the record, a few frames deeper than ``json.loads`` had read it: an unread
    field nested ~990 deep beside an escaped emoji was a RecursionError that lost every log of the Load (review)."""
    import sys

    first, rest = log_text.splitlines()[0], log_text.splitlines()[1:]
    limit = sys.getrecursionlimit()
    for depth in range(limit - 150, limit + 1):
        line = first[:-1] + ', "note": "\\ud83d\\ude00", "x": ' + "[" * depth + "]" * depth + "}"
        timeline = parse_log("\n".join([line, *rest]))  # read, or that line skipped as too deep
        assert timeline.steps[-1] == 30 and len(timeline.steps) >= len(rest)


def test_a_line_that_is_not_json_is_skipped_when_others_read(log_text):
    lines = log_text.splitlines()
    timeline = parse_log("\n".join([lines[0], lines[1][:500], lines[2]]))
    assert timeline.steps == [0, 20] and "line 2 of the log is not JSON" in timeline.notes[0]


def test_records_of_another_monitor_version_are_named_as_such_and_the_others_still_read(log_text):
    """A record of attnscope.monitor/2 was "not an AttnScope monitor record", and one such line, as a run upgraded
    while it trains appends, refused the whole log (stop-51 schema audit)."""
    lines = log_text.splitlines()
    newer = lines[2].replace('"attnscope.monitor/1"', '"attnscope.monitor/2"')
    timeline = parse_log("\n".join([lines[0], lines[1], newer, newer]))
    assert timeline.steps == [0, 10]
    assert timeline.notes == ["lines 3, 4 of the log were written by another version of AttnScope (schema "
                              "attnscope.monitor/2; this one reads attnscope.monitor/1): skipped; update AttnScope to "
                              "read them"]
    with pytest.raises(InputError, match=r"^line 1 of the log was written by another version of AttnScope \(schema "
                                         r"attnscope.monitor/2; this one reads attnscope.monitor/1\); read it with"):
        parse_log(newer)


def test_skipped_records_of_another_version_hold_no_memory_and_name_each_version_briefly(log_text):
    """Each skipped line was kept as its error, whose traceback held the whole parsed record: 99 padded lines of a
    14 MB log held 321 MB; a 2 MB schema string made a 2 MB note; lines of /2 and /3 named /2 only (stop-51
    review)."""
    import tracemalloc

    record = json.loads(log_text.splitlines()[0])
    lines = [json.dumps(record)]
    record["padding"] = [[]] * 50_000
    for step, schema in ((10, "attnscope.monitor/2"), (20, "attnscope.monitor/3"), (30, "attnscope.monitor/2")):
        lines.append(json.dumps({**record, "step": step, "schema": schema}))
    padded = "\n".join(lines)
    tracemalloc.start()
    timeline = parse_log(padded)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert timeline.steps == [0] and held < len(padded)  # 3 skipped lines held ~6 x the log
    assert "lines 2, 3, 4 of the log were written by another version of AttnScope (schema attnscope.monitor/2, " \
           "attnscope.monitor/3; this one reads" in timeline.notes[0]
    huge = json.dumps({**record, "padding": [], "schema": "attnscope.monitor/" + "9" * 100_000})
    assert len(parse_log("\n".join([lines[0], huge])).notes[0]) < 400
    with pytest.raises(InputError) as refused:
        parse_log(huge)
    assert len(str(refused.value)) < 400


def test_a_file_of_lines_that_are_not_json_is_refused_early_and_few_cut_lines_are_listed_briefly(log_text):
    """Every line that was not JSON was kept as an exception and listed in the note: a 1 MB text file took 20 s and
    1.3 GB before its one-line error; one record and 4 MB of such lines, 90 s, 5.4 GB and a 17-million-character
    note on the page."""
    start = time.perf_counter()
    with pytest.raises(InputError, match="more than 100 lines of the log are not JSON, the first line 2; give"):
        parse_log(log_text.splitlines()[0] + "\n" + "x\n" * 500_000)
    assert time.perf_counter() - start < 2
    lines = log_text.splitlines()
    timeline = parse_log("\n".join([lines[0]] + ["x"] * 12 + [lines[1]]))
    assert timeline.notes == ["lines 2, 3, 4, 5, 6, 7, 8, 9, 10, 11 and 2 more of the log are not JSON (a write cut "
                              "short?): skipped"]


def test_only_what_the_timeline_reads_is_kept_of_a_record(log_text, monkeypatch):
    """A record was kept whole: a 16 MB log padded with a field the Timeline never reads held 346 MB."""
    import tracemalloc

    from diagnostics import timeline as tl

    record = json.loads(log_text.splitlines()[0])
    record["padding"] = [[]] * 200_000
    record["heads"][0]["metrics"].update({f"m{i}": 1.5 for i in range(100)}, text="x" * 1000)
    line = json.dumps(record)
    tracemalloc.start()
    kept = parse_log(line).records[0]
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert held < len(line) / 4 and set(kept) == {"schema", "step", "model", "heads", "findings"}
    assert len(kept["heads"][0]["metrics"]) == tl.MAX_METRICS and "text" not in kept["heads"][0]["metrics"]
    assert kept["heads"][0]["metrics"]["entropy"] == record["heads"][0]["metrics"]["entropy"]
    # "self", the monitor's part name: json.loads makes each head's anew (one-letter strings are shared): 4.9 ×
    bare = [{"part": "self", "layer": 0, "head": h, "pattern": "sparse", "metrics": {}} for h in range(256)]
    lines = "\n".join(json.dumps({"schema": tl.SCHEMA, "step": s, "heads": bare, "model": {"parts": {"self": {
        "layers": 1, "heads": 256}}}}, separators=(",", ":")) for s in range(20))
    tracemalloc.start()
    timeline = parse_log(lines)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert held < 4.5 * len(lines) and timeline.shape("self") == (1, 256)  # a roles list per bare head: 6.5 ×
    monkeypatch.setattr(tl, "MAX_LINE_CHARS", 1000)
    with pytest.raises(InputError, match="line 1 of the log is over 1,000 characters"):
        parse_log(line)


def test_a_log_of_more_measurements_than_the_timeline_keeps_is_refused_while_read(monkeypatch):
    """A 255 MB log of 4.5 million lines without heads was read whole, at 3.9 GB: no grid bounded it."""
    import tracemalloc

    from diagnostics import timeline as tl
    line = json.dumps({"schema": tl.SCHEMA, "step": 0, "heads": []})
    log = "\n".join(line.replace('"step": 0', f'"step": {s}') for s in range(40))
    monkeypatch.setattr(tl, "MAX_RECORDS", 40)
    assert len(parse_log(log).records) == 40
    with pytest.raises(InputError, match="more than 40 measurements; log less often"):
        parse_log(log + "\n" + line.replace('"step": 0', '"step": 40'))
    assert parse_log(log + "\n" + line[:20]).notes == ["line 41 of the log is not JSON (a write cut short?): skipped"]
    monkeypatch.undo()
    headless = "\n".join(line.replace('"step": 0', f'"step": {s}') for s in range(20_000))
    tracemalloc.start()
    parse_log(headless)
    held = tracemalloc.get_traced_memory()[0]
    tracemalloc.stop()
    assert held / 20_000 * tl.MAX_RECORDS < 128 * 2**20  # the most a log of lines without heads can keep


def test_two_models_in_one_log_are_refused(log_text):
    """Before, a 2 x 4 run and a 3 x 6 run appended to one file were drawn as one run in the 3 x 6 grid."""
    other = json.loads(log_text.splitlines()[0])
    other.update(step=40, model=other["model"] | {"layers": 3, "parts": {"self": {"layers": 3, "heads": 4}}})
    with pytest.raises(InputError, match=r"two different models \(GPT2.*self 2 × 4, then .*self 3 × 4 at step 40"):
        parse_log(log_text + json.dumps(other) + "\n")


def test_a_long_architecture_name_is_cut_in_the_message(log_text):
    """A 10 MB log whose two records name 5 MB architectures made a 10 MB error line, shown whole by the app."""
    first, second = (json.loads(line) for line in log_text.splitlines()[:2])
    first["model"]["architecture"], second["model"]["architecture"] = "a" * 1_000_000, "b" * 1_000_000
    with pytest.raises(InputError, match="two different models") as caught:
        parse_log(json.dumps(first) + "\n" + json.dumps(second) + "\n")
    assert len(str(caught.value)) < 600 and "aaa…" in str(caught.value)


DAMAGE = {  # a change to the first record -> the error it gets (each crashed the Timeline with a raw error before)
    "huge step": (lambda r: r.update(step=None), "not JSON (ValueError)"),
    "heads not a list": (lambda r: r.update(heads={"0": 1}), "has no step or heads"),
    "heads of numbers": (lambda r: r.update(heads=[1, 2]), "a head without its part"),
    "head without part": (lambda r: r["heads"][0].pop("part"), "a head without its part"),
    "layer as text": (lambda r: r["heads"][0].update(layer="0"), "a head without its part"),
    "layer of a billion": (lambda r: r["heads"][0].update(layer=10**9), "a head without its part"),
    "layer past model.parts": (lambda r: r["heads"][0].update(layer=2), "head (L2H0) outside the 2 layers × 4 heads"),
    "undeclared part": (lambda r: r["heads"][0].update(part="cross"), "a part that its model.parts does not declare"),
    "step of 2**64": (lambda r: r.update(step=2**64), "a step of 2**53 or more"),  # broke plotly's JSON, before
    "findings a number": (lambda r: r.update(findings=5), "a finding without its code"),
    "finding without part": (lambda r: r["findings"][0].pop("part"), "a finding without its code"),
}


@pytest.mark.parametrize("case", DAMAGE)
def test_damaged_records_are_one_line_errors(log_text, case):
    change, message = DAMAGE[case]
    record = json.loads(log_text.splitlines()[2])  # step 20: it has findings
    change(record)
    text = json.dumps(record) if case != "huge step" else json.dumps(record).replace("null", "9" * 5000, 1)
    with pytest.raises(InputError, match=rf"^line 1 of the log .*{re.escape(message)}"):
        parse_log(text)


def test_a_weights_only_log_reads_back(tmp_path):
    """Without a tokenizer the monitor checks an encoder-decoder's weights only: records with no heads."""
    from tiny import tiny_bart

    log = tmp_path / "bart.jsonl"
    monitor = AttentionMonitor(tokenizer=None, every=1, log_path=log)
    for step in (0, 10):
        monitor.on_step(tiny_bart(), step)
    timeline = parse_log(log.read_text())  # "line 1 of the log has no step or heads", before
    assert timeline.steps == [0, 10] and timeline.parts == [] and timeline.shape() == (0, 0)
    assert timeline.metric("entropy").shape == (2, 0, 0)


def test_deeply_nested_lines_are_one_line_errors():
    with pytest.raises(InputError, match=r"line 1 of the log is not JSON \(RecursionError\)"):
        parse_log("[" * 100_000 + "]" * 100_000)


def test_a_metric_that_is_not_a_number_is_left_out(log_text):
    record = json.loads(log_text.splitlines()[0])
    record["heads"][0]["metrics"]["entropy"] = "high"
    record["heads"][1]["metrics"]["entropy"] = 10 ** 400  # a hand-edited line: OverflowError before
    entropy = parse_log(json.dumps(record)).metric("entropy")  # (1, L, H)
    assert np.isnan(entropy[0, 0, :2]).all() and not np.isnan(entropy[0, 0, 2])


def _corner_heads(log_text, steps: int) -> str:
    """``steps`` records of a model declared 512 × 1024 whose heads (2 × 4 and L511H1023) fill few of its cells."""
    record = json.loads(log_text.splitlines()[0])
    record["model"]["parts"]["self"] = {"layers": 512, "heads": 1024}
    record["heads"].append(dict(record["heads"][0], layer=511, head=1023))
    return "\n".join(json.dumps(dict(record, step=step)) for step in range(steps))


def test_a_grid_far_emptier_than_its_heads_is_refused_before_it_is_allocated(log_text):
    """Before, 18 KB of log drew a 524,288-row heatmap (200 MiB of grid and 355 MiB of plotly JSON at 100 steps)."""
    with pytest.raises(InputError, match=r"self heads fill 9 of the 524,288 cells of their 1 steps × 512 layers × "
                                         r"1024 heads; the file is damaged"):
        parse_log(_corner_heads(log_text, 1)).metric("entropy")
    with pytest.raises(InputError, match=rf"2,621,440 cells, over the Timeline's {MAX_CELLS:,}; log less often"):
        parse_log(_corner_heads(log_text, 5)).metric("entropy")


def test_a_smollm2_sized_grid_is_drawn():
    """30 layers × 9 heads over 2,000 steps (a 256 MB log holds no more than ~600,000 cells) fit the cell budget."""
    heads = [{"part": "self", "layer": layer, "head": head, "metrics": {"entropy": 0.5}}
             for layer in range(30) for head in range(9)]
    entropy = Timeline([{"step": step, "heads": heads} for step in range(2000)]).metric("entropy")
    assert entropy.shape == (2000, 30, 9) and (entropy == 0.5).all()


def test_a_log_saved_with_a_byte_order_mark_keeps_its_first_line(log_text, tmp_path):
    """A log re-saved by a Windows editor: its first line was skipped as "not JSON (a write cut short?)", before."""
    path = tmp_path / "attention.jsonl"
    path.write_bytes(b"\xef\xbb\xbf" + log_text.encode())
    for timeline in (read_log(path, allowed_roots=[tmp_path]), parse_log("\ufeff" + log_text)):
        assert timeline.steps == [0, 10, 20, 30] and timeline.notes == []


def test_read_log_stays_inside_the_allowed_roots(log_text, tmp_path):
    path = tmp_path / "attention.jsonl"
    path.write_text(log_text)
    assert read_log(path, allowed_roots=[tmp_path]).steps == [0, 10, 20, 30]
    with pytest.raises(AttnScopeError, match="outside the folders"):
        read_log(path, allowed_roots=[tmp_path / "elsewhere"])


def test_checkpoint_folders_are_diagnosed_in_step_order(tmp_path):
    model, tokenizer = tiny_bert(), wordpiece_tokenizer()
    for step in (20, 5):
        folder = tmp_path / f"checkpoint-{step}"
        model.save_pretrained(folder)
        tokenizer.save_pretrained(folder)
        (folder / "trainer_state.json").write_text(json.dumps({"global_step": step}))
    (tmp_path / "runs").mkdir()  # not a checkpoint
    assert [s for s, _ in checkpoint_folders(tmp_path, allowed_roots=[tmp_path])] == [5, 20]
    seen = []
    timeline = from_checkpoints(tmp_path, texts=PROBES, allowed_roots=[tmp_path],
                                progress=lambda fraction, message: seen.append((fraction, message)))
    assert timeline.steps == [5, 20] and timeline.shape() == (2, 4)
    logged = parse_log(json.dumps(record_of(diagnose((model, tokenizer), PROBES), 5)))
    for read in (timeline, logged):  # the same records whichever way it was read: a finding's heads as pairs
        heads = [f["heads"] for f in read.records[0]["findings"]]
        assert heads and all(h.dtype == np.int32 and h.shape[1:] == (2,) for h in heads)
    messages = [m for _, m in seen]
    assert messages[0] == "checkpoint 5 (1/2): loading" and messages[-1] == "done"
    # the bar moves inside each checkpoint's diagnosis (one step per probe), forward only
    assert f"checkpoint 20 (2/2): probe {len(PROBES)}/{len(PROBES)}" in messages
    fractions = [f for f, _ in seen]
    assert fractions == sorted(fractions) and 0.5 <= fractions[messages.index("checkpoint 20 (2/2): loading")]
    with pytest.raises(InputError, match="no checkpoint-<step> folders"):
        checkpoint_folders(tmp_path / "runs", allowed_roots=[tmp_path])


def _checkpoint(folder, model, tokenizer=None):
    model.save_pretrained(folder)
    if tokenizer is not None:
        tokenizer.save_pretrained(folder)


def test_checkpoints_are_held_one_at_a_time(tmp_path, monkeypatch):
    """The last checkpoint's model stayed alive while the next one loaded: two models for one place of the app's
    cap on models loaded at once."""
    import gc
    import weakref

    import core

    for step in (100, 200, 300):
        _checkpoint(tmp_path / f"checkpoint-{step}", tiny_bert(), wordpiece_tokenizer())
    alive, models, real = [], [], core.load_checkpoint

    def counting(*args, **kwargs):
        gc.collect()
        alive.append(sum(m() is not None for m in models))
        loaded = real(*args, **kwargs)
        models.append(weakref.ref(loaded.model))
        return loaded

    monkeypatch.setattr(core, "load_checkpoint", counting)
    from_checkpoints(tmp_path, texts=PROBES, allowed_roots=[tmp_path])
    assert alive == [0, 0, 0]


def test_a_checkpoint_that_does_not_load_is_skipped_with_a_note(tmp_path):
    """A save cut short (only trainer_state.json) threw the whole timeline away: one error, nothing drawn."""
    for step in (100, 200):
        _checkpoint(tmp_path / f"checkpoint-{step}", tiny_bert(), wordpiece_tokenizer())
    (tmp_path / "checkpoint-150").mkdir()
    (tmp_path / "checkpoint-150" / "trainer_state.json").write_text("{}")
    timeline = from_checkpoints(tmp_path, texts=PROBES, allowed_roots=[tmp_path])
    assert timeline.steps == [100, 200]
    assert [n.split(":")[0] for n in timeline.notes] == ["checkpoint-150 skipped"]
    for step in (100, 200):
        for file in (tmp_path / f"checkpoint-{step}").iterdir():
            file.unlink()
    with pytest.raises(InputError, match=r"^no checkpoint of .* could be loaded: checkpoint-100 skipped: "):
        from_checkpoints(tmp_path, texts=PROBES, allowed_roots=[tmp_path])


def test_checkpoints_of_two_models_are_refused_by_name(tmp_path):
    """The message was the log's: 'the log measures two different models ...; give each run its own log_path'."""
    _checkpoint(tmp_path / "checkpoint-100", tiny_bert(), wordpiece_tokenizer())
    _checkpoint(tmp_path / "checkpoint-200", tiny_gpt2(), bpe_tokenizer())
    with pytest.raises(InputError, match=r"^checkpoint-200 is a different model \(GPT2.*\) from checkpoint-100 "):
        from_checkpoints(tmp_path, texts=PROBES, allowed_roots=[tmp_path])


@pytest.mark.parametrize("names, problem", [
    (["checkpoint-01", "checkpoint-1"], "checkpoint-01 and checkpoint-1 are both step 1; keep one of them"),
    (["checkpoint-\u0661\u0660\u0660"], "no checkpoint-<step> folders"),  # Arabic-Indic digits are not a step
    ([f"checkpoint-{2**64}"], "no checkpoint-<step> folders"),  # plotly's JSON failed at 2**64
])
def test_checkpoint_folder_names_are_steps_as_the_trainer_writes_them(tmp_path, names, problem):
    for name in names:
        (tmp_path / name).mkdir()
    with pytest.raises(InputError, match=re.escape(problem)):
        checkpoint_folders(tmp_path, allowed_roots=[tmp_path])


def test_checkpoint_links_out_of_the_roots_are_each_refused_alike_by_the_path_given(tmp_path, monkeypatch):
    """Links were followed: one to a folder outside counted as a checkpoint and one to nothing did not ("has no
    checkpoint-<step> folders"), and the refusal named the link's absolute path (the server's home folder)."""
    from core.checkpoints.checkpoint import OUTSIDE

    monkeypatch.setenv("HOME", str(tmp_path / "alice"))
    run = tmp_path / "alice" / "run"
    run.mkdir(parents=True)
    (run / "checkpoint-1").symlink_to("/etc")
    (run / "checkpoint-2").symlink_to("/nonexistent-attnscope")
    with pytest.raises(InputError) as caught:
        from_checkpoints("~/run", allowed_roots=[tmp_path])
    refusals = [OUTSIDE.format(path=f"~/run/checkpoint-{step}", env="ATTNSCOPE_ALLOWED_ROOTS") for step in (1, 2)]
    assert str(caught.value) == (f"no checkpoint of run could be loaded: checkpoint-1 skipped: {refusals[0]}; "
                                 f"checkpoint-2 skipped: {refusals[1]}")


def test_a_bad_server_setting_stops_a_checkpoint_run_as_itself(tmp_path, monkeypatch):
    """Each checkpoint was "skipped" for it, and the run ended in an InputError the app does not log."""
    from core import SettingError

    (tmp_path / "checkpoint-1").mkdir()
    monkeypatch.setenv("ATTNSCOPE_MAX_ENTRIES", "abc")
    with pytest.raises(SettingError, match="ATTNSCOPE_MAX_ENTRIES='abc'"):
        from_checkpoints(tmp_path, allowed_roots=[tmp_path])


def test_a_full_temporary_folder_stops_a_checkpoint_run_as_itself(tmp_path, monkeypatch):
    """Each checkpoint was "skipped" for it, and the run ended in an InputError the app does not log."""
    from core import DiskFull
    from core.checkpoints import checkpoint

    bert_folder = tmp_path / "checkpoint-1"
    tiny_bert().save_pretrained(bert_folder)

    def full(*args, **kwargs):
        raise DiskFull("the temporary folder has no room for the checkpoint (No space left on device)")

    monkeypatch.setattr(checkpoint, "_stage", full)
    with pytest.raises(DiskFull):
        from_checkpoints(tmp_path, allowed_roots=[tmp_path])


def test_a_log_of_many_parts_is_read_in_one_pass():
    """Each part's grid was checked with a pass over every head: 8,000 one-head parts (a 1 MB log) took 4.5 s."""
    parts = [f"p{i}" for i in range(8000)]
    record = {"schema": "attnscope.monitor/1", "step": 0, "findings": [],
              "model": {"architecture": "x", "parts": {p: {"layers": 1, "heads": 1} for p in parts}},
              "heads": [{"part": p, "layer": 0, "head": 0, "pattern": "diffuse", "metrics": {}, "roles": []}
                        for p in parts]}
    start = time.perf_counter()
    assert len(parse_log(json.dumps(record)).parts) == 8000
    assert time.perf_counter() - start < 1.0  # 0.03 s here


def test_a_part_named_with_the_empty_string_is_that_part(log_text):
    """``metric(part="")`` fell back to the first part: the page drew the "self" heads under the "" label."""
    records = [json.loads(line) for line in log_text.splitlines()]
    for record in records:
        record["model"]["parts"][""] = record["model"]["parts"]["self"]
        record["heads"] += [dict(h, part="", metrics=dict(h["metrics"], entropy=0.125)) for h in record["heads"]]
    timeline = parse_log("\n".join(json.dumps(r) for r in records))
    assert timeline.parts == ["self", ""]
    assert np.all(timeline.metric("entropy", "") == 0.125)
    assert not np.any(timeline.metric("entropy", "self") == 0.125)
    assert timeline.shape("") == timeline.shape("self")
