"""Safe unpacking of uploaded checkpoints: size limits, zip and tar extraction, loose files.

Every entry is checked before a byte is written: no absolute paths, no ``..``,
no links or device files, at most ``Limits.max_entries`` entries and
``Limits.max_total_bytes`` declared bytes. Bytes are counted again while
streaming, so an archive that lies about its sizes (a zip bomb) is stopped
too. Files are created with ``O_EXCL | O_NOFOLLOW`` inside a private folder.
Compare Python's ``tarfile`` "data" filter (PEP 706), which applies the same rules.
"""

from __future__ import annotations

import os
import stat
import tarfile
import zipfile
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..errors import CheckpointError

CHUNK = 1 << 20
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")
ENV_MAX_UPLOAD, ENV_MAX_TOTAL, ENV_MAX_ENTRIES = (
    "ATTNSCOPE_MAX_UPLOAD_BYTES", "ATTNSCOPE_MAX_UNCOMPRESSED_BYTES", "ATTNSCOPE_MAX_ENTRIES")
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}

TOO_BIG = "{name} is {size:,} bytes, more than the {limit:,}-byte upload limit; raise it with {env} or Limits(max_upload_bytes=...)"
TOO_MANY = "{name} holds more than {limit:,} entries; a model folder has a few dozen files at most (limit: {env})"
TOO_LARGE_UNPACKED = ("{name} would unpack to more than {limit:,} bytes (a zip bomb, or a model above the limit); "
                      "raise it with {env} or Limits(max_total_bytes=...)")
BAD_ENTRY = "{name} contains {entry!r}, {why}; an archive of a model folder holds only plain files and folders"
UNREADABLE = "{name} is not a readable {kind} archive ({err}); upload a .zip or .tar.gz of the model folder"


def _env_size(name: str, default: int) -> int:
    raw = os.environ.get(name, "").strip().upper().replace(" ", "")
    if not raw:
        return default
    number = raw.rstrip("KMGTB")
    try:
        value = int(float(number) * _UNITS[raw[len(number):]])
    except (ValueError, KeyError):
        raise CheckpointError(f"{name}={os.environ[name]!r} is not a size; use bytes or e.g. 500MB, 2GB") from None
    if value <= 0:
        raise CheckpointError(f"{name}={os.environ[name]!r} must be positive")
    return value


@dataclass(frozen=True)
class Limits:
    """Caps on what an upload may cost; each default can be overridden by an environment variable."""

    max_upload_bytes: int = field(default_factory=lambda: _env_size(ENV_MAX_UPLOAD, 2 * 10**9))  # archive / files as sent
    max_total_bytes: int = field(default_factory=lambda: _env_size(ENV_MAX_TOTAL, 4 * 10**9))  # after unpacking
    max_entries: int = field(default_factory=lambda: _env_size(ENV_MAX_ENTRIES, 1000))  # files + folders in an archive


def check_upload_size(name: str, size: int, limits: Limits) -> None:
    if size > limits.max_upload_bytes:
        raise CheckpointError(TOO_BIG.format(name=name, size=size, limit=limits.max_upload_bytes, env=ENV_MAX_UPLOAD))


def is_archive(path: Path) -> bool:
    return path.name.lower().endswith(ARCHIVE_SUFFIXES)


def _safe_relpath(name: str, entry: str, raw: str) -> PurePosixPath:
    """The entry's path inside the destination, or CheckpointError for absolute paths and ``..``."""
    text = raw.replace("\\", "/")
    if "\x00" in text:
        raise CheckpointError(BAD_ENTRY.format(name=name, entry=entry, why="a name with a NUL byte"))
    if text.startswith("/") or (len(text) > 1 and text[1] == ":"):
        raise CheckpointError(BAD_ENTRY.format(name=name, entry=entry, why="an absolute path"))
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise CheckpointError(BAD_ENTRY.format(name=name, entry=entry, why="a path that climbs out with '..'"))
    return PurePosixPath(*parts) if parts else PurePosixPath(".")


class _Writer:
    """Creates files under ``dest`` while counting the bytes of the whole archive."""

    def __init__(self, name: str, dest: Path, limits: Limits):
        self.name, self.dest, self.limits, self.total, self.entries = name, dest, limits, 0, 0

    def count_entry(self) -> None:
        self.entries += 1
        if self.entries > self.limits.max_entries:
            raise CheckpointError(TOO_MANY.format(name=self.name, limit=self.limits.max_entries, env=ENV_MAX_ENTRIES))

    def declare(self, size: int) -> None:
        self.total += max(size, 0)
        if self.total > self.limits.max_total_bytes:
            raise CheckpointError(
                TOO_LARGE_UNPACKED.format(name=self.name, limit=self.limits.max_total_bytes, env=ENV_MAX_TOTAL))

    def mkdir(self, rel: PurePosixPath) -> Path:
        target = self.dest.joinpath(*rel.parts)
        target.mkdir(mode=0o700, parents=True, exist_ok=True)
        if not target.resolve().is_relative_to(self.dest.resolve()):  # defence in depth: no link was created
            raise CheckpointError(BAD_ENTRY.format(name=self.name, entry=str(rel), why="a path outside the archive"))
        return target

    def write(self, rel: PurePosixPath, stream, declared: int) -> None:
        if rel == PurePosixPath("."):
            return
        parent = self.mkdir(rel.parent)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(parent / rel.name, flags, 0o600)
        except FileExistsError:
            raise CheckpointError(BAD_ENTRY.format(name=self.name, entry=str(rel), why="a duplicate entry")) from None
        written = 0
        with os.fdopen(fd, "wb") as out:
            while chunk := stream.read(CHUNK):
                written += len(chunk)
                if written > declared:  # the entry lies about its size: count what really arrives
                    self.declare(written - declared)
                    declared = written
                out.write(chunk)


def extract_archive(path: Path, dest: Path, limits: Limits) -> None:
    """Unpack a zip or tar(.gz) archive into ``dest`` (an empty private folder)."""
    check_upload_size(path.name, path.stat().st_size, limits)
    writer = _Writer(path.name, dest, limits)
    is_zip = path.name.lower().endswith(".zip")
    try:
        (_extract_zip if is_zip else _extract_tar)(path, writer)
    except CheckpointError:
        raise
    except Exception as err:  # zipfile, tarfile, zlib and gzip raise many types for corrupt input
        kind = "zip" if is_zip else "tar"
        raise CheckpointError(UNREADABLE.format(name=path.name, kind=kind, err=_short(err))) from None


def _extract_zip(path: Path, writer: _Writer) -> None:
    with zipfile.ZipFile(path) as archive:
        infos = archive.infolist()
        for info in infos:  # every check before the first byte is written
            writer.count_entry()
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise CheckpointError(BAD_ENTRY.format(name=writer.name, entry=info.filename, why="a symbolic link"))
            _safe_relpath(writer.name, info.filename, info.filename)
            writer.declare(info.file_size)
        for info in infos:
            rel = _safe_relpath(writer.name, info.filename, info.filename)
            if info.is_dir():
                writer.mkdir(rel)
            else:
                with archive.open(info) as stream:
                    writer.write(rel, stream, info.file_size)


def _extract_tar(path: Path, writer: _Writer) -> None:
    with tarfile.open(path, mode="r:*") as archive:
        members = []
        while (member := archive.next()) is not None:  # stops at the limit without reading the rest
            writer.count_entry()
            if member.issym() or member.islnk():
                why = "a symbolic link" if member.issym() else "a hard link"
                raise CheckpointError(BAD_ENTRY.format(name=writer.name, entry=member.name, why=why))
            if not (member.isreg() or member.isdir()):
                raise CheckpointError(BAD_ENTRY.format(name=writer.name, entry=member.name, why="a device or pipe"))
            _safe_relpath(writer.name, member.name, member.name)
            writer.declare(member.size)
            members.append(member)
        for member in members:
            rel = _safe_relpath(writer.name, member.name, member.name)
            if member.isdir():
                writer.mkdir(rel)
            else:
                writer.write(rel, archive.extractfile(member), member.size)


def write_loose_files(files: list[tuple[str, bytes]], dest: Path, limits: Limits) -> None:
    """Write uploaded ``(filename, bytes)`` pairs into ``dest``; names are reduced to their last part."""
    total = sum(len(data) for _, data in files)
    check_upload_size(f"the {len(files)} uploaded files", total, limits)
    writer = _Writer("the upload", dest, limits)
    for raw_name, data in files:
        writer.count_entry()
        name = str(raw_name).replace("\\", "/").rsplit("/", 1)[-1]
        if name in ("", ".", ".."):
            raise CheckpointError(f"an uploaded file is named {raw_name!r}; give each file its real name")
        writer.declare(len(data))
        writer.write(PurePosixPath(name), _BytesReader(data), len(data))


class _BytesReader:
    def __init__(self, data: bytes):
        self.data, self.pos = memoryview(bytes(data)), 0

    def read(self, size: int) -> bytes:
        chunk = self.data[self.pos:self.pos + size]
        self.pos += len(chunk)
        return bytes(chunk)


def _short(err: Exception) -> str:
    text = str(err).strip().splitlines()
    first = text[0][:160].rstrip(": ") if text else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__
