"""Query and key vectors of one attention layer, for BertViz's neuron view (Vig 2019).

The neuron view shows how a query vector meets each key vector (elementwise
product, dot product, softmax). It is defined for attention whose scores are
``q · k / √d`` of linear projections: the BERT family (BERT, RoBERTa, ELECTRA,
MiniLM), whose self-attention modules hold ``query`` and ``key`` linear layers.
Models whose scores add a rotation (RoPE: Llama, SmolLM2) or a relative bias
(T5) are refused: their q · k is not what they attend with.
"""

from __future__ import annotations

import torch
from torch import nn

from ..errors import InputError


def _qk_modules(model: nn.Module) -> list[tuple[nn.Linear, nn.Linear]]:
    """``(query, key)`` linear layers of every BERT-style self-attention module, in layer order."""
    found = []
    for module in model.modules():
        query, key = getattr(module, "query", None), getattr(module, "key", None)
        if isinstance(query, nn.Linear) and isinstance(key, nn.Linear) and isinstance(getattr(module, "value", None),
                                                                                     nn.Linear):
            found.append((query, key))
    return found


def supports_neuron_view(model: nn.Module) -> bool:
    config = getattr(model, "config", None)
    return bool(_qk_modules(model)) and getattr(config, "position_embedding_type", "absolute") == "absolute"


def query_key_vectors(model: nn.Module, token_ids: list[int], layer: int, head: int):
    """``(queries [t, d], keys [t, d])`` of ``head`` in ``layer`` for the tokens ``token_ids`` (float32, CPU)."""
    modules = _qk_modules(model)
    if not supports_neuron_view(model):
        raise InputError(f"{type(model).__name__} has no BERT-style query/key layers; the neuron view needs them")
    if not 0 <= layer < len(modules):
        raise InputError(f"layer {layer} is out of range; the model has {len(modules)} attention layers")
    n_heads = model.config.num_attention_heads
    captured = {}
    hooks = [m.register_forward_hook(lambda _m, _i, out, name=name: captured.__setitem__(name, out.detach()))
             for name, m in zip(("q", "k"), modules[layer])]
    try:
        with torch.inference_mode():
            model(input_ids=torch.tensor([token_ids], device=next(model.parameters()).device))
    finally:
        for hook in hooks:
            hook.remove()
    q, k = captured["q"][0], captured["k"][0]  # (t, hidden) each
    d = q.shape[-1] // n_heads
    return (q[:, head * d:(head + 1) * d].float().cpu(),  # (t, d)
            k[:, head * d:(head + 1) * d].float().cpu())  # (t, d)


REPRODUCE_TOLERANCE = 1e-3  # largest weight difference for q·k to count as the head's own score (float32 noise ~1e-6)


def reproduces(queries: torch.Tensor, keys: torch.Tensor, weights: torch.Tensor, causal: bool) -> bool:
    """True when softmax(q·kᵀ/√d) is the head's attention ``weights (q, k)``: no rotation or bias was added."""
    scores = queries @ keys.T / queries.shape[-1] ** 0.5  # (q, k)
    if causal:
        scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
    return bool((torch.softmax(scores, dim=-1) - weights).abs().max() <= REPRODUCE_TOLERANCE)
