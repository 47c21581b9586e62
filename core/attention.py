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
from .whole import is_size


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
    masked gets zero weights (and a zero output), never NaN.
    """
    if mask is not None and mask.dtype != torch.bool:
        raise InputError(f"the attention mask must be bool (True = may attend), not {mask.dtype}; convert it: "
                         "mask.bool() for a 0/1 mask, mask == 0 for an additive one (0 = attend, -inf = masked)")
    d_k = query.size(-1)
    # Scores and softmax in at least float32 (as fused kernels accumulate): fp16 scores overflow past 65,504 to inf
    # and NaN; float64 stays float64.
    acc = torch.promote_types(query.dtype, torch.float32)
    scores = (query.to(acc) / math.sqrt(d_k)) @ key.to(acc).transpose(-2, -1)  # (..., q, k)
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.softmax(scores, dim=-1)  # (..., q, k)
    if mask is not None:  # a row with every key masked is NaN after the softmax: zero weights, zero output
        weights = weights.masked_fill(~mask.any(-1, keepdim=True), 0.0)
    weights = weights.to(query.dtype)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights.to(value.dtype) @ value, weights  # (..., q, d_v), (..., q, k)


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
        q = self._split_heads(self.q_proj(query))  # (B, nh, q, hs)
        k = self._split_heads(self.k_proj(key))  # (B, nh, k, hs)
        v = self._split_heads(self.v_proj(value))  # (B, nh, k, hs)
        mask = self._mask(query.size(1), key.size(1), key_padding_mask, causal, query.device)
        drop = self.dropout if self.training else 0.0
        attend = self.attention_fn or scaled_dot_product_attention
        out, weights = attend(q, k, v, mask, drop)  # (B, nh, q, hs), (B, nh, q, k) or None
        out = out.transpose(1, 2).reshape(query.size(0), query.size(1), self.d_model)  # (B, q, C)
        return self.out_proj(out), weights

    @staticmethod
    def _mask(q_len, k_len, key_padding_mask, causal, device) -> torch.Tensor | None:
        mask = causal_mask(q_len, k_len, device) if causal else None  # (q, k)
        if key_padding_mask is not None:
            keep = ~key_padding_mask.bool()[:, None, None, :]  # (B, 1, 1, k)
            mask = keep if mask is None else keep & mask
        return mask
