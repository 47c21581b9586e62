"""Safe unpacking of uploaded checkpoints: size limits, zip and tar extraction, loose files.

Every entry is checked before a byte is written: no absolute paths, no ``..``,
no links or device files, no name a file system cannot hold (a NUL byte, a part
over ``MAX_NAME_BYTES``), at most ``Limits.max_entries`` entries (a zip's count is
read from its end record before its directory is parsed), no tar header record
(a long name, PAX data) over ``MAX_HEADER_RECORD_BYTES``, and the
declared sizes within the archive's budget (``unpack_budget``: the unpacked
cap, itself derived from the model size cap, and at most ``MAX_RATIO`` times
the archive's own size). The bytes really written are counted as they stream,
and unpacking stops the moment they pass the budget, so an archive that lies
about its sizes (a zip bomb) costs no more than the budget. Files are created
with ``O_EXCL | O_NOFOLLOW`` inside a private folder. Compare Python's
``tarfile`` "data" filter (PEP 706), which applies the same rules.
"""

from __future__ import annotations

import errno
import os
import re
import shutil
import stat
import tarfile
import zipfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath

from ..errors import CheckpointError, DiskFull, SettingError, clipped, quoted
from .paths import MAX_NAME_BYTES

CHUNK = 1 << 20
ARCHIVE_SUFFIXES = (".zip", ".tar.gz", ".tgz", ".tar")
ENV_MAX_UPLOAD, ENV_MAX_MODEL, ENV_MAX_TOTAL, ENV_MAX_ENTRIES = (
    "ATTNSCOPE_MAX_UPLOAD_BYTES", "ATTNSCOPE_MAX_MODEL_BYTES", "ATTNSCOPE_MAX_UNCOMPRESSED_BYTES",
    "ATTNSCOPE_MAX_ENTRIES")
# What a model folder holds beside its weights (tokenizer.json, vocab, README): all-MiniLM-L6-v2's extras are
# 0.75 MB, a 250k-token sentencepiece vocabulary ~17 MB; 256 MB leaves room for any tokenizer.
EXTRA_FILES_BYTES = 256 * 10**6
MAX_ENTRIES = 1000  # files and folders in an archive, by default
# An archive may unpack to at most MAX_RATIO times its own size (above RATIO_FLOOR_BYTES). zlib level 6 on
# all-MiniLM-L6-v2: model.safetensors 1.09x, tokenizer.json 2.43x, vocab.txt 2.09x, the largest file ratio
# 12.7x (data_config.json, 39 kB); demo models' weights 1.08x. Weights are near-random floats and do not
# compress; a zip bomb reaches ~1000x. (python scripts/compression_ratios.py)
MAX_RATIO = 20
RATIO_FLOOR_BYTES = 64 * 10**6
# tarfile reads a GNU long-name or PAX header record whole, before its member exists to be counted; a real one
# holds a path and a few key=value lines, while a lying one can declare gigabytes that decompress from kilobytes.
MAX_HEADER_RECORD_BYTES = 64 * 1024
# PAX global headers, all together: tarfile keeps them and copies them into every later member (200 of 4,500 keys
# each, 2.1 MB of gzip, took 14 s and 3.3 GB). git archive writes one of 52 bytes.
MAX_GLOBAL_HEADER_BYTES = 4096
# A zip directory entry: 46 fixed bytes, a path (at most PATH_MAX, 4096, to be extractable) and extra fields.
_MAX_DIRECTORY_ENTRY_BYTES = 46 + 4096 + 1024
_UNITS = {"": 1, "B": 1, "KB": 10**3, "MB": 10**6, "GB": 10**9, "TB": 10**12}

TOO_BIG = ("{name} {is_} {size:,} bytes, more than the {limit:,}-byte upload limit; "
           "raise it with {env} or Limits(max_upload_bytes=...)")
TOO_MANY = "{name} holds more than {limit:,} entries; a model folder has a few dozen files at most (limit: {env})"
TOO_LARGE_UNPACKED = ("{name} would unpack to more than {limit:,} bytes (a zip bomb, or a model above the limit); "
                      "raise it with {env} or Limits(max_total_bytes=...)")
TOO_COMPRESSED = ("{name} would unpack to more than {limit:,} bytes, over {ratio} times its own {packed:,} bytes; "
                  "model weights barely compress, so this looks like a zip bomb — give the model folder, or a "
                  "plain zip of it")
BAD_ENTRY = "{name} contains {entry!r}, {why}; an archive of a model folder holds only plain files and folders"
UNREADABLE = "{name} is not a readable {kind} archive ({err}); give a .zip or .tar.gz of the model folder"
NOT_WRITTEN = "{name}: {entry!r} could not be written ({why}); give the model folder's files under their own names"


def env_size(name: str, default: int) -> int:
    """``$name`` as a number of bytes (``500MB``, ``2GB``), or ``default`` when unset or blank; SettingError for
    anything else that is not a size of at least 1 byte (0, 0.5, -5, inf, abc)."""
    raw = os.environ.get(name, "").strip().upper().replace(" ", "")
    if not raw:
        return default
    number = raw.rstrip("KMGTB")
    try:
        value = int(float(number) * _UNITS[raw[len(number):]])
    except (ValueError, KeyError, OverflowError):  # OverflowError: inf, 1e400
        raise SettingError(f"{name}={os.environ[name]!r} is not a size; use bytes or e.g. 500MB, 2GB") from None
    if value <= 0:
        raise SettingError(f"{name}={os.environ[name]!r} must be a size of at least 1 byte")
    return value


def env_count(name: str, default: int, what: str) -> int:
    """``$name`` as a whole number of ``what`` (1 or more), or ``default`` when unset; SettingError otherwise."""
    raw = os.environ.get(name, "").strip()
    if not raw:
        return default
    if not re.fullmatch(r"[0-9]{1,18}", raw) or int(raw) < 1:  # isdigit() took "²" and "١٢"
        raise SettingError(f"{name}={raw!r} must be a whole number of {what}, 1 or more")
    return int(raw)


def model_limits() -> "Limits":
    """Limits that read only the model cap from the environment, for a model that is not an upload (an installed
    wheel's GGUF): a bad upload setting stopped its load."""
    cap = max_model_bytes()
    return Limits(max_upload_bytes=cap, max_model_bytes=cap, max_total_bytes=cap + EXTRA_FILES_BYTES,
                  max_entries=MAX_ENTRIES)


def max_model_bytes() -> int:
    """The model cap alone, ``$ATTNSCOPE_MAX_MODEL_BYTES`` (2 GB by default): what every loaded model is held to,
    read without the upload settings (a bad one stopped every model's load, not only the uploads)."""
    return env_size(ENV_MAX_MODEL, 2 * 10**9)


@dataclass(frozen=True)
class Limits:
    """Caps on what an upload may cost; each default can be overridden by an environment variable.

    ``max_total_bytes`` (unpacked) defaults to the model cap plus ``EXTRA_FILES_BYTES``: an upload never
    needs more disk than the largest model it may hold.
    """

    max_upload_bytes: int = field(default_factory=lambda: env_size(ENV_MAX_UPLOAD, 2 * 10**9))  # archive/files sent
    max_model_bytes: int = field(default_factory=lambda: max_model_bytes())  # parameters x 4 bytes
    max_total_bytes: int | None = field(default_factory=lambda: env_size(ENV_MAX_TOTAL, 0) or None)  # unpacked
    max_entries: int = field(default_factory=lambda: env_count(ENV_MAX_ENTRIES, MAX_ENTRIES, "entries"))  # files

    def __post_init__(self):
        if self.max_total_bytes is None:
            object.__setattr__(self, "max_total_bytes", self.max_model_bytes + EXTRA_FILES_BYTES)

    def unpack_budget(self, packed_bytes: int) -> int:
        """Bytes an archive of ``packed_bytes`` may unpack to: the unpacked cap, and ``MAX_RATIO`` x its size."""
        return min(self.max_total_bytes, max(RATIO_FLOOR_BYTES, MAX_RATIO * packed_bytes))


def check_upload_size(name: str, size: int, limits: Limits, files: int = 1) -> None:
    """CheckpointError when ``files`` uploaded files (``name``) of ``size`` bytes together pass the upload limit."""
    if size > limits.max_upload_bytes:
        is_ = "is" if files == 1 else "are together"
        raise CheckpointError(TOO_BIG.format(name=name, is_=is_, size=size, limit=limits.max_upload_bytes,
                                             env=ENV_MAX_UPLOAD))


def has_control(text: str) -> bool:
    """Whether ``text`` holds a control character (a newline, a tab, an escape): no model file's name does."""
    return any(ord(c) < 32 or 127 <= ord(c) < 160 for c in text)


def _skipped(entry: str) -> bool:
    """Whether an archive entry is left out: a file or folder whose own name holds a control character (macOS's
    "Icon\\r"), which no model file has; a folder so named above a kept entry refuses the archive
    (``_safe_relpath``)."""
    return has_control(entry.replace("\\", "/").rstrip("/").rsplit("/", 1)[-1])


def is_archive(path: Path) -> bool:
    return path.name.lower().endswith(ARCHIVE_SUFFIXES)


def _safe_relpath(name: str, entry: str, raw: str) -> PurePosixPath:
    """The entry's path inside the destination, or CheckpointError for absolute paths and ``..``."""
    text = raw.replace("\\", "/")
    if "\x00" in text:
        raise CheckpointError(BAD_ENTRY.format(name=name, entry=clipped(entry), why="a name with a NUL byte"))
    if has_control(text):  # a newline in a name split every message that named the file in two
        raise CheckpointError(BAD_ENTRY.format(name=name, entry=clipped(entry), why="a name with a control character"))
    if text.startswith("/") or (len(text) > 1 and text[1] == ":"):
        raise CheckpointError(BAD_ENTRY.format(name=name, entry=clipped(entry), why="an absolute path"))
    parts = [p for p in text.split("/") if p not in ("", ".")]
    if ".." in parts:
        raise CheckpointError(BAD_ENTRY.format(name=name, entry=clipped(entry), why="a path that climbs out with '..'"))
    if any(len(part.encode("utf-8", "surrogateescape")) > MAX_NAME_BYTES for part in parts):
        raise CheckpointError(BAD_ENTRY.format(name=name, entry=clipped(entry),
                                               why=f"a name longer than {MAX_NAME_BYTES} bytes"))
    return PurePosixPath(*parts) if parts else PurePosixPath(".")


class _Writer:
    """Creates files under ``dest`` while counting the bytes of the whole archive."""

    def __init__(self, name: str, dest: Path, limits: Limits, packed_bytes: int | None = None):
        self.name, self.dest, self.limits, self.total, self.entries = name, dest, limits, 0, 0
        self.budget = limits.max_total_bytes if packed_bytes is None else limits.unpack_budget(packed_bytes)
        self.packed = packed_bytes

    def count_entry(self) -> None:
        self.entries += 1
        if self.entries > self.limits.max_entries:
            raise CheckpointError(TOO_MANY.format(name=self.name, limit=self.limits.max_entries, env=ENV_MAX_ENTRIES))

    def declare(self, size: int) -> None:
        self.total += max(size, 0)
        if self.total <= self.budget:
            return
        if self.budget < self.limits.max_total_bytes:  # the ratio, not the cap, stopped it
            raise CheckpointError(TOO_COMPRESSED.format(name=self.name, limit=self.budget, ratio=MAX_RATIO,
                                                        packed=self.packed))
        raise CheckpointError(TOO_LARGE_UNPACKED.format(name=self.name, limit=self.budget, env=ENV_MAX_TOTAL))

    def mkdir(self, rel: PurePosixPath) -> Path:
        target = self.dest.joinpath(*rel.parts)
        try:
            target.mkdir(mode=0o700, parents=True, exist_ok=True)
        except (FileExistsError, NotADirectoryError):  # an earlier entry is a file of the folder's name
            raise CheckpointError(BAD_ENTRY.format(name=self.name, entry=clipped(str(rel)),
                                                   why="a folder of the same name as a file")) from None
        except OSError as err:  # the private folder's path stays out of the message
            raise CheckpointError(NOT_WRITTEN.format(name=self.name, entry=clipped(str(rel)),
                                                     why=err.strerror)) from None
        if not target.resolve().is_relative_to(self.dest.resolve()):  # defence in depth: no link was created
            raise CheckpointError(BAD_ENTRY.format(name=self.name, entry=clipped(str(rel)),
                                                   why="a path outside the archive"))
        return target

    def write(self, rel: PurePosixPath, stream, declared: int) -> None:
        if rel == PurePosixPath("."):
            return
        parent = self.mkdir(rel.parent)
        flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_NOFOLLOW", 0)
        try:
            fd = os.open(parent / rel.name, flags, 0o600)
        except FileExistsError:
            raise CheckpointError(BAD_ENTRY.format(name=self.name, entry=clipped(str(rel)),
                                                   why="a duplicate entry")) from None
        except OSError as err:  # the private folder's path stays out of the message
            raise CheckpointError(NOT_WRITTEN.format(name=self.name, entry=clipped(str(rel)),
                                                     why=err.strerror)) from None
        written = 0
        with os.fdopen(fd, "wb") as out:
            while chunk := stream.read(CHUNK):
                written += len(chunk)
                if written > declared:  # the entry lies about its size: count what really arrives
                    self.declare(written - declared)
                    declared = written
                out.write(chunk)


NO_ROOM = ("the temporary folder has no room for the checkpoint ({why}); free disk space there, or point TMPDIR at "
           "a larger disk")
_NO_ROOM = {errno.ENOSPC, errno.EDQUOT, errno.EFBIG}


def no_room(err: BaseException) -> bool:
    """Whether ``err`` says the disk (or a quota, or a file size limit) is full."""
    return isinstance(err, OSError) and err.errno in _NO_ROOM


def check_room(folder: Path, needed: int) -> None:
    """CheckpointError (``NO_ROOM``) when ``folder``'s disk has fewer than ``needed`` bytes free: a writer that fails
    there says so in its own words (safetensors' "IoError ... StorageFull" had become a bad config.json)."""
    free = shutil.disk_usage(folder).free
    if needed > free:
        raise DiskFull(NO_ROOM.format(why=f"{needed:,} bytes to write, {free:,} free"))


def extract_archive(path: Path, dest: Path, limits: Limits) -> None:
    """Unpack a zip or tar(.gz) archive into ``dest`` (an empty private folder)."""
    packed = path.stat().st_size
    check_upload_size(path.name, packed, limits)
    writer = _Writer(path.name, dest, limits, packed)
    is_zip = path.name.lower().endswith(".zip")
    try:
        (_extract_zip if is_zip else _extract_tar)(path, writer)
    except CheckpointError:
        raise
    except Exception as err:  # zipfile, tarfile, zlib and gzip raise many types for corrupt input
        if no_room(err):  # the disk, not the archive (it was "not a readable zip archive")
            raise DiskFull(NO_ROOM.format(why=err.strerror)) from None
        kind = "zip" if is_zip else "tar"
        raise CheckpointError(UNREADABLE.format(name=path.name, kind=kind, err=_short(err))) from None


def _extract_zip(path: Path, writer: _Writer) -> None:
    _check_zip_directory(path, writer)
    with zipfile.ZipFile(path) as archive:
        infos = [info for info in archive.infolist() if not _skipped(info.filename)]
        for info in infos:  # every check before the first byte is written
            writer.count_entry()
            mode = info.external_attr >> 16
            if stat.S_ISLNK(mode):
                raise CheckpointError(BAD_ENTRY.format(name=writer.name, entry=clipped(info.filename),
                                                       why="a symbolic link"))
            _safe_relpath(writer.name, info.filename, info.filename)
            writer.declare(info.file_size)
        for info in infos:
            rel = _safe_relpath(writer.name, info.filename, info.filename)
            if info.is_dir():
                writer.mkdir(rel)
            else:
                with archive.open(info) as stream:
                    writer.write(rel, stream, info.file_size)


def _check_zip_directory(path: Path, writer: _Writer) -> None:
    """Refuse a central directory too large for ``max_entries`` before ``ZipFile`` parses all of it."""
    limit = writer.limits.max_entries
    entries, size = zip_directory(path)
    if entries > limit or size > limit * _MAX_DIRECTORY_ENTRY_BYTES:  # ZipFile reads entries by size, not count
        raise CheckpointError(TOO_MANY.format(name=writer.name, limit=limit, env=ENV_MAX_ENTRIES))


def zip_directory(path: Path) -> tuple[int, int]:
    """``(entries, bytes)`` of a zip's central directory from its end record (zip64 too), as ``ZipFile`` will read
    it, without parsing the directory; ``(0, 0)`` when there is no end record (not a zip: ZipFile says so)."""
    with path.open("rb") as file:
        end = zipfile._EndRecData(file)
    return (end[zipfile._ECD_ENTRIES_TOTAL], end[zipfile._ECD_SIZE]) if end else (0, 0)


class _BoundedTarInfo(tarfile.TarInfo):
    """A tar header whose long-name and PAX records are refused before they are read (tarfile reads them whole), and
    a sparse file refused before its map is read: tarfile reads a GNU sparse header's extension blocks (or a PAX 1.0
    sparse map from the member's data) for as long as they say more follow, into a list, before the member is
    counted (1.5 MB of gzip held 14.6 s of CPU, 2.2 MB 3.9 GB of memory). No model folder holds a sparse file."""

    def _proc_member(self, tarfile_):
        if self.type == tarfile.XGLTYPE:  # kept for the rest of the archive, and copied into every member after it
            tarfile_.attnscope_global_bytes = getattr(tarfile_, "attnscope_global_bytes", 0) + self.size
            if tarfile_.attnscope_global_bytes > MAX_GLOBAL_HEADER_BYTES:
                raise _HeaderRefused(f"global header records of {tarfile_.attnscope_global_bytes:,} bytes or more "
                                      "in all; an archive of a model folder has short headers")
        if self.type in _RECORD_TYPES and self.size > MAX_HEADER_RECORD_BYTES:
            raise _HeaderRefused(f"{self.name!r}, a header record of {self.size:,} bytes; an archive of a model "
                                  "folder has short headers")
        if self.type == tarfile.GNUTYPE_SPARSE:
            raise _HeaderRefused(f"{quoted(self.name)}, {_SPARSE}")
        return super()._proc_member(tarfile_)

    def _proc_gnusparse_10(self, next, pax_headers, tarfile_):
        raise _HeaderRefused(f"{quoted(next.name)}, {_SPARSE}")


class _HeaderRefused(Exception):
    pass


_SPARSE = "a sparse file; an archive of a model folder holds none"


_RECORD_TYPES = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                 tarfile.SOLARIS_XHDTYPE)


def _extract_tar(path: Path, writer: _Writer) -> None:
    try:
        _unpack_tar(path, writer)
    except _HeaderRefused as err:
        raise CheckpointError(f"{writer.name} contains {err}") from None


def _unpack_tar(path: Path, writer: _Writer) -> None:
    with tarfile.open(path, mode="r:*", tarinfo=_BoundedTarInfo) as archive:
        members = []
        while (member := archive.next()) is not None:  # stops at the limit without reading the rest
            writer.count_entry()
            if member.issym() or member.islnk():
                why = "a symbolic link" if member.issym() else "a hard link"
                raise CheckpointError(BAD_ENTRY.format(name=writer.name, entry=clipped(member.name), why=why))
            if not (member.isreg() or member.isdir()):
                raise CheckpointError(BAD_ENTRY.format(name=writer.name, entry=clipped(member.name),
                                                       why="a device or pipe"))
            writer.declare(member.size)  # a skipped member too: tarfile inflates its data to seek past it
            if _skipped(member.name):
                continue
            _safe_relpath(writer.name, member.name, member.name)
            members.append(member)
        for member in members:
            rel = _safe_relpath(writer.name, member.name, member.name)
            if member.isdir():
                writer.mkdir(rel)
            else:
                writer.write(rel, archive.extractfile(member), member.size)


def write_loose_files(files: list[tuple[str, object]], dest: Path, limits: Limits) -> None:
    """Write uploaded ``(filename, data)`` pairs into ``dest``; names are reduced to their last part.

    ``data`` is bytes, a local file's ``Path``, or a binary file object (an upload spooled to disk, or
    Streamlit's ``UploadedFile``): files are copied in ``CHUNK``s, never read whole into memory.
    """
    sizes = [_data_size(data) for _, data in files]
    check_upload_size(f"the {len(files)} uploaded files", sum(sizes), limits, len(files))
    writer = _Writer("the upload", dest, limits)
    for (raw_name, data), size in zip(files, sizes):
        writer.count_entry()
        name = str(raw_name).replace("\\", "/").rsplit("/", 1)[-1]
        if name in ("", ".", ".."):
            raise CheckpointError(f"an uploaded file is named {raw_name!r}; give each file its real name")
        rel = _safe_relpath(writer.name, name, name)  # a NUL byte, a name too long
        writer.declare(size)
        with _opened(data) as stream:
            writer.write(rel, stream, size)


def _data_size(data) -> int:
    if isinstance(data, (bytes, bytearray)):
        return len(data)
    if isinstance(data, Path):
        return data.stat().st_size
    data.seek(0, os.SEEK_END)
    return data.tell()


@contextmanager
def _opened(data):
    """A ``read(n)`` stream over ``data``, from its start; a ``Path`` is opened and closed here."""
    if isinstance(data, Path):
        with data.open("rb") as stream:
            yield stream
    elif isinstance(data, (bytes, bytearray)):
        yield _BytesReader(data)
    else:
        data.seek(0)
        yield data


class _BytesReader:
    def __init__(self, data: bytes):
        self.data, self.pos = memoryview(data), 0

    def read(self, size: int) -> bytes:
        chunk = self.data[self.pos:self.pos + size]
        self.pos += len(chunk)
        return bytes(chunk)


def _short(err: Exception) -> str:
    text = str(err).strip().splitlines()
    first = text[0][:160].rstrip(": ") if text else ""
    return f"{type(err).__name__}: {first}" if first else type(err).__name__
