"""Extraction adapter for any ``torch.nn.Module`` built from ``nn.MultiheadAttention``.

Temporary hooks, registered and removed in one place (as TransformerLens does):
a forward pre-hook asks each ``nn.MultiheadAttention`` for per-head weights
(``need_weights=True, average_attn_weights=False``) and a forward hook keeps
them. PyTorch's fused "fast path" skips the module call entirely, so it is
switched off while the hooks are in place.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from torch import nn

from ..errors import ExtractionError
from .hf_extract import stack_layers

_MHA_POSITIONAL = ("query", "key", "value", "key_padding_mask", "need_weights", "attn_mask")


def attention_modules(model: nn.Module) -> list[nn.MultiheadAttention]:
    return [m for m in model.modules() if isinstance(m, nn.MultiheadAttention)]


def _is_causal_call(kwargs: dict, q_len: int, k_len: int) -> bool:
    if kwargs.get("is_causal"):
        return True
    mask = kwargs.get("attn_mask")
    if mask is None or mask.dim() != 2:
        return False
    blocked = mask if mask.dtype == torch.bool else torch.isinf(mask) & (mask < 0)  # (q, k)
    upper = torch.ones(q_len, k_len, dtype=torch.bool, device=mask.device).triu(diagonal=1)
    return bool(torch.equal(blocked.bool(), upper))


@contextmanager
def capture_mha_weights(model: nn.Module):
    """Yield a list that fills with ``(weights (B, H, q, k), causal)`` per attention call."""
    modules = attention_modules(model)
    if not modules:
        raise ExtractionError(f"{type(model).__name__} contains no torch.nn.MultiheadAttention layer")
    captured, handles = [], []

    def request_weights(module, args, kwargs):
        kwargs = {**dict(zip(_MHA_POSITIONAL, args)), **kwargs}
        kwargs.update(need_weights=True, average_attn_weights=False)
        return (), kwargs

    def keep_weights(module, args, kwargs, output):
        weights = output[1]  # (B, H, q, k)
        if weights is None or weights.dim() != 4:
            raise ExtractionError("nn.MultiheadAttention returned no per-head weights")
        call = {**dict(zip(_MHA_POSITIONAL, args)), **kwargs}
        if call.get("query") is not call.get("key"):  # cross-attention: a decoder reading an encoder's memory
            raise ExtractionError(f"{type(model).__name__} has cross-attention (an encoder-decoder such as "
                                  "nn.Transformer), whose maps are not a stack of self-attention layers; give "
                                  "extract_module_attention its encoder or a self-attention stack")
        captured.append((weights.detach(), _is_causal_call(kwargs, *weights.shape[-2:])))

    fastpath = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:
        for module in modules:
            handles.append(module.register_forward_pre_hook(request_weights, with_kwargs=True))
            handles.append(module.register_forward_hook(keep_weights, with_kwargs=True))
        yield captured
    finally:
        for handle in handles:
            handle.remove()
        torch.backends.mha.set_fastpath_enabled(fastpath)


def run_with_hooks(model: nn.Module, *inputs, **kwargs) -> tuple[torch.Tensor, bool]:
    """Run ``model(*inputs, **kwargs)``; return ``(attentions (L, H, q, k), causal)`` of batch item 0."""
    with capture_mha_weights(model) as captured, torch.inference_mode():
        model(*inputs, **kwargs)
    if not captured:
        raise ExtractionError(f"{type(model).__name__} ran without calling any of its attention layers")
    shapes = {tuple(w.shape[1:]) for w, _ in captured}
    if len(shapes) > 1:
        raise ExtractionError(f"attention layers disagree on [heads, q, k]: {sorted(shapes)}")
    attentions = stack_layers([w for w, _ in captured], "self", model)  # (L, H, q, k)
    return attentions, all(causal for _, causal in captured)
