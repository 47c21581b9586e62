"""Per-layer attention weights (W_Q, W_K, W_V, W_O) of known architectures, one layout for all.

Every layer comes out in ``nn.Linear`` layout (``[out, in]``): ``w_q``/``w_k``
``[H*d_k, d_in]``, ``w_v`` ``[H*d_v, d_in]``, ``w_o`` ``[d_out, H*d_v]``; head h
owns rows ``h*d : (h+1)*d`` of the first three and those columns of ``w_o``.

Recognised, by module shape rather than class name so relatives come along:
- BERT/RoBERTa-like: ``attention.self.query/key/value`` + ``attention.output.dense``;
- GPT-2: fused ``attn.c_attn`` (``Conv1D``, ``[in, out]`` layout) + ``c_proj``;
  cross-attention splits ``q_attn`` and ``c_attn``;
- ``q_proj/k_proj/v_proj`` + ``out_proj`` or ``o_proj``: BART, AttnScope's own
  ``MultiHeadAttention``, Llama-like models without grouped K/V;
- T5: ``q/k/v/o`` (no 1/√d_k scaling: ``scale`` is 1);
- ``torch.nn.MultiheadAttention`` (``in_proj_weight`` or separate projections).
Anything else yields nothing, and the weight checks are skipped with a note.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn

CROSS_NAMES = ("encoder_attn", "EncDecAttention", "crossattention", "cross_attn")


@dataclass
class LayerWeights:
    name: str  # module path inside the model
    part: str  # "self", "encoder", "decoder" or "cross"
    layer: int  # index within its part
    n_heads: int
    d_head: int
    w_q: torch.Tensor  # (H*d_k, d_in)
    w_k: torch.Tensor  # (H*d_k, d_in)
    w_v: torch.Tensor  # (H*d_v, d_in)
    w_o: torch.Tensor  # (d_out, H*d_v)
    scale: float  # factor on q·k before the softmax (1/√d_k, or 1 for T5)

    def heads(self, matrix):
        """Split ``w_q``/``w_k``/``w_v`` rows into ``[H, d, d_in]``."""
        return matrix.reshape(self.n_heads, -1, matrix.shape[-1])  # (H, d, d_in)

    def out_heads(self):
        """Split ``w_o`` columns into ``[H, d_out, d]``."""
        return self.w_o.reshape(self.w_o.shape[0], self.n_heads, -1).permute(1, 0, 2)  # (H, d_out, d)


def _t(weight):
    return weight.detach().float().cpu()


def _bert(module):
    core = getattr(module, "self", None)
    dense = getattr(getattr(module, "output", None), "dense", None)
    if core is None or dense is None or not all(hasattr(core, n) for n in ("query", "key", "value")):
        return None
    heads = getattr(core, "num_attention_heads", None)
    return heads, _t(core.query.weight), _t(core.key.weight), _t(core.value.weight), _t(dense.weight), \
        getattr(core, "scaling", None)


def _gpt2(module):
    if not (hasattr(module, "c_attn") and hasattr(module, "c_proj") and hasattr(module, "num_heads")):
        return None
    fused = _t(module.c_attn.weight).T  # Conv1D stores [in, out]
    if hasattr(module, "q_attn"):  # cross-attention: queries separate, c_attn holds K and V
        q = _t(module.q_attn.weight).T
        k, v = fused.chunk(2, dim=0)
    else:
        q, k, v = fused.chunk(3, dim=0)
    scale = getattr(module, "scaling", None) if getattr(module, "scale_attn_weights", True) else 1.0
    return module.num_heads, q, k, v, _t(module.c_proj.weight).T, scale


def _proj(module):
    out = getattr(module, "out_proj", None)
    out = getattr(module, "o_proj", None) if out is None else out
    if not isinstance(out, nn.Linear) or not all(hasattr(module, n) for n in ("q_proj", "k_proj", "v_proj")):
        return None
    config = getattr(module, "config", None)
    heads = next((getattr(o, n) for o in (module, config) for n in ("n_heads", "num_heads", "num_attention_heads")
                  if o is not None and isinstance(getattr(o, n, None), int)), None)
    return heads, _t(module.q_proj.weight), _t(module.k_proj.weight), _t(module.v_proj.weight), \
        _t(out.weight), getattr(module, "scaling", None)


def _t5(module):
    if not (all(isinstance(getattr(module, n, None), nn.Linear) for n in "qkvo") and hasattr(module, "n_heads")):
        return None
    return module.n_heads, _t(module.q.weight), _t(module.k.weight), _t(module.v.weight), _t(module.o.weight), 1.0


def _mha(module):
    if not isinstance(module, nn.MultiheadAttention):
        return None
    if module.in_proj_weight is not None:
        q, k, v = _t(module.in_proj_weight).chunk(3, dim=0)
    else:
        q, k, v = _t(module.q_proj_weight), _t(module.k_proj_weight), _t(module.v_proj_weight)
    return module.num_heads, q, k, v, _t(module.out_proj.weight), None


_READERS = (_mha, _bert, _gpt2, _proj, _t5)


def _part(name, encoder_decoder):
    if any(c in name for c in CROSS_NAMES):
        return "cross"
    if not encoder_decoder:
        return "self"
    return "decoder" if "decoder" in name else "encoder"


def attention_weights(model):
    """Every attention layer of ``model`` as ``LayerWeights``, in module order; [] if unknown.

    Layers whose shapes do not split into equal heads (e.g. grouped-query K/V)
    are left out.
    """
    encoder_decoder = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
    layers, counts, claimed = [], {}, set()
    for name, module in model.named_modules():
        if any(name.startswith(c + ".") for c in claimed):
            continue  # BERT's attention.self would be read twice
        found = next((r for r in (reader(module) for reader in _READERS) if r is not None), None)
        if found is None or not isinstance(found[0], int) or found[0] < 1:
            continue
        heads, q, k, v, o, scale = found
        if q.shape != k.shape or q.shape[0] % heads or v.shape[0] % heads or o.shape[1] != v.shape[0]:
            continue
        claimed.add(name)
        part = _part(name, encoder_decoder)
        d_head = q.shape[0] // heads
        scale = float(scale) if isinstance(scale, (int, float)) else 1 / math.sqrt(d_head)
        layers.append(LayerWeights(name, part, counts.get(part, 0), heads, d_head, q, k, v, o, scale))
        counts[part] = counts.get(part, 0) + 1
    return layers
