"""Turn any exception into one readable line on the page, never a traceback."""

from __future__ import annotations

import contextlib
import functools
import logging
import re
import time

import streamlit as st

import core
from app.plain import for_markdown
from core.errors import first_line, is_failure, panicked

log = logging.getLogger("attnscope.app")
# core's limits tell a library or CLI user how to raise them; on a page, only whoever runs the server can
_RAISE_LIMIT = re.compile(r"raise (?:it|the limit) with (ATTNSCOPE_[A-Z_]+)(?: or Limits\(\w+=\.\.\.\))?")
FOR_THE_PAGE = r"whoever runs this AttnScope server can raise the limit (\1)"
_OPERATOR_TOLD: dict[str, float] = {}  # what the log has told whoever runs the server, by kind: when
RETELL_S = 3600.0  # a kind told again after this long (a disk that fills again); never once per page view


def message(err: BaseException) -> str:
    """AttnScope's own errors carry an actionable message; anything else gets a one-line summary. What only whoever
    runs the server can fix (a setting, the installation, the disk, the memory, a limit of theirs that turned a
    visitor away) is also logged for them: only visitors' pages had said it."""
    if panicked(err):
        log.error("a library panicked: %s", first_line(err))
        return panicked(err)[0].upper() + panicked(err)[1:]
    if isinstance(err, core.AttnScopeError):
        text = _RAISE_LIMIT.sub(FOR_THE_PAGE, str(err))
        limit = _RAISE_LIMIT.search(str(err))
        if isinstance(err, (core.ServerError, core.OutOfMemory)) or limit:
            _tell_operator(limit.group(1) if limit else type(err).__name__, f"{type(err).__name__}: {err}")
        return text
    text = err.strerror if isinstance(err, OSError) and err.strerror else str(err)  # no server path on the page
    first = (text.strip().splitlines() or [""])[0][:300]
    log.exception("unexpected error in the app")
    return f"Something went wrong ({type(err).__name__}: {first}). Try another input; details are in the server log."


def _tell_operator(kind: str, text: str) -> None:
    """Log ``text`` unless its ``kind`` (an error type, or the setting a limit names) was told within ``RETELL_S``:
    once per text, a visitor's refused uploads of ever new names or sizes wrote a line each."""
    now = time.monotonic()
    if now - _OPERATOR_TOLD.get(kind, -RETELL_S) >= RETELL_S:
        _OPERATOR_TOLD[kind] = now
        log.warning("for whoever runs this server: %s", text)


def show(err: Exception) -> None:
    shown(message(err))


def caught(draw):
    """``draw`` with any error shown as one line: under ``st.fragment`` an error would be a traceback on the page."""
    @functools.wraps(draw)
    def drawn(*args, **kwargs):
        try:
            with panics_shown():
                return draw(*args, **kwargs)
        except Exception as err:  # noqa: BLE001  Streamlit's rerun and stop signals are BaseExceptions: they pass
            show(err)
    return drawn


@contextlib.contextmanager
def panics_shown():
    """A native library's panic (``core.errors.panicked``) shown as one line; every other BaseException passes
    (Streamlit's rerun and stop signals). Unshown, it ended Streamlit's script thread and left the page "running"."""
    try:
        yield
    except BaseException as err:
        if not is_failure(err):
            raise
        show(err)


def shown(text: str) -> None:
    """An error line as plain text: messages quote file names and paths a user chose, which may hold markdown."""
    st.error(for_markdown(text), icon="⚠️")
