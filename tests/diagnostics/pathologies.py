"""Pathological copies of a loaded model, made and undone in place: Q/K weights scaled, every head a copy of one.

Each context manager edits the attention projections of every layer and puts
the original weights back on exit, so one loaded real model (a module-scoped
fixture) serves every case. Layouts: BERT (``attention.self.query/key/value``),
``q_proj/k_proj/v_proj`` (Llama, with grouped key/value heads; BART) and
GPT-2's fused ``c_attn`` (``Conv1D``, columns Q | K | V).
"""

from contextlib import contextmanager

import torch
from torch import nn


class _Fused:
    """Q, K or V (``index`` 0, 1, 2) of GPT-2's fused ``Conv1D``, as ``weight [out, in]`` and ``bias [out]`` views."""

    def __init__(self, conv, index):
        self.weight = conv.weight.T.chunk(3, dim=0)[index]  # (out, in) view of [in, 3*out]
        self.bias = conv.bias.chunk(3)[index]  # (out,)


def _projections(model):
    """Per attention layer: ``{"q"|"k"|"v": (projection with .weight [out, in] and .bias, heads)}``."""
    out = []
    for module in model.modules():
        core = getattr(module, "self", None)
        if core is not None and all(isinstance(getattr(core, n, None), nn.Linear) for n in ("query", "key", "value")):
            h = core.num_attention_heads
            out.append({n[0]: (getattr(core, n), h) for n in ("query", "key", "value")})
        elif all(isinstance(getattr(module, n, None), nn.Linear) for n in ("q_proj", "k_proj", "v_proj")):
            config = module.config
            h = config.num_attention_heads
            kv = getattr(config, "num_key_value_heads", None) or h
            out.append({"q": (module.q_proj, h), "k": (module.k_proj, kv), "v": (module.v_proj, kv)})
        elif hasattr(module, "c_attn") and hasattr(module, "num_heads"):
            out.append({name: (_Fused(module.c_attn, i), module.num_heads) for i, name in enumerate("qkv")})
    return out


@contextmanager
def _restored(model):
    saved = {name: p.detach().clone() for name, p in model.named_parameters()}
    try:
        yield
    finally:
        with torch.no_grad():
            for name, p in model.named_parameters():
                p.copy_(saved[name])


@contextmanager
def scaled_qk(model, factor, layer=None):
    """Q and K weights (not biases) times ``factor``, in every layer or one (``layer``): ×8 saturates every head, ×0
    makes it uniform."""
    with _restored(model), torch.no_grad():
        for layer in _projections(model) if layer is None else [_projections(model)[layer]]:
            for name in ("q", "k"):
                layer[name][0].weight.mul_(factor)
        yield model


@contextmanager
def scaled_values(model, layer, factor):
    """One layer's V weights and biases times ``factor``: soft gates that prune a whole layer leave 1e-3, not 0."""
    with _restored(model), torch.no_grad():
        projection = _projections(model)[layer]["v"][0]
        projection.weight.mul_(factor)
        if projection.bias is not None:
            projection.bias.mul_(factor)
        yield model


@contextmanager
def zeroed_output_norm(model, layer):
    """A BERT-family model's LayerNorm after ``layer`` zeroed: every later layer reads a constant, its heads uniform
    though their Q/K weights are as trained."""
    with _restored(model), torch.no_grad():
        norm = model.encoder.layer[layer].output.LayerNorm
        norm.weight.zero_()
        norm.bias.zero_()
        yield model


@contextmanager
def copied_heads(model):
    """Every head of every layer a copy of that layer's head 0 (Q, K and V weights and biases; key/value head 0
    under GQA)."""
    with _restored(model), torch.no_grad():
        for layer in _projections(model):
            for proj, heads in layer.values():
                rows = proj.weight.view(heads, -1, proj.weight.shape[-1])  # (H, d, d_in)
                rows[1:] = rows[0]
                if proj.bias is not None:
                    bias = proj.bias.view(heads, -1)  # (H, d)
                    bias[1:] = bias[0]
        yield model


@contextmanager
def random_query_bias(model, layer, scale, seed=0):
    """One layer's query bias replaced by Gaussian noise ``scale`` times its largest entry: the bias then outweighs
    what each query says, and every query of a head prefers the same key, an ordinary word that changes from text to
    text (× 20 on MiniLM's layer 3: mean-pooled output cosine 0.45-0.49 to the healthy model)."""
    with _restored(model), torch.no_grad():
        bias = _projections(model)[layer]["q"][0].bias
        noise = torch.randn(bias.shape, generator=torch.Generator().manual_seed(seed))  # (out,)
        bias.copy_(noise * bias.abs().max() * scale)
        yield model


@contextmanager
def scaled_qk_biases(model, layer, factor):
    """One layer's query and key biases times ``factor``: × 30 on MiniLM's layer 3 makes 11 of its 12 heads near
    copies of each other."""
    with _restored(model), torch.no_grad():
        for name in ("q", "k"):
            _projections(model)[layer][name][0].bias.mul_(factor)
        yield model
