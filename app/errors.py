"""Turn any exception into one readable line on the page, never a traceback."""

from __future__ import annotations

import logging
import re

import streamlit as st

import core

log = logging.getLogger("attnscope.app")
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|<>~$:=^\"'&])")  # as app.plain.for_markdown


def message(err: Exception) -> str:
    """AttnScope's own errors carry an actionable message; anything else gets a one-line summary."""
    if isinstance(err, core.AttnScopeError):
        return str(err)
    first = (str(err).strip().splitlines() or [""])[0][:300]
    log.exception("unexpected error in the app")
    return f"Something went wrong ({type(err).__name__}: {first}). Try another input; details are in the server log."


def as_plain_markdown(text: str) -> str:
    """``text`` shown as the characters it holds: messages quote file names and paths a user chose."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", str(text)).replace("\n", " ")


def show(err: Exception) -> None:
    st.error(as_plain_markdown(message(err)), icon="⚠️")
