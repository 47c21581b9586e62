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
when the session's state is dropped (``weakref.finalize``). Streamlit keeps a closed tab's state for
``server.disconnectedSessionTTL`` (2 minutes) in case it reconnects, but drops it only when another session
disconnects: on a quiet server a closed tab's uploads stayed for good, and counted against the cap. So every
upload also knows its session, and one whose session has been gone longer than that is removed
(``remove_abandoned``, every ``SWEEP_S`` seconds while any upload lives, and before each new one is counted).
Every session's staged uploads together are capped (``max_staged_bytes``): one tab may hold three (Diagnose,
Compare A and B) of up to 2 GB each, and a few dozen tabs had filled the server's disk.
"""

from __future__ import annotations

import gc
import logging
import shutil
import tempfile
import threading
import time
import weakref
from contextlib import ExitStack, contextmanager
from pathlib import Path

from streamlit import config
from streamlit.runtime import Runtime
from streamlit.runtime.uploaded_file_manager import UploadedFile, UploadedFileRec
from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

from core.checkpoints.archive import CHUNK, Limits, check_upload_size, env_size
from core.checkpoints.temp_dirs import owned_temp_dir, sweep_orphans
from core.errors import CheckpointError, DiskFull, size_text


def _shared_copy(self: UploadedFile, memo) -> UploadedFile:
    """A copy of an uploaded file that shares its bytes until either is written (``io.BytesIO`` copy on write)."""
    record = UploadedFileRec(self.file_id, self.name, self.type, self.getvalue())  # getvalue: the bytes, not a copy
    twin = UploadedFile(record, self._file_urls)
    twin.seek(self.tell())
    return twin


log = logging.getLogger("attnscope.app")
ENV_MAX_STAGED = "ATTNSCOPE_MAX_STAGED_BYTES"
STAGED_UPLOADS = 4  # the default cap on every session's staged uploads together: four at the upload limit (8 GB)
_staged: weakref.WeakSet = weakref.WeakSet()  # every session's live uploads, and the lock that counts them
_staged_lock = threading.Lock()


def max_staged_bytes(limits: Limits) -> int:
    """Bytes every session's staged uploads may take together: ``$ATTNSCOPE_MAX_STAGED_BYTES``, else four uploads
    at the upload limit."""
    return env_size(ENV_MAX_STAGED, STAGED_UPLOADS * limits.max_upload_bytes)


def staged_bytes(but: "Staged | None" = None) -> int:
    """The bytes every session's live uploads hold (or are being copied to hold), ``but`` aside."""
    return sum(upload.reserved for upload in list(_staged) if upload is not but and upload.alive)


def share_uploaded_bytes() -> None:
    """Make Streamlit's per-run ``deepcopy`` of an uploader's value share the file's bytes (idempotent)."""
    UploadedFile.__deepcopy__ = _shared_copy


def remove_orphans() -> None:
    """Remove the uploads a killed AttnScope process left (``temp_dirs.sweep_orphans``), once, as the server starts:
    SIGKILL runs no finaliser, so they had stayed on disk for good."""
    removed = sweep_orphans()
    if removed:
        log.warning("removed %d upload folder(s) that a killed AttnScope process left in %s", removed,
                    tempfile.gettempdir())


share_uploaded_bytes()
remove_orphans()


class Staged:
    """Uploaded files on disk, by the name the user gave them."""

    def __init__(self, reserved: int = 0, session_id: str | None = None):
        self.folder = owned_temp_dir()
        self.files: dict[str, Path] = {}
        self.reserved = reserved  # the bytes it was staged for, counted against max_staged_bytes while it lives
        self.session_id = session_id  # the browser session it was uploaded in (None: outside a script run)
        self.gone_since: float | None = None  # when ``remove_abandoned`` first found that session gone
        self._count = 0
        self._cleanup = weakref.finalize(self, shutil.rmtree, str(self.folder), True)

    @property
    def alive(self) -> bool:
        return self._cleanup.alive

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
    upload limit together (Streamlit caps each file alone), or above what every session's uploads may hold
    together (``previous`` aside: it goes), are refused before a byte is written; a copy that fails (a full disk)
    is one CheckpointError, its part-copy removed. Either way ``previous`` stays as it was."""
    uploaded, limits = list(uploaded), limits or Limits()
    name = uploaded[0].name if len(uploaded) == 1 else f"the {len(uploaded)} uploaded files"
    size = sum(file.size for file in uploaded)
    check_upload_size(name, size, limits, len(uploaded))
    staged = None
    try:
        staged = _reserved(size, previous, limits)
        for file in uploaded:
            staged.add(file.name, file)
    except OSError as err:  # its message would show the server's private folder
        if staged is not None:
            staged.remove()
        raise DiskFull(f"the upload could not be stored on the server ({err.strerror or 'write failed'}); "
                       "try again, or ask the server's operator for disk space") from None
    if previous is not None:
        previous.remove()
    return staged


def _reserved(size: int, previous: Staged | None, limits: Limits) -> Staged:
    """A new ``Staged`` counted for ``size`` bytes, if every session's uploads still fit with it."""
    cap = max_staged_bytes(limits)
    remove_abandoned()
    with _staged_lock:  # two sessions checking at once must not both take the last room
        held = staged_bytes(but=previous)
        if size > cap:
            raise CheckpointError(f"this upload is {size_text(size)}, more than the {size_text(cap)} this server "
                                  f"keeps of every session's uploads at once; raise the limit with {ENV_MAX_STAGED}")
        if held + size > cap:
            raise CheckpointError(f"this server holds {size_text(held)} of uploads being used now, and this "
                                  f"one ({size_text(size)}) would pass the {size_text(cap)} it keeps at once; "
                                  "try again when other uploads are done, or Clear one you no longer need — raise "
                                  f"the limit with {ENV_MAX_STAGED}")
        ctx = get_script_run_ctx()
        staged = Staged(size, ctx.session_id if ctx is not None else None)
        _staged.add(staged)
    _sweep_while_staged()
    return staged


SWEEP_S = 10.0  # how often uploads are checked for a session gone (a tab back and gone again between two checks
# keeps its first time gone: its upload may go before Streamlit stops resuming it, and the page then says so)
_sweeper: list[threading.Thread] = []  # the sweep thread while it runs


def remove_abandoned(now: float | None = None) -> None:
    """Remove the uploads of sessions gone for longer than Streamlit keeps a closed tab's session
    (``server.disconnectedSessionTTL``): past it the tab cannot reconnect to them."""
    if not Runtime.exists():
        return
    runtime, now = Runtime.instance(), time.monotonic() if now is None else now
    keep_s = config.get_option("server.disconnectedSessionTTL")
    with _staged_lock:  # another session's upload may be added meanwhile: a WeakSet cannot be read while it grows
        staged = list(_staged)
    for upload in staged:
        if upload.session_id is None or not upload.alive:
            continue
        if runtime.is_active_session(upload.session_id):
            upload.gone_since = None  # back (a reconnect), or never gone
        elif upload.gone_since is None:
            upload.gone_since = now
        elif now - upload.gone_since > keep_s:
            upload.remove()


def _sweep_while_staged() -> None:
    """Start the sweep (one daemon thread) unless it runs; it ends once no upload is left."""
    with _staged_lock:
        if _sweeper:
            return
        _sweeper.append(threading.Thread(target=_sweep, name="attnscope-upload-sweep", daemon=True))
        _sweeper[0].start()


def _sweep() -> None:
    while True:
        time.sleep(SWEEP_S)
        try:
            remove_abandoned()
        except Exception:  # noqa: BLE001 - one failed check (a folder already gone) must not end the sweep for good
            log.exception("the upload sweep failed once; it goes on")
        with _staged_lock:  # decided under the lock: an upload staged meanwhile finds the sweep still running
            if not any(upload.alive for upload in list(_staged)):
                _sweeper.clear()
                return


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
