"""Query and key vectors of one attention head, for BertViz's neuron view (Vig 2019).

The neuron view shows how a query vector meets each key vector (elementwise
product, dot product, softmax). It is defined for attention whose scores are
``scale · q · k`` of the head's projections: the layers ``head_weights`` reads
(BERT, RoBERTa, ELECTRA, MiniLM, DistilBERT, GPT-2, OPT, GPT-Neo, GPT-BigCode,
…), whose ``q_source``/``k_source`` say where each head's queries and keys come
out. Models whose scores add a rotation (RoPE: Llama, SmolLM2), a distance
penalty (ALiBi: Bloom) or a relative bias (T5, BERT's ``relative_key``) are
refused: their q · k is not what they attend with. ``reproduces`` checks every
head besides, and the app says so where it fails.
"""

from __future__ import annotations

import torch
from torch import nn

from ..device import model_device
from ..errors import InputError
from .encode import segment_inputs
from .extract import eval_mode
from .head_weights import LayerWeights, attention_weights
from .windows import in_window


def _neuron_layers(model: nn.Module) -> list[LayerWeights]:
    """The self-attention layers whose scores are scale·q·k of queries and keys that can be read, in layer order;
    none for a model that adds position terms to its scores or is an encoder-decoder."""
    config = getattr(model, "config", None)
    if getattr(config, "is_encoder_decoder", False) or _positions_in_scores(model, config):
        return []
    return [lw for lw in attention_weights(model)
            if lw.part == "self" and lw.q_source is not None and lw.k_source is not None]


def supports_neuron_view(model: nn.Module) -> bool:
    """Whether ``query_key_vectors`` reads ``model`` and nothing but q·k is known to make its scores.

    ``reproduces`` checks each head as well: a sink head whose map is one-hot either way would pass it alone.
    """
    return bool(_neuron_layers(model))


def _positions_in_scores(model, config) -> bool:
    """Rotary embeddings (Llama, GPT-NeoX, GPT-J, ...), ALiBi (Bloom, Falcon's option), relative position terms."""
    return (any("Rotary" in type(m).__name__ for m in model.modules()) or getattr(config, "rotary_dim", None)
            or getattr(config, "alibi", False) or getattr(config, "model_type", None) == "bloom"
            or getattr(config, "position_embedding_type", None) not in (None, "absolute")
            or getattr(config, "relative_attention_num_buckets", None))  # MPNet's relative bias


def query_key_vectors(model: nn.Module, token_ids: list[int], layer: int, head: int, token_type_ids=None):
    """``(queries [t, d], keys [t, d], scale)`` of ``head`` in ``layer`` for the tokens ``token_ids`` (CPU float32)
    and, for a pair, their segment ids ``token_type_ids`` (``AttentionResult.token_type_ids``).

    ``scale`` is the factor on q·k before the softmax (1/√d, or 1 for T5 and GPT-Neo).
    """
    layers = _neuron_layers(model)
    if not layers:
        raise InputError(f"{type(model).__name__}'s scores are not the dot products of query/key vectors AttnScope "
                         "reads (position terms, or a layout it does not know); the neuron view needs them")
    if not 0 <= layer < len(layers):
        raise InputError(f"layer {layer} is out of range; the model has {len(layers)} attention layers")
    lw = layers[layer]
    if not 0 <= head < lw.n_heads:
        raise InputError(f"head {head} is out of range; layer {layer} has {lw.n_heads} heads")
    captured = {}
    hooks = [source.module.register_forward_hook(
        lambda _m, _i, out, name=name: captured.__setitem__(name, (out[0] if isinstance(out, tuple) else out)[0]))
        for name, source in (("q", lw.q_source), ("k", lw.k_source))]
    try:
        with eval_mode(model), torch.no_grad():  # no dropout on the vectors, as extract_attention
            device = model_device(model)
            model(input_ids=torch.tensor([token_ids], device=device), **segment_inputs(model, token_type_ids, device))
    finally:
        for hook in hooks:
            hook.remove()
    queries = lw.q_source.split(captured["q"], lw.d_head)[:, head].float().cpu()  # (t, d)
    keys = lw.k_source.split(captured["k"], lw.d_head)[:, lw.kv_head(head)].float().cpu()  # (t, d)
    return queries, keys, lw.scale


REPRODUCE_TOLERANCE = 1e-3  # largest weight difference for q·k to count as the head's own score (float32 noise ~1e-6)
# ... or this many of the model's rounding steps where they are coarser: a bfloat16 MiniLM's maps differ from the
# float32 recomputation by up to 0.0095 (its steps are 0.0078), and 71 of its 72 heads had been refused
ROUNDING_STEPS = 4


def reproduces(queries: torch.Tensor, keys: torch.Tensor, weights: torch.Tensor, causal: bool,
               scale: float | None = None, window: int | None = None, dtype: str = "float32") -> bool:
    """True when softmax(scale · q·kᵀ) is the head's attention ``weights (q, k)``: no rotation or bias was added.

    ``scale`` defaults to 1/√d; ``window``: the layer's sliding window (``AttentionResult.windows``), or None;
    ``dtype``: what the model computed in (``AttentionResult.dtype``, e.g. ``"bfloat16"``), whose rounding the
    weights carry.
    """
    scale = queries.shape[-1] ** -0.5 if scale is None else scale
    scores = scale * queries @ keys.T  # (q, k)
    distance = torch.arange(len(queries)).unsqueeze(1) + len(keys) - len(queries) - torch.arange(len(keys))  # (q, k)
    hidden = (distance < 0) if causal else torch.zeros_like(scores, dtype=torch.bool)  # (q, k)
    scores = scores.masked_fill(hidden | ~in_window(distance, window, causal), float("-inf"))
    computed = getattr(torch, dtype, None)
    steps = torch.finfo(computed).eps if isinstance(computed, torch.dtype) and computed.is_floating_point else 0.0
    tolerance = max(REPRODUCE_TOLERANCE, ROUNDING_STEPS * steps)
    return bool((torch.softmax(scores, dim=-1) - weights).abs().max() <= tolerance)
