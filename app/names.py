"""What the app calls a model, and the file names of its exports: never a server path.

A demo name or a Hugging Face id is shown as typed; a folder or file path by
its last part (``/models/my-bert`` → ``my-bert``); an upload by its file name.
The server's own paths (``/tmp/attnscope-upload-…``) never reach a title, a
report or a file name.
"""

from __future__ import annotations

import hashlib
import re
from pathlib import PurePosixPath

from core.extraction.tokens import visible

_UNSAFE_FILE_CHARS = re.compile(r"[^A-Za-z0-9.-]+")
MAX_STEM = 80  # characters of an export's file name before its extension
CUT_MODEL_CHARS = 40  # a model name too long for a file name is cut to this: every file of it starts alike
MIN_MODEL_CHARS = 20  # where what a file holds is itself long, the model keeps this much before that is cut too
DIGEST_CHARS = 7  # hex digits of the hash that ends a cut name, so two names cut alike stay apart
GENERIC_FOLDERS = {"model", "models", "checkpoint", "weights"}  # named with their parent: "all_minilm/model"


def is_path(source: str) -> bool:
    """A path, as opposed to a demo name or a Hub id (``org/name``: one slash, no leading ``/ ~ .``)."""
    source = source.strip()
    return source.startswith(("/", "~", ".", "\\")) or source.count("/") > 1 or "\\" in source


def display_name(source: str) -> str:
    """The name a user knows the model by: demo name, Hub id, or the last part of a path; its control and invisible
    characters written out (``\\u202e``: a right-to-left override turned the rest of a title around)."""
    return visible(_shown_part(str(source).strip()), spaces=False)


def _shown_part(source: str) -> str:
    if not is_path(source):
        return source or "model"
    parts = [p for p in PurePosixPath(source.replace("\\", "/")).parts if p not in ("/", "~", ".", "..")]
    if len(parts) > 1 and parts[-1].lower() in GENERIC_FOLDERS and not parts[-2].startswith("attnscope-upload"):
        return "/".join(parts[-2:])
    return parts[-1] if parts else "model"


_WEIGHTS_SUFFIXES = (".gguf", ".safetensors", ".bin", ".pt", ".pth")  # after config.json, what an upload is named by


def upload_name(file_names: list[str]) -> str:
    """An upload is named by its file, or for several by its config.json or weights file ("+ n more"; the browser's
    order put "vocab.txt + 11 more" first)."""
    names = [display_name(n) for n in file_names]
    if len(names) == 1:
        return names[0]
    first = next((n for n in names if n.lower() == "config.json"), None)  # not tokenizer_config.json
    first = first or next((n for end in _WEIGHTS_SUFFIXES for n in names if n.lower().endswith(end)), names[0])
    return f"{first} + {len(names) - 1} more"


def file_stem(model, *parts) -> str:
    """A download's file name from its model's name and what it holds (``parts``): letters, digits, ``.`` and
    ``-``, joined by ``_``, at most ``MAX_STEM`` characters. A long model name is shortened, never the parts
    that tell one head or layer from another (unless they alone leave no room for the model)."""
    name, rest = _safe_word(model), "_".join(w for w in map(_safe_word, parts) if w)
    if len(rest) > MAX_STEM - MIN_MODEL_CHARS - 1:  # the parts alone leave the model no room: cut the whole
        return _shortened("_".join(w for w in (name, rest) if w), MAX_STEM)
    if len(name) + len(rest) + 1 > MAX_STEM:
        name = _shortened(name, min(CUT_MODEL_CHARS, MAX_STEM - len(rest) - 1))
    return "_".join(w for w in (name, rest) if w) or "attnscope"


def _safe_word(part) -> str:
    """``part`` in letters, digits, ``.`` and ``-``; a hash of it ends a name that had other scripts ("ü漢字.zip" and
    "日本.zip" were both "zip", so their reports downloaded under one file name)."""
    part = str(part)
    word = _UNSAFE_FILE_CHARS.sub("-", part).strip("-.")
    if part.isascii():
        return word
    return "-".join(w for w in (word, hashlib.sha1(part.encode("utf-8", "replace")).hexdigest()[:DIGEST_CHARS]) if w)


def _shortened(word: str, width: int) -> str:
    """``word`` in at most ``width`` characters: cut, and ended by a hash of the whole word."""
    if len(word) <= width:
        return word
    digest = hashlib.sha1(word.encode()).hexdigest()[:DIGEST_CHARS]
    return f"{word[:width - DIGEST_CHARS - 1].rstrip('-._')}-{digest}"
