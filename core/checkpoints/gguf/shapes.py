"""The shapes a GGUF file's metadata implies for its common tensors, checked from the header before a model is built.

llama.cpp creates every tensor with the shape its hyperparameters imply and refuses a file whose tensor differs
(``create_tensor`` in src/llama-model.cpp). transformers builds its model from the same metadata but finds a
mismatch only after dequantising every tensor, and then points at a report it logs. Here llama.cpp's rules are
applied to the header: the embedding and output matrices for every architecture, the attention and feed-forward
projections for the architectures laid out as Llama is (separate Q, K and V with one head size; not GPT-2's or
Phi-3's fused ones, nor Gemma 4's per-layer head sizes). Shapes are in GGML order, the fastest-varying dimension
first, as the file and llama.cpp's messages give them: a weight is ``[inputs, outputs]``.
"""

from __future__ import annotations

import re

from ...errors import CheckpointError, quoted
from ...whole import is_size
from .header import GGUFHeader

# general.architecture values whose blk.N.attn_{q,k,v,output} and ffn_{gate,up,down} follow llama.cpp's Llama shapes
LLAMA_LAYOUT = ("llama", "mistral", "qwen2", "qwen2moe", "qwen3", "qwen3moe", "gemma2", "gemma3", "starcoder2",
                "stablelm", "nemotron")

NOT_MATCHING = "the metadata does not match the weights (re-convert the model with llama.cpp's convert_hf_to_gguf.py)"
MISMATCH = "{name}: tensor {tensor} has shape {got} in the file, but the metadata implies {want} ({keys}); "
MISMATCH += NOT_MATCHING
EXTRA_BLOCK = ("{name}: tensor {tensor} belongs to block {block}, but the metadata's {key} is {count}, so it would "
               "be dropped without a word; " + NOT_MATCHING)

_BLOCK = re.compile(r"blk\.\d+\.(\w+)\.weight")
_BLOCK_INDEX = re.compile(r"blk\.(\d+)\.")
# GGML-order shapes in the sizes of _sizes(): E width, V vocabulary, F feed-forward, Q/K/KV_V query/key/value widths
_EVERY_ARCH = {"token_embd.weight": ("E", "V"), "output.weight": ("E", "V")}
_LLAMA_BLOCK = {"attn_q": ("E", "Q"), "attn_k": ("E", "K"), "attn_v": ("E", "KV_V"), "attn_output": ("Q", "E"),
                "ffn_gate": ("E", "F"), "ffn_up": ("E", "F"), "ffn_down": ("F", "E")}

Dim = tuple[int, tuple[str, ...]]  # a size and the metadata keys it comes from


def check_tensor_shapes(header: GGUFHeader, name: str) -> None:
    """CheckpointError naming the first tensor whose shape differs from the one the metadata implies."""
    arch = header.fields.get("general.architecture")
    _check_blocks(header, str(arch), name)
    sizes = _sizes(header.fields, str(arch))
    for tensor in header.tensors:
        want = _expected(tensor.name, sizes, arch in LLAMA_LAYOUT)
        if want is None or [size for size, _ in want] == list(tensor.dims):
            continue
        wrong = [dim for dim, got in zip(want, tensor.dims) if dim[0] != got] if len(want) == len(tensor.dims) else want
        keys = dict.fromkeys(key for _, dim_keys in wrong for key in dim_keys)
        raise CheckpointError(MISMATCH.format(
            name=name, tensor=quoted(tensor.name), got=list(tensor.dims), want=[size for size, _ in want],
            keys=", ".join(f"{key}={_shown(header.fields, key)}" for key in keys)))


def _check_blocks(header: GGUFHeader, arch: str, name: str) -> None:
    """CheckpointError for a ``blk.N`` tensor past the metadata's block count: transformers builds that many layers
    and drops the rest of the file's tensors without a word."""
    key = f"{arch}.block_count"
    count = header.fields.get(key)
    if not isinstance(count, int) or isinstance(count, bool):
        return  # a missing or odd count is refused where the layers are built (load.py)
    for tensor in header.tensors:
        block = _BLOCK_INDEX.match(tensor.name)
        if block and int(block.group(1)) >= count:
            raise CheckpointError(EXTRA_BLOCK.format(name=name, tensor=quoted(tensor.name), block=int(block.group(1)),
                                                     key=key, count=count))


def _expected(tensor: str, sizes: dict[str, Dim], llama_layout: bool) -> list[Dim] | None:
    """The tensor's shape as llama.cpp builds it, or None where no rule applies or a size is unknown."""
    block = _BLOCK.fullmatch(tensor)
    names = (_LLAMA_BLOCK.get(block.group(1)) if llama_layout else None) if block else _EVERY_ARCH.get(tensor)
    if names is None or any(size not in sizes for size in names):
        return None
    return [sizes[size] for size in names]


def _sizes(fields: dict, arch: str) -> dict[str, Dim]:
    """The sizes the metadata gives, each with its keys; a missing or non-positive key leaves its sizes out."""
    def read(suffix: str) -> Dim | None:
        key = f"{arch}.{suffix}"
        value = fields.get(key)
        return (value, (key,)) if is_size(value) else None

    tokens = fields.get("tokenizer.ggml.tokens")
    vocab = read("vocab_size") or ((tokens[1], ("tokenizer.ggml.tokens",)) if isinstance(tokens, tuple) else None)
    width, heads, ffn = read("embedding_length"), read("attention.head_count"), read("feed_forward_length")
    kv_heads = read("attention.head_count_kv") or heads  # absent: one key/value head per query head
    sizes = {"E": width, "V": vocab, "F": ffn}
    if width and heads:
        head = _combine(width, heads, width[0] // heads[0])
        key_head, value_head = read("attention.key_length") or head, read("attention.value_length") or head
        sizes.update(Q=_combine(key_head, heads, key_head[0] * heads[0]),
                     K=_combine(key_head, kv_heads, key_head[0] * kv_heads[0]),
                     KV_V=_combine(value_head, kv_heads, value_head[0] * kv_heads[0]))
    return {size: dim for size, dim in sizes.items() if dim is not None}


def _combine(a: Dim, b: Dim, size: int) -> Dim:
    return size, tuple(dict.fromkeys(a[1] + b[1]))


def _shown(fields: dict, key: str) -> str:
    value = fields.get(key)
    return f"{value[1]} items" if isinstance(value, tuple) else str(value)
