"""Uploads go to disk: each file from ``st.file_uploader`` is copied into a private folder, then released.

Streamlit 1.67 spools an upload's request body to a temporary file but then
reads it whole into its in-memory file manager, where it stays as long as the
widget holds it; and every run deep-copies each widget's value, so a script that
reads an uploader holds a second copy of every file (``SessionState`` returns
``deepcopy(widget_value)``). ``share_uploaded_bytes`` gives ``UploadedFile`` a
``__deepcopy__`` that shares the immutable bytes instead (``io.BytesIO`` copies
on write, so the copy stays independent). ``Staged.add`` copies each file in
1 MB chunks into a fresh 0700 folder of this session and ``release`` drops
Streamlit's record of it (the page then swaps the widget for a fresh one), so an
upload costs memory once, while it arrives, and not again while the model is
loaded.

A ``Staged`` upload is what the Diagnose page loads. Each drop replaces the
one before: two uploads in a row are two models, never one upload of both
(which once failed with "holds no model … among its 2 files", and loose files
of two models would mix silently). Its folder is removed when the upload is
replaced (once the new one is on disk: a failed copy keeps it) or cleared, or
when the session's state is dropped (``weakref.finalize``).
"""

from __future__ import annotations

import gc
import shutil
import tempfile
import weakref
from contextlib import ExitStack, contextmanager
from pathlib import Path

from streamlit.runtime import Runtime
from streamlit.runtime.uploaded_file_manager import UploadedFile, UploadedFileRec
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from core.checkpoints.archive import CHUNK, Limits, check_upload_size
from core.errors import CheckpointError


def _shared_copy(self: UploadedFile, memo) -> UploadedFile:
    """A copy of an uploaded file that shares its bytes until either is written (``io.BytesIO`` copy on write)."""
    record = UploadedFileRec(self.file_id, self.name, self.type, self.getvalue())  # getvalue: the bytes, not a copy
    twin = UploadedFile(record, self._file_urls)
    twin.seek(self.tell())
    return twin


def share_uploaded_bytes() -> None:
    """Make Streamlit's per-run ``deepcopy`` of an uploader's value share the file's bytes (idempotent)."""
    UploadedFile.__deepcopy__ = _shared_copy


share_uploaded_bytes()


class Staged:
    """Uploaded files on disk, by the name the user gave them."""

    def __init__(self):
        self.folder = Path(tempfile.mkdtemp(prefix="attnscope-upload-"))
        self.files: dict[str, Path] = {}
        self._count = 0
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.folder), True)

    def add(self, name: str, stream) -> None:
        """Copy ``stream`` (from its start, in chunks) under ``name``; a file of the same name is replaced."""
        self._count += 1
        path = self.folder / str(self._count)  # the user's name never becomes a path
        stream.seek(0)
        with open(path, "xb") as out:
            shutil.copyfileobj(stream, out, CHUNK)
        if name in self.files:
            self.files.pop(name).unlink()
        self.files[name] = path

    @property
    def names(self) -> list[str]:
        return list(self.files)

    @property
    def size(self) -> int:
        return sum(p.stat().st_size for p in self.files.values())

    @contextmanager
    def opened(self):
        """``[(name, open binary file)]`` for ``core.load_untrusted``; closed on exit."""
        with ExitStack() as stack:
            yield [(name, stack.enter_context(path.open("rb"))) for name, path in self.files.items()]

    def remove(self) -> None:
        self._cleanup()


def stage(previous: Staged | None, uploaded, limits: Limits | None = None) -> Staged:
    """``uploaded`` files on disk in a new ``Staged``; ``previous`` is removed once they all are. Files above the
    upload limit together (Streamlit caps each file alone) are refused before a byte is written; a copy that
    fails (a full disk) is one CheckpointError, its part-copy removed. Either way ``previous`` stays as it was."""
    uploaded = list(uploaded)
    name = uploaded[0].name if len(uploaded) == 1 else f"the {len(uploaded)} uploaded files"
    check_upload_size(name, sum(file.size for file in uploaded), limits or Limits(), len(uploaded))
    staged = None
    try:
        staged = Staged()
        for file in uploaded:
            staged.add(file.name, file)
    except OSError as err:  # its message would show the server's private folder
        if staged is not None:
            staged.remove()
        raise CheckpointError(f"the upload could not be stored on the server ({err.strerror or 'write failed'}); "
                              "try again, or ask the server's operator for disk space") from None
    if previous is not None:
        previous.remove()
    return staged


def release(uploaded) -> None:
    """Drop Streamlit's in-memory copy of ``uploaded`` (the file manager's records), then collect."""
    ctx = get_script_run_ctx()
    if ctx is not None and Runtime.exists():
        manager = Runtime.instance().uploaded_file_mgr
        for file in uploaded:
            manager.remove_file(ctx.session_id, file.file_id)
    for file in uploaded:
        file.close()  # the UploadedFile's own buffer
    gc.collect()
