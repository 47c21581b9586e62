"""Arrays and pages derived from a cached attention result, cached per session-independent key.

A head switch or a view switch recomputes only what it shows: each function is
cached by the result id (the result itself, ``_result``, is not hashed), so a
rollout, every head's metrics or a layer's head-view links are computed once
per result and reused by every later rerun and every session. Small arrays go
through ``st.cache_data``; the every-head table and the head-view links, read
on every rerun and never mutated, through ``st.cache_resource`` (no copy); the
rollouts, as large as a result's layer averages, through
``app.server.cache.rollout_cache``, bounded in bytes.
"""

from __future__ import annotations

import streamlit as st


import core
import diagnostics.classify.patterns as patterns
from app.server import cache
from app.views import plots
from app.views.head_view import head_view_data, head_view_page
from core import views
from diagnostics.measure.metrics import finite_head, head_metrics, layer_metrics


def rollouts(result_id: str, result: core.AttentionResult):
    """The rollout through every layer ``(L, t, t)``, in one pass: each layer's is a step of the next one's. Kept
    in ``cache.rollout_cache``, bounded in bytes (read-only)."""
    def computed():
        with st.spinner("Computing the attention rollout…"):  # drawn after 0.5 s: only the first time
            return views.attention_rollout(result.attentions)  # (L, t, t)
    return cache.rollout_cache().get(result_id, computed)


def view_map(result_id: str, mode: str, layer: int, head: int, hide_special: bool, result: core.AttentionResult):
    """``(weights (q, k), (queries, their positions), (keys, their positions), hidden special tokens)`` of one view
    of one layer; a position is the token's place in the input, which hiding special tokens keeps. A rollout's is
    cut from the rollout cache at each rerun, outside ``st.cache_data`` (which would replay its spinner)."""
    if mode == "rollout":
        return _shown(rollouts(result_id, result)[layer], result, hide_special)  # (t, t)
    return _map_view(result_id, mode, layer, head, hide_special, result)


@st.cache_data(max_entries=64, show_spinner=False)
def _map_view(result_id: str, mode: str, layer: int, head: int, hide_special: bool, _result: core.AttentionResult):
    if mode == "average":
        weights = views.head_average(_result.attentions[layer:layer + 1])[0]  # (q, k)
    else:
        weights = _result.attentions[layer, head]  # (q, k)
    return _shown(weights, _result, hide_special)


def _shown(weights, result: core.AttentionResult, hide_special: bool):
    """``view_map``'s tuple of ``weights (q, k)`` of ``result``, its special tokens hidden if asked."""
    queries, keys, hidden = list(result.tokens), list(result.keys), []
    kept_q, kept_k = list(range(len(queries))), list(range(len(keys)))
    if hide_special:
        hidden = {t for t, s in zip(result.tokens, result.special) if s}
        hidden = sorted(hidden | {t for t, s in zip(result.keys, result.keys_special) if s})
        weights, kept_q, kept_k = views.hide_positions(weights, result.special, result.keys_special)
        queries, keys = [queries[i] for i in kept_q], [keys[i] for i in kept_k]
    # a copy: a view would pickle the whole result's storage (st.cache_data), or hold the rollout's
    return weights.clone(), (queries, kept_q), (keys, kept_k), hidden


@st.cache_resource(max_entries=32, show_spinner=False)  # read-only: no copy per rerun
def _head_view_links(result_id: str, layer: int, _result: core.AttentionResult) -> dict:
    return head_view_data(_result.attentions, list(_result.tokens), list(_result.keys), layer, 0)


def head_view(result_id: str, layer: int, head: int, result: core.AttentionResult, title: str = "") -> str:
    """The offline head view of ``layer`` with ``head`` selected; the links of a layer are computed once."""
    return head_view_page(_head_view_links(result_id, layer, result), layer, head, title)


def unmeasurable(result: core.AttentionResult) -> str | None:
    """Why no head of ``result`` has metrics or a pattern, or None when they have."""
    q, k = result.attentions.shape[-2:]
    if q > k:
        return "This map cannot be labelled: it has more queries than keys."
    if k < 2:
        return "A one-token input has nothing to measure: each map is a single weight of 1. Give a longer text."
    return None


@st.cache_resource(max_entries=8, show_spinner="Measuring every head…")  # read-only: no copy per rerun
def head_table(result_id: str, _result: core.AttentionResult):
    """``(patterns [layers][heads], metrics [layers][heads] of dicts)`` of every head, measured in one pass.

    None when the maps cannot be measured (``unmeasurable``).
    """
    attn = _result.attentions  # (L, H, q, k)
    if unmeasurable(_result):
        return None
    m = layer_metrics(attn, causal=_result.causal, special=_result.keys_special, padding=_result.keys_padding,
                      windows=_result.windows)
    scalars = [[m[layer, head].scalars() for head in range(attn.shape[1])] for layer in range(attn.shape[0])]
    labelled = [[_labelled(p, s) for p, s in zip(*rows)] for rows in zip(patterns.classify_metrics(m), scalars)]
    return labelled, scalars


@st.cache_data(max_entries=256, show_spinner=False)
def head_summary(result_id: str, layer: int, head: int, _result: core.AttentionResult):
    """``(metrics dict, HeadPattern)`` of one head; ``({}, None)`` when it cannot be measured (``unmeasurable``)."""
    attn = _result.attentions[layer, head]  # (q, k)
    if unmeasurable(_result):
        return {}, None
    window = _result.windows[layer] if _result.windows else None  # a local layer's (Mistral, Gemma 2)
    m = head_metrics(attn, causal=_result.causal, special=_result.keys_special, padding=_result.keys_padding,
                     window=window)
    return m.scalars(), _labelled(patterns.classify_metrics(m), m.scalars())


def _labelled(pattern, scalars: dict):
    """``pattern``, or None for a head whose map is NaN or infinite: its label would mean nothing (it read as
    sparse, confidence nan%), as in a report (``diagnose``)."""
    return pattern if finite_head(scalars) else None


@st.cache_data(max_entries=32, show_spinner=False)
def thumbnail_sheet(result_id: str, _result: core.AttentionResult, _patterns) -> bytes:
    """One PNG with a thumbnail per head, framed in its pattern colour (``plots.thumbnail_sheet``)."""
    labels = [[p and p.label for p in row] for row in _patterns] if _patterns else None
    return plots.thumbnail_sheet(_result.attentions, labels)
