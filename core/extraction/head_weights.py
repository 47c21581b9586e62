"""Per-layer attention weights (W_Q, W_K, W_V, W_O) of known architectures, one layout for all.

Every layer comes out in ``nn.Linear`` layout (``[out, in]``): ``w_q``/``w_k``
``[H*d_k, d_in]``, ``w_v`` ``[H*d_v, d_in]``, ``w_o`` ``[d_out, H*d_v]``; head h
owns rows ``h*d : (h+1)*d`` of the first three and those columns of ``w_o``.

Recognised, by module shape rather than class name so relatives come along:
- BERT/RoBERTa/ELECTRA-like: ``attention.self.query/key/value`` + ``attention.output.dense``;
- GPT-2: fused ``attn.c_attn`` (``Conv1D``, ``[in, out]`` layout) + ``c_proj``;
  cross-attention splits ``q_attn`` and ``c_attn``;
- separate projections ``q_proj/k_proj/v_proj`` + ``out_proj``, ``o_proj`` or
  ``dense`` (BART, OPT, GPT-J, GPT-Neo, Phi, AttnScope's own ``MultiHeadAttention``,
  Llama, Mistral, Qwen2, Gemma and their relatives, with grouped key/value heads
  (GQA: ``num_key_value_heads`` < ``num_attention_heads``)), ``q_lin/k_lin/v_lin``
  + ``out_lin`` (DistilBERT), ``q/k/v/o`` (T5, whose scores are not scaled:
  ``scale`` 1, and MPNet);
- one fused projection (``_qkv_rows`` has the layouts): ``query_key_value`` +
  ``dense`` (GPT-NeoX/Pythia, Bloom, Falcon, Persimmon), ``qkv_proj`` + ``o_proj`` (Phi-3),
  ``Wqkv`` + ``Wo`` (ModernBERT), a linear ``c_attn`` + ``c_proj`` (GPT-BigCode);
- ``torch.nn.MultiheadAttention`` (``in_proj_weight`` or separate projections).
Anything else yields nothing (ALBERT, whose layers share one set of weights;
DeBERTa, whose scores add position terms; CodeGen's model-parallel layout), and
the weight checks are skipped with a note. Position terms that models add to
q·k (ALiBi's distance penalty, T5's bucket biases) are not part of W_Q, W_K.

Grouped-query attention: K and V have one head per group of ``H / kv_heads``
query heads (query head h reads key/value head ``h // (H / kv_heads)``, as
transformers' ``repeat_kv``). Their rows are repeated here to one per query
head, so every check runs per query head; ``kv_heads`` keeps the real count.

``q_source``/``k_source`` name the modules whose outputs are the queries and
keys for ``qk_norms.record_qk_norms``: after ``q_norm``/``k_norm`` or
``q_layernorm``/``k_layernorm`` where a model has them (Qwen3, Persimmon and
Cohere run them on ``[batch, tokens, heads, d]``; Gemma 3, Exaone4, Apertus and
Phi on ``[batch, heads, tokens, d]``; OLMo2 on ``[batch, tokens, heads*d]``).
Rotary embeddings rotate each head's q and k, which keeps their norms.
"""

import math
from dataclasses import dataclass

import torch
from torch import nn

from ..errors import ExtractionError
from .offload import weights_in_memory
from .text_config import text_model

CROSS_NAMES = ("encoder_attn", "EncDecAttention", "crossattention", "cross_attn")


# Models whose scores are q·k, not q·k/√d_k, though their modules look like their scaled relatives'
# (GPT-Neo: ``GPTNeoSelfAttention._attn`` multiplies query by key and nothing else).
UNSCALED_MODEL_TYPES = ("gpt_neo",)


@dataclass(frozen=True, eq=False)  # compared by identity: a tensor field has no single truth value
class Source:
    """Output ``columns`` of ``module`` (all when None) hold ``heads`` heads (of queries or keys), head by head.

    A per-head norm's output (``q_norm``, ``q_layernorm``) is ``[batch, tokens, heads, d]`` or
    ``[batch, heads, tokens, d]``, depending on whether the model transposes before or after the norm; ``feed``
    is then the projection the norm reads, which tells the two apart when tokens == heads.
    """

    module: nn.Module
    heads: int
    columns: torch.Tensor | None = None  # (heads*d,) long
    feed: "Source | None" = None  # the projection output a per-head norm normalises

    def split(self, out: torch.Tensor, d_head: int, heads_first: bool = False) -> torch.Tensor:
        """This source's vectors in ``out``, a module output ``[..., heads*d]`` or ``[..., heads, d]`` (or, with
        ``heads_first``, ``[batch, heads, tokens, d]``), as ``[n, heads, d]``, every leading dim flattened into n."""
        x = out if self.columns is None else out[..., self.columns.to(out.device)]  # (..., heads*d) or (.., heads, d)
        if heads_first:
            x = x.transpose(-3, -2)  # (b, heads, s, d) -> (b, s, heads, d)
        if x.numel() % (self.heads * d_head) or (x.dim() > 1 and x.shape[-1] not in (d_head, self.heads * d_head)):
            raise ExtractionError(f"{type(self.module).__name__} output of shape {tuple(out.shape)} does not split "
                                  f"into {self.heads} heads of {d_head}")
        return x.reshape(-1, self.heads, d_head)  # (n, heads, d)

    def heads_first(self, out: torch.Tensor, d_head: int, norm_input=None, fed=None) -> bool | None:
        """Whether ``out`` is ``[batch, heads, tokens, d]`` rather than ``[batch, tokens, heads, d]`` or flat; None
        when it cannot be told: tokens == heads, and the norm's input ``norm_input`` is not the ``feed``
        projection's output ``fed`` viewed per head, transposed or not."""
        if out.dim() != 4 or out.shape[-1] != d_head or out.shape[1] != self.heads:
            return False  # (b, s, heads, d) or (b, s, heads*d): the heads are next to d
        if out.shape[2] != self.heads:
            return True  # (b, heads, s, d)
        if self.feed is None or not isinstance(norm_input, torch.Tensor) or not isinstance(fed, torch.Tensor):
            return None
        viewed = fed if self.feed.columns is None else fed[..., self.feed.columns.to(fed.device)]  # (b, s, heads*d)
        viewed = viewed.unflatten(-1, (self.heads, d_head))  # (b, s, heads, d)
        for first, x in ((False, viewed), (True, viewed.transpose(1, 2))):  # (b, s, heads, d), (b, heads, s, d)
            if x.shape == norm_input.shape and torch.equal(x, norm_input):
                return first
        return None


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
    softcap: float | None = None  # scores are capped to ±softcap (Gemma 2's attn_logit_softcapping)

    def kv_head(self, head):
        """The key/value head query head ``head`` reads."""
        return head // (self.n_heads // (self.kv_heads or self.n_heads))

    def heads(self, matrix):
        """Split ``w_q``/``w_k``/``w_v`` rows into ``[H, d, d_in]``."""
        return matrix.reshape(self.n_heads, -1, matrix.shape[-1])  # (H, d, d_in)

    def out_heads(self):
        """Split ``w_o`` columns into ``[H, d_out, d]``."""
        return self.w_o.reshape(self.w_o.shape[0], self.n_heads, -1).permute(1, 0, 2)  # (H, d_out, d)


class _OnMeta(Exception):
    """A reader reached a weight with no data (accelerate's offload keeps it on ``meta`` between forwards)."""


def _t(weight):
    if weight.is_meta:
        raise _OnMeta
    return weight.detach().float().cpu()


def _read(module, name):
    """The first reader's dict for ``module``, or None. Only a module a reader takes has its weights read: an
    offloaded one's are brought in then, for that module alone (bringing in every module's, the whole model's from
    the root, first, would hold a model offloaded for its size whole)."""
    try:
        return _first_reading(module)
    except _OnMeta:
        pass
    with weights_in_memory(module):
        try:
            return _first_reading(module)
        except _OnMeta:
            raise ExtractionError(f"the weights of {name or type(module).__name__} are not loaded (on the meta "
                                  "device); load them, e.g. with from_pretrained") from None


def _first_reading(module):
    for reader in _READERS:
        try:
            found = reader(module)
        except AttributeError:  # a reader's layout with a part it cannot read (a query wrapped in nn.Sequential had
            continue  # stopped the whole diagnosis with "'Sequential' object has no attribute 'weight'")
        if found is not None:
            return found
    return None


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
    if not (hasattr(module, "c_attn") and hasattr(module, "c_proj") and hasattr(module, "num_heads")) \
            or isinstance(module.c_attn, nn.Linear):  # GPT-BigCode's c_attn is an nn.Linear: _fused
        return None
    fused = _t(module.c_attn.weight).T  # Conv1D stores [in, out]
    heads = module.num_heads
    if hasattr(module, "q_attn"):  # cross-attention: queries separate, c_attn holds K and V
        q = _t(module.q_attn.weight).T
        k, v = fused.chunk(2, dim=0)
        sources = Source(module.q_attn, heads), Source(module.c_attn, heads, torch.arange(len(k)))
    else:
        q, k, v = fused.chunk(3, dim=0)
        sources = (Source(module.c_attn, heads, torch.arange(len(q))),
                   Source(module.c_attn, heads, torch.arange(len(q), 2 * len(q))))
    scale = _scale(module)  # transformers folds scale_attn_weights and scale_attn_by_inverse_layer_idx into it
    if scale is None and not getattr(module, "scale_attn_weights", True):
        scale = 1.0
    return _found(heads, q, k, v, _t(module.c_proj.weight).T, scale, *sources)


# Separate projections: (query, key, value, output names). T5's q/k/v/o are told from MPNet's by ``n_heads``.
_SEPARATE = (("q_proj", "k_proj", "v_proj", ("out_proj", "o_proj", "dense")),
             ("q_lin", "k_lin", "v_lin", ("out_lin",)),  # DistilBERT
             ("q", "k", "v", ("o",)))  # T5, MPNet


def _proj(module):
    for q_name, k_name, v_name, out_names in _SEPARATE:
        q_proj, k_proj, v_proj = (getattr(module, n, None) for n in (q_name, k_name, v_name))
        out = next((getattr(module, n) for n in out_names if isinstance(getattr(module, n, None), nn.Linear)), None)
        if out is not None and all(isinstance(p, nn.Linear) for p in (q_proj, k_proj, v_proj)):
            break
    else:
        return None
    heads = _count(module, ("n_heads", "num_heads", "num_attention_heads"))
    kv_heads = _count(module, ("num_key_value_heads", "n_kv_heads")) or heads
    sources = _normed(module, Source(q_proj, heads), Source(k_proj, kv_heads))
    scale = 1.0 if q_name == "q" and hasattr(module, "n_heads") else _scale(module)  # T5 does not scale
    return _found(heads, _t(q_proj.weight), _t(k_proj.weight), _t(v_proj.weight), _t(out.weight), scale,
                  *sources, kv_heads)


# One projection for Q, K and V: (its name, the output projection's, its row layout: see _qkv_rows).
_FUSED = (("query_key_value", "dense", "per_head"), ("qkv_proj", "o_proj", "contiguous"),
          ("Wqkv", "Wo", "contiguous"), ("c_attn", "c_proj", "per_head"))


def _fused(module):
    fused, out, layout = next(((getattr(module, f), getattr(module, o), layout) for f, o, layout in _FUSED
                               if all(isinstance(getattr(module, n, None), nn.Linear) for n in (f, o))),
                              (None, None, None))
    heads = _count(module, ("num_heads", "num_attention_heads", "n_head"))
    if fused is None or not isinstance(heads, int) or heads < 1 or out.in_features % heads:
        return None
    d = out.in_features // heads
    rows = _qkv_rows(module, layout, fused.out_features, heads, d)
    if rows is None:
        return None
    q, k, v = (_t(fused.weight)[r] for r in rows)  # (H*d, d_in), (kv*d, d_in), (kv*d, d_in)
    kv_heads = len(rows[1]) // d
    sources = _normed(module, Source(fused, heads, rows[0]), Source(fused, kv_heads, rows[1]))
    return _found(heads, q, k, v, _t(out.weight), _scale(module), *sources, kv_heads)


# Norms of the queries and keys that run between the projection and the scores: (query norm, key norm) names.
_QK_NORMS = (("q_norm", "k_norm"), ("q_layernorm", "k_layernorm"))  # Qwen3, Gemma 3, ...; Persimmon, Phi


def _normed(module, q_source, k_source):
    """The query and key sources after ``module``'s q/k norms where it has them: the scores see the norms'
    outputs (Persimmon's LayerNorm takes away any scale of W_Q, W_K)."""
    found = []
    for source, names in zip((q_source, k_source), zip(*_QK_NORMS)):
        norm = next((getattr(module, n) for n in names if isinstance(getattr(module, n, None), nn.Module)), None)
        found.append(source if norm is None else Source(norm, source.heads, feed=source))
    return tuple(found)


def _qkv_rows(module, layout, n_rows, heads, d):
    """Which rows of a fused Q/K/V weight are the queries, keys and values, head by head (None if they do not fit).

    - ``per_head``, q, k, v of each head in turn (``view(heads, 3, d)``): GPT-NeoX, Bloom, and Falcon and
      GPT-BigCode without ``multi_query``;
    - per key/value group, its queries, then k, then v (``view(kv, heads/kv + 2, d)``): Falcon's
      ``new_decoder_architecture``;
    - ``contiguous``, every head's q, then k, then v: Phi-3, ModernBERT, and Falcon and GPT-BigCode with
      ``multi_query`` (one key/value head).
    """
    rows = torch.arange(n_rows)
    if getattr(module, "new_decoder_architecture", False):
        kv = getattr(module, "num_kv_heads", None)
        if not isinstance(kv, int) or kv < 1 or heads % kv or n_rows != (heads + 2 * kv) * d:
            return None
        groups = rows.view(kv, -1, d)  # (kv, heads/kv + 2, d)
        return groups[:, :-2].flatten(), groups[:, -2].flatten(), groups[:, -1].flatten()
    if layout == "per_head" and not getattr(module, "multi_query", False):
        if n_rows != 3 * heads * d:
            return None
        per_head = rows.view(heads, 3, d)  # (H, 3, d)
        return per_head[:, 0].flatten(), per_head[:, 1].flatten(), per_head[:, 2].flatten()
    kv = (n_rows // d - heads) // 2
    if kv < 1 or n_rows != (heads + 2 * kv) * d:
        return None
    return rows[:heads * d], rows[heads * d:(heads + kv) * d], rows[(heads + kv) * d:]


def _scale(module):
    """The module's own factor on q·k where it keeps one (None: the usual 1/√d_k)."""
    return next((getattr(module, n) for n in ("scaling", "inv_norm_factor")
                 if isinstance(getattr(module, n, None), (int, float))), None)


def _count(module, names):
    """The first int attribute of ``names`` on the module, then on its config (None if none)."""
    config = getattr(module, "config", None)
    return next((getattr(o, n) for o in (module, config) for n in names
                 if o is not None and isinstance(getattr(o, n, None), int)), None)


def _mha(module):
    if not isinstance(module, nn.MultiheadAttention):
        return None
    if module.in_proj_weight is not None:
        q, k, v = _t(module.in_proj_weight).chunk(3, dim=0)
    else:
        q, k, v = _t(module.q_proj_weight), _t(module.k_proj_weight), _t(module.v_proj_weight)
    return _found(module.num_heads, q, k, v, _t(module.out_proj.weight), None)  # projections are functional


_READERS = (_mha, _bert, _gpt2, _proj, _fused)


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
    config = getattr(model, "config", None)
    encoder_decoder = bool(getattr(config, "is_encoder_decoder", False))
    unscaled = getattr(config, "model_type", None) in UNSCALED_MODEL_TYPES
    layers, counts, claimed = [], {}, set()
    prefix, text = text_model(model)  # a vision-language model's vision tower had taken layers 0, 1, ...
    for name, module in text.named_modules(prefix=prefix):
        if any(name.startswith(c + ".") for c in claimed):
            continue  # BERT's attention.self would be read twice
        found = _read(module, name)
        if found is not None and unscaled:
            found["scale"] = 1.0
        lw = _layer(found, name, _part(name, encoder_decoder), counts) if found is not None else None
        if lw is None:
            continue
        cap = getattr(module, "attn_logit_softcapping", None)
        lw.softcap = float(cap) if isinstance(cap, (int, float)) and cap > 0 else None
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
