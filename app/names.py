"""What the app calls a model, and the file names of its exports: never a server path.

A demo name or a Hugging Face id is shown as typed; a folder or file path by
its last part (``/models/my-bert`` → ``my-bert``); an upload by its file name.
The server's own paths (``/tmp/attnscope-upload-…``) never reach a title, a
report or a file name.
"""

from __future__ import annotations

import re
from pathlib import PurePosixPath

_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9.-]+")
MAX_STEM = 80  # characters of an export's file name before its extension
GENERIC_FOLDERS = {"model", "models", "checkpoint", "weights"}  # named with their parent: "all_minilm/model"


def is_path(source: str) -> bool:
    """A path, as opposed to a demo name or a Hub id (``org/name``: one slash, no leading ``/ ~ .``)."""
    source = source.strip()
    return source.startswith(("/", "~", ".", "\\")) or source.count("/") > 1 or "\\" in source


def display_name(source: str) -> str:
    """The name a user knows the model by: demo name, Hub id, or the last part of a path."""
    source = str(source).strip()
    if not is_path(source):
        return source or "model"
    parts = [p for p in PurePosixPath(source.replace("\\", "/")).parts if p not in ("/", "~", ".", "..")]
    if len(parts) > 1 and parts[-1].lower() in GENERIC_FOLDERS and not parts[-2].startswith("attnscope-upload"):
        return "/".join(parts[-2:])
    return parts[-1] if parts else "model"


def upload_name(file_names: list[str]) -> str:
    """An upload is named by its file (or its first file, "+ n more" for several)."""
    names = [display_name(n) for n in file_names]
    return names[0] if len(names) == 1 else f"{names[0]} + {len(names) - 1} more"


def file_stem(*parts) -> str:
    """A download's file name from its parts: letters, digits, ``.`` and ``-``, joined by ``_``."""
    words = [_UNSAFE_FILE_CHARS.sub("-", str(p)).strip("-.") for p in parts]
    return "_".join(w for w in words if w)[:MAX_STEM] or "attnscope"
