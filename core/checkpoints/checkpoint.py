"""``load_checkpoint``: one safe entry point for uploaded or local checkpoints.

Accepted: a Hugging Face model folder (as a folder, a .zip / .tar.gz of it, or
its loose files) with ``config.json`` and ``model.safetensors`` /
``pytorch_model.bin`` / a sharded index; an AttnScope model folder; a GGUF file
(``gguf``); or a bare state dict (.safetensors, .bin, .pt, .pth) whose
architecture is read from its key names (``infer_arch``). Inside a folder or
archive the model folder is found (``layout``): sentence-transformers folders,
Hub snapshot layouts and extra subfolders (onnx/, 1_Pooling/) load. The private temporary folder is removed before
returning; the rebuilt weights file stays mapped, its disk space held, until the model is dropped. Every failure is a
``CheckpointError`` with one line saying what is wrong and what would work.
See docs/checkpoints.md for the limits and the table of rejected inputs.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import torch

from .archive import (NO_ROOM, Limits, check_upload_size, extract_archive, has_control, is_archive, no_room,
                      write_loose_files)
from .build import build_custom, build_hf, check_model_config, token_vocabulary
from .gguf import is_gguf, load_gguf
from .layout import IGNORED_DIRS, NO_MODEL, entries_under, model_root
from .paths import readable_name
from .temp_dirs import owned_temp_dir
from .tokenizer import choose_tokenizer, copy_tokenizer_files
from ..custom_model import CONFIG_NAME, MODEL_TYPE, AttnScopeTransformer
from ..extraction.extract import model_is_causal
from ..device import pick_device
from ..errors import CheckpointError, DiskFull, one_line, quoted
from .infer_arch import ADAPTER, infer_architecture
from .json_items import check_json_items
from .state_dict import WEIGHT_SUFFIXES, find_weights, read_state_dict

log = logging.getLogger("attnscope.load")  # as loading's: the CLI prints it

ENV_ROOTS = "ATTNSCOPE_ALLOWED_ROOTS"
_SKIPPED_ROOTS: set[str] = set()  # allowed roots whose links could not be followed, logged once each
ADAPTER_CONFIG = "adapter_config.json"  # a PEFT adapter's folder

NOT_FOUND = "{path} does not exist; give the path of {wanted}"
MODEL_PATH = "a model folder, an archive or a weights file"
# One message whether or not the path exists, is a folder, a file or a link: it must not tell a server user
# what lies outside the folders they may read, nor where those folders are.
OUTSIDE = ("{path} is outside the folders AttnScope may read, or does not exist there; give a path under them "
           "(the folders are set by {env})")
NOT_PLAIN = ("{path} is not a folder or a plain file (a pipe, socket or device); give the path of a model folder, an "
             "archive or a weights file")
NUL_BYTE = "the path {path} holds a NUL byte, which no file name can; give the path without it"
SEVERAL_ARCHIVES = ("the upload holds {count} archives ({names}); upload one archive, or the files of one model "
                    "folder, at a time")
NO_WEIGHTS = ("{name} has a config.json but no weights (model.safetensors, pytorch_model.bin or a shard index); "
              "give the whole folder written by save_pretrained")
CONFIG_ALONE = ("config.json alone holds no weights; give the folder that holds it and the weights "
                "(model.safetensors, pytorch_model.bin or a shard index), or give them together")
NOT_JSON = "config.json is not valid JSON ({err}); give the config.json written by save_pretrained"
BIG_CONFIG = ("config.json is {size:,} bytes, more than the {limit:,} any model's config takes (they are a few kB); "
              "give the config.json written by save_pretrained")
# Read whole and parsed before any check: a config.json is a few kB, a few MB with tens of thousands of labels
MAX_CONFIG_BYTES = 16 * 10**6
BAD_INPUT = ("cannot load a checkpoint from a {kind}; pass a path, or a list of (filename, bytes or binary file) "
             "uploads")
PYTHON_IGNORED = "ignored {n} Python file(s) in the checkpoint ({names}): AttnScope never runs code from a checkpoint"
REMOTE_CODE_IGNORED = "config.json asks for custom code (auto_map); it was ignored and the built-in {model_type} used"
HEADS_IGNORED = "n_heads={given} ignored: config.json says {actual}"
SEVERAL_GGUF = "found several GGUF files ({names}); give one model (one .gguf) at a time"
TOO_MUCH_WEIGHT = ("{name} holds {size:,} bytes of weights, more than the {limit:,}-byte limit; raise it with "
                   "ATTNSCOPE_MAX_UNCOMPRESSED_BYTES or Limits(max_total_bytes=...)")

Upload = tuple  # (filename, bytes or a binary file object opened for reading)


@dataclass
class LoadedCheckpoint:
    model: torch.nn.Module
    tokenizer: object | None  # a transformers tokenizer, or None when none fits (see notes)
    notes: list[str] = field(default_factory=list)  # what was inferred, borrowed or ignored, for the user
    architecture: str = ""  # model_type: "bert", "gpt2", "attnscope", ...

    def __iter__(self):  # model, tokenizer = load_checkpoint(...)
        return iter((self.model, self.tokenizer))


def load_checkpoint(inputs, *, n_heads: int | None = None, limits: Limits | None = None,
                    allowed_roots=None, device=None, progress=None) -> LoadedCheckpoint:
    """Load ``inputs`` — a path, or a list of uploaded ``(filename, bytes)`` pairs / paths — safely.

    ``n_heads`` is needed only for a bare state dict (the weights do not hold
    it). ``allowed_roots`` bounds local paths (default: ``$ATTNSCOPE_ALLOWED_ROOTS``
    or the current folder and the home folder). ``progress(fraction, message)``
    is told as each step starts (unpacking, reading the weights, building the model, the tokenizer; a GGUF's
    dequantisation tensor by tensor): a 400 MB zip took seconds a step with no word.
    """
    limits = limits or Limits()
    roots = resolve_roots(allowed_roots)
    if progress is not None:  # each step also a place to stop (``core.cancel.stoppable``)
        progress(0.0, "unpacking the checkpoint")
    with private_dir() as work, _said_no_room():
        folder, label, notes = _stage(inputs, work, limits, roots)
        loaded = _load_folder(folder, label, work / "clean", n_heads, limits, notes, progress)
    loaded.model = loaded.model.to(pick_device(device)).eval()
    return loaded


@contextmanager
def _said_no_room():
    """A full disk while the upload is copied, unpacked or rebuilt, as ``NO_ROOM`` (a raw OSError had been an
    "internal error" naming the private folder)."""
    try:
        yield
    except OSError as err:
        if no_room(err):
            raise DiskFull(NO_ROOM.format(why=err.strerror)) from None
        raise


@contextmanager
def private_dir():
    """A fresh 0700 folder (``temp_dirs.owned_temp_dir``), removed with everything in it on exit."""
    path = owned_temp_dir()
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def resolve_roots(roots=None) -> list[Path]:
    if roots is None:
        env = os.environ.get(ENV_ROOTS, "")
        roots = env.split(os.pathsep) if env.strip() else [Path.cwd(), Path.home()]
    resolved = [_resolved_root(r) for r in roots if str(r).strip()]
    return [root for root in resolved if root is not None]


def _resolved_root(root) -> Path | None:
    """``root`` with its links followed; None, in the log, for one in a link loop (every path was refused with the
    loop's RuntimeError, under the good roots too)."""
    try:
        return expand_user(root).resolve()
    except (RuntimeError, OSError) as err:
        if str(root) not in _SKIPPED_ROOTS:  # once: the roots are read again for every load
            _SKIPPED_ROOTS.add(str(root))
            log.warning("ATTNSCOPE_ALLOWED_ROOTS: %s is skipped, its links cannot be followed (%s)", root, err)
        return None


def expand_user(path) -> Path:
    """``~`` and ``~user`` expanded as everywhere in AttnScope; an unknown user leaves the path as typed."""
    try:
        return Path(path).expanduser()
    except RuntimeError:  # "~nobody-here/x": no such user
        return Path(path)


def check_allowed(path: Path, roots: list[Path], wanted: str = MODEL_PATH) -> Path:
    """``path`` resolved (symlinks followed), or CheckpointError unless it exists under one of ``roots``
    (``wanted``: what a missing path should have been, for the message).

    Outside the roots, a missing path, a link out, an unreadable one and an unknown ``~user``'s get the same message
    (``OUTSIDE``): a ``~user`` left as typed had resolved in the working folder, "does not exist" where a real
    account's home gave ``OUTSIDE``, so the messages told which accounts the server has.
    """
    if "\x00" in str(path):  # no file name can hold one; os.stat raises ValueError, not OSError
        raise CheckpointError(NUL_BYTE.format(path=one_line(str(path))))
    resolved = _resolved_inside(path, roots)
    if resolved is None:
        raise CheckpointError(OUTSIDE.format(path=one_line(str(path)), env=ENV_ROOTS))
    if not _exists(resolved):
        raise CheckpointError(NOT_FOUND.format(path=one_line(str(path)), wanted=wanted))
    return resolved


def _resolved_inside(path: Path, roots: list[Path]) -> Path | None:
    """``path`` with ``~`` expanded and links followed when it lies under one of ``roots``; None outside them, and
    for an unknown ``~user``, a link loop, a path too long or one without permission."""
    try:
        resolved = path.expanduser().resolve()  # RuntimeError for an unknown ~user
    except (OSError, RuntimeError, ValueError):
        return None
    return resolved if any(resolved.is_relative_to(root) for root in roots) else None


def _exists(path: Path) -> bool:
    try:
        return path.exists()
    except OSError:  # a name over the system's length limit (ENAMETOOLONG): no such file
        return False


def _stage(inputs, work: Path, limits: Limits, roots) -> tuple[Path, str, list[str]]:
    """Put the input where it can be read: (model folder, label for messages, notes)."""
    upload = work / "upload"
    upload.mkdir(mode=0o700)
    if isinstance(inputs, (str, Path)):
        path = check_allowed(Path(inputs), roots)
        given = Path(inputs)  # as typed: "~" expanded would name the server's home folder (its user) in messages
        if path.is_dir():
            label = _label(given, path)
            _check_links(path, label, roots, limits.max_entries)
            folder = model_root(path, label, limits.max_entries)
            return folder, label, _ignored_code(folder, recursive=False)
        if not path.is_file():  # a pipe would block the read for ever, a device never end
            raise CheckpointError(NOT_PLAIN.format(path=one_line(str(inputs))))
        return _stage_file(path, _file_name(given, path), work, limits)
    if isinstance(inputs, tuple) and len(inputs) == 2 and _is_data(inputs[1]):
        inputs = [inputs]
    if not isinstance(inputs, (list, tuple)) or not inputs:
        raise CheckpointError(BAD_INPUT.format(kind=type(inputs).__name__ if inputs != [] else "empty list"))
    write_loose_files([_as_upload(item, roots, limits) for item in inputs], upload, limits)
    files = sorted(upload.iterdir())
    archives = [f.name for f in files if is_archive(f)]
    if len(archives) > 1:
        raise CheckpointError(SEVERAL_ARCHIVES.format(count=len(archives), names=", ".join(archives[:4])))
    if len(files) == 1 and is_archive(files[0]):
        archive = files[0].rename(work / files[0].name)
        extract_archive(archive, upload, limits)
        return _model_root(upload, archive.name)
    return _model_root(upload, files[0].name if len(files) == 1 else "the upload")


def _stage_file(path: Path, name: str, work: Path, limits: Limits) -> tuple[Path, str, list[str]]:
    """Stage the checked file ``path`` under ``name``: a Hub cache blob (blobs/<sha256>) has no suffix of its own;
    a name that is not UTF-8 as ``readable_name(name)``, which the Rust readers open and messages show."""
    upload, name = work / "upload", readable_name(name)
    if has_control(name):
        raise CheckpointError(f"{one_line(name)} has a control character in its name; rename the file")
    check_upload_size(name, path.stat().st_size, limits)
    if is_archive(Path(name)):
        (work / name).symlink_to(path)  # the link's target is the resolved path checked against the roots
        extract_archive(work / name, upload, limits)
        return _model_root(upload, name)
    if is_gguf(Path(name)):  # read in place: GGUF files are large, and it is memory-mapped, not copied
        (upload / name).symlink_to(path)
        return upload, name, []
    shutil.copyfile(path, upload / name)
    return upload, name, []


def _label(given: Path, resolved: Path) -> str:
    """How messages name a path: as the user gave it; ``.`` and ``..`` by the folder's name, ``/`` in full."""
    name = given.name if given.name not in ("", "..") else resolved.name
    return name or str(resolved)


def _file_name(given: Path, resolved: Path) -> str:
    """The name a file is read by: the one given, unless only the link's target names a type AttnScope reads."""
    for path in (given, resolved):
        if is_archive(path) or is_gguf(path) or path.name.lower().endswith(WEIGHT_SUFFIXES):
            return path.name
    return _label(given, resolved)


def _is_data(data) -> bool:
    return isinstance(data, (bytes, bytearray)) or (hasattr(data, "read") and hasattr(data, "seek"))


def _as_upload(item, roots, limits: Limits) -> Upload:
    if isinstance(item, (tuple, list)) and len(item) == 2 and _is_data(item[1]):
        return str(item[0]), item[1]
    if isinstance(item, (str, Path)):
        path = check_allowed(Path(item), roots)
        if not path.is_file():
            raise CheckpointError(f"{one_line(str(item))} is not a file; list the files of the model folder, or pass "
                                  "the folder")
        name = _file_name(Path(item), path)
        check_upload_size(name, path.stat().st_size, limits)
        return name, path  # copied in chunks by write_loose_files
    raise CheckpointError(BAD_INPUT.format(kind=f"list holding a {type(item).__name__}"))


def _check_links(folder: Path, label: str, roots, max_entries: int) -> None:
    """A local folder is read in place: no link under it (as deep as the loader looks) may lead outside the allowed
    roots, or nowhere outside them. Checked before a file is read or counted, each named under ``label``: links
    were followed first, so the file counts in messages told existing files outside from missing ones, and the
    refusal named the link's absolute path."""
    for entry in entries_under(folder, label, max_entries):
        if entry.is_symlink() and _resolved_inside(entry, roots) is None:
            shown = f"{label}/{entry.relative_to(folder).as_posix()}"
            raise CheckpointError(OUTSIDE.format(path=one_line(shown), env=ENV_ROOTS))


def _model_root(upload: Path, label: str) -> tuple[Path, str, list[str]]:
    """The model folder of the unpacked upload (``layout.model_root``), and notes on ignored code."""
    return model_root(upload, label), label, _ignored_code(upload, recursive=True)


def _ignored_code(folder: Path, recursive: bool) -> list[str]:
    code = sorted((folder.rglob("*.py") if recursive else folder.glob("*.py")), key=str)
    code = [p for p in code if not any(d in p.parts for d in IGNORED_DIRS)]
    if not code:
        return []
    return [PYTHON_IGNORED.format(n=len(code), names=", ".join(p.name for p in code[:3]))]


def _load_folder(folder: Path, label: str, clean: Path, n_heads, limits: Limits, notes: list[str],
                 progress=None) -> LoadedCheckpoint:
    gguf = gguf_in_folder(folder, label)
    if gguf is not None:
        model, tokenizer, gguf_notes = load_gguf(gguf, limits, progress)
        return LoadedCheckpoint(model, tokenizer, notes + gguf_notes, model.config.model_type)
    tell = progress or (lambda fraction, message: None)  # the steps of a large zip: seconds each
    tell(0.3, "reading the weights")
    config_path = folder / CONFIG_NAME
    if config_path.is_file():
        config = _read_config(config_path)
        check_model_config(config, limits)  # every size cap before a byte of weights is read
        state = _read_weights(folder, label, limits)
        notes.extend(heads_ignored(config, n_heads))
    else:
        _check_not_adapter(folder, label)
        state = _read_weights(folder, label, limits)
        inferred = infer_architecture(state, n_heads)
        config, state = inferred.config, inferred.state
        notes.extend(inferred.notes)
    model_type = config.get("model_type", MODEL_TYPE)
    tell(0.6, "building the model")
    if model_type == MODEL_TYPE:
        model = build_custom(config, state, limits)
    else:
        if "auto_map" in config:
            notes.append(REMOTE_CODE_IGNORED.format(model_type=model_type))
        model = build_hf(config, state, clean, limits, notes)
    tell(0.95, "reading the tokenizer")
    tokenizer_dir = clean if copy_tokenizer_files(folder, clean) else None
    tokenizer = choose_tokenizer(tokenizer_dir, *token_reading(model), notes)
    tell(1.0, "loaded")
    return LoadedCheckpoint(model, tokenizer, notes, model_type)


def token_reading(model) -> tuple[int, bool]:
    """``(vocab, causal)`` a tokenizer is chosen by (``choose_tokenizer``): the token ids ``model`` embeds, and
    whether it reads them causally (a demo decoder's tokenizer is tried first then); CheckpointError for a model
    that reads no tokens."""
    if isinstance(model, AttnScopeTransformer):
        return model.config.vocab_size, model.config.causal
    return token_vocabulary(model), model_is_causal(model)  # Llama too: "gpt2 or is_decoder" read it as an encoder


def gguf_in_folder(folder: Path, label: str) -> Path | None:
    """The GGUF file to load from ``folder`` (a label naming one wins), or None when the folder has none."""
    if is_gguf(Path(label)) and (folder / label).is_file():
        return folder / label
    if any(p.is_file() and p.name.lower().endswith(WEIGHT_SUFFIXES) for p in folder.iterdir()):
        return None  # a Hugging Face or state-dict folder that also carries a .gguf export
    found = sorted(p for p in folder.iterdir() if p.is_file() and is_gguf(p))
    if len(found) > 1:
        raise CheckpointError(SEVERAL_GGUF.format(names=", ".join(p.name for p in found[:5])))
    return found[0] if found else None


def _check_not_adapter(folder: Path, label: str) -> None:
    """CheckpointError (``ADAPTER``, naming its base model) for a PEFT adapter's folder: its weights alone were read
    as a bare state dict of unknown names."""
    if not (folder / ADAPTER_CONFIG).is_file():
        return
    config = _read_config(folder / ADAPTER_CONFIG)
    base = config.get("base_model_name_or_path") if isinstance(config, dict) else None
    named = f" for {quoted(str(base))}" if base else ""
    raise CheckpointError(ADAPTER.format(name=label, base=named))


def _read_config(path: Path):
    size = path.stat().st_size
    if size > MAX_CONFIG_BYTES:
        raise CheckpointError(BIG_CONFIG.format(size=size, limit=MAX_CONFIG_BYTES))
    raw = path.read_bytes()
    check_json_items(raw, path.name)
    try:
        return json.loads(raw.decode("utf-8"))
    except (ValueError, RecursionError) as err:  # bad JSON or UTF-8, a 5,000-digit number, 200,000 nested [
        raise CheckpointError(NOT_JSON.format(err=str(err).splitlines()[0][:160])) from None


def _read_weights(folder: Path, label: str, limits: Limits) -> dict[str, torch.Tensor]:
    weights = find_weights(folder)
    size = sum(p.stat().st_size for p in folder.iterdir() if p.is_file() and p.name.lower().endswith(WEIGHT_SUFFIXES))
    if size > limits.max_total_bytes:  # a folder read in place was not counted while unpacking
        raise CheckpointError(TOO_MUCH_WEIGHT.format(name=label, size=size, limit=limits.max_total_bytes))
    if not weights and (folder / CONFIG_NAME).is_file():  # "config.json has a config.json" said nothing
        raise CheckpointError(CONFIG_ALONE if label == CONFIG_NAME else NO_WEIGHTS.format(name=label))
    if not weights:
        count = sum(1 for p in folder.iterdir() if p.is_file())
        raise CheckpointError(NO_MODEL.format(name=label, count=count))
    return read_state_dict(weights[0])


def heads_ignored(config: dict, n_heads) -> list[str]:
    """The note (a list of 0 or 1) that ``n_heads`` is ignored because the config gives another count."""
    actual = next((config[k] for k in ("num_attention_heads", "n_head", "n_heads") if k in config), None)
    if n_heads is not None and actual is not None and n_heads != actual:
        return [HEADS_IGNORED.format(given=n_heads, actual=actual)]
    return []
