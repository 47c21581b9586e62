"""Per-layer attention weights (W_Q, W_K, W_V, W_O) of known architectures, one layout for all.

Every layer comes out in ``nn.Linear`` layout (``[out, in]``): ``w_q``/``w_k``
``[H*d_k, d_in]``, ``w_v`` ``[H*d_v, d_in]``, ``w_o`` ``[d_out, H*d_v]``; head h
owns rows ``h*d : (h+1)*d`` of the first three and those columns of ``w_o``.

Recognised, by module shape rather than class name so relatives come along:
- BERT/RoBERTa-like: ``attention.self.query/key/value`` + ``attention.output.dense``;
- GPT-2: fused ``attn.c_attn`` (``Conv1D``, ``[in, out]`` layout) + ``c_proj``;
  cross-attention splits ``q_attn`` and ``c_attn``;
- ``q_proj/k_proj/v_proj`` + ``out_proj`` or ``o_proj``: BART, AttnScope's own
  ``MultiHeadAttention``, Llama, Mistral, Qwen2, Gemma and their relatives, with
  grouped key/value heads (GQA: ``num_key_value_heads`` < ``num_attention_heads``);
- T5: ``q/k/v/o`` (no 1/√d_k scaling: ``scale`` is 1);
- ``torch.nn.MultiheadAttention`` (``in_proj_weight`` or separate projections).
Anything else yields nothing, and the weight checks are skipped with a note.

Grouped-query attention: K and V have one head per group of ``H / kv_heads``
query heads (query head h reads key/value head ``h // (H / kv_heads)``, as
transformers' ``repeat_kv``). Their rows are repeated here to one per query
head, so every check runs per query head; ``kv_heads`` keeps the real count.

``q_source``/``k_source`` name the modules whose outputs are the queries and
keys (after ``q_norm``/``k_norm`` where a model has them) for
``qk_norms.record_qk_norms``; rotary embeddings rotate each head's q and k,
which keeps their norms.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn

CROSS_NAMES = ("encoder_attn", "EncDecAttention", "crossattention", "cross_attn")


@dataclass(frozen=True)
class Source:
    """Columns ``start:stop`` of ``module``'s output hold ``heads`` heads (of queries or keys) side by side."""

    module: nn.Module
    heads: int
    start: int = 0
    stop: int | None = None


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
    kv_heads: int = 0  # key/value heads (< n_heads under grouped-query attention); 0 means n_heads
    q_source: "Source | None" = None  # where the queries come out, for qk_norms
    k_source: "Source | None" = None

    def kv_head(self, head):
        """The key/value head query head ``head`` reads."""
        return head // (self.n_heads // (self.kv_heads or self.n_heads))

    def heads(self, matrix):
        """Split ``w_q``/``w_k``/``w_v`` rows into ``[H, d, d_in]``."""
        return matrix.reshape(self.n_heads, -1, matrix.shape[-1])  # (H, d, d_in)

    def out_heads(self):
        """Split ``w_o`` columns into ``[H, d_out, d]``."""
        return self.w_o.reshape(self.w_o.shape[0], self.n_heads, -1).permute(1, 0, 2)  # (H, d_out, d)


def _t(weight):
    return weight.detach().float().cpu()


def _found(heads, q, k, v, o, scale, q_source=None, k_source=None, kv_heads=None):
    return {"heads": heads, "q": q, "k": k, "v": v, "o": o, "scale": scale, "kv_heads": kv_heads or heads,
            "q_source": q_source, "k_source": k_source}


def _bert(module):
    core = getattr(module, "self", None)
    dense = getattr(getattr(module, "output", None), "dense", None)
    if core is None or dense is None or not all(hasattr(core, n) for n in ("query", "key", "value")):
        return None
    heads = getattr(core, "num_attention_heads", None)
    return _found(heads, _t(core.query.weight), _t(core.key.weight), _t(core.value.weight), _t(dense.weight),
                  getattr(core, "scaling", None), Source(core.query, heads), Source(core.key, heads))


def _gpt2(module):
    if not (hasattr(module, "c_attn") and hasattr(module, "c_proj") and hasattr(module, "num_heads")):
        return None
    fused = _t(module.c_attn.weight).T  # Conv1D stores [in, out]
    heads = module.num_heads
    if hasattr(module, "q_attn"):  # cross-attention: queries separate, c_attn holds K and V
        q = _t(module.q_attn.weight).T
        k, v = fused.chunk(2, dim=0)
        sources = Source(module.q_attn, heads), Source(module.c_attn, heads, 0, len(k))
    else:
        q, k, v = fused.chunk(3, dim=0)
        sources = Source(module.c_attn, heads, 0, len(q)), Source(module.c_attn, heads, len(q), 2 * len(q))
    scale = getattr(module, "scaling", None) if getattr(module, "scale_attn_weights", True) else 1.0
    return _found(heads, q, k, v, _t(module.c_proj.weight).T, scale, *sources)


def _proj(module):
    out = getattr(module, "out_proj", None)
    out = getattr(module, "o_proj", None) if out is None else out
    if not isinstance(out, nn.Linear) or not all(hasattr(module, n) for n in ("q_proj", "k_proj", "v_proj")):
        return None
    heads = _count(module, ("n_heads", "num_heads", "num_attention_heads"))
    kv_heads = _count(module, ("num_key_value_heads", "n_kv_heads")) or heads
    q_out = module.q_norm if isinstance(getattr(module, "q_norm", None), nn.Module) else module.q_proj
    k_out = module.k_norm if isinstance(getattr(module, "k_norm", None), nn.Module) else module.k_proj
    return _found(heads, _t(module.q_proj.weight), _t(module.k_proj.weight), _t(module.v_proj.weight),
                  _t(out.weight), getattr(module, "scaling", None), Source(q_out, heads), Source(k_out, kv_heads),
                  kv_heads)


def _count(module, names):
    """The first int attribute of ``names`` on the module, then on its config (None if none)."""
    config = getattr(module, "config", None)
    return next((getattr(o, n) for o in (module, config) for n in names
                 if o is not None and isinstance(getattr(o, n, None), int)), None)


def _t5(module):
    if not (all(isinstance(getattr(module, n, None), nn.Linear) for n in "qkvo") and hasattr(module, "n_heads")):
        return None
    heads = module.n_heads
    return _found(heads, _t(module.q.weight), _t(module.k.weight), _t(module.v.weight), _t(module.o.weight), 1.0,
                  Source(module.q, heads), Source(module.k, heads))


def _mha(module):
    if not isinstance(module, nn.MultiheadAttention):
        return None
    if module.in_proj_weight is not None:
        q, k, v = _t(module.in_proj_weight).chunk(3, dim=0)
    else:
        q, k, v = _t(module.q_proj_weight), _t(module.k_proj_weight), _t(module.v_proj_weight)
    return _found(module.num_heads, q, k, v, _t(module.out_proj.weight), None)  # projections are functional


_READERS = (_mha, _bert, _gpt2, _proj, _t5)


def _part(name, encoder_decoder):
    if any(c in name for c in CROSS_NAMES):
        return "cross"
    if not encoder_decoder:
        return "self"
    return "decoder" if "decoder" in name else "encoder"


def attention_weights(model):
    """Every attention layer of ``model`` as ``LayerWeights``, in module order; [] if unknown.

    Grouped K/V rows are repeated to one head per query head (see the module
    docstring); layers whose shapes do not split into equal heads are left out.
    """
    encoder_decoder = bool(getattr(getattr(model, "config", None), "is_encoder_decoder", False))
    layers, counts, claimed = [], {}, set()
    for name, module in model.named_modules():
        if any(name.startswith(c + ".") for c in claimed):
            continue  # BERT's attention.self would be read twice
        found = next((r for r in (reader(module) for reader in _READERS) if r is not None), None)
        lw = _layer(found, name, _part(name, encoder_decoder), counts) if found is not None else None
        if lw is None:
            continue
        claimed.add(name)
        layers.append(lw)
        counts[lw.part] = counts.get(lw.part, 0) + 1
    return layers


def _layer(found, name, part, counts):
    """``LayerWeights`` from a reader's dict, K/V repeated to the query heads; None if the shapes do not fit."""
    heads, kv, q, k, v, o = (found[n] for n in ("heads", "kv_heads", "q", "k", "v", "o"))
    if not isinstance(heads, int) or not isinstance(kv, int) or heads < 1 or kv < 1 or heads % kv:
        return None
    if q.shape[0] % heads or k.shape[0] * heads != q.shape[0] * kv or v.shape[0] % kv or k.shape[1] != q.shape[1]:
        return None
    group = heads // kv
    k = k.reshape(kv, -1, k.shape[-1]).repeat_interleave(group, 0).flatten(0, 1)  # (H*d_k, d_in)
    v = v.reshape(kv, -1, v.shape[-1]).repeat_interleave(group, 0).flatten(0, 1)  # (H*d_v, d_in)
    if o.shape[1] != v.shape[0]:
        return None
    d_head = q.shape[0] // heads
    scale = found["scale"]
    scale = float(scale) if isinstance(scale, (int, float)) else 1 / math.sqrt(d_head)
    return LayerWeights(name, part, counts.get(part, 0), heads, d_head, q, k, v, o, scale, kv,
                        found["q_source"], found["k_source"])
