"""Builders of bad and hostile GGUF files, one per ``gguf-*`` row of docs/checkpoints.md's table.

Most are written byte by byte (``raw_gguf``) so a header can lie in exactly one
place: a count, a shape, a type, an array length. The truncated ones cut a
valid tiny Llama file written by ``tiny_gguf``.
"""

from __future__ import annotations

import random
import struct
from pathlib import Path

from tiny_gguf import tiny_llama, write_llama_gguf

F32, STRING_TYPE, ARRAY_TYPE, U8_TYPE = 0, 8, 9, 0


def _string(text: str) -> bytes:
    data = text.encode()
    return struct.pack("<Q", len(data)) + data


def raw_gguf(path: Path, arch: str = "llama", tensors=(), extra_kv: bytes = b"", n_kv_extra: int = 0,
             tensor_count: int | None = None, data: bytes = b"") -> Path:
    """A GGUF v3 file: ``general.architecture`` (+ ``extra_kv``), the tensor infos ``(name, dims, type, offset)``."""
    kv = _string("general.architecture") + struct.pack("<I", STRING_TYPE) + _string(arch) + extra_kv
    infos = b"".join(_string(name) + struct.pack("<I", len(dims)) + struct.pack(f"<{len(dims)}Q", *dims)
                     + struct.pack("<IQ", qtype, offset) for name, dims, qtype, offset in tensors)
    count = len(tensors) if tensor_count is None else tensor_count
    head = b"GGUF" + struct.pack("<IQQ", 3, count, 1 + n_kv_extra) + kv + infos
    head += b"\0" * (-len(head) % 32)
    path.write_bytes(head + data)
    return path


def metadata_arrays(path: Path, arrays: dict[str, tuple[int, int]]) -> Path:
    """A GGUF whose metadata holds, per key, an array of ``(item type, count)`` zero items: 0 (u8) or "" (string)."""
    item_bytes = {U8_TYPE: 1, STRING_TYPE: 8}  # an empty string is its u64 length, 0
    kv = b"".join(_string(key) + struct.pack("<IIQ", ARRAY_TYPE, item, n) + bytes(n * item_bytes[item])
                  for key, (item, n) in arrays.items())
    return raw_gguf(path, extra_kv=kv, n_kv_extra=len(arrays))


def gguf_not_gguf(d: Path) -> Path:
    (d / "notgguf.gguf").write_bytes(random.Random(0).randbytes(4096))
    return d / "notgguf.gguf"


def gguf_header_cut(d: Path) -> Path:
    path = write_llama_gguf(d / "header_cut.gguf")
    path.write_bytes(path.read_bytes()[:200])
    return path


def gguf_truncated(d: Path) -> Path:
    path = write_llama_gguf(d / "truncated.gguf")
    data = path.read_bytes()
    path.write_bytes(data[:len(data) // 2])
    return path


def gguf_unsupported_architecture(d: Path) -> Path:
    return raw_gguf(d / "evil_arch.gguf", arch="evilformer", tensors=[("token_embd.weight", [8, 4], F32, 0)],
                    data=bytes(128))


def gguf_unsupported_quantisation(d: Path) -> Path:
    return raw_gguf(d / "odd_quant.gguf", tensors=[("token_embd.weight", [8, 4], 99, 0)], data=bytes(128))


def gguf_absurd_tensor_count(d: Path) -> Path:
    return raw_gguf(d / "many_tensors.gguf", tensor_count=2**40)


def gguf_absurd_shape(d: Path) -> Path:
    return raw_gguf(d / "huge_shape.gguf", tensors=[("token_embd.weight", [2**21, 2**21], F32, 0)])


def gguf_too_big(d: Path) -> Path:
    return raw_gguf(d / "too_big.gguf", tensors=[("token_embd.weight", [16384, 65536], F32, 0)])


def gguf_huge_array(d: Path) -> Path:
    """An array claiming 2^50 one-byte items: a reader that walks it item by item never ends."""
    kv = _string("tokenizer.ggml.token_type") + struct.pack("<IIQ", ARRAY_TYPE, U8_TYPE, 2**50) + bytes(64)
    return raw_gguf(d / "huge_array.gguf", extra_kv=kv, n_kv_extra=1)


GGUF_BAD_INPUTS = {f.__name__.replace("_", "-"): f for f in [
    gguf_not_gguf, gguf_header_cut, gguf_truncated, gguf_unsupported_architecture, gguf_unsupported_quantisation,
    gguf_absurd_tensor_count, gguf_absurd_shape, gguf_too_big, gguf_huge_array,
]}


def _u32(key: str, value: int) -> bytes:
    return _string(key) + struct.pack("<II", 4, value)


SMALL_LLAMA = {"llama.embedding_length": 8, "llama.feed_forward_length": 8, "llama.attention.head_count": 2,
               "llama.vocab_size": 16, "llama.context_length": 16}


def gguf_absurd_layers(d: Path) -> Path:
    kv = {**SMALL_LLAMA, "llama.block_count": 1_000_000}
    return raw_gguf(d / "deep.gguf", extra_kv=b"".join(_u32(k, v) for k, v in kv.items()), n_kv_extra=len(kv))


def gguf_without_tensors(d: Path) -> Path:
    kv = {**SMALL_LLAMA, "llama.block_count": 1}
    return raw_gguf(d / "empty_model.gguf", extra_kv=b"".join(_u32(k, v) for k, v in kv.items()), n_kv_extra=len(kv))


def gguf_array_amplification(d: Path) -> Path:
    """16,385 empty strings (8 bytes each in the file): gguf.GGUFReader turns each into numpy objects, ~1 KB apiece."""
    return metadata_arrays(d / "amplify.gguf", {"general.junk": (STRING_TYPE, 16_385)})


def gguf_metadata_mismatch(d: Path) -> Path:
    """A tiny Llama (4 heads of 8, 2 key/value heads) whose metadata claims 8 heads."""
    return write_llama_gguf(d / "heads8.gguf", head_count=8)


def gguf_uneven_kv_heads(d: Path) -> Path:
    """A tiny Llama whose metadata and tensors agree on 4 query heads over 3 key/value heads: it loaded, then failed
    on its first forward."""
    return write_llama_gguf(d / "kv3.gguf", tiny_llama(kv_heads=3))


def gguf_aliased_tensors(d: Path) -> Path:
    """A tiny Llama whose blk.0.attn_k.weight points at attn_q's data (both aligned): it loaded with K = Q, and
    290 tensors on one 1 MB block built 236 MB of weights."""
    path = write_llama_gguf(d / "aliased.gguf")
    data = bytearray(path.read_bytes())
    offsets = {name: _offset_at(data, name) for name in (b"blk.0.attn_q.weight", b"blk.0.attn_k.weight")}
    q_offset = struct.unpack_from("<Q", data, offsets[b"blk.0.attn_q.weight"])[0]
    struct.pack_into("<Q", data, offsets[b"blk.0.attn_k.weight"], q_offset)
    path.write_bytes(bytes(data))
    return path


def _offset_at(data: bytearray, name: bytes) -> int:
    """Where the tensor info of ``name`` keeps its data offset (after n_dims u32, dims u64 each, type u32)."""
    dims_at = data.index(name) + len(name)
    return dims_at + 4 + 8 * struct.unpack_from("<I", data, dims_at)[0] + 4


def gguf_unused_tensors(d: Path) -> Path:
    """A tiny Llama with attention biases (blk.N.attn_q.bias ..., which llama.cpp reads): transformers' LlamaModel
    has no place for them, and it loaded without them (attention off by 0.38)."""
    return write_llama_gguf(d / "llama_bias.gguf", tiny_llama(attention_bias=True))


def gguf_rope_scaling(d: Path) -> Path:
    """A tiny Llama whose metadata asks for linear rope scaling x4, which transformers' GGUF config drops."""
    return write_llama_gguf(d / "linear_rope.gguf", rope_scaling=4.0)


def gguf_not_utf8(d: Path) -> Path:
    """A tiny Llama whose token "he" is the bytes ff fe (GGUF strings are UTF-8): the gguf package fails on it, and
    transformers said the file was "not a valid JSON file"."""
    path = write_llama_gguf(d / "not_utf8.gguf")
    data = bytearray(path.read_bytes())
    token = data.index(struct.pack("<Q", 2) + b"he") + 8
    data[token:token + 2] = b"\xff\xfe"
    path.write_bytes(bytes(data))
    return path


def _f32(key: str, value: float) -> bytes:
    return _string(key) + struct.pack("<If", 6, value)


def _small_llama(path: Path, extra: bytes = b"", n_extra: int = 0) -> Path:
    kv = b"".join(_u32(k, v) for k, v in {**SMALL_LLAMA, "llama.block_count": 1}.items())
    return raw_gguf(path, extra_kv=kv + extra, n_kv_extra=len(SMALL_LLAMA) + 1 + n_extra)


def gguf_many_keys(d: Path) -> Path:
    """1,100 one-byte keys (a 30 kB file): transformers looks each up in a list, and 99,000 (2 MB) took 270 s under
    the lock every GGUF load shares."""
    kv = b"".join(_string(f"general.k{i}") + struct.pack("<IB", U8_TYPE, 0) for i in range(1_100))
    return raw_gguf(d / "many_keys.gguf", extra_kv=kv, n_kv_extra=1_100)


def gguf_nan_rope_base(d: Path) -> Path:
    """A NaN rotary base: every weight finite, every attention map NaN, reported as a diverged training run."""
    return _small_llama(d / "nan_rope.gguf", _f32("llama.rope.freq_base", float("nan")), 1)


def gguf_negative_epsilon(d: Path) -> Path:
    return _small_llama(d / "negative_eps.gguf", _f32("llama.attention.layer_norm_rms_epsilon", -1.0), 1)


def gguf_size_as_text(d: Path) -> Path:
    """llama.embedding_length as a string: transformers failed with 'Validation error for field hidden_size:'."""
    kv = {k: v for k, v in {**SMALL_LLAMA, "llama.block_count": 1}.items() if k != "llama.embedding_length"}
    text = _string("llama.embedding_length") + struct.pack("<I", STRING_TYPE) + _string("eight")
    return raw_gguf(d / "width_text.gguf", extra_kv=b"".join(_u32(k, v) for k, v in kv.items()) + text,
                    n_kv_extra=len(kv) + 1)


def gguf_no_attention_heads(d: Path) -> Path:
    """llama.attention.head_count 0, as llama.cpp writes for Mamba: it was called "corrupt"."""
    kv = {**SMALL_LLAMA, "llama.block_count": 1, "llama.attention.head_count": 0}
    return raw_gguf(d / "no_heads.gguf", extra_kv=b"".join(_u32(k, v) for k, v in kv.items()), n_kv_extra=len(kv))


def gguf_duplicate_key(d: Path) -> Path:
    """general.architecture twice: the gguf package refused it as 'Duplicate … already in list at offset …'."""
    return raw_gguf(d / "twice.gguf", extra_kv=_string("general.architecture") + struct.pack("<I", STRING_TYPE)
                    + _string("gpt2"), n_kv_extra=1)


def gguf_long_key(d: Path) -> Path:
    """A 1 MB key of an unknown type: its name went whole into the message (an 8 MB key, an 8 MB error line)."""
    return raw_gguf(d / "long_key.gguf", extra_kv=_string("A" * 2**20) + struct.pack("<I", 99), n_kv_extra=1)


GGUF_BAD_INPUTS.update({f.__name__.replace("_", "-"): f for f in [
    gguf_many_keys, gguf_nan_rope_base, gguf_negative_epsilon, gguf_size_as_text, gguf_no_attention_heads,
    gguf_duplicate_key, gguf_long_key,
]})


GGUF_BAD_INPUTS.update({f.__name__.replace("_", "-"): f for f in [
    gguf_absurd_layers, gguf_without_tensors, gguf_array_amplification, gguf_metadata_mismatch, gguf_uneven_kv_heads,
    gguf_aliased_tensors, gguf_unused_tensors, gguf_rope_scaling, gguf_not_utf8]})
