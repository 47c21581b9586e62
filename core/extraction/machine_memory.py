"""How much memory this process may use: the machine's, or less where a container (cgroup) caps it.

``docker run --memory 4g`` on a 64 GB host still shows 64 GB to ``os.sysconf``; a budget of half of that let a
text through whose maps the container's limit then killed. The limit is read from the cgroup files Linux keeps
(v2 ``memory.max``, v1 ``memory.limit_in_bytes``) for this process's group and the groups above it.
"""

from __future__ import annotations

import os
from pathlib import Path

CGROUP_ROOT = Path("/sys/fs/cgroup")
PROC_CGROUP = Path("/proc/self/cgroup")
UNLIMITED = 2 ** 62  # v1's "no limit" is 2⁶³ rounded down to a page
LIMIT_FILES = {"": "memory.max", "memory": "memory.limit_in_bytes"}  # v2 (no controller named), v1 memory


def machine_memory() -> int | None:
    """Bytes of memory this process may use: the smaller of physical memory and a cgroup limit; None where the
    system says neither."""
    sizes = [n for n in (_physical_memory(), cgroup_memory_limit()) if n]
    return min(sizes) if sizes else None


def _physical_memory() -> int | None:
    try:
        return os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES")
    except (AttributeError, ValueError, OSError):  # not a POSIX system
        return None


def cgroup_memory_limit() -> int | None:
    """The tightest memory limit of this process's cgroup and its parents; None where none is set (v2 writes
    "max", v1 a number near 2⁶³)."""
    limits = [n for path in _limit_paths() if (n := _read_limit(path))]
    return min(limits) if limits else None


def _limit_paths() -> list[Path]:
    try:
        lines = PROC_CGROUP.read_text().splitlines()
    except OSError:  # not Linux
        return []
    paths = []
    for line in lines:  # "hierarchy:controllers:/path"
        _, controllers, group = (line.split(":", 2) + ["", ""])[:3]
        name = "" if controllers == "" else "memory" if "memory" in controllers.split(",") else None
        if name is None:
            continue
        base = CGROUP_ROOT / name if name else CGROUP_ROOT
        parts = [p for p in group.split("/") if p and p != ".."]
        paths += [base.joinpath(*parts[:n], LIMIT_FILES[name]) for n in range(len(parts), -1, -1)]
    return paths


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    return int(text) if text.isdigit() and 0 < int(text) < UNLIMITED else None
