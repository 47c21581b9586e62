"""A bounded reader of a GGUF file's header: metadata and tensor table, never the tensor data.

GGUF (https://github.com/ggml-org/ggml/blob/master/docs/gguf.md) is a magic
``GGUF``, a version (2 or 3), a tensor count and a key/value count (u64 each),
the key/value pairs, one info record per tensor (name, dims, type, offset) and,
after padding to ``general.alignment``, the tensor data. Every count and length
read here is checked against the bytes left in the file before it is used, so a
hostile header cannot make the reader loop for ever or allocate more than the
file holds (``gguf.GGUFReader`` trusts an array's count and walks it item by
item, past the end of the file). Arrays that fit in the file are capped too, by
their total item count: ``GGUFReader`` and transformers turn every item into Python
objects (about 17 µs and 1 KB each), so 2,000,000 empty strings, a 16 MB file, took
53 s and 3.5 GB to load before the cap. Only little-endian files are read.
"""

from __future__ import annotations

import mmap
import struct
from dataclasses import dataclass, field
from pathlib import Path

from ...errors import CheckpointError, quoted

MAGIC = b"GGUF"
VERSIONS = (2, 3)  # version 1 used 32-bit counts and is long gone
DEFAULT_ALIGNMENT = 32
# transformers' GGUF loader walks the keys with a list lookup each (quadratic): 99,000 one-byte keys, a 2 MB file,
# took 270 s, under the lock every GGUF load of the process shares; 99,000 tensors took 9.7 s and +534 MB.
MAX_TENSORS = 16_384  # a 405 B Llama has 1,138 tensors; mixture-of-experts files a few thousand
MAX_KEYS = 1_024  # a real file has a few dozen keys (SmolLM2: 33)
MAX_DIMS = 4  # GGML_MAX_DIMS
MAX_ARRAY_DEPTH = 2  # arrays of arrays exist (e.g. per-layer lists); deeper is corrupt
# Metadata array items, all arrays of a group together (gguf.GGUFReader parses SmolLM2's 147,204 in 2.6 s, 160 MB).
# tokenizer.ggml.* holds at most four per-token arrays (tokens, scores, token types, and BPE merges or a Unigram
# charsmap, ~240 KB in T5) of the largest vocabulary among transformers' GGUF architectures, Gemma's 262,144 tokens;
# every other array is short (per-layer lists of at most 512 layers, tags, languages).
TOKENIZER_PREFIX = "tokenizer.ggml."
MAX_TOKENIZER_ITEMS = 4 * 262_144
MAX_OTHER_ITEMS = 16_384

# value type id -> (struct format, size); 8 = string, 9 = array
_SCALARS = {0: ("B", 1), 1: ("b", 1), 2: ("H", 2), 3: ("h", 2), 4: ("I", 4), 5: ("i", 4), 6: ("f", 4), 7: ("?", 1),
            10: ("Q", 8), 11: ("q", 8), 12: ("d", 8)}
STRING, ARRAY = 8, 9
ALIGNMENT_TYPE = 4  # general.alignment is a u32 (gguf.GGUFReader refuses any other type)

NOT_GGUF = "{name} is not a GGUF file ({why}); give the .gguf written by llama.cpp's convert_hf_to_gguf.py"
CUT = ("{name} is truncated or corrupt: {what} at byte {at:,} runs past the end of the file ({size:,} bytes); "
       "give the complete file")
COUNT = "{name} declares {n:,} {what}, more than the {limit:,} any model file has; the header is corrupt"
NOT_UTF8 = "{name}: {what} at byte {at:,} is not UTF-8 text, as every GGUF string is; the file is corrupt"
MANY_ITEMS = ("{name}: the metadata array {key} brings the {group} to {n:,} items, more than the {limit:,} "
              "a real model file holds (each costs time and memory to parse); the header is corrupt or hostile")


@dataclass
class TensorInfo:
    name: str
    dims: tuple[int, ...]  # GGML order: the fastest-varying dimension first
    type_id: int  # GGMLQuantizationType value
    offset: int  # from the start of the data section


@dataclass
class GGUFHeader:
    version: int
    fields: dict[str, object] = field(default_factory=dict)  # scalars and strings; arrays as ("array", count)
    tensors: list[TensorInfo] = field(default_factory=list)
    data_start: int = 0  # byte where the tensor data begins
    file_size: int = 0


class _ItemBudget:
    """Counts metadata array items per group (tokenizer.ggml.* or the rest), refusing past the group's cap."""

    def __init__(self, name: str):
        self.name, self.spent = name, {True: 0, False: 0}

    def spend(self, key: str, count: int) -> None:
        tokenizer = key.startswith(TOKENIZER_PREFIX)
        self.spent[tokenizer] += count
        limit = MAX_TOKENIZER_ITEMS if tokenizer else MAX_OTHER_ITEMS
        if self.spent[tokenizer] > limit:
            group = f"{TOKENIZER_PREFIX}* arrays" if tokenizer else f"arrays outside {TOKENIZER_PREFIX}*"
            raise CheckpointError(MANY_ITEMS.format(name=self.name, key=quoted(key), group=group,
                                                    n=self.spent[tokenizer],
                                                    limit=limit))


class _Cursor:
    """Reads little-endian values from a buffer, refusing to read past its end."""

    def __init__(self, buffer, name: str):
        self.buffer, self.name, self.pos, self.size = buffer, name, 0, len(buffer)

    def need(self, n: int, what: str) -> None:
        if n < 0 or self.pos + n > self.size:
            raise CheckpointError(CUT.format(name=self.name, what=what, at=self.pos, size=self.size))

    def scalar(self, fmt: str, size: int, what: str):
        self.need(size, what)
        value = struct.unpack_from("<" + fmt, self.buffer, self.pos)[0]
        self.pos += size
        return value

    def u32(self, what: str) -> int:
        return self.scalar("I", 4, what)

    def u64(self, what: str) -> int:
        return self.scalar("Q", 8, what)

    def string(self, what: str) -> str:
        length = self.u64(what)
        self.need(length, what)
        raw = bytes(self.buffer[self.pos:self.pos + length])
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:  # the gguf package and transformers then fail with "not a valid JSON file"
            raise CheckpointError(NOT_UTF8.format(name=self.name, what=what, at=self.pos)) from None
        self.pos += length
        return text


def read_gguf_header(path: Path) -> GGUFHeader:
    """The header of the GGUF file at ``path``; CheckpointError naming what is wrong."""
    name = path.name
    size = path.stat().st_size
    if size < 24:
        raise CheckpointError(NOT_GGUF.format(name=name, why=f"only {size} bytes"))
    with path.open("rb") as handle, mmap.mmap(handle.fileno(), 0, access=mmap.ACCESS_READ) as buffer:
        return _parse(_Cursor(buffer, name), name)


def _parse(cur: _Cursor, name: str) -> GGUFHeader:
    if bytes(cur.buffer[:4]) != MAGIC:
        raise CheckpointError(NOT_GGUF.format(name=name, why="it does not start with the bytes GGUF"))
    cur.pos = 4
    version = cur.u32("the version")
    if version not in VERSIONS:
        why = "a big-endian file" if version & 0xFFFF == 0 else f"version {version}; AttnScope reads versions 2 and 3"
        raise CheckpointError(NOT_GGUF.format(name=name, why=why))
    n_tensors, n_keys = cur.u64("the tensor count"), cur.u64("the key count")
    for count, what, limit in ((n_tensors, "tensors", MAX_TENSORS), (n_keys, "metadata keys", MAX_KEYS)):
        if count > limit:
            raise CheckpointError(COUNT.format(name=name, n=count, what=what, limit=limit))
    header, budget = GGUFHeader(version, file_size=cur.size), _ItemBudget(name)
    for _ in range(n_keys):
        key = cur.string("a metadata key")
        type_id = cur.u32(f"the type of {quoted(key)}")
        if key in header.fields or (key == "general.alignment" and type_id != ALIGNMENT_TYPE):
            why = "appears twice" if key in header.fields else f"is stored as type {type_id}, where GGUF has a u32"
            raise CheckpointError(NOT_GGUF.format(name=name, why=f"the metadata key {quoted(key)} {why}"))
        header.fields[key] = _value(cur, type_id, key, 0, budget)
    names = set()
    for _ in range(n_tensors):
        header.tensors.append(_tensor_info(cur))
        if header.tensors[-1].name in names:  # one name, two sets of weights: which one a loader takes is luck
            raise CheckpointError(NOT_GGUF.format(name=name, why=f"the tensor {quoted(header.tensors[-1].name)} "
                                                             "appears twice"))
        names.add(header.tensors[-1].name)
    alignment = header.fields.get("general.alignment", DEFAULT_ALIGNMENT)
    if not isinstance(alignment, int) or alignment <= 0 or alignment & (alignment - 1):
        raise CheckpointError(NOT_GGUF.format(name=name, why=f"general.alignment is {alignment!r}, not a power of two"))
    header.data_start = -(-cur.pos // alignment) * alignment
    return header


def _value(cur: _Cursor, type_id: int, key: str, depth: int, budget: _ItemBudget):
    if type_id in _SCALARS:
        return cur.scalar(*_SCALARS[type_id], what=f"the value of {quoted(key)}")
    if type_id == STRING:
        return cur.string(f"an item of {quoted(key)}" if depth else f"the value of {quoted(key)}")
    if type_id == ARRAY and depth < MAX_ARRAY_DEPTH:
        item_type, count = cur.u32(f"the item type of {quoted(key)}"), cur.u64(f"the length of {quoted(key)}")
        smallest = _SCALARS[item_type][1] if item_type in _SCALARS else 8  # a string or array is >= 8 bytes
        cur.need(count * smallest, f"the {count:,} items of {quoted(key)}")
        budget.spend(key, count)  # before walking the items, so a refusal is quick too
        if item_type in _SCALARS:
            cur.pos += count * smallest
        else:
            for _ in range(count):
                _value(cur, item_type, key, depth + 1, budget)
        return ("array", count)
    why = f"the metadata key {quoted(key)} has unknown type {type_id}"
    raise CheckpointError(NOT_GGUF.format(name=cur.name, why=why))


def _tensor_info(cur: _Cursor) -> TensorInfo:
    name = cur.string("a tensor name")
    n_dims = cur.u32(f"the dimensions of {quoted(name)}")
    if not 1 <= n_dims <= MAX_DIMS:
        raise CheckpointError(f"{cur.name}: tensor {quoted(name)} has {n_dims} dimensions (GGUF allows 1 to "
                              f"{MAX_DIMS}); "
                              "the file is corrupt")
    dims = tuple(cur.u64(f"the shape of {quoted(name)}") for _ in range(n_dims))
    return TensorInfo(name, dims, cur.u32(f"the type of {quoted(name)}"), cur.u64(f"the offset of {quoted(name)}"))
