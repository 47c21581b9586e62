"""Array transforms behind the app's views of an attention map: no streamlit, no plotting.

Every function takes and returns float32 CPU tensors following the
``[layers, heads, q, k]`` contract (or one map ``[q, k]``), so the app only
draws what these return.

- ``head_average``: mean over heads of each layer.
- ``attention_rollout``: Abnar & Zuidema 2020, "Quantifying Attention Flow in
  Transformers", Sec. 3: per layer, average the heads, add the identity for the
  residual connection, renormalise the rows, and multiply through the layers.
- ``hide_positions``: drop query rows / key columns (e.g. special tokens) and
  renormalise each remaining row to sum to 1.
- ``pool_map``: block-max downsampling of a large map for display.
- ``top_links``: the strongest keys of every query, to draw a sparse head view.
"""

from __future__ import annotations

import math

import torch

from .errors import InputError
from .whole import is_size


def _as_maps(attn, min_dim: int, what: str) -> torch.Tensor:
    attn = torch.as_tensor(attn).detach().float().cpu()
    if attn.dim() < min_dim:
        raise InputError(f"{what} needs a tensor with at least {min_dim} dims; got shape {tuple(attn.shape)}")
    return attn


def head_average(attn) -> torch.Tensor:
    """``[layers, heads, q, k]`` -> ``[layers, q, k]``: the mean of each layer's heads."""
    return _as_maps(attn, 4, "head_average").mean(dim=1)  # (L, q, k)


def attention_rollout(attn) -> torch.Tensor:
    """``[layers, heads, t, t]`` -> ``[layers, t, t]``: rolled-out attention after each layer.

    Row i of layer l says how much position i's representation after layer l
    draws on each input token, counting the residual path as attention to self.
    """
    attn = _as_maps(attn, 4, "attention_rollout")
    if attn.shape[-1] != attn.shape[-2]:
        raise InputError(
            f"attention rollout needs self-attention (q == k); got {attn.shape[-2]} queries and "
            f"{attn.shape[-1]} keys (cross-attention cannot be rolled out)"
        )
    eye = torch.eye(attn.shape[-1])  # (t, t)
    rolled, out = eye, []
    for layer in attn.mean(dim=1):  # (t, t) per layer
        a = layer + eye  # residual connection
        a = a / a.sum(dim=-1, keepdim=True)  # rows sum to 1
        rolled = a @ rolled  # (t, t)
        out.append(rolled)
    return torch.stack(out)  # (L, t, t)


def hide_positions(weights, hide_queries, hide_keys):
    """Drop the flagged rows and columns of ``weights [..., q, k]`` and renormalise rows.

    Returns ``(weights [..., q', k'], kept_query_indices, kept_key_indices)``.
    A row whose remaining mass is zero (all of it was on hidden tokens) stays zero rather than becoming NaN; every
    other row is divided by its own sum, however small.
    """
    weights = _as_maps(weights, 2, "hide_positions")
    q, k = weights.shape[-2:]
    keep_q = _kept(hide_queries, q, "queries")
    keep_k = _kept(hide_keys, k, "keys")
    if not keep_q or not keep_k:
        raise InputError("hiding special tokens would leave nothing to show: every token is special")
    w = weights[..., keep_q, :][..., keep_k]  # (..., q', k')
    sums = w.sum(dim=-1, keepdim=True)  # (..., q', 1)
    w = w / sums.masked_fill(sums == 0, 1.0)  # a clamp at 1e-12 left rows of tinier mass short of 1
    return w, keep_q, keep_k


def _kept(flags, n: int, what: str) -> list[int]:
    flags = list(flags) if flags is not None else [False] * n
    if len(flags) != n:
        raise InputError(f"{len(flags)} flags given for {n} {what}")
    return [i for i, hidden in enumerate(flags) if not hidden]


def pool_factor(n: int, max_cells: int) -> int:
    """The block size that brings ``n`` positions down to at most ``max_cells``."""
    return max(1, math.ceil(n / max_cells))


def pool_map(weights, max_cells: int) -> tuple[torch.Tensor, int, int]:
    """Block-max pool ``[..., q, k]`` to at most ``max_cells`` per side.

    Returns ``(pooled, q_block, k_block)``: cell (i, j) is the largest weight of
    queries ``i*q_block .. (i+1)*q_block - 1`` and keys likewise. The maximum
    (not the mean) keeps a one-token-wide diagonal or sink visible.
    """
    w = _as_maps(weights, 2, "pool_map")
    if not is_size(max_cells):
        raise InputError(f"pool_map needs max_cells of at least 1, not {max_cells!r}")
    q, k = w.shape[-2:]
    bq, bk = pool_factor(q, max_cells), pool_factor(k, max_cells)
    if bq == 1 and bk == 1:
        return w, 1, 1
    # ceil_mode: the blocks at the far edges hold what is left; padding a copy of the maps to whole blocks doubled
    # the server's peak for the overview of a long result (SmolLM2 at 1,086 tokens: +1.2 GiB)
    flat = w.reshape(-1, 1, q, k)  # (N, 1, q, k): a view of contiguous maps
    pooled = torch.nn.functional.max_pool2d(flat, (bq, bk), stride=(bq, bk), ceil_mode=True)  # (N, 1, q/bq, k/bk)
    return pooled.reshape(*w.shape[:-2], *pooled.shape[-2:]), bq, bk


def pool_signed(change, max_cells: int) -> tuple[torch.Tensor, int, int]:
    """``pool_map`` of a map of signed changes (B − A): each cell holds its block's largest change in size, with
    that change's sign (a block where one weight fell by 0.4 and another rose by 0.1 is −0.4)."""
    size, bq, bk = pool_map(torch.as_tensor(change).abs(), max_cells)  # (..., q/bq, k/bk)
    rise, _, _ = pool_map(torch.as_tensor(change).clamp(min=0), max_cells)  # (..., q/bq, k/bk)
    return torch.where(rise >= size, size, -size), bq, bk


def top_links(weights, k: int, min_weight: float = 0.0):
    """The ``k`` strongest keys of every query of ``weights [q, k_len]``.

    Returns ``(query_idx, key_idx, weight)`` 1-D tensors; a head view draws one
    line per entry. Links below ``min_weight`` are dropped, except each query's
    strongest one, so even a near-uniform head shows where every query looks;
    a NaN or infinite weight (a diverged head) is never a link.
    """
    w = _as_maps(weights, 2, "top_links")
    if w.dim() != 2:
        raise InputError(f"top_links takes one [q, k] map; got shape {tuple(w.shape)}")
    if not is_size(k):
        raise InputError(f"top_links needs k of at least 1, not {k!r}")
    values, keys = w.topk(min(k, w.shape[-1]), dim=-1)  # (q, k), (q, k)
    queries = torch.arange(w.shape[0]).unsqueeze(1).expand_as(keys)  # (q, k)
    keep = values > min_weight
    keep[:, 0] = True  # (q, k): topk sorts, so column 0 is each query's strongest key
    keep &= values.isfinite()  # (q, k): topk ranks NaN first
    return queries[keep], keys[keep], values[keep]
