"""The diagnostics CLI on every bad input of docs/checkpoints.md: exit code 2 and that one line on stderr.

Every row runs the CLI's ``main`` in-process (importing torch once); one row also
runs ``python -m diagnostics`` as a real process, to cover the interpreter exit.
"""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from diagnostics import cli
from hostile_inputs import BAD_INPUTS, MARKER, state_dict_without_heads, table_rows

ROOT = Path(__file__).resolve().parents[2]
ROWS = table_rows()


def _stderr_lines(text: str) -> list[str]:
    return [line for line in text.splitlines() if line.strip()]


@pytest.mark.parametrize("row, message", ROWS, ids=[row for row, _ in ROWS])
def test_cli_exits_2_with_the_one_line_message(tmp_path, monkeypatch, capsys, row, message):
    path = BAD_INPUTS[row](tmp_path)
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    status = cli.main([str(path), "--quiet"])
    lines = _stderr_lines(capsys.readouterr().err)
    assert status == 2, lines
    assert len(lines) == 1 and message in lines[0], lines
    assert not (tmp_path / MARKER).exists()


def test_heads_option_loads_a_bare_state_dict(tmp_path, monkeypatch, capsys):
    path = state_dict_without_heads(tmp_path)
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    status = cli.main([str(path), "--heads", "4", "--format", "json", "--quiet"])
    assert status in (0, 1), capsys.readouterr().err
    assert '"schema": "attnscope.report/2"' in capsys.readouterr().out


@pytest.mark.slow
def test_real_process_exits_2_on_a_hostile_pickle(tmp_path):
    row, message = next((r, m) for r, m in ROWS if r == "pickle-os-system")
    path = BAD_INPUTS[row](tmp_path)
    env = {**os.environ, "ATTNSCOPE_ALLOWED_ROOTS": str(tmp_path), "PYTHONPATH": str(ROOT)}
    done = subprocess.run([sys.executable, "-m", "diagnostics", str(path)], cwd=ROOT, env=env,
                          capture_output=True, text=True, timeout=300)
    lines = _stderr_lines(done.stderr)
    assert done.returncode == 2 and len(lines) == 1 and message in lines[0], done.stderr[-2000:]
    assert not (tmp_path / MARKER).exists()
