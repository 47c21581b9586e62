"""Benchmarks, run on their own (``python -m benchmarks.<name>``), never by the default test run."""

import argparse

MODELS = ("minilm", "smollm2", "demo-bert", "demo-gpt2")  # the models the calibration benchmarks judge


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1 (``--tokens 0`` was an IndexError deep in a run)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
