"""Cached models and attention results, shared by every session of the app.

Models live in ``st.cache_resource`` bounded to ``MAX_MODELS`` entries: beyond
that the least recently used one is dropped. Each carries a lock, because one
model object serves every session and extraction switches it to eval mode.
Attention results are kept with ``st.cache_resource`` too: at 512 tokens on a
12 × 12 model they hold 150 MB, which ``st.cache_data`` would copy on every
rerun; they are never mutated. Small derived data (pattern labels, thumbnail
PNGs) goes through ``st.cache_data``, keyed by a result id string because the
result itself (``_result``) is not hashed.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import streamlit as st

import core
import diagnostics.classify.patterns as patterns
from diagnostics.measure.metrics import head_metrics
from app import plots

MAX_MODELS = 3  # models kept in memory at once (LRU beyond that)
PROGRESS_STEPS = 20  # loading-bar updates at most (each is replayed on every cache hit)
MAX_RESULTS = 4  # attention results kept at once (a 12 × 12 model at 512 tokens: 151 MB each)


@dataclass
class LoadedModel:
    model: object
    tokenizer: object
    lock: threading.Lock = field(default_factory=threading.Lock)


@st.cache_resource(max_entries=MAX_MODELS, show_spinner="Loading the model…")
def load_model(source: str) -> LoadedModel:
    bar = st.empty()  # made here, not passed in: a cached function may only replay elements it created
    shown = []

    def progress(fraction: float, message: str) -> None:  # a GGUF file dequantises for seconds to minutes
        step = int(fraction * PROGRESS_STEPS)
        if not shown or step > shown[-1]:
            shown.append(step)
            bar.progress(min(1.0, fraction), text=f"Loading {source}: {message}")

    model, tokenizer = core.load_model(source, progress=progress)
    bar.empty()
    return LoadedModel(model, tokenizer)


@st.cache_resource(max_entries=MAX_RESULTS, show_spinner="Reading the attention weights…")
def attention(source: str, text: str, text_pair: str = "", target: str = "") -> core.AttentionResult:
    """Attention of ``source`` on the text(s); errors are raised (and not cached)."""
    loaded = load_model(source)
    with loaded.lock:
        return core.extract_attention(loaded.model, loaded.tokenizer, text, text_pair or None, target or None)


@st.cache_data(max_entries=32, show_spinner=False)
def head_patterns(result_id: str, _result: core.AttentionResult):
    """``[layers][heads]`` of ``HeadPattern``, or None when the map cannot be classified (q > k)."""
    try:
        return patterns.classify_heads(_result.attentions, causal=_result.causal,
                                       special=_result.keys_special, padding=_result.keys_padding)
    except core.InputError:
        return None


@st.cache_data(max_entries=256, show_spinner=False)
def head_summary(result_id: str, layer: int, head: int, _result: core.AttentionResult):
    """``(metrics dict, HeadPattern)`` of one head; ``({}, None)`` when q > k (cannot be measured)."""
    attn = _result.attentions[layer, head]  # (q, k)
    if attn.shape[0] > attn.shape[1]:
        return {}, None
    m = head_metrics(attn, causal=_result.causal, special=_result.keys_special, padding=_result.keys_padding)
    return m.scalars(), patterns.classify_metrics(m)


@st.cache_data(max_entries=32, show_spinner=False)
def thumbnail_sheet(result_id: str, _result: core.AttentionResult, _patterns) -> bytes:
    """One PNG with a thumbnail per head, framed in its pattern colour (``plots.thumbnail_sheet``)."""
    labels = [[p.label for p in row] for row in _patterns] if _patterns else None
    return plots.thumbnail_sheet(_result.attentions, labels)
