"""The server's log: what a visitor's text puts in a record cannot pose as a record of its own."""

import logging
import sys

from app.server.log_lines import RecordLines, log_to_stderr


def _record(message, exc_info=None):
    return logging.LogRecord("attnscope.app", logging.ERROR, __file__, 1, "%s", (message,), exc_info)


def test_a_quoted_newline_or_escape_sequence_stays_inside_its_record():
    forged = "bad file 'x\n2026-12-07 02:40:00.000 Uvicorn server started\n\x1b[2J\x1b[31mFORGED\x9b0m'"
    try:
        raise ValueError(forged)
    except ValueError:
        text = RecordLines("%(levelname)s %(name)s: %(message)s").format(_record(forged, sys.exc_info()))
    lines = text.split("\n")
    assert lines[0].startswith("ERROR attnscope.app: bad file")
    assert all(line.startswith("    ") for line in lines[1:])  # the message's own lines and the traceback
    assert "\x1b" not in text and "\x9b" not in text and "\\x1b[2J" in text
    assert any(line.strip().startswith("ValueError: bad file") for line in lines)


def test_the_handler_is_added_once_and_dates_each_record(capsys):
    logger = logging.getLogger("attnscope-test-log-lines")
    log_to_stderr(logger.name)
    log_to_stderr(logger.name)
    [handler] = logger.handlers
    try:
        logger.warning("upload refused")
        line = handler.format(_record("upload refused"))
        assert line.split(" ")[0].count("-") == 2 and line.endswith("ERROR attnscope.app: upload refused")
    finally:
        logger.removeHandler(handler)
