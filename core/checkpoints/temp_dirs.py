"""AttnScope's folders in the system's temporary folder, each named with the id of the process that made it (and of
its PID namespace), so that a later process can remove those of one that is gone.

A process removes its own on the way out (a ``finally``, a finaliser), but not when it is killed: SIGKILL, and the
kernel's out-of-memory killer, run neither. A killed server had left its visitors' uploads on disk for good, up to
2 GB each, outside every cap (``ATTNSCOPE_MAX_STAGED_BYTES`` counts only live ones).
"""

from __future__ import annotations

import os
import re
import shutil
import tempfile
from pathlib import Path

PREFIX = "attnscope-upload-"
_OWNED = re.compile(re.escape(PREFIX) + r"(\d+)-(\d+)-.+")  # namespace, pid


def owned_temp_dir() -> Path:
    """A fresh 0700 folder (``mkdtemp``) named ``attnscope-upload-<namespace>-<pid>-…``; the caller removes it."""
    return Path(tempfile.mkdtemp(prefix=f"{PREFIX}{_namespace()}-{os.getpid()}-"))


def sweep_orphans() -> int:
    """Remove the folders ``owned_temp_dir`` made for processes of this PID namespace that no longer run; returns
    how many. A folder of a live process, of another namespace (a container sharing the temporary folder, whose
    pids mean nothing here: its live server's uploads were removed), of another user, a link, or one named
    otherwise is left as it is."""
    removed = 0
    for path in Path(tempfile.gettempdir()).glob(PREFIX + "*"):
        owner = _OWNED.fullmatch(path.name)
        try:
            if owner is None or owner.group(1) != _namespace() or _running(int(owner.group(2))) \
                    or path.is_symlink() or not path.is_dir() or path.stat().st_uid != os.getuid():
                continue
        except OSError:  # gone meanwhile
            continue
        shutil.rmtree(path, ignore_errors=True)
        removed += 1
    return removed


def _namespace() -> str:
    """This process's PID namespace: the inode of ``/proc/self/ns/pid`` on Linux; "0" where there is none (macOS,
    Windows have no PID namespaces)."""
    try:
        return str(os.stat("/proc/self/ns/pid").st_ino)
    except OSError:
        return "0"


def _running(pid: int) -> bool:
    try:
        os.kill(pid, 0)  # signal 0: is there such a process, sending nothing
    except ProcessLookupError:
        return False
    except (PermissionError, OverflowError):  # another user's process, or no pid this system has: left alone
        return True
    return True
