"""The monitor-overhead benchmark still runs (tiny model, few steps); the documented run is marked ``benchmark``."""

import pytest

from benchmarks import monitor_overhead


@pytest.mark.slow
def test_the_benchmark_measures_a_ratio_in_process():
    result = monitor_overhead.measure("tiny", steps=2, every=10, batch=2, length=16)
    assert result["step_s"] > 0 and result["measure_s"] > 0
    assert result["overhead"] == pytest.approx(result["measure_s"] / (10 * result["step_s"]))


@pytest.mark.benchmark
def test_default_interval_costs_at_most_3_percent(capsys):
    """The documented command (minutes on 2 cores): docs/training.md's number."""
    result = monitor_overhead.measure()
    assert result["overhead"] <= 0.03, result
    print(result)
