"""File names that are not UTF-8 (a Latin-1 ``b\\xe9.safetensors``, kept by Python as lone surrogates).

Python opens them, but the Rust readers (safetensors, tokenizers) take paths as UTF-8 text and refuse them
("Path … is not valid UTF-8"), and a report naming one cannot be written as UTF-8. ``readable`` is the name with
those bytes as U+FFFD; ``utf8_path`` a path to the same file or folder that the Rust readers open.
"""

from __future__ import annotations

import os
import tempfile
from contextlib import contextmanager
from pathlib import Path

MAX_NAME_BYTES = 255  # the longest file or folder name (one path part) ext4, APFS and NTFS accept, in UTF-8 bytes


def is_utf8(text: str) -> bool:
    """Whether ``text`` can be written as UTF-8: no lone surrogates (``surrogateescape``'s undecodable bytes)."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


def readable(text) -> str:
    """``text`` that encodes as UTF-8: the undecodable bytes of a file name as U+FFFD."""
    try:
        raw = str(text).encode("utf-8", "surrogateescape")
    except UnicodeEncodeError:  # a surrogate that no undecodable byte gives
        raw = str(text).encode("utf-8", "replace")
    return raw.decode("utf-8", "replace")


def readable_name(name) -> str:
    """``readable(name)`` short enough to name a file (``MAX_NAME_BYTES``): U+FFFD takes 3 bytes where the byte it
    stands for took one, so a long name's middle gives way to "…" (its suffixes kept: .tar.gz, .safetensors)."""
    text = readable(name)
    if len(text.encode()) <= MAX_NAME_BYTES:
        return text
    suffix = "".join(Path(text).suffixes[-2:])[-32:]
    stem = text[:len(text) - len(suffix)]
    while len(f"{stem}…{suffix}".encode()) > MAX_NAME_BYTES:
        stem = stem[:-1]
    return f"{stem}…{suffix}"


@contextmanager
def utf8_path(path: Path):
    """``path`` when it is UTF-8; else a link to it named ``readable_name(path.name)``, in a private folder removed
    on exit (what is read through it stays readable: a link, not a copy)."""
    if is_utf8(str(path)):
        yield path
        return
    with tempfile.TemporaryDirectory(prefix="attnscope-name-") as folder:
        link = Path(folder) / readable_name(path.name)
        link.symlink_to(os.path.abspath(path))
        yield link
