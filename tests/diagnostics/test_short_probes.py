"""Probes too short to judge: the threshold holds, uncapped, on the shipped models (``benchmarks.short_probes``)."""

import pytest

from benchmarks import short_probes
from diagnostics.probe_texts import MIN_JUDGED_TOKENS


def _rows(capsys, models, lengths):
    assert short_probes.main(["--models", *models, "--lengths", *map(str, lengths)]) == 0
    rows = [line.strip("|").split("|") for line in capsys.readouterr().out.splitlines()[2:]]
    return {(cells[0].strip(), int(cells[1])): [c.strip() for c in cells[2:]] for cells in rows}


def _judged(cells):
    """Healthy: no probe alarmed; Q/K x 8: saturated on every probe (tuning and held-out columns)."""
    healthy_tuning, broken_tuning, healthy_held_out, broken_held_out = cells
    return (healthy_tuning.startswith("0/") and healthy_held_out.startswith("0/")
            and all(int(b.split("/")[0]) == int(b.split("/")[1]) > 0 for b in (broken_tuning, broken_held_out)))


def test_demo_models_alarm_below_the_threshold_and_not_at_it(capsys):
    rows = _rows(capsys, ["demo-bert", "demo-gpt2"], [4, MIN_JUDGED_TOKENS])
    assert not rows[("demo-gpt2", 4)][0].startswith("0/")  # two-to-four-token probes read as diffuse
    assert all(_judged(rows[(name, MIN_JUDGED_TOKENS)]) for name in ("demo-bert", "demo-gpt2")), rows


def test_the_cap_is_switched_back_on():
    with short_probes.uncapped():
        pass
    from diagnostics import diagnose
    assert diagnose("demo-gpt2", texts=["Hello"]).finding("probes_short") is not None


@pytest.mark.slow
def test_real_models_are_judged_at_the_threshold(capsys):
    rows = _rows(capsys, ["minilm", "smollm2"], [MIN_JUDGED_TOKENS])
    assert all(_judged(cells) for cells in rows.values()), rows
