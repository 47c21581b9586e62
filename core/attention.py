"""Multi-head attention, written out.

softmax(Q Kᵀ / √d_k) · V computed step by step so that the per-head weights are
always available (fused kernels such as SDPA or flash attention never
materialise them). Follows the layout of nanoGPT's ``CausalSelfAttention`` and
of ``torch.nn.MultiheadAttention`` so parity tests can compare against both.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .errors import InputError
from .whole import is_probability, is_size


def scaled_dot_product_attention(
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    mask: torch.Tensor | None = None,
    dropout_p: float = 0.0,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Return ``(output, weights)`` of softmax(QKᵀ/√d_k)·V.

    ``query`` is ``[..., q, d_k]``, ``key`` ``[..., k, d_k]``, ``value``
    ``[..., k, d_v]``. ``mask`` is a boolean tensor broadcastable to
    ``[..., q, k]`` where True means "may attend". A row whose keys are all
    masked gets zero weights (and a zero output), never NaN. The leading sizes broadcast as torch's kernel reads
    them (one key/value head serves every query head); arguments that do not fit are an InputError naming them.
    """
    _check_inputs(query, key, value, mask, dropout_p)
    d_k = query.size(-1)
    # Scores and softmax in at least float32 (as fused kernels accumulate): fp16 scores overflow past 65,504 to inf
    # and NaN; float64 stays float64.
    acc = torch.promote_types(query.dtype, torch.float32)
    scores = (query.to(acc) / math.sqrt(d_k)) @ key.to(acc).transpose(-2, -1)  # (..., q, k)
    if mask is not None:
        scores.masked_fill_(~mask, float("-inf"))  # in place: the scores are this call's own
    weights = torch.softmax(scores, dim=-1)  # (..., q, k)
    del scores  # the softmax keeps its output for backward, not its input: one [..., q, k] fewer at the peak
    if mask is not None:  # a row with every key masked is NaN after the softmax: zero weights, zero output
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    weights = weights.to(query.dtype)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights.to(value.dtype) @ value, weights  # (..., q, d_v), (..., q, k)


def _check_inputs(query, key, value, mask, dropout_p) -> None:
    """InputError naming what is wrong with the arguments of ``scaled_dot_product_attention`` (torch's own errors
    name no argument; an int tensor gave all-zero weights, a mask of one more dimension a result of one more)."""
    for name, tensor in {"query": query, "key": key, "value": value}.items():
        if not isinstance(tensor, torch.Tensor):
            raise InputError(f"{name} must be a tensor, not {type(tensor).__name__}")
        if tensor.dim() < 2 or not tensor.is_floating_point():
            raise InputError(f"{name} must be a floating-point tensor [..., length, size], not {tensor.dtype} of "
                             f"shape {list(tensor.shape)}")
    if len({query.dtype, key.dtype, value.dtype}) > 1:
        raise InputError(f"query, key and value must share one dtype, not {query.dtype}, {key.dtype} and "
                         f"{value.dtype}; convert them, e.g. key.to(query.dtype)")
    if query.size(-1) != key.size(-1) or key.size(-2) != value.size(-2):
        raise InputError(f"query [..., q, d_k], key [..., k, d_k] and value [..., k, d_v] do not fit: they are "
                         f"{list(query.shape)}, {list(key.shape)} and {list(value.shape)}")
    try:
        lead = torch.broadcast_shapes(query.shape[:-2], key.shape[:-2], value.shape[:-2])
    except RuntimeError:
        raise InputError(f"the leading sizes (batch, heads) of query {list(query.shape[:-2])}, key "
                         f"{list(key.shape[:-2])} and value {list(value.shape[:-2])} do not broadcast; for fewer key "
                         "and value heads than query heads, repeat them per group first "
                         "(key.repeat_interleave(groups, dim=-3))") from None
    scores = (*lead, query.size(-2), key.size(-2))
    if mask is not None:
        if not isinstance(mask, torch.Tensor) or mask.dtype != torch.bool:
            raise InputError(f"the attention mask must be bool (True = may attend), not "
                             f"{getattr(mask, 'dtype', type(mask).__name__)}; convert it: mask.bool() for a 0/1 "
                             "mask, mask == 0 for an additive one (0 = attend, -inf = masked)")
        if not _broadcasts_to(mask.shape, scores):
            raise InputError(f"the attention mask is {list(mask.shape)}, which does not broadcast to the scores "
                             f"[..., q, k] = {list(scores)}")
    if not is_probability(dropout_p):
        raise InputError(f"dropout_p must be a number from 0 to 1, not {dropout_p!r}")


def _broadcasts_to(shape, target) -> bool:
    try:
        return torch.broadcast_shapes(shape, target) == torch.Size(target)
    except RuntimeError:
        return False


def causal_mask(q_len: int, k_len: int, device: torch.device | None = None) -> torch.Tensor:
    """Boolean ``[q, k]`` mask: query i may see keys ≤ i + (k_len − q_len)."""
    offset = k_len - q_len
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(diagonal=offset)


class MultiHeadAttention(nn.Module):
    """Project Q/K/V, split heads, attend per head, concatenate, project out.

    ``forward`` returns the output ``[batch, q, d_model]`` and the per-head
    weights ``[batch, heads, q, k]``. Works for self-attention
    (``key``/``value`` omitted) and cross-attention (q_len ≠ k_len).
    """

    # Hook point: when set, called instead of ``scaled_dot_product_attention``
    # with the same arguments (``core.extraction.streaming`` sets it for the call).
    attention_fn = None

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True):
        super().__init__()
        if not (is_size(d_model) and is_size(n_heads)):
            raise InputError(f"d_model and n_heads must be whole numbers of at least 1, not {d_model!r} and "
                             f"{n_heads!r}")
        if d_model % n_heads != 0:
            raise InputError(f"d_model={d_model} must be divisible by n_heads={n_heads}")
        if not is_probability(dropout):  # 2.0 failed only at the first forward in training
            raise InputError(f"dropout must be a number from 0 to 1, not {dropout!r}")
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout = dropout
        self.q_proj = nn.Linear(d_model, d_model, bias=bias)
        self.k_proj = nn.Linear(d_model, d_model, bias=bias)
        self.v_proj = nn.Linear(d_model, d_model, bias=bias)
        self.out_proj = nn.Linear(d_model, d_model, bias=bias)

    def _split_heads(self, x: torch.Tensor) -> torch.Tensor:
        batch, length, _ = x.shape
        return x.view(batch, length, self.n_heads, self.d_head).transpose(1, 2)  # (B, nh, T, hs)

    def forward(
        self,
        query: torch.Tensor,
        key: torch.Tensor | None = None,
        value: torch.Tensor | None = None,
        key_padding_mask: torch.Tensor | None = None,
        causal: bool = False,
    ) -> tuple[torch.Tensor, torch.Tensor]:
        """``key_padding_mask``: bool ``[batch, k]``, True marks padding (as in PyTorch)."""
        key = query if key is None else key
        value = key if value is None else value
        self._check_inputs(query, key, value, key_padding_mask)
        q = self._split_heads(self.q_proj(query))  # (B, nh, q, hs)
        k = self._split_heads(self.k_proj(key))  # (B, nh, k, hs)
        v = self._split_heads(self.v_proj(value))  # (B, nh, k, hs)
        mask = self._mask(query.size(1), key.size(1), key_padding_mask, causal, query.device)
        drop = self.dropout if self.training else 0.0
        attend = self.attention_fn or scaled_dot_product_attention
        out, weights = attend(q, k, v, mask, drop)  # (B, nh, q, hs), (B, nh, q, k) or None
        out = out.transpose(1, 2).reshape(query.size(0), query.size(1), self.d_model)  # (B, q, C)
        return self.out_proj(out), weights

    def _check_inputs(self, query, key, value, key_padding_mask) -> None:
        """InputError naming the argument that does not fit (torch's own errors name none, and a float 0/1 padding
        mask was read as bool where torch's module reads it as added to the scores)."""
        for name, x in {"query": query, "key": key, "value": value}.items():
            if not isinstance(x, torch.Tensor) or x.dim() != 3 or x.size(-1) != self.d_model:
                shape = list(x.shape) if isinstance(x, torch.Tensor) else type(x).__name__
                raise InputError(f"{name} must be a tensor [batch, length, d_model={self.d_model}], not {shape}")
        if query.size(0) != key.size(0) or key.shape[:2] != value.shape[:2]:
            raise InputError(f"query, key and value must share the batch (and key and value the length): they are "
                             f"{list(query.shape)}, {list(key.shape)} and {list(value.shape)}")
        if key_padding_mask is None:
            return
        if not isinstance(key_padding_mask, torch.Tensor) or key_padding_mask.dtype != torch.bool:
            raise InputError(f"key_padding_mask must be bool (True = padding), not "
                             f"{getattr(key_padding_mask, 'dtype', type(key_padding_mask).__name__)}; convert it: "
                             "mask.bool() for a 0/1 mask")
        if key_padding_mask.shape != key.shape[:2]:
            raise InputError(f"key_padding_mask must be [batch, k] = {list(key.shape[:2])}, not "
                             f"{list(key_padding_mask.shape)}")

    @staticmethod
    def _mask(q_len, k_len, key_padding_mask, causal, device) -> torch.Tensor | None:
        mask = causal_mask(q_len, k_len, device) if causal else None  # (q, k)
        if key_padding_mask is not None:
            keep = ~key_padding_mask[:, None, None, :]  # (B, 1, 1, k)
            mask = keep if mask is None else keep & mask
        return mask
