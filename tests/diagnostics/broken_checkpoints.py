"""Checkpoints broken on purpose: saved model folders whose ``model.safetensors`` is edited in place.

The edits work on the tensor names of Hugging Face BERT (``attention.self.query``
/``key``/``value``, ``[out, in]`` rows per head) and GPT-2 (fused ``attn.c_attn``,
``Conv1D`` ``[in, 3*out]``: columns Q | K | V), so they apply to the tiny
models built here and to the shipped demo models alike.

The tiny "structured" models start from ``tiny.py``'s random models with
W_Q = W_K = ALPHA · I (and zero Q/K biases): every head scores a key by the
dot product of its slice of the (LayerNorm-ed) token vectors, so maps are
peaked (mean normalised entropy ≈ 0.6) without being one-hot. Random-init
models are near uniform and would make "×0 → diffuse" trivially true.
"""

import re
import shutil
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file

from tiny import bpe_tokenizer, tiny_bert, tiny_gpt2, wordpiece_tokenizer

ALPHA = 1.5
WEIGHTS = "model.safetensors"


@torch.no_grad()
def structured_bert(folder):
    model = tiny_bert()
    for layer in model.encoder.layer:
        for proj in (layer.attention.self.query, layer.attention.self.key):
            proj.weight.copy_(ALPHA * torch.eye(proj.weight.shape[0]))
            proj.bias.zero_()
    return _save(model, wordpiece_tokenizer(), folder)


@torch.no_grad()
def structured_gpt2(folder):
    model = tiny_gpt2()
    for block in model.h:
        width = block.attn.embed_dim
        block.attn.c_attn.weight[:, : 2 * width] = ALPHA * torch.eye(width).repeat(1, 2)
        block.attn.c_attn.bias[: 2 * width] = 0
    return _save(model, bpe_tokenizer(), folder)


def _save(model, tokenizer, folder):
    folder = Path(folder)
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return folder


def _qkv_slices(name, tensor, heads):
    """``{"q"|"k"|"v": [per-head index]}`` of one Q/K/V weight or bias; {} for any other tensor."""
    bert = re.search(r"attention\.self\.(query|key|value)\.(weight|bias)$", name)
    if bert:
        d = tensor.shape[0] // heads
        return {bert.group(1)[0]: [(slice(h * d, (h + 1) * d),) for h in range(heads)]}
    if re.search(r"attn\.c_attn\.(weight|bias)$", name):
        width = tensor.shape[-1] // 3
        d, rows = width // heads, (slice(None),) * (tensor.dim() - 1)
        return {kind: [rows + (slice(i * width + h * d, i * width + (h + 1) * d),) for h in range(heads)]
                for i, kind in enumerate("qkv")}
    return {}


def _edit(src, dst, edit):
    """Copy the folder ``src`` to ``dst`` and apply ``edit(name, tensor)`` to every weight tensor."""
    shutil.copytree(src, dst)
    state = load_file(str(Path(dst) / WEIGHTS))
    touched = sum(bool(edit(name, tensor)) for name, tensor in state.items())
    assert touched, "no attention weights found to break"
    save_file({k: v.contiguous() for k, v in state.items()}, str(Path(dst) / WEIGHTS), metadata={"format": "pt"})
    return Path(dst)


def scale_qk(src, dst, factor, heads=4):
    """Multiply every Q and K weight matrix by ``factor`` (biases untouched)."""
    def edit(name, tensor):
        if not name.endswith("weight"):
            return False
        slices = _qkv_slices(name, tensor, heads)
        for kind in ("q", "k"):
            for index in slices.get(kind, []):
                tensor[index] *= factor
        return bool(slices.get("q") or slices.get("k"))
    return _edit(src, dst, edit)


def copy_head(src, dst, layer, source_head=0, heads=4):
    """Copy head ``source_head``'s Q/K/V weights and biases over every other head of ``layer``."""
    def edit(name, tensor):
        if not re.search(rf"(^|\.)(layer|h)\.{layer}\.", name):
            return False
        slices = _qkv_slices(name, tensor, heads)
        for per_head in slices.values():
            for h in range(heads):
                if h != source_head:
                    tensor[per_head[h]] = tensor[per_head[source_head]]
        return bool(slices)
    return _edit(src, dst, edit)
