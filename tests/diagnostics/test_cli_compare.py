"""``python -m diagnostics compare A B``: exit 0 when B adds no error finding, 1 when it does, 2 on bad input."""

import json

import pytest

from broken_checkpoints import scale_qk, structured_bert, structured_gpt2
from diagnostics import cli


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return structured_bert(tmp_path_factory.mktemp("models") / "bert")


def run_compare(a, b, tmp_path, *extra):
    out = tmp_path / "compare.json"
    status = cli.main(["compare", str(a), str(b), "--format", "json", "--out", str(out), "--quiet", *extra])
    return status, (json.loads(out.read_text()) if out.exists() else None)


def test_same_model_exits_0_and_nothing_changed(bert_dir, tmp_path):
    status, report = run_compare(bert_dir, bert_dir, tmp_path, "--text", "The cat sat on the mat.")
    assert status == 0
    assert report["schema"] == "attnscope.compare/1" and report["summary"]["changed"] == 0
    assert all(h["js_distance"] < 1e-4 and not h["changed"] for h in report["heads"])


@pytest.mark.slow
def test_saturating_b_exits_1_and_names_the_new_error(bert_dir, tmp_path):
    broken = scale_qk(bert_dir, tmp_path / "x30", 30.0)
    status, report = run_compare(bert_dir, broken, tmp_path)
    assert status == 1
    assert "saturated_heads" in [f["code"] for f in report["findings"]["appeared"] if f["severity"] == "error"]
    assert all(h["changed"] for h in report["heads"])
    assert run_compare(broken, bert_dir, tmp_path)[0] == 0  # fixing it is no new error


def test_a_comparison_says_its_findings_are_capped_and_what_to_do(bert_dir, tmp_path):
    """On a short probe every finding is capped at info, and the note that says so is A's and B's alike, so it was
    neither appeared nor disappeared and shown nowhere: B's collapse read as "Info" with no reason; the Markdown
    and HTML also left out each appeared finding's advice (stop-51 schema audit)."""
    broken = scale_qk(bert_dir, tmp_path / "x40", 40.0)
    status, report = run_compare(bert_dir, broken, tmp_path, "--text", "The cat sat on the mat.")
    appeared = {f["code"]: f["severity"] for f in report["findings"]["appeared"]}
    assert status == 1 and appeared["qk_scale_large"] == "error"  # read from the weights: no probe caps it
    assert appeared["saturated_heads"] == "info"  # capped: the probe is short
    assert [(n["models"], n["code"]) for n in report["notes"]] == [("A and B", "probes_short")]
    advice = report["findings"]["appeared"][0]["suggestion"]
    for fmt in ("markdown", "html"):
        out = tmp_path / f"compare.{fmt}"
        cli.main(["compare", str(bert_dir), str(broken), "--format", fmt, "--out", str(out), "--quiet", "--text",
                  "The cat sat on the mat."])
        text = out.read_text()
        assert "Notes on the probes" in text and "probes_short" in text and "A and B" in text
        assert "What to do:" in text and advice.split("(")[0].strip()[:40] in text.replace("\\", "")


def test_bad_input_exits_2_with_one_line(bert_dir, tmp_path, capsys):
    gpt2 = structured_gpt2(tmp_path / "gpt2")
    assert run_compare(bert_dir, gpt2, tmp_path)[0] == 2
    assert "different vocabularies" in capsys.readouterr().err
    assert run_compare(bert_dir, tmp_path / "missing", tmp_path)[0] == 2
    assert cli.main(["compare", str(bert_dir)]) == 2  # B missing
    err = capsys.readouterr().err
    assert err.count("\n") == 2 and "usage" in err


@pytest.mark.parametrize("fmt, marker", [("markdown", "# AttnScope comparison"), ("html", "<!DOCTYPE html>")])
def test_formats(bert_dir, tmp_path, fmt, marker):
    out = tmp_path / f"compare.{fmt}"
    assert cli.main(["compare", str(bert_dir), str(bert_dir), "--format", fmt, "--out", str(out), "--quiet",
                     "--text", "A short probe."]) == 0
    assert out.read_text().startswith(marker)


def test_bare_state_dicts_take_heads(tmp_path, capsys):
    """The loader asked for --heads N, which compare did not accept ('unrecognized arguments')."""
    from safetensors.torch import save_file
    from tiny import tiny_bert

    weights = tmp_path / "bert.safetensors"
    save_file({k: v.contiguous() for k, v in tiny_bert().state_dict().items()}, str(weights))
    assert run_compare(weights, weights, tmp_path)[0] == 2
    assert "--heads N" in capsys.readouterr().err
    status, report = run_compare(weights, weights, tmp_path, "--heads", "4", "--text", "the cat sat on the mat")
    assert status == 0 and report["summary"] == {**report["summary"], "heads": 8, "changed": 0}


def test_help_names_the_compare_command(capsys):
    with pytest.raises(SystemExit):
        cli.build_parser().parse_args(["--help"])
    assert "python -m diagnostics compare A B" in capsys.readouterr().out
