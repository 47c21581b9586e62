"""Benchmarks, run on their own (``python -m benchmarks.<name>``), never by the default test run."""

import argparse

MODELS = ["minilm", "smollm2", "demo-bert", "demo-gpt2"]  # the calibration benchmarks' default models


def rows_or_exit(parser, name: str, table) -> None:
    """The rows ``table(name)`` returns (a table's rows for model ``name``), printed; a model that does not load is
    argparse's one line and exit 2 (``--models nosuch`` was a ModelLoadError traceback)."""
    from core.errors import ModelLoadError

    try:
        for row in table(name):
            print(row, flush=True)
    except ModelLoadError as err:  # only: a benchmark's own bug keeps its traceback
        parser.error(f"--models {name}: {err}")


def positive(text: str) -> int:
    """An argparse type: a whole number of at least 1 (``--tokens 0`` was an IndexError deep in a run)."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a whole number: {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, got {value}")
    return value
