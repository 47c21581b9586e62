"""Extraction adapter for any ``torch.nn.Module`` built from ``nn.MultiheadAttention``.

Temporary hooks, registered and removed in one place (as TransformerLens does):
a forward pre-hook asks each ``nn.MultiheadAttention`` for per-head weights
(``need_weights=True, average_attn_weights=False``) and a forward hook keeps
them, handing the module's caller the weights it asked for. PyTorch's fused
"fast path" skips the module call entirely, so it is switched off while the
hooks are in place. Only the capturing thread's calls are kept.
"""

from __future__ import annotations

import inspect
import threading
from contextlib import contextmanager
from typing import NamedTuple

import torch
import torch.nn.functional as F
from torch import nn
from torch.overrides import TorchFunctionMode

from ..errors import ExtractionError
from .hf_extract import stack_layers

_MHA_POSITIONAL = tuple(inspect.signature(nn.MultiheadAttention.forward).parameters)[1:]  # its arguments in order
MASKED_SCORE = -1e4  # an additive mask entry at or below this blocks its key: exp(-1e4) is 0 in every dtype


def attention_modules(model: nn.Module) -> list[nn.MultiheadAttention]:
    return [m for m in model.modules() if isinstance(m, nn.MultiheadAttention)]


@contextmanager
def called_modules(model: nn.Module):
    """Yield a list that fills with the name of each ``nn.MultiheadAttention`` of ``model`` this thread calls, in
    the order called (a module called for two layers is named twice; one never called, not at all)."""
    names = {module: name for name, module in model.named_modules() if isinstance(module, nn.MultiheadAttention)}
    called, thread = [], threading.get_ident()

    def heard(module, args, output):
        if threading.get_ident() == thread:
            called.append(names[module])
    hooks = [module.register_forward_hook(heard) for module in names]
    try:
        yield called
    finally:
        for hook in hooks:
            hook.remove()


def _is_causal_call(kwargs: dict, q_len: int, k_len: int) -> bool:
    """Whether the call's mask blocks exactly the keys after each query: a bool mask (True = blocked) or an
    additive one whose blocked entries are -inf or a large finite negative (finfo.min, -1e9), 2-D or per head."""
    if kwargs.get("is_causal"):
        return True
    mask = kwargs.get("attn_mask")
    if mask is None or mask.dim() not in (2, 3):
        return False
    blocked = mask if mask.dtype == torch.bool else mask <= MASKED_SCORE  # (q, k) or (B·H, q, k)
    upper = torch.ones(q_len, k_len, dtype=torch.bool, device=mask.device).triu(diagonal=1)  # (q, k)
    return bool((blocked == upper).all())


_FASTPATH_LOCK = threading.Lock()
_fastpath_users = [0, True]  # captures running now, the fast-path setting found by the first


@contextmanager
def _fastpath_off():
    """PyTorch's fused MHA path skips the module call (and its hooks): off while any capture runs, restored
    when the last one ends (a global flag: two threads must not restore it under each other)."""
    with _FASTPATH_LOCK:
        if _fastpath_users[0] == 0:
            _fastpath_users[1] = torch.backends.mha.get_fastpath_enabled()
            torch.backends.mha.set_fastpath_enabled(False)
        _fastpath_users[0] += 1
    try:
        yield
    finally:
        with _FASTPATH_LOCK:
            _fastpath_users[0] -= 1
            if _fastpath_users[0] == 0:
                torch.backends.mha.set_fastpath_enabled(_fastpath_users[1])


# What a module whose attention AttnScope cannot read should do instead (every refusal of one says it).
READABLE_LAYERS = ("build its attention layers from nn.MultiheadAttention itself (SDPA or a softmax written out gives "
                   "no weights to read), or use AttnScope's own core.custom_model")


def _refuse_own_forward(modules, model):
    """A subclass of nn.MultiheadAttention whose forward does not take nn.MultiheadAttention's arguments (the hooks
    pass them by name; ``forward(self, x)`` failed with a TypeError deep inside the capture). torch's quantizable
    and quantized ones, and a pass-through ``forward(self, *args, **kwargs)``, take them."""
    own = next((m for m in modules if not _takes_mha_arguments(type(m).forward)), None)
    if own is not None:
        raise ExtractionError(f"{type(model).__name__} has {type(own).__name__}, a subclass of nn.MultiheadAttention "
                              f"whose forward takes other arguments, which AttnScope cannot read; {READABLE_LAYERS}")


def _takes_mha_arguments(forward) -> bool:
    try:
        inspect.signature(forward).bind(None, **dict.fromkeys(_MHA_POSITIONAL))
    except (TypeError, ValueError):  # ValueError: a builtin with no signature
        return False
    return True


def _refuse_extra_keys(modules, model):
    if any(m.bias_k is not None or m.add_zero_attn for m in modules):
        raise ExtractionError(f"{type(model).__name__} uses nn.MultiheadAttention with add_bias_kv or add_zero_attn, "
                              "whose extra key column is no token; AttnScope reads attention over the tokens only")


def _is_self_attention(call: dict) -> bool:
    query, key = call.get("query"), call.get("key")
    return query is key or (query.shape == key.shape and torch.equal(query, key))


@contextmanager
def capture_mha_weights(model: nn.Module):
    """Yield a list that fills with ``(weights (B, H, q, k), causal, padded)`` per attention call of this thread
    (``padded``: the keys its ``key_padding_mask`` blocks for batch item 0, a bool ``(k,)``, or None).

    The module still returns what its caller asked for (averaged weights, or none)."""
    modules = attention_modules(model)
    if not modules:
        advice = ("read it with core.extract_attention(model, tokenizer, text)" if hasattr(model, "config")
                  else READABLE_LAYERS)  # a Hugging Face or AttnScope model: extract_attention reads it
        raise ExtractionError(f"{type(model).__name__} contains no torch.nn.MultiheadAttention layer; {advice}")
    _refuse_own_forward(modules, model)
    _refuse_extra_keys(modules, model)
    captured, handles, asked, thread = [], [], [], threading.get_ident()

    def request_weights(module, args, kwargs):
        kwargs = {**dict(zip(_MHA_POSITIONAL, args)), **kwargs}
        if threading.get_ident() == thread:
            asked.append((kwargs.get("need_weights", True), kwargs.get("average_attn_weights", True)))
            kwargs.update(need_weights=True, average_attn_weights=False)
        return (), kwargs

    def keep_weights(module, args, kwargs, output):
        if threading.get_ident() != thread:  # another thread's call of a shared module: not this capture's
            return None
        need, average = asked.pop()
        if not (isinstance(output, tuple) and len(output) == 2):  # a subclass's forward that returns the output alone
            raise ExtractionError(f"{type(module).__name__} returned no (output, weights) pair, as "
                                  f"nn.MultiheadAttention does; AttnScope cannot read it: {READABLE_LAYERS}")
        weights = output[1]  # (B, H, q, k), or (H, q, k) for an unbatched call
        if weights is None or weights.dim() not in (3, 4):
            raise ExtractionError("nn.MultiheadAttention returned no per-head weights")
        if not _is_self_attention({**dict(zip(_MHA_POSITIONAL, args)), **kwargs}):
            raise ExtractionError(f"{type(model).__name__} has cross-attention (an encoder-decoder such as "
                                  "nn.Transformer), whose maps are not a stack of self-attention layers; give "
                                  "extract_module_attention its encoder or a self-attention stack")
        per_head = weights if weights.dim() == 4 else weights.unsqueeze(0)  # (B, H, q, k)
        call = {**dict(zip(_MHA_POSITIONAL, args)), **kwargs}
        captured.append((per_head.detach(), _is_causal_call(call, *weights.shape[-2:]), _padded_keys(call)))
        return output[0], (weights.mean(-3) if average else weights) if need else None

    with _fastpath_off():
        try:
            for module in modules:
                handles.append(module.register_forward_pre_hook(request_weights, with_kwargs=True))
                handles.append(module.register_forward_hook(keep_weights, with_kwargs=True))
            yield captured
        finally:
            for handle in handles:
                handle.remove()


def _padded_keys(call: dict) -> torch.Tensor | None:
    """Bool ``(k,)``: the keys the call's ``key_padding_mask`` blocks for batch item 0 (True or an additive
    entry at or below ``MASKED_SCORE``); None without one."""
    mask = call.get("key_padding_mask")
    if mask is None:
        return None
    first = mask if mask.dim() == 1 else mask[0]  # (k,)
    return (first if first.dtype == torch.bool else first <= MASKED_SCORE).detach().cpu()


class _FusedAttentionCalls(TorchFunctionMode):
    """The query lengths of this thread's ``F.scaled_dot_product_attention`` calls (a mode is per thread). Hooked
    ``nn.MultiheadAttention`` makes none: asked for its weights, it computes them itself."""

    def __init__(self):
        super().__init__()
        self.query_lengths = []

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        query = kwargs.get("query", args[0] if args else None)
        if func is F.scaled_dot_product_attention and isinstance(query, torch.Tensor) and query.dim() >= 2:
            self.query_lengths.append(query.shape[-2])
        return func(*args, **kwargs)

    def layers(self, tokens: int) -> int:
        """Calls of one query per token, as a layer of the stack makes (keys may be more: a learned sink key, a
        prefix); attention pooling, a few learned queries over the tokens, is none."""
        return sum(length == tokens for length in self.query_lengths)


class ModuleMaps(NamedTuple):
    attentions: torch.Tensor  # (L, H, q, k) of batch item 0
    causal: bool
    padding: list[bool] | None  # the keys the first layer's key_padding_mask blocks for item 0; None without one
    batch: int  # the batch the layers were called with (sequence-first layers read (1, T) ids as a batch of T)


def run_with_hooks(model: nn.Module, *inputs, **kwargs) -> ModuleMaps:
    """Run ``model(*inputs, **kwargs)``; return its maps of batch item 0 (``ModuleMaps``)."""
    with capture_mha_weights(model) as captured, torch.no_grad(), _FusedAttentionCalls() as fused:
        model(*inputs, **kwargs)
    if not captured:
        raise ExtractionError(f"{type(model).__name__} ran without calling any of its attention layers")
    layers = fused.layers(tokens=captured[0][0].shape[-2])  # (B, H, q, k): one query per token
    if layers:  # its maps would have covered some layers only, and been diagnosed as a smaller model
        raise ExtractionError(f"{type(model).__name__} also computes attention with F.scaled_dot_product_attention "
                              f"({layers} call(s) besides its {len(captured)} nn.MultiheadAttention call(s)), "
                              "whose weights no hook can read; build those layers from nn.MultiheadAttention too")
    shapes = {tuple(w.shape[1:]) for w, _, _ in captured}
    if len(shapes) > 1:
        raise ExtractionError(f"attention layers disagree on [heads, q, k]: {sorted(shapes)}")
    maps, causal = [w for w, _, _ in captured], all(causal for _, causal, _ in captured)
    padded, batch = captured[0][2], captured[0][0].shape[0]
    captured.clear()  # the list alone holds the maps, which stack_layers lets go of as it copies them
    return ModuleMaps(stack_layers(maps, "self", model), causal,  # (L, H, q, k)
                      None if padded is None else padded.tolist(), batch)
