"""Silence transformers' load report and progress bars while AttnScope loads a model.

A head-less LM checkpoint is expected (its "newly initialised" report is noise to
our users); the caller reports what matters.
"""

from __future__ import annotations

import threading
from contextlib import contextmanager
from types import SimpleNamespace

from transformers.utils import logging as hf_logging

_LOCK = threading.Lock()
_quiet = SimpleNamespace(loads=0, verbosity=None, bars=False)  # loads inside ``quiet_transformers`` now


@contextmanager
def quiet_transformers():
    """Turn transformers' logging down to errors and its progress bars off, and both back as they were when the
    last load inside ends. The setting is the process's: a server's sessions load at once, and the first load to
    end had turned the logging back on under the others (an upload's config values then reached the log)."""
    with _LOCK:
        if _quiet.loads == 0:
            _quiet.verbosity, _quiet.bars = hf_logging.get_verbosity(), hf_logging.is_progress_bar_enabled()
            hf_logging.set_verbosity_error()
            hf_logging.disable_progress_bar()
        _quiet.loads += 1
    try:
        yield
    finally:
        with _LOCK:
            _quiet.loads -= 1
            if _quiet.loads == 0:
                hf_logging.set_verbosity(_quiet.verbosity)
                if _quiet.bars:
                    hf_logging.enable_progress_bar()
