"""The server's own log: each record with its time, level and logger, and no quoted text able to pose as a record."""

from __future__ import annotations

import logging
import re

# Control characters but newline and tab (C0, DEL and C1: ESC and CSI start a terminal's escape sequences), and
# the Unicode line and paragraph separators (str.splitlines and many log viewers break lines there)
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u2028\u2029]")
FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


class RecordLines(logging.Formatter):
    """A record's continuation lines (a traceback, a message quoting a newline) indented, and other control
    characters escaped: an error's text comes from what a visitor typed or uploaded, and at the start of a line it
    could pass for a record of the server's own, or clear the operator's terminal."""

    def format(self, record: logging.LogRecord) -> str:
        text = _CONTROL.sub(lambda m: repr(m.group())[1:-1], super().format(record))
        return text.replace("\n", "\n    ")


def log_to_stderr(name: str = "attnscope") -> None:
    """Give ``name``'s logger a stderr handler of ``RecordLines`` (once; records below warning are not written):
    with none, Python wrote bare messages, no time or logger."""
    logger = logging.getLogger(name)
    if not any(isinstance(h.formatter, RecordLines) for h in logger.handlers):
        handler = logging.StreamHandler()
        handler.setFormatter(RecordLines(FORMAT))
        logger.addHandler(handler)
