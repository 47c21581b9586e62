"""The CLI on checkpoints broken on purpose (issue 3, "Done when"), exit codes 0/1/2, output formats.

Each broken checkpoint is checked against its healthy starting point, so the
test fails if a detector stops telling them apart.
"""

import io
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from broken_checkpoints import copy_head, scale_qk, structured_bert, structured_gpt2
from diagnostics import cli

ROOT = Path(__file__).resolve().parents[2]
DEMO_DIR = ROOT / "core" / "demo_models"


@pytest.fixture(scope="module")
def bert_dir(tmp_path_factory):
    return structured_bert(tmp_path_factory.mktemp("models") / "bert")


@pytest.fixture(scope="module")
def gpt2_dir(tmp_path_factory):
    return structured_gpt2(tmp_path_factory.mktemp("models") / "gpt2")


def run_json(folder, tmp_path, *extra):
    """``(exit status, report dict)`` of ``python -m diagnostics folder --format json``, in process."""
    out = tmp_path / "report.json"
    status = cli.main([str(folder), "--format", "json", "--out", str(out), "--quiet", *extra])
    return status, json.loads(out.read_text())


def finding(report, code):
    return next((f for f in report["findings"] if f["code"] == code), None)


def errors(report):
    return [f["code"] for f in report["findings"] if f["severity"] == "error"]


@pytest.mark.parametrize("which", ["bert", "gpt2"])
def test_healthy_structured_model_exits_0(which, bert_dir, gpt2_dir, tmp_path):
    status, report = run_json(bert_dir if which == "bert" else gpt2_dir, tmp_path)
    assert status == 0, errors(report)
    entropies = [h["metrics"]["entropy"] for h in report["heads"]]
    assert 0.3 < min(entropies) and max(entropies) < 0.9  # peaked, neither uniform nor one-hot
    assert finding(report, "saturated_heads") is None and finding(report, "diffuse_heads") is None


@pytest.mark.parametrize("which", ["bert", "gpt2"])
def test_qk_times_30_is_saturated_error(which, bert_dir, gpt2_dir, tmp_path):
    broken = scale_qk(bert_dir if which == "bert" else gpt2_dir, tmp_path / "x30", 30.0)
    status, report = run_json(broken, tmp_path)
    assert status == 1
    saturated = finding(report, "saturated_heads")
    assert saturated["severity"] == "error"
    assert len(saturated["heads"]) == 8  # every head of 2 layers x 4
    assert max(h["metrics"]["entropy"] for h in report["heads"]) < 0.05
    assert finding(report, "qk_scale_large")["severity"] == "error"


@pytest.mark.parametrize("which", ["bert", "gpt2"])
def test_qk_times_0_is_diffuse_error(which, bert_dir, gpt2_dir, tmp_path):
    broken = scale_qk(bert_dir if which == "bert" else gpt2_dir, tmp_path / "x0", 0.0)
    status, report = run_json(broken, tmp_path)
    assert status == 1
    diffuse = finding(report, "diffuse_heads")
    assert diffuse["severity"] == "error" and len(diffuse["heads"]) == 8
    assert min(h["metrics"]["entropy"] for h in report["heads"]) > 0.999
    assert finding(report, "redundant_heads") is None  # uniform heads coincide, but are reported as diffuse


@pytest.mark.parametrize("which", ["bert", "gpt2"])
def test_copied_head_is_redundant_naming_the_pairs(which, bert_dir, gpt2_dir, tmp_path):
    broken = copy_head(bert_dir if which == "bert" else gpt2_dir, tmp_path / "copied", layer=1, source_head=0)
    _, report = run_json(broken, tmp_path)
    redundant = finding(report, "redundant_heads")
    pairs = {(a[1], b[1]) for a, b, _ in redundant["details"]["pairs"]}
    assert pairs == {(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)}
    assert all(a[0] == 1 == b[0] for a, b, _ in redundant["details"]["pairs"])
    assert redundant["heads"] == [[1, 0], [1, 1], [1, 2], [1, 3]]
    assert "L1H0~L1H1" in redundant["message"]
    similar = finding(report, "similar_head_weights")
    assert {(a[1], b[1]) for a, b, _ in similar["details"]["pairs"]} == pairs
    _, healthy = run_json(bert_dir if which == "bert" else gpt2_dir, tmp_path)
    assert finding(healthy, "redundant_heads") is None


DEMOS = ["demo-bert", "demo-gpt2"]


def demo_folder(name):
    folder = DEMO_DIR / name
    assert (folder / "config.json").is_file(), f"the demo model {name} is not shipped (core/demo_models/{name})"
    return folder


@pytest.mark.parametrize("name", DEMOS)
def test_healthy_demo_model_has_no_error(name, tmp_path):
    demo_folder(name)
    status, report = run_json(name, tmp_path)
    assert status == 0, [f["message"] for f in report["findings"] if f["severity"] == "error"]
    assert not errors(report)


@pytest.mark.parametrize("name", DEMOS)
def test_broken_demo_models(name, tmp_path):
    folder = demo_folder(name)
    _, saturated = run_json(scale_qk(folder, tmp_path / "x30", 30.0), tmp_path)
    assert finding(saturated, "saturated_heads")["severity"] == "error"
    _, diffuse = run_json(scale_qk(folder, tmp_path / "x0", 0.0), tmp_path)
    assert finding(diffuse, "diffuse_heads")["severity"] == "error"


def test_bad_input_exits_2_with_one_line(tmp_path, capsys):
    assert cli.main([str(tmp_path / "missing"), "--quiet"]) == 2
    garbage = tmp_path / "garbage"
    garbage.mkdir()
    (garbage / "config.json").write_text("{not json")
    assert cli.main([str(garbage), "--quiet"]) == 2
    assert cli.main(["demo-bert", "--format", "pdf"]) == 2
    assert cli.main([]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 4 and all(line.startswith("error: ") for line in lines)
    assert "Traceback" not in "".join(lines)


def test_main_leaves_the_load_log_as_it_found_it(tmp_path, caplog):
    """main() turned the load log's propagation off for good: a later load's notes reached no caller's handler
    (a core test failed whenever a CLI test ran before it)."""
    import logging

    assert cli.main([str(tmp_path / "missing"), "--quiet"]) == 2
    load_log = logging.getLogger("attnscope.load")
    assert load_log.propagate and not load_log.handlers
    with caplog.at_level(logging.WARNING, "attnscope.load"):
        load_log.warning("a later note")
    assert "a later note" in caplog.text


def test_a_model_path_that_cannot_be_read_is_bad_input_not_an_internal_error(tmp_path, capsys, monkeypatch):
    """An unreadable folder, tokenizer.json or GGUF, or a name too long, was "internal error (PermissionError …);
    please report it", exit 3, and named the upload's staging copy (CLI audit, stop 56)."""
    from core.checkpoints import loading

    assert cli.main(["./" + "a" * 300, "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot read ./aaa") and "…" in err and err.endswith("aaa: file name too long\n")

    def unreadable(name):
        def load(*args):
            raise PermissionError(13, "Permission denied", f"/tmp/attnscope-upload-1/upload/{name}")
        return load
    for source, name, said in (("m4", "config.json", "m4 (config.json in it)"), ("u.gguf", "u.gguf", "u.gguf")):
        monkeypatch.setattr(loading, "_load_model", unreadable(name))
        assert cli.main([source, "--quiet"]) == 2
        assert capsys.readouterr().err == f"error: cannot read {said}: permission denied\n"
    monkeypatch.setattr(loading, "_load_model", lambda *args: (_ for _ in ()).throw(OSError(28, "No space left")))
    assert cli.main(["m4", "--quiet"]) == 3  # no file of the user's: still a distinct status
    assert "internal error" in capsys.readouterr().err
    monkeypatch.undo()
    folder = tmp_path / "m1"
    folder.mkdir()
    (folder / "config.json").write_text("{}")
    monkeypatch.setattr(Path, "read_text", lambda self, *a, **k: (_ for _ in ()).throw(
        PermissionError(13, "Permission denied", str(self))))
    assert cli.main([str(folder), "--quiet"]) == 2  # it said "is not valid JSON (PermissionError …)"
    assert capsys.readouterr().err == f"error: cannot read {folder} (config.json in it): permission denied\n"
    latin = tmp_path / os.fsdecode(b"caf\xe9")  # opened through a private link: the message names the user's folder
    latin.mkdir()
    (latin / "config.json").write_text("{}")
    assert cli.main([str(latin), "--quiet"]) == 2
    said = f"error: cannot read {tmp_path}/caf\ufffd (config.json in it): permission denied\n"
    assert capsys.readouterr().err == said
    monkeypatch.undo()
    os.mkfifo(tmp_path / "fifo.safetensors")  # it said "is not a model folder: it has no config.json"
    assert cli.main([str(tmp_path / "fifo.safetensors"), "--quiet"]) == 2
    assert "fifo.safetensors is not a file or a folder (a pipe or a device?)" in capsys.readouterr().err
    (tmp_path / "eio").mkdir()  # an I/O error (a failing disk, NFS) stays bad input: a one-line exit 2
    (tmp_path / "eio" / "config.json").symlink_to("/proc/self/mem")
    assert cli.main([str(tmp_path / "eio"), "--quiet"]) == 2
    assert capsys.readouterr().err.endswith("eio (config.json in it): input/output error\n")


def test_loader_messages_do_not_ask_a_command_line_user_to_upload(tmp_path, capsys):
    """The CLI reads files through the app's loader, whose advice said 'upload the complete file'."""
    (tmp_path / "cut.safetensors").write_bytes(b"junk!")
    (tmp_path / "empty.bin").write_bytes(b"")
    assert cli.main([str(tmp_path / "cut.safetensors"), "--quiet"]) == 2
    assert cli.main([str(tmp_path / "empty.bin"), "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 2 and all("give the" in line and "upload" not in line for line in lines), lines


def test_a_probe_that_gives_no_tokens_is_named(bert_dir, capsys):
    """It said 'the text gives no tokens …; type a sentence with words in it' (Inspect's words), not which probe."""
    assert cli.main([str(bert_dir), "--quiet", "--text", "the cat sat on the mat", "--text", "\u200b"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: probe 2 of 2: its text gives no tokens") and "type a sentence" not in err


def test_an_unwritable_out_is_refused_before_the_diagnosis(tmp_path, capsys, monkeypatch):
    ran = []
    monkeypatch.setattr(cli, "_diagnose", lambda args, progress: ran.append(args))
    for out, why in ((tmp_path / "missing" / "r.md", "does not exist"), (tmp_path, "it is a folder")):
        assert cli.main(["demo-bert", "--out", str(out), "--quiet"]) == 2
        assert why in capsys.readouterr().err
    assert ran == []  # nothing was diagnosed first



def test_an_out_the_system_cannot_even_look_at_is_one_line_before_the_diagnosis(tmp_path, capsys, monkeypatch):
    """A name too long or a folder that may not be searched raised from the --out checks, before main's handler:
    a traceback and exit 1 (CLI audit, stop 56); and "reports/" wrote a file named reports."""
    ran = []
    monkeypatch.setattr(cli, "_diagnose", lambda args, progress: ran.append(args))
    long = tmp_path / ("a" * 300 + ".md")
    assert cli.main(["demo-bert", "--out", str(long), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: cannot write ") and err.endswith("aaa.md: file name too long\n") and len(err) < 300
    assert "…" in err  # cut in the middle: its end names the file
    with monkeypatch.context() as patched:  # root searches any folder: the folder's refusal, as the system says it
        patched.setattr(Path, "is_dir", lambda self: (_ for _ in ()).throw(PermissionError(13, "Permission denied")))
        assert cli.main(["demo-bert", "--out", str(tmp_path / "unread" / "x.md"), "--quiet"]) == 2
    assert capsys.readouterr().err == f"error: cannot write {tmp_path / 'unread' / 'x.md'}: permission denied\n"
    for out in (str(tmp_path / "new") + "/", str(tmp_path / "old.md") + "/", str(tmp_path / "new") + "/."):
        (tmp_path / "old.md").write_text("kept")
        assert cli.main(["demo-bert", "--out", out, "--quiet"]) == 2
        assert capsys.readouterr().err == f"error: --out {out} names a folder; give a file name\n"
    assert ran == [] and not (tmp_path / "new").exists() and (tmp_path / "old.md").read_text() == "kept"


def test_a_writable_report_in_a_read_only_folder_is_not_refused(tmp_path, capsys, monkeypatch, diagnosed):
    """The check asked for a folder that takes new files, so the file was refused by its own name while a link to
    it was written (the writer falls back to writing in place)."""
    out = tmp_path / "report.md"
    out.write_text("old")
    real_access = os.access
    monkeypatch.setattr(os, "access", lambda path, mode: Path(path) != tmp_path and real_access(path, mode))
    monkeypatch.setattr(cli.os, "replace", lambda *args: (_ for _ in ()).throw(PermissionError(13, "denied")))
    assert cli.main(["demo-bert", "--out", str(out), "--quiet"]) == 0
    assert out.read_text().startswith("# AttnScope diagnosis")
    assert cli.main(["demo-bert", "--out", str(tmp_path / "new.md"), "--quiet"]) == 2  # a new file: refused
    assert capsys.readouterr().err.endswith("new.md: permission denied\n")


def test_a_device_out_of_memory_is_bad_input_with_advice(bert_dir, capsys, monkeypatch):
    """CUDA's allocator raises torch.OutOfMemoryError: it was "internal error (OutOfMemoryError: ...); please report
    it" and exit 3, not the advice a CPU out of memory gets."""
    import torch
    from transformers import BertModel

    def out_of_memory(*args, **kwargs):
        raise torch.OutOfMemoryError("CUDA out of memory. Tried to allocate 18.00 GiB. GPU 0 has a total capacity of "
                                     "23.64 GiB of which 3.10 GiB is free.")

    monkeypatch.setattr(BertModel, "forward", out_of_memory)
    assert cli.main([str(bert_dir), "--quiet", "--text", "the cat sat on the mat"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert "ran out of memory on this text (OutOfMemoryError: CUDA out of memory." in lines[0]
    assert "internal error" not in lines[0] and "stream_statistics" in lines[0]


def test_out_of_memory_outside_a_forward_is_bad_input_too(bert_dir, capsys, monkeypatch):
    """Memory running out past the forward (the metrics of a long probe) was "internal error ...", exit 3."""
    def out_of_memory(*args, **kwargs):
        raise RuntimeError("[enforce fail at alloc_cpu.cpp:127] DefaultCPUAllocator: can't allocate memory: you "
                           "tried to allocate 687748320 bytes.")

    monkeypatch.setattr(cli, "_diagnose", out_of_memory)
    assert cli.main([str(bert_dir), "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: out of memory (RuntimeError: ")
    assert "internal" not in lines[0]


def test_a_tokenizer_that_panics_on_the_probes_is_one_line(tmp_path, capsys, monkeypatch):
    """The tokenizers library panics past Oniguruma's retry limit with a BaseException: it passed `except Exception`
    and the CLI printed a Python traceback. The check of a tokenizer's regexes refuses this one (monkeypatched here);
    a panic it does not foresee is one line too."""
    from core.checkpoints import tokenizer as checkpoint_tokenizer
    from tiny_checkpoints import PANICKING_PATTERN, save_splitting_bert

    monkeypatch.setattr(checkpoint_tokenizer, "_risky", lambda tree: "")
    folder = save_splitting_bert(tmp_path / "panics", PANICKING_PATTERN)
    capsys.readouterr()  # save_pretrained's progress bar
    assert cli.main([str(folder), "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: the tokenizer failed on this text (PanicException: Onig: Regex search error: ")


@pytest.mark.parametrize("argv", [["demo-bert"], ["compare", "demo-bert", "demo-gpt2"]])
@pytest.mark.parametrize("device", ["mps", "vulkan", "meta", "quantum"])
def test_an_unusable_device_is_refused_before_the_model_is_loaded(capsys, monkeypatch, argv, device):
    import torch

    ran = []
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    monkeypatch.setattr(cli, "_diagnose", lambda args, progress: ran.append(args))
    monkeypatch.setattr(cli, "_compare", lambda args, progress: ran.append(args))
    assert cli.main([*argv, "--device", device, "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: ") and f"'{device}'" in lines[0]
    assert "internal error" not in lines[0] and ran == []


def test_formats_and_text_option(bert_dir, tmp_path, capsys):
    assert cli.main([str(bert_dir), "--text", "A short probe.", "--quiet"]) == 0
    markdown = capsys.readouterr().out
    assert markdown.startswith("# AttnScope diagnosis") and "## Pattern map" in markdown
    out = tmp_path / "report.html"
    assert cli.main([str(bert_dir), "--format", "html", "--out", str(out), "--quiet"]) == 0
    assert out.read_text().startswith("<!DOCTYPE html>")
    _, report = run_json(bert_dir, tmp_path, "--text", "One.", "--text", "Two words here.")
    assert [p["text"] for p in report["probes"]] == ["One.", "Two words here."]


@pytest.mark.slow  # two interpreter start-ups importing torch and transformers
def test_python_m_diagnostics(bert_dir, tmp_path):
    broken = scale_qk(bert_dir, tmp_path / "x30", 30.0)
    run = subprocess.run([sys.executable, "-m", "diagnostics", str(broken), "--format", "json"],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert run.returncode == 1
    assert json.loads(run.stdout)["schema"] == "attnscope.report/2"
    bad = subprocess.run([sys.executable, "-m", "diagnostics", str(tmp_path / "nope")],
                         cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert bad.returncode == 2 and len(bad.stderr.strip().splitlines()) == 1 and bad.stdout == ""


def test_what_loading_inferred_is_a_note_on_stderr(tmp_path, capsys):
    """load_model kept (model, tokenizer) of a checkpoint load and dropped its notes: nothing said that the
    architecture was read from the weights or that a demo model's tokenizer was borrowed."""
    from safetensors.torch import save_file

    import core

    model, _ = core.load_model("demo-gpt2", device="cpu")
    weights = tmp_path / "weights.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
    assert cli.main([str(weights), "--heads", "4", "--quiet", "--text", "the cat sat on the mat",
                     "--out", str(tmp_path / "r.md")]) in (0, 1)
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]
    assert any("read the architecture from the weights" in n for n in notes), notes
    assert any("demo-gpt2's tokenizer" in n for n in notes)


def test_a_report_says_whose_tokenizer_it_borrowed(tmp_path):
    """The borrowed tokenizer was a note on stderr only: the report (what one keeps, or downloads from the app) read
    like one of the model's own tokens."""
    from safetensors.torch import save_file

    import core

    model, _ = core.load_model("demo-gpt2", device="cpu")
    weights = tmp_path / "weights.safetensors"
    save_file({k: v.contiguous() for k, v in model.state_dict().items()}, str(weights))
    for ext, form in (("json", "json"), ("md", "markdown"), ("html", "html")):
        assert cli.main([str(weights), "--heads", "4", "--quiet", "--text", "the cat sat on the mat",
                         "--format", form, "--out", str(tmp_path / f"r.{ext}")]) in (0, 1)
    assert json.loads((tmp_path / "r.json").read_text())["model"]["borrowed_tokenizer"] == "demo-gpt2"
    said = "1, in demo-gpt2's tokens (borrowed: the model came without a tokenizer)"
    assert f"| probes | {said} |" in (tmp_path / "r.md").read_text()
    assert f"<th>probes</th><td>{said.replace(chr(39), '&#x27;')}</td>" in (tmp_path / "r.html").read_text()
    assert cli.main(["demo-gpt2", "--quiet", "--text", "the cat sat on the mat", "--format", "json",
                     "--out", str(tmp_path / "o.json")]) in (0, 1)
    assert json.loads((tmp_path / "o.json").read_text())["model"]["borrowed_tokenizer"] is None


def test_heads_that_a_model_folder_overrides_are_a_note(tmp_path, capsys):
    """The same model as a zip said "n_heads=2 ignored: config.json says 4"; as a folder, nothing."""
    from tiny_checkpoints import save_tiny_bert

    folder = save_tiny_bert(tmp_path / "bert")
    assert cli.main([str(folder), "--heads", "2", "--quiet", "--text", "the cat sat on the mat",
                     "--out", str(tmp_path / "r.md")]) in (0, 1)
    notes = [line for line in capsys.readouterr().err.splitlines() if line.startswith("note: ")]
    assert "note: n_heads=2 ignored: config.json says 4" in notes, notes


class _FakeReport:
    """What main() needs of a report, for the CLI's own behaviour: no model is loaded."""

    has_errors = has_new_errors = False

    def __init__(self, text="# AttnScope diagnosis: ≈ → é ≥\n"):
        self.model, self.text = {"name": "fake"}, text

    def to_markdown(self):
        return self.text

    to_json = to_html = to_markdown


@pytest.fixture
def diagnosed(monkeypatch):
    """The sources main() diagnosed or compared, each answered with a ``_FakeReport``."""
    ran = []
    monkeypatch.setattr(cli, "_diagnose", lambda args, progress: ran.append(args) or _FakeReport())
    monkeypatch.setattr(cli, "_compare", lambda args, progress: ran.append(args) or _FakeReport())
    return ran



def test_a_failed_write_leaves_the_report_that_was_there(tmp_path, capsys, monkeypatch, diagnosed):
    """--out was written in place: a full disk emptied the old report and left 4,096 bytes of the new one."""
    import stat

    out = tmp_path / "report.md"
    out.write_text("the old report\n")
    out.chmod(0o640)

    class FullDisk(io.FileIO):
        def write(self, data):
            super().write(bytes(data)[:4096])
            raise OSError(28, "No space left on device")
    with monkeypatch.context() as patched:
        patched.setattr(cli, "open", lambda fd, mode: FullDisk(fd, "wb"), raising=False)
        assert cli.main(["demo-bert", "--out", str(out), "--quiet"]) == 2
    assert capsys.readouterr().err == f"error: cannot write {out}: No space left on device\n"
    assert out.read_text() == "the old report\n" and [p.name for p in tmp_path.iterdir()] == ["report.md"]
    link = tmp_path / "latest.md"
    link.symlink_to(out)
    assert cli.main(["demo-bert", "--out", str(link), "--quiet"]) == 0
    assert link.is_symlink() and out.read_text().startswith("# AttnScope diagnosis")  # through the link
    assert stat.S_IMODE(out.stat().st_mode) == 0o640 and sorted(p.name for p in tmp_path.iterdir()) == [
        "latest.md", "report.md"]
    assert cli.main(["demo-bert", "--out", os.devnull, "--quiet"]) == 0
    assert stat.S_ISCHR(os.stat(os.devnull).st_mode)  # a device is written, never replaced


def test_an_out_whose_folder_takes_no_new_file_is_written_in_place(tmp_path, capsys, monkeypatch, diagnosed):
    """Renamed over, a report through a link into a read-only folder, or another user's file in a sticky folder
    (/tmp), failed after the whole run ("Permission denied"), where writing in place had worked; a link loop was
    "internal error" (exit 3); and a 0600 report's new copy was readable by all while it was written."""
    import stat

    out = tmp_path / "report.md"
    out.write_text("old")
    out.chmod(0o600)
    modes, real_open = [], open

    def recording(fd, mode):
        modes.append(stat.S_IMODE(os.fstat(fd).st_mode))
        return real_open(fd, mode)
    with monkeypatch.context() as patched:
        patched.setattr(cli, "open", recording, raising=False)
        assert cli.main(["demo-bert", "--out", str(out), "--quiet"]) == 0
    assert modes == [0o600] and stat.S_IMODE(out.stat().st_mode) == 0o600

    def refused(*args):
        raise PermissionError(1, "Operation not permitted")
    with monkeypatch.context() as patched:
        patched.setattr(cli.os, "replace", refused)
        out.write_text("old")
        assert cli.main(["demo-bert", "--out", str(out), "--quiet"]) == 0
    assert out.read_text().startswith("# AttnScope diagnosis") and [p.name for p in tmp_path.iterdir()] == ["report.md"]
    (tmp_path / "loop1").symlink_to(tmp_path / "loop2")
    (tmp_path / "loop2").symlink_to(tmp_path / "loop1")
    capsys.readouterr()
    assert cli.main(["demo-bert", "--out", str(tmp_path / "loop1"), "--quiet"]) == 2
    assert capsys.readouterr().err.startswith(f"error: cannot write {tmp_path / 'loop1'}: ")

def test_an_out_that_is_the_model_is_refused_before_the_diagnosis(bert_dir, tmp_path, capsys, monkeypatch,
                                                                  diagnosed):
    """`bert.zip --out bert.zip` replaced the checkpoint with its report; `--out bert/config.json` broke the folder."""
    archive = tmp_path / "bert.zip"
    archive.write_bytes(b"PK\x03\x04 a checkpoint")
    (tmp_path / "link.zip").symlink_to(archive)
    (tmp_path / "hard_config.json").hardlink_to(bert_dir / "config.json")  # outside the folder, its file inside
    monkeypatch.chdir(tmp_path)
    config = (bert_dir / "config.json").read_bytes()
    for argv, which in (([str(archive), "--out", "bert.zip"], "the model"),
                        (["bert.zip", "--out", "link.zip"], "the model"),
                        ([str(bert_dir), "--out", str(bert_dir / "config.json")], "the model"),
                        ([str(bert_dir), "--format", "json", "--out", str(bert_dir / "report.json")], "the model"),
                        (["compare", "demo-bert", "bert.zip", "--out", str(archive)], "model B"),
                        (["compare", str(bert_dir), "demo-bert", "--out", str(bert_dir / "r.md")], "model A"),
                        (["compare", "demo-bert", str(bert_dir), "--out", "hard_config.json"], "model B")):
        assert cli.main([*argv, "--quiet"]) == 2, argv
        lines = capsys.readouterr().err.strip().splitlines()
        assert len(lines) == 1 and lines[0].startswith("error: --out ") and f"would overwrite {which}" in lines[0]
    assert archive.read_bytes() == b"PK\x03\x04 a checkpoint" and (bert_dir / "config.json").read_bytes() == config
    assert not (bert_dir / "report.json").exists() and diagnosed == []


def test_an_out_inside_a_model_with_a_long_or_odd_name_is_refused_in_one_short_line(tmp_path, capsys, diagnosed):
    """The overwrite refusal printed --out and the model's path uncut: a newline in the folder's name split the
    message in two, and a long path ran it to 800 characters."""
    folder = tmp_path / ("m\n" + "d" * 200) / ("e" * 200)
    folder.mkdir(parents=True)
    assert cli.main([str(folder), "--out", str(folder / "report.md"), "--quiet"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "would overwrite the model" in lines[0] and len(lines[0]) < 600, lines
    assert diagnosed == [] and not (folder / "report.md").exists()


def test_an_out_beside_the_model_or_named_like_a_known_model_is_written(tmp_path, monkeypatch, diagnosed):
    """A known model's name is not a file here: `demo-bert --out demo-bert` writes ./demo-bert."""
    archive = tmp_path / "bert.zip"
    archive.write_bytes(b"PK\x03\x04 a checkpoint")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["demo-bert", "--out", "demo-bert", "--quiet"]) == 0
    assert cli.main(["bert.zip", "--out", "bert.zip.md", "--quiet"]) == 0
    assert (tmp_path / "demo-bert").read_text(encoding="utf-8") == _FakeReport().text
    assert (tmp_path / "bert.zip.md").is_file() and len(diagnosed) == 2


def test_a_file_name_that_is_not_utf8_is_shown_with_a_replacement_character(tmp_path, capsysbinary):
    """A Latin-1 name (b'b\\xe9.pt'): --out failed with UnicodeEncodeError (exit 3) after the whole diagnosis, and
    the JSON on stdout held the raw byte 0xE9, which is not UTF-8."""
    import torch

    from tiny import tiny_bert

    weights = tmp_path / b"b\xe9.pt".decode("utf-8", "surrogateescape")
    torch.save(tiny_bert().state_dict(), weights)
    out = tmp_path / "r.json"
    assert cli.main([str(weights), "--heads", "4", "--format", "json", "--out", str(out), "--quiet"]) in (0, 1)
    assert json.loads(out.read_bytes().decode("utf-8"))["model"]["name"].endswith("b\ufffd.pt")
    assert cli.main([str(weights), "--heads", "4", "--format", "json", "--quiet"]) in (0, 1)
    assert json.loads(capsysbinary.readouterr().out.decode("utf-8"))["model"]["name"].endswith("b\ufffd.pt")
    assert cli.main(["compare", str(weights), str(weights), "--heads", "4", "--format", "json", "--quiet"]) == 0
    compared = json.loads(capsysbinary.readouterr().out.decode("utf-8"))
    assert compared["a"]["name"].endswith("b\ufffd.pt") and compared["b"]["name"].endswith("b\ufffd.pt")


@pytest.mark.parametrize("encoding", ["cp1252", "ascii"])
def test_the_report_is_utf8_whatever_the_stdout_encoding(encoding, monkeypatch, diagnosed):
    """PYTHONIOENCODING=cp1252 (a Windows pipe) or ascii: UnicodeEncodeError, exit 3 and no report."""
    stdout = io.TextIOWrapper(io.BytesIO(), encoding=encoding)
    monkeypatch.setattr(sys, "stdout", stdout)
    assert cli.main(["demo-bert", "--quiet"]) == 0
    assert stdout.buffer.getvalue().decode("utf-8") == _FakeReport().text


class _ClosedPipe:
    """A stdout whose reader went away (`| head`, a pager quit early)."""

    def __init__(self):
        self.buffer = self

    def write(self, data):
        raise BrokenPipeError(32, "Broken pipe")

    def flush(self):
        pass


def test_a_closed_stdout_ends_quietly_with_141(monkeypatch, capsys, diagnosed):
    """`--format html | true` said "internal error (BrokenPipeError); please report it" and exited 3."""
    monkeypatch.setattr(sys, "stdout", _ClosedPipe())
    assert cli.main(["demo-bert", "--format", "html", "--quiet"]) == cli.EXIT_BROKEN_PIPE == 141
    assert capsys.readouterr().err == ""


class _LeavingReader(_ClosedPipe):
    """A reader that leaves in the middle of a long report: the write in progress is cut short (CPython returns
    the bytes it wrote, raising nothing), the next one raises."""

    def __init__(self):
        super().__init__()
        self.written = 0

    def write(self, data):
        if self.written:
            raise BrokenPipeError(32, "Broken pipe")
        self.written = min(len(data) - 1, 65536)  # all but the last byte, or what a pipe takes at once
        return self.written


class _FullDisk(_ClosedPipe):
    def write(self, data):
        raise OSError(28, "No space left on device")


def test_a_reader_leaving_mid_report_or_a_full_stdout_is_no_success_and_no_bug(monkeypatch, capsys, diagnosed):
    """A report over 64 KiB whose reader left exited 0 as if delivered; `> /dev/full` was 'internal error', 3."""
    monkeypatch.setattr(sys, "stdout", _LeavingReader())
    assert cli.main(["demo-bert", "--quiet"]) == cli.EXIT_BROKEN_PIPE and capsys.readouterr().err == ""
    monkeypatch.setattr(sys, "stdout", _FullDisk())
    assert cli.main(["demo-bert", "--quiet"]) == cli.EXIT_BAD_INPUT
    assert capsys.readouterr().err == "error: cannot write the report to stdout: No space left on device\n"


def test_ctrl_c_is_one_line_and_130(monkeypatch, capsys):
    """Ctrl-C in a minutes-long diagnosis printed a 60-line traceback."""
    def interrupted(args, progress):
        raise KeyboardInterrupt
    monkeypatch.setattr(cli, "_diagnose", interrupted)
    assert cli.main(["demo-bert", "--quiet"]) == 130 and capsys.readouterr().err == "error: interrupted\n"


def test_ctrl_c_while_the_packages_import_is_one_line_and_130(tmp_path):
    """torch and transformers take seconds to import, before main() runs: Ctrl-C then printed a 53-line traceback.
    A torch that raises KeyboardInterrupt as it imports stands in for the keypress; a program importing diagnose
    still gets the KeyboardInterrupt (``import diagnostics`` alone imports no torch)."""
    (tmp_path / "torch.py").write_text("raise KeyboardInterrupt\n")
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(Path(cli.__file__).parents[1])])}
    run = subprocess.run([sys.executable, "-m", "diagnostics", "demo-bert"], env=env, capture_output=True, text=True,
                         timeout=60)
    assert (run.returncode, run.stderr) == (130, "error: interrupted\n")
    run = subprocess.run([sys.executable, "-c", "from diagnostics import diagnose"], env=env, capture_output=True,
                         text=True, timeout=60)
    assert run.returncode == -2 and run.stderr.rstrip().endswith("KeyboardInterrupt")  # killed by SIGINT, as before



def test_sigterm_removes_the_unpacked_upload_and_says_so(tmp_path):
    """SIGTERM (kill, timeout, docker stop) ended the CLI at once, with no word, and left the unpacked checkpoint in
    the temporary folder for good. Here it arrives while the upload is unpacked, before the model is built."""
    import shutil

    archive = shutil.make_archive(str(tmp_path / "demo"), "zip", ROOT / "core" / "demo_models" / "demo-bert")
    code = ("import os, runpy, signal, sys\nfrom core.checkpoints import checkpoint\n"
            "build = checkpoint._load_folder\ndef killed(*args, **kwargs):\n"
            "    os.kill(os.getpid(), signal.SIGTERM)\n    return build(*args, **kwargs)\n"
            "checkpoint._load_folder = killed\nsys.argv = ['diagnostics', *sys.argv[1:]]\n"
            "runpy.run_module('diagnostics', run_name='__main__')\n")
    (tmp_path / "tmp").mkdir()
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TMPDIR": str(tmp_path / "tmp"), "ATTNSCOPE_ALLOWED_ROOTS": "/"}
    run = subprocess.run([sys.executable, "-c", code, archive, "--quiet"], cwd=ROOT, env=env, capture_output=True,
                         text=True, timeout=120)
    assert (run.returncode, run.stderr) == (143, "error: terminated\n")
    assert list((tmp_path / "tmp").iterdir()) == []

@pytest.mark.parametrize("argv", [["--help"], ["demo-bert", "--format", "xml"]])
def test_help_and_a_bad_option_answer_before_torch_and_transformers_import(argv):
    """`python -m diagnostics --help` took 5-7 s, and so did a typo's one-line usage error: importing the packages
    imported torch and transformers before the parser ran."""
    code = ("import runpy, sys\nsys.argv = ['diagnostics', *sys.argv[1:]]\ntry:\n"
            "    runpy.run_module('diagnostics', run_name='__main__')\nexcept SystemExit as end:\n"
            "    print(end.code, sorted({'torch', 'transformers'} & set(sys.modules)))\n")
    run = subprocess.run([sys.executable, "-c", code, *argv], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=60)
    status = 0 if argv == ["--help"] else cli.EXIT_BAD_INPUT
    assert run.stdout.splitlines()[-1] == f"{status} []", run.stderr
    assert ("usage:" in run.stdout) if status == 0 else run.stderr.startswith("error: usage:")


@pytest.mark.parametrize("heads", ["0", "-4", "2.5"])
def test_heads_must_be_a_positive_whole_number(heads, capsys, diagnosed):
    """`--heads -4` was said not to divide d_model; `--heads 0` on a folder was 'ignored' with a note."""
    assert cli.main(["demo-bert", "--heads", heads, "--quiet"]) == 2 and diagnosed == []
    assert "--heads: expected a whole number of at least 1" in capsys.readouterr().err


def test_a_missing_weights_file_is_no_hub_id(tmp_path, monkeypatch, capsys):
    """`weights.safetensors` not found here was looked up on the Hugging Face Hub, and an absolute one called a
    folder."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["weights.safetensors", "--quiet"]) == 2
    assert capsys.readouterr().err.startswith("error: no file or folder weights.safetensors; check the path")


def test_out_dash_is_stdout_and_an_empty_out_is_refused(tmp_path, monkeypatch, capsys, diagnosed):
    """`--out -` created a file named '-'; `--out ""` wrote to stdout without a word."""
    monkeypatch.chdir(tmp_path)
    assert cli.main(["demo-bert", "--out", "-", "--quiet"]) == 0
    assert capsys.readouterr().out == _FakeReport().text and not (tmp_path / "-").exists()
    assert cli.main(["demo-bert", "--out", "", "--quiet"]) == 2
    assert capsys.readouterr().err == "error: --out needs a file name (or - for stdout)\n" and len(diagnosed) == 1


def test_options_before_compare_say_to_put_compare_first(capsys, diagnosed):
    """`--quiet compare A B` said only "unrecognized arguments: A B"."""
    assert cli.main(["--quiet", "compare", "A", "B"]) == 2
    lines = capsys.readouterr().err.strip().splitlines()
    assert len(lines) == 1 and "put compare first: python -m diagnostics compare A B" in lines[0] and diagnosed == []


def test_error_messages_show_control_characters_as_escapes(tmp_path, capsys):
    """A path holding an ESC sequence reached stderr raw, where it drives the terminal."""
    assert cli.main([str(tmp_path / "m\x1b[31mred\x9b"), "--quiet"]) == 2
    err = capsys.readouterr().err
    assert "\x1b" not in err and "\x9b" not in err and "m\\x1b[31mred\\x9b" in err


@pytest.mark.slow  # two interpreter start-ups importing torch and transformers
def test_python_m_diagnostics_on_an_ascii_stdout_and_a_closed_pipe(bert_dir):
    """A real process: stdout's encoding is not UTF-8; its reader goes away before the report (`| true`)."""
    command = [sys.executable, "-m", "diagnostics", str(bert_dir), "--text", "A short probe.", "--quiet"]
    ascii_run = subprocess.run(command, cwd=ROOT, capture_output=True, timeout=120,
                               env={**os.environ, "PYTHONIOENCODING": "ascii"})
    assert ascii_run.returncode == 0 and "≥" in ascii_run.stdout.decode("utf-8"), ascii_run.stderr
    closed = subprocess.Popen([*command, "--format", "html"], cwd=ROOT, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE)
    closed.stdout.close()
    assert closed.wait(timeout=120) == 141 and closed.stderr.read() == b""
    closed.stderr.close()


def test_the_progress_bar_shows_its_step_once(monkeypatch):
    """Its format put the step before the percentage and again after the bar: "probe 1/7:  40%|####| probe 1/7"."""
    class Terminal(io.StringIO):
        def isatty(self):
            return True

    stderr = Terminal()
    monkeypatch.setattr(sys, "stderr", stderr)
    with cli._progress(quiet=False) as tell:
        tell(0.4, "probe 1/7")
    drawn = stderr.getvalue().split("\r")
    assert any("40%" in line for line in drawn)
    assert all(line.count("probe 1/7") <= 1 for line in drawn)
