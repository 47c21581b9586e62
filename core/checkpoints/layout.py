"""Which folder of an upload or a local folder holds the model.

Real model folders hold more than one folder and more than one config.json:
- sentence-transformers: the model at the top, plus ``modules.json``,
  ``1_Pooling/config.json``, ``2_Normalize/``, sometimes ``2_Dense/`` with its
  own config and weights (https://sbert.net/docs/sentence_transformer/usage/custom_models.html);
- the Hugging Face cache: ``models--org--name/{blobs,refs,snapshots/<hash>/}``,
  ``refs/main`` naming the snapshot in use (https://huggingface.co/docs/huggingface_hub/guides/manage-cache);
- Hub repositories: README.md, .gitattributes, ``onnx/``, ``openvino/`` exports.
The model folder is the one holding a config.json that names a ``model_type``
and weights (or a .gguf). Only when several such folders remain is the input
refused, naming them. Without one, a folder of bare weights is taken (a state
dict or a GGUF), else a folder whose config.json has no weights beside it (the
loader then says what is missing).
"""

from __future__ import annotations

import json
import os
from pathlib import Path

from ..custom_model import CONFIG_NAME
from ..errors import CheckpointError, one_line
from .json_items import MAX_CONFIG_ITEMS, json_items
from .state_dict import WEIGHT_SUFFIXES

IGNORED_DIRS = ("__MACOSX", ".git", "__pycache__")
MODEL_FILE_SUFFIXES = (*WEIGHT_SUFFIXES, ".gguf", ".index.json")
MAX_DEPTH = 6  # models--org--name/snapshots/<hash>/ plus an archive's top folder and some slack
MAX_CONFIG_BYTES = 1 << 20  # a real config.json is a few KB; a larger one is not peeked at

NO_MODEL = ("{name} holds no model: no config.json and no weights file (.safetensors, .bin, .pt, .pth) among its "
            "{count} files; give a model folder (zipped or as files) or a state dict")
SEVERAL_MODELS = ("{name} holds several model folders ({folders}); give one of them at a time")
TOO_MANY_FILES = "{name} holds more than {limit:,} files within {depth} levels; give the model folder itself"


def model_root(top: Path, label: str, max_entries: int | None = None) -> Path:
    """The model folder inside ``top`` (possibly ``top`` itself); CheckpointError if none or ambiguous."""
    files = files_under(top, label, max_entries)
    config_dirs = {p.parent for p in files if p.name == CONFIG_NAME}
    weight_dirs = {p.parent for p in files if p.name.lower().endswith(MODEL_FILE_SUFFIXES)}
    named = {d for d in config_dirs if _names_model(d / CONFIG_NAME)}
    for candidates in (named & weight_dirs, weight_dirs, config_dirs):
        chosen = _one(sorted(candidates), top, label)
        if chosen is not None:
            return chosen
    raise CheckpointError(NO_MODEL.format(name=one_line(label), count=len(files)))


def holds_model_files(top: Path, max_entries: int = 1000) -> bool:
    """True if a config.json or a weights file lies somewhere under ``top`` (or too many files to tell)."""
    try:
        files = files_under(top, str(top), max_entries)
    except CheckpointError:
        return True
    return any(p.name == CONFIG_NAME or p.name.lower().endswith(MODEL_FILE_SUFFIXES) for p in files)


def _one(folders: list[Path], top: Path, label: str) -> Path | None:
    if len(folders) > 1:
        folders = _current_snapshot(folders) or folders
    if len(folders) > 1:
        names = ", ".join((str(f.relative_to(top)) if f != top else ".") + "/" for f in folders[:4])
        raise CheckpointError(SEVERAL_MODELS.format(name=one_line(label), folders=names))
    return folders[0] if folders else None


def _current_snapshot(folders: list[Path]) -> list[Path]:
    """Of several snapshots of one cached Hub repository, the one ``refs/main`` names (else none)."""
    parents = {f.parent for f in folders}
    if len(parents) != 1 or next(iter(parents)).name != "snapshots":
        return []
    ref = next(iter(parents)).parent / "refs" / "main"
    try:
        wanted = ref.read_text(encoding="utf-8").strip()[:100]
    except (OSError, UnicodeDecodeError):
        return []
    return [f for f in folders if f.name == wanted]


def _names_model(config: Path) -> bool:
    """True if ``config`` is a JSON object naming a ``model_type`` (not a pooling or tokenizer config)."""
    try:
        if config.stat().st_size > MAX_CONFIG_BYTES:
            return False
        raw = config.read_bytes()
        if json_items(raw) > MAX_CONFIG_ITEMS:  # not peeked at, as a file over MAX_CONFIG_BYTES
            return False
        data = json.loads(raw.decode("utf-8"))
    except (OSError, UnicodeDecodeError, ValueError, RecursionError):
        return False
    return isinstance(data, dict) and isinstance(data.get("model_type"), str) and bool(data["model_type"])


def files_under(top: Path, label: str, max_entries: int | None) -> list[Path]:
    """Plain files (or links to them) under ``top``, at most ``MAX_DEPTH`` levels down, skipping tool folders and
    macOS resource forks (``._*``)."""
    return [p for p in entries_under(top, label, max_entries) if not p.name.startswith("._") and p.is_file()]


def entries_under(top: Path, label: str, max_entries: int | None) -> list[Path]:
    """Every name under ``top`` that ``files_under`` picks from, no link followed: file names (``._*`` too: the
    loader's readers list a folder whole), links to folders and links to nothing, at most ``MAX_DEPTH`` levels
    down, skipping tool folders. More than ``max_entries`` names other than folders and ``._*`` is too many (a link
    to nothing or a pipe counts: each is one more name to look at, and nothing is followed to tell)."""
    found, counted, depth0 = [], 0, len(top.parts)
    for root, dirs, names in os.walk(top):  # does not descend into linked folders
        here = Path(root)
        found += [here / name for name in names + [d for d in dirs if (here / d).is_symlink()]]
        dirs[:] = [] if len(here.parts) - depth0 >= MAX_DEPTH else [d for d in dirs if d not in IGNORED_DIRS]
        counted += sum(not name.startswith("._") for name in names)
        if max_entries is not None and counted > max_entries:
            raise CheckpointError(TOO_MANY_FILES.format(name=one_line(label), limit=max_entries, depth=MAX_DEPTH))
    return found
