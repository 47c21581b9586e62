"""Temporary folders of a killed process are removed by the next one."""

import os
import subprocess
import sys

from core.checkpoints import temp_dirs


def test_the_folders_of_a_gone_process_are_swept_and_no_others(tmp_path, monkeypatch):
    """SIGKILL runs no finaliser: a killed server's staged uploads stayed on disk for good, outside every cap."""
    monkeypatch.setattr(temp_dirs.tempfile, "tempdir", str(tmp_path))
    gone = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    here = temp_dirs._namespace()
    dead = tmp_path / f"attnscope-upload-{here}-{int(gone.stdout)}-abcd1234"
    elsewhere = tmp_path / f"attnscope-upload-{int(here) + 1}-{int(gone.stdout)}-abcd1234"  # another container's
    mine = temp_dirs.owned_temp_dir()
    (dead / "deep").mkdir(parents=True)
    (dead / "deep" / "model.zip").write_bytes(b"x" * 100)
    others = [tmp_path / "attnscope-upload-6v7hs8b5", tmp_path / "attnscope-name-123-x", tmp_path / "unrelated",
              tmp_path / f"attnscope-upload-{int(gone.stdout)}-abcd1234", elsewhere]
    for folder in others:
        folder.mkdir()
    (tmp_path / f"attnscope-upload-{here}-{int(gone.stdout)}-link").symlink_to(tmp_path / "unrelated")
    assert mine.name.startswith(f"attnscope-upload-{here}-{os.getpid()}-") and oct(mine.stat().st_mode)[-3:] == "700"
    assert temp_dirs.sweep_orphans() == 1
    assert not dead.exists() and mine.is_dir() and all(folder.is_dir() for folder in others)
    assert (tmp_path / f"attnscope-upload-{here}-{int(gone.stdout)}-link").is_symlink()
