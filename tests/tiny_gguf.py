"""Tiny GGUF files written in-process with the ``gguf`` package's writer, as llama.cpp's converter writes them.

``convert_hf_to_gguf.py`` renames tensors with ``gguf.get_tensor_name_map``,
permutes Llama's Q and K rows into llama.cpp's rotary layout, and transposes
GPT-2's Conv1D weights; the writers below do the same, in float32, so a model
loaded from the file must equal the model it was written from. Both files
carry the tests' BPE tokenizer (vocabulary and merges), as real files do.
"""

from __future__ import annotations

import json
from pathlib import Path

import gguf
import numpy as np
import torch
from transformers import LlamaConfig, LlamaModel

from tiny import bpe_tokenizer, tiny_gpt2

GPT2_TRANSPOSED = ("attn_qkv.weight", "attn_output.weight", "ffn_up.weight", "ffn_down.weight")


def tiny_llama(kv_heads: int = 2, **config) -> LlamaModel:
    """2 layers, 4 query heads sharing 2 key/value heads (grouped-query attention), as SmolLM2 does."""
    config = LlamaConfig(**{**dict(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=kv_heads, max_position_embeddings=64,
                                   rms_norm_eps=1e-5, rope_theta=10000.0, bos_token_id=0, eos_token_id=0), **config})
    torch.manual_seed(0)
    return LlamaModel(config).eval()


def permute(weights: np.ndarray, n_head: int, n_head_kv: int) -> np.ndarray:
    """llama.cpp's ``LlamaModel.permute``: HF's rotary halves -> interleaved pairs, per head."""
    if n_head_kv is not None and n_head != n_head_kv:
        n_head = n_head_kv
    return (weights.reshape(n_head, 2, weights.shape[0] // n_head // 2, *weights.shape[1:])
            .swapaxes(1, 2).reshape(weights.shape))


def _gguf_names(model, arch, prefix: str) -> dict[str, np.ndarray]:
    names = gguf.get_tensor_name_map(arch, model.config.num_hidden_layers)
    out = {}
    for key, tensor in model.state_dict().items():
        if key.endswith((".attn.bias", ".attn.masked_bias")) or "rotary_emb" in key:
            continue
        base, suffix = key.rsplit(".", 1)
        name = names.get_name(prefix + base)
        assert name is not None, key
        out[f"{name}.{suffix}"] = tensor.detach().to(torch.float32).numpy().copy()
    return out


def write_llama_gguf(path: Path, model: LlamaModel | None = None, *, head_count: int | None = None,
                     head_count_kv: bool = True, extra: dict | None = None, rope_scaling: float | None = None) -> Path:
    """``head_count`` overrides the heads the metadata claims (the tensors keep the model's); without
    ``head_count_kv`` the optional key is left out, as files of models without grouped-query attention may.
    ``extra``: more tensors (``rope_freqs.weight``); ``rope_scaling``: a linear rope scaling factor in the metadata."""
    model = model or tiny_llama()
    c = model.config
    writer = _start(path, "llama", c.num_hidden_layers, c.max_position_embeddings, c.hidden_size,
                    c.intermediate_size, head_count or c.num_attention_heads)
    if head_count_kv:
        writer.add_head_count_kv(c.num_key_value_heads)
    writer.add_layer_norm_rms_eps(c.rms_norm_eps)
    writer.add_rope_dimension_count(c.hidden_size // c.num_attention_heads)
    writer.add_rope_freq_base(10000.0)
    if rope_scaling:
        writer.add_rope_scaling_type(gguf.RopeScalingType.LINEAR)
        writer.add_rope_scaling_factor(rope_scaling)
    writer.add_vocab_size(c.vocab_size)
    _add_bpe_tokenizer(writer, c.vocab_size)
    for name, data in _gguf_names(model, gguf.MODEL_ARCH.LLAMA, "model.").items():
        if name.endswith("attn_q.weight"):
            data = permute(data, c.num_attention_heads, c.num_attention_heads)
        elif name.endswith("attn_k.weight"):
            data = permute(data, c.num_attention_heads, c.num_key_value_heads)
        writer.add_tensor(name, data)
    for name, data in (extra or {}).items():
        writer.add_tensor(name, data)
    return finish_gguf(writer, path)


def llama3_rope_factors(rope: dict, head_dim: int) -> np.ndarray:
    """``rope_freqs.weight`` as llama.cpp's ``LlamaModel.generate_extra_tensors`` writes it for a ``llama3`` rope:
    the factor each rotary frequency is divided by (1 for short wavelengths, ``factor`` for long, smooth between)."""
    freqs = 1.0 / rope["rope_theta"] ** (np.arange(0, head_dim, 2, dtype=np.float64) / head_dim)
    context, low, high = rope["original_max_position_embeddings"], rope["low_freq_factor"], rope["high_freq_factor"]
    factors = []
    for wavelength in 2 * np.pi / freqs:
        if wavelength < context / high:
            factors.append(1.0)
        elif wavelength > context / low:
            factors.append(rope["factor"])
        else:
            smooth = (context / wavelength - low) / (high - low)
            factors.append(1 / ((1 - smooth) / rope["factor"] + smooth))
    return np.array(factors, dtype=np.float32)


def write_lfm2_gguf(path: Path, model, extra: dict | None = None) -> Path:
    """An LFM2 (a short-convolution layer, then an attention layer), which transformers loads through its newer GGUF
    path: its convolution weights are stored without their middle dimension, as llama.cpp's converter does.
    ``extra``: more tensors, by GGUF name."""
    c = model.config
    writer = gguf.GGUFWriter(str(path), "lfm2")
    for key, value in {"context_length": 64, "embedding_length": c.hidden_size, "feed_forward_length": 48,
                       "block_count": c.num_hidden_layers, "attention.head_count": c.num_attention_heads,
                       "shortconv.l_cache": c.conv_L_cache}.items():
        writer.add_uint32(f"lfm2.{key}", value)
    writer.add_array("lfm2.attention.head_count_kv", [0 if t == "conv" else c.num_key_value_heads
                                                      for t in c.layer_types])
    writer.add_float32("lfm2.rope.freq_base", 1000000.0)
    writer.add_float32("lfm2.attention.layer_norm_rms_epsilon", c.norm_eps)
    _add_bpe_tokenizer(writer, c.vocab_size)
    names = gguf.get_tensor_name_map(gguf.MODEL_ARCH.LFM2, c.num_hidden_layers)
    for key, tensor in model.state_dict().items():
        base, suffix = key.rsplit(".", 1)
        data = tensor.detach().float().numpy().copy()
        writer.add_tensor(f"{names.get_name(base) or names.get_name('model.' + base)}.{suffix}",
                          data.squeeze(1) if "conv.conv" in key else data)
    for name, data in (extra or {}).items():
        writer.add_tensor(name, data)
    return finish_gguf(writer, path)


def write_plain_gguf(path: Path, model, fields: dict) -> Path:
    """Any architecture whose tensors llama.cpp's converter only renames (Phi-3, StarCoder2, Qwen3): ``fields`` are
    the metadata keys after ``<arch>.`` (floats as float32, ints as uint32)."""
    arch = {"phi3": gguf.MODEL_ARCH.PHI3, "starcoder2": gguf.MODEL_ARCH.STARCODER2,
            "qwen3": gguf.MODEL_ARCH.QWEN3}[model.config.model_type]
    writer = gguf.GGUFWriter(str(path), gguf.MODEL_ARCH_NAMES[arch])
    writer.add_name(f"tiny-{model.config.model_type}")
    for key, value in fields.items():
        add = writer.add_float32 if isinstance(value, float) else writer.add_uint32
        add(f"{gguf.MODEL_ARCH_NAMES[arch]}.{key}", value)
    _add_bpe_tokenizer(writer, model.config.vocab_size)
    writer.add_pad_token_id(0)  # Phi-3's config would default it to 32,000, past the tiny vocabulary
    for name, data in _gguf_names(model, arch, "model.").items():
        writer.add_tensor(name, data)
    return finish_gguf(writer, path)


def write_gpt2_gguf(path: Path, model=None) -> Path:
    model = model or tiny_gpt2(max_positions=1024)  # transformers reads n_positions from n_ctx (1024 in GPT-2)
    c = model.config
    writer = _start(path, "gpt2", c.n_layer, c.n_positions, c.n_embd, 4 * c.n_embd, c.n_head)
    writer.add_layer_norm_eps(c.layer_norm_epsilon)
    _add_bpe_tokenizer(writer, c.vocab_size)
    for name, data in _gguf_names(model, gguf.MODEL_ARCH.GPT2, "transformer.").items():
        writer.add_tensor(name, data.T.copy() if name.endswith(GPT2_TRANSPOSED) else data)
    return finish_gguf(writer, path)


def _start(path: Path, arch: str, layers: int, context: int, hidden: int, feed_forward: int, heads: int):
    """A writer with the hyperparameters every architecture's header carries."""
    writer = gguf.GGUFWriter(str(path), arch)
    writer.add_name(f"tiny-{arch}")
    writer.add_block_count(layers)
    writer.add_context_length(context)
    writer.add_embedding_length(hidden)
    writer.add_feed_forward_length(feed_forward)
    writer.add_head_count(heads)
    return writer


def _add_bpe_tokenizer(writer, vocab_size: int) -> None:
    spec = json.loads(bpe_tokenizer().backend_tokenizer.to_str())
    vocab = sorted(spec["model"]["vocab"].items(), key=lambda item: item[1])
    assert len(vocab) == vocab_size, (len(vocab), vocab_size)
    merges = [m if isinstance(m, str) else " ".join(m) for m in spec["model"]["merges"]]
    writer.add_tokenizer_model("gpt2")
    writer.add_token_list([token for token, _ in vocab])
    writer.add_token_merges(merges)
    writer.add_token_types([3 if token == "<|endoftext|>" else 1 for token, _ in vocab])
    writer.add_bos_token_id(0)
    writer.add_eos_token_id(0)


def finish_gguf(writer, path: Path) -> Path:
    writer.write_header_to_file()
    writer.write_kv_data_to_file()
    writer.write_tensors_to_file()
    writer.close()
    return path
