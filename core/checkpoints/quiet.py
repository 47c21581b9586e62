"""Silence transformers' load report and progress bars while AttnScope loads a model.

A head-less LM checkpoint is expected (its "newly initialised" report is noise to
our users); the caller reports what matters.
"""

from __future__ import annotations

from contextlib import contextmanager

from transformers.utils import logging as hf_logging


@contextmanager
def quiet_transformers():
    """Turn transformers' logging down to errors and its progress bars off, then restore both."""
    verbosity, bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
    hf_logging.set_verbosity_error()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        hf_logging.set_verbosity(verbosity)
        if bars:
            hf_logging.enable_progress_bar()
