"""Read weights without running code: safetensors, ``torch.load(weights_only=True)``, sharded indexes.

safetensors files are read by the Rust parser (once, memory-mapped) after their header has been checked
against the file size, so a truncated file gets a precise message. Pickle-based
files (.bin, .pt, .pth) go only through PyTorch's restricted unpickler
(``weights_only=True``), which refuses any global outside plain tensors and
containers; a payload that would call ``os.system`` is reported, never run.
See https://huggingface.co/docs/safetensors and torch.load's security notes.
"""

from __future__ import annotations

import io
import json
import pickletools
import re
import struct
import zipfile
from pathlib import Path

import torch
from safetensors.torch import load_file as load_safetensors_file

from ..errors import CheckpointError
from ..errors import first_line as _first_line
from ..whole import is_count
from .archive import zip_directory
from .json_items import MAX_DATA_ITEMS, check_json_items
from .paths import utf8_path

SAFETENSORS_SUFFIX = ".safetensors"
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".ckpt")
WEIGHT_SUFFIXES = (SAFETENSORS_SUFFIX, *PICKLE_SUFFIXES)
# Preferred order, as in transformers: safetensors first, pickle last.
PREFERRED = ("model.safetensors", "model.safetensors.index.json", "pytorch_model.bin", "pytorch_model.bin.index.json")
_WRAPPER_KEYS = ("state_dict", "model_state_dict", "model", "module", "weights")  # training-loop checkpoints
# A safetensors header or a shard index is parsed whole, at up to ~15 times its size (a 97 MB header of 7 M
# metadata entries took 1.5 GB and 21 s); one naming MAX_TORCH_RECORDS tensors takes ~15 MB (~150 bytes each)
MAX_HEADER_BYTES = 16 * 2**20
# A torch.save zip holds one record per storage plus four; record names are ~30 bytes ("archive/data/123"), so
# a directory entry with its extra fields stays far below _TORCH_RECORD_BYTES. Training checkpoints with
# optimizer state hold a few thousand storages.
MAX_TORCH_RECORDS = 100_000
_TORCH_RECORD_BYTES = 256
# What torch.load takes for its zip format (torch.serialization._is_zipfile): the first record's signature. Python's
# is_zipfile looks for the directory at the end, so a legacy pickle with an empty zip's 22 bytes after it was both
ZIP_OPENING = b"PK\x03\x04"

EMPTY = "{name} is empty (0 bytes); give the complete weights file"
NOT_SAFETENSORS = "{name} is not a safetensors file ({why}); give the file written by save_file / save_pretrained"
TRUNCATED = ("{name} is truncated: its header says the tensors end at byte {end:,} but the file has {size:,} bytes; "
             "give the complete file")
PICKLE_CODE = ("{name} is a pickle that would run code ({what}) when loaded; AttnScope loads only plain tensors — "
               "save the weights with torch.save(model.state_dict(), ...) or as .safetensors")
NOT_PICKLE = "{name} is not a PyTorch weights file ({why}); give a .safetensors file or a torch.save'd state dict"
LEGACY = ("{name} is in PyTorch's legacy file format (torch.save before 1.6), whose tensors are sized by what the file "
          "declares, not by what it holds; re-save it in a trusted session with torch.save(torch.load(path, "
          "weights_only=True), 'weights.bin') or as .safetensors")
NO_TENSORS = "{name} holds no tensors ({what}); give a state dict: a mapping of parameter names to tensors"
BAD_INDEX = "{name} is not a usable shard index ({why}); give the index with every shard it names"
NOT_WEIGHTS = ("{name} holds {key!r}, {why}; AttnScope reads plain dense weights — save them with "
               "torch.save(model.state_dict(), ...) or as .safetensors")
TOO_MANY = ("{name} holds {n:,} tensors; AttnScope reads at most {high:,} (a model's weights are a few hundred to a "
            "few thousand) — give the model's state dict alone")
BIG_HEADER = ("{name}'s {what} is {size:,} bytes, more than the {limit:,} AttnScope reads (a model's is a few MB "
              "at most) — give the model's state dict alone")
SEVERAL = "found several weight files ({names}) and no index naming which belong together; give one model at a time"


def find_weights(folder: Path) -> list[Path]:
    """The weight file (or index) to read in ``folder``: HF names first, else the single weights file."""
    for name in PREFERRED:
        if (folder / name).is_file():
            return [folder / name]
    found = sorted(p for p in folder.iterdir() if p.is_file() and p.name.lower().endswith(WEIGHT_SUFFIXES))
    found += sorted(p for p in folder.iterdir() if p.is_file() and p.name.endswith(".index.json"))
    if len(found) > 1:
        raise CheckpointError(SEVERAL.format(names=", ".join(p.name for p in found[:5])))
    return found


def read_state_dict(path: Path) -> dict[str, torch.Tensor]:
    """All tensors of a weights file or shard index, on CPU."""
    if path.name.endswith(".index.json"):
        return _read_sharded(path)
    if path.stat().st_size == 0:
        raise CheckpointError(EMPTY.format(name=path.name))
    if path.name.lower().endswith(SAFETENSORS_SUFFIX):
        return read_safetensors(path)
    return read_pickle(path)


def read_safetensors(path: Path) -> dict[str, torch.Tensor]:
    size = path.stat().st_size
    with path.open("rb") as file:  # the header only: the tensors are read once, by the Rust parser
        prefix = file.read(8)
        length = struct.unpack("<Q", prefix)[0] if len(prefix) == 8 else 0
        head = prefix + file.read(min(length, MAX_HEADER_BYTES, max(size - 8, 0)))
    _check_safetensors_header(path.name, head, size)
    try:
        with utf8_path(path) as openable:  # the Rust parser refuses a path that is not UTF-8
            state = load_safetensors_file(str(openable))
    except Exception as err:  # the Rust parser rejects anything malformed with SafetensorError
        raise CheckpointError(NOT_SAFETENSORS.format(name=path.name, why=_first_line(err))) from None
    return _require_tensors(path.name, state)


def _check_safetensors_header(name: str, data: bytes, size: int) -> None:
    """Format: u64 little-endian header length, JSON header of dtype/shape/data_offsets, raw bytes.

    ``data`` is the start of the file (at least the header), ``size`` its length.
    """
    if size < 8:
        raise CheckpointError(NOT_SAFETENSORS.format(name=name, why=f"only {size} bytes"))
    (length,) = struct.unpack("<Q", data[:8])
    if length > min(MAX_HEADER_BYTES, size - 8):
        if data[8:9] == b"{" and length <= size - 8:  # there, and too big to parse
            raise CheckpointError(BIG_HEADER.format(name=name, what="header", size=length, limit=MAX_HEADER_BYTES))
        if data[8:9] == b"{" and length <= MAX_HEADER_BYTES:
            raise CheckpointError(TRUNCATED.format(name=name, end=8 + length, size=size))
        raise CheckpointError(NOT_SAFETENSORS.format(name=name, why="no valid header at the start"))
    check_json_items(data[8:8 + length], f"{name}'s header", MAX_DATA_ITEMS)
    try:
        header = json.loads(data[8:8 + length])
        ends = [v["data_offsets"][1] for k, v in header.items() if k != "__metadata__"]
    except Exception:  # noqa: BLE001 - any malformed header is the same user error
        raise CheckpointError(NOT_SAFETENSORS.format(name=name, why="its header is not valid JSON")) from None
    if not all(is_count(end) and end < 2**63 for end in ends):  # a 4,000-digit offset made a 5,000-character message
        raise CheckpointError(NOT_SAFETENSORS.format(name=name, why="its data_offsets are not byte positions"))
    if len(ends) > MAX_TORCH_RECORDS:  # before the parser builds them all (200,000 empty tensors: +450 MB)
        raise CheckpointError(TOO_MANY.format(name=name, n=len(ends), high=MAX_TORCH_RECORDS))
    end = 8 + length + max(ends, default=0)
    if end > size:
        raise CheckpointError(TRUNCATED.format(name=name, end=end, size=size))


def pickled_code(err) -> str | None:
    """The callable a pickle names that ``torch.load(weights_only=True)`` refused to call (``builtins.eval``, a
    whole model's class), from its error; None for another error."""
    code = re.search(r"GLOBAL ([\w.]+)", str(err))
    return code.group(1) if code else None


def read_pickle(path: Path) -> dict[str, torch.Tensor]:
    with path.open("rb") as file:
        opens_as_zip = file.read(4) == ZIP_OPENING
    if not (opens_as_zip and zipfile.is_zipfile(path)):  # torch.load reads any other file as the legacy format
        _refuse_not_zip(path)
    _check_torch_zip(path)
    try:
        obj = torch.load(path, weights_only=True, map_location="cpu")
    except Exception as err:  # UnpicklingError, RuntimeError, EOFError, ...: all mean "not loadable safely"
        text = str(err)
        code = pickled_code(err)
        if code:
            raise CheckpointError(PICKLE_CODE.format(name=path.name, what=f"it calls {code}")) from None
        detail = re.search(r"WeightsUnpickler error:\s*([^\n]+)", text)
        why = f"{type(err).__name__}: {detail.group(1).strip()[:120]}" if detail else _first_line(err)
        raise CheckpointError(NOT_PICKLE.format(name=path.name, why=why)) from None
    return _require_tensors(path.name, _unwrap(obj))


def _refuse_not_zip(path: Path) -> None:
    """CheckpointError for a file torch.load would read as torch.save's pre-1.6 format: it allocates each storage at
    the size the pickle declares before reading any data, and leaves those the file never fills as they were (a
    344-byte file held a 10 GB tensor, a 914-byte upload built a 2 GB model of zeros). Its message says what the
    file looks like: the legacy format (its magic number's pickle, read as opcodes, never run), a zip cut short."""
    with path.open("rb") as file:
        head = file.read(64)  # the magic number's pickle is 15 bytes at protocol 2, 26 in protocol 4's frame
    try:
        legacy = any(arg == torch.serialization.MAGIC_NUMBER for _, arg, _ in pickletools.genops(io.BytesIO(head)))
    except Exception:  # noqa: BLE001 - not a pickle that opens with a number
        legacy = False
    if legacy:
        raise CheckpointError(LEGACY.format(name=path.name))
    why = "a zip cut short, without its directory" if head.startswith(ZIP_OPENING) else "not torch.save's zip format"
    raise CheckpointError(NOT_PICKLE.format(name=path.name, why=why))


def _check_torch_zip(path: Path) -> None:
    """torch.save stores every record uncompressed, so its bytes are in the file; a compressed record (1.6 MB
    of deflated zeros that torch.load inflates to 1.6 GB) or a directory no state dict needs is refused unread.
    (The size torch allocates for a stored record is checked by torch against the record itself.)"""
    records, directory = zip_directory(path)
    if records > MAX_TORCH_RECORDS or directory > MAX_TORCH_RECORDS * _TORCH_RECORD_BYTES:
        raise CheckpointError(NOT_PICKLE.format(name=path.name, why=f"a zip of {records:,} records"))
    try:
        with zipfile.ZipFile(path) as records_zip:
            packed = [i.filename for i in records_zip.infolist() if i.compress_type != zipfile.ZIP_STORED]
    except (zipfile.BadZipFile, OSError, ValueError) as err:
        raise CheckpointError(NOT_PICKLE.format(name=path.name, why=_first_line(err))) from None
    if packed:
        why = f"{len(packed)} compressed records, e.g. {packed[0]!r}, where torch.save stores them as they are"
        raise CheckpointError(NOT_PICKLE.format(name=path.name, why=why))


def _unwrap(obj):
    """Training checkpoints nest the weights one level down, e.g. ``{"state_dict": {...}, "epoch": 3}``."""
    if isinstance(obj, dict) and not any(isinstance(v, torch.Tensor) for v in obj.values()):
        for key in _WRAPPER_KEYS:
            if isinstance(obj.get(key), dict):
                return obj[key]
    return obj


def _require_tensors(name: str, obj) -> dict[str, torch.Tensor]:
    if not isinstance(obj, dict):
        raise CheckpointError(NO_TENSORS.format(name=name, what=f"it holds a {type(obj).__name__}"))
    state = {str(k): v for k, v in obj.items() if isinstance(v, torch.Tensor)}
    if not state:
        raise CheckpointError(NO_TENSORS.format(name=name, what="a mapping without tensors"))
    if len(state) > MAX_TORCH_RECORDS:
        raise CheckpointError(TOO_MANY.format(name=name, n=len(state), high=MAX_TORCH_RECORDS))
    for key, tensor in state.items():
        why = _not_plain(tensor)
        if why:
            raise CheckpointError(NOT_WEIGHTS.format(name=name, key=key[:80], why=why))
    return state


def _not_plain(tensor: torch.Tensor) -> str | None:
    """Why ``tensor`` is no plain weight tensor, or None. ``weights_only`` loading also gives meta, sparse, quantized
    and nested tensors, and views whose numbers are not in the file: a stride-0 expand of one stored number
    claims 300,000,000 (1.2 GB written out) from a 2 kB upload."""
    if tensor.is_nested or tensor.is_quantized or tensor.layout != torch.strided:
        return f"a {'nested' if tensor.is_nested else 'quantized' if tensor.is_quantized else tensor.layout} tensor"
    if tensor.device.type != "cpu":
        return f"a tensor on the {tensor.device.type} device, without its numbers"
    if tensor.is_complex():
        return f"of {tensor.dtype}"
    if tensor.numel() * tensor.element_size() > tensor.untyped_storage().nbytes():
        return f"a view of {tensor.numel():,} numbers over {tensor.untyped_storage().nbytes():,} stored bytes"
    return None


def _read_sharded(index: Path) -> dict[str, torch.Tensor]:
    size = index.stat().st_size
    if size > MAX_HEADER_BYTES:
        raise CheckpointError(BIG_HEADER.format(name=index.name, what="index", size=size, limit=MAX_HEADER_BYTES))
    raw = index.read_bytes()
    check_json_items(raw, index.name, MAX_DATA_ITEMS)
    try:
        weight_map = json.loads(raw.decode("utf-8"))["weight_map"]
        shards = sorted(set(weight_map.values()))
    except Exception:  # noqa: BLE001
        why = 'it has no "weight_map" of names to files'
        raise CheckpointError(BAD_INDEX.format(name=index.name, why=why)) from None
    state = {}
    for shard in shards:
        plain = isinstance(shard, str) and Path(shard).name == shard and shard.lower().endswith(WEIGHT_SUFFIXES)
        if not plain or not (index.parent / shard).is_file():
            raise CheckpointError(BAD_INDEX.format(name=index.name, why=f"shard {shard!r} is missing"))
        state.update(read_state_dict(index.parent / shard))
        if len(state) > MAX_TORCH_RECORDS:  # each shard within the cap, the model over it (120,037 were written)
            raise CheckpointError(TOO_MANY.format(name=f"{index.name}'s shards", n=len(state), high=MAX_TORCH_RECORDS))
    missing = [k for k in weight_map if k not in state]
    if missing:
        why = f"{len(missing)} tensors missing, e.g. {missing[0]}"
        raise CheckpointError(BAD_INDEX.format(name=index.name, why=why))
    return state

