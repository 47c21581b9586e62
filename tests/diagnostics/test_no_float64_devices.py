"""Streamed statistics on a device without float64 (Apple's MPS, which ``core.device.pick_device`` picks on a Mac).

The streamed sums live on the model's device; they were float64 there, and MPS refuses float64 tensors, so every
streamed diagnosis, lockstep compare and training-monitor step failed on a Mac. Here the CPU stands in for such a
device (``row_stats.NO_FLOAT64``) and every op that makes a float64 tensor fails, as it would on MPS.
"""

import importlib

import pytest
import torch
from torch.overrides import TorchFunctionMode

from diagnostics import diagnose
from diagnostics.compare import compare
from diagnostics.measure import row_stats
from diagnostics.monitor import AttentionMonitor
from tiny import bpe_tokenizer, tiny_gpt2

TEXTS = ["The cat sat on the mat and looked out of the window at the rain, and the rain did not stop."]


class _NoFloat64(TorchFunctionMode):
    """Fails every torch op that makes a float64 tensor."""

    def __torch_function__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        for value in out if isinstance(out, (tuple, list)) else (out,):
            if isinstance(value, torch.Tensor) and value.dtype == torch.float64:
                raise TypeError(f"float64 from {getattr(func, '__name__', func)} on a device without float64")
        return out


@pytest.fixture
def no_float64(monkeypatch):
    monkeypatch.setattr(row_stats, "NO_FLOAT64", ("cpu",), raising=False)
    monkeypatch.setattr(importlib.import_module("diagnostics.diagnose"), "STREAM_ABOVE_TOKENS", 4)
    return _NoFloat64


def test_a_streamed_diagnosis_needs_no_float64_and_agrees_with_float64_sums(no_float64, monkeypatch):
    pair = tiny_gpt2(), bpe_tokenizer()
    with no_float64():
        narrow = diagnose(pair, TEXTS)
    monkeypatch.setattr(row_stats, "NO_FLOAT64", ())
    wide = diagnose(pair, TEXTS)
    assert narrow.model["streamed"] and wide.model["streamed"]
    for got, want in zip(narrow.heads, wide.heads, strict=True):
        assert got.pattern == want.pattern and got.role_names == want.role_names
        for name, value in want.metrics.items():
            if isinstance(value, float):
                assert got.metrics[name] == pytest.approx(value, rel=1e-4, abs=1e-5), name


def test_a_lockstep_compare_needs_no_float64(no_float64):
    model, tokenizer = tiny_gpt2(), bpe_tokenizer()
    with no_float64():
        report = compare((model, tokenizer), (model, tokenizer), TEXTS)
    assert report.streamed and all(h.js_distance == pytest.approx(0.0, abs=1e-6) for h in report.heads)


def test_the_training_monitor_needs_no_float64(no_float64):
    monitor = AttentionMonitor(bpe_tokenizer(), probes=TEXTS)
    with no_float64():
        record = monitor.check(tiny_gpt2(), 0)
    assert record["heads"]
