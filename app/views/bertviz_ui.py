"""BertViz's model view in the app: pick layers and heads, see them, save them as one offline HTML file."""

from __future__ import annotations

import time

import streamlit as st

import core
from app.server import cache
from app.views.bertviz_view import (
    MAX_BYTES, MAX_DRAWN, MODEL_VIEW_MAX_TOKENS, NEURON_PER_PAIR, NEURON_VIEW_MAX_TOKENS, model_view_fits,
    model_view_page, neuron_view_fits, neuron_view_page,
)
from app.names import file_stem
from app.views.head_detail import view_title
from core.extraction.query_key import query_key_vectors, reproduces, supports_neuron_view

FRAME_PX = 280  # frame height per layer shown (bertviz draws one row of thumbnails per layer)
# BertViz's pages answer the mouse alone (hover, click): no Tab stop, no key. The Head view is their keyboard way.
MOUSE_ONLY = ("It answers the mouse only; from the keyboard, the Head view shows the same links (Tab to a token, "
              "arrow keys within a column).")
MAX_FRAME_PX = 900


@st.cache_data(max_entries=16, show_spinner="Drawing the BertViz model view…")
def _page(result_id: str, layers: tuple[int, ...], heads: tuple[int, ...], title: str, inline: bool,
          _result: core.AttentionResult):
    return model_view_page(_result.attentions, list(_result.tokens), list(_result.keys), list(layers), list(heads),
                           title, inline)


def model_view_ui(prefix: str, result_id: str, result: core.AttentionResult, layer: int, head: int,
                  model: str) -> None:
    """Layers default to the selected one, heads to all of them; the page holds what fits in ``MAX_BYTES``.

    The pickers are keyed by the result (and the layers by the explorer's layer): a choice made on another
    result (4 heads kept for a 12-head model, layer 5 of a 4-layer one) or another layer starts afresh."""
    if not model_view_fits(len(result.tokens), len(result.keys)):
        lines = len(result.tokens) * len(result.keys)
        st.info(f"BertViz's model view draws a line per query–key pair of each head: one head here is {lines:,} "
                f"lines, more than the {MAX_DRAWN:,} a browser draws in about 3 seconds (the page waits while it "
                f"draws). It draws inputs of up to {MODEL_VIEW_MAX_TOKENS} tokens; the head view shows this one.")
        return
    cols = st.columns(2)
    layers = cols[0].multiselect("Layers", range(result.n_layers), default=[layer],
                                 key=f"{prefix}bv_layers_{result_id}_{layer}")
    heads = cols[1].multiselect("Heads", range(result.n_heads), default=list(range(result.n_heads)),
                                key=f"{prefix}bv_heads_{result_id}")
    if not layers or not heads:
        st.info("Choose at least one layer and one head.")
        return
    layers, heads = tuple(sorted(layers)), tuple(sorted(heads))
    title = view_title(model, result.kind, "BertViz model view")
    page = _page(result_id, layers, heads, title, False, result)
    st.caption("BertViz (Vig 2019): one thumbnail per layer × head; click a thumbnail to enlarge it. "
               f"Weights rounded to whole percent; the view holds at most {MAX_BYTES / 1e6:g} MB of weights and "
               f"{MAX_DRAWN:,} lines. {MOUSE_ONLY}")
    if page.note:
        st.info(page.note)
    st.iframe(page.html, height=min(MAX_FRAME_PX, 60 + FRAME_PX * len(page.layers)), alt=title)
    part = [] if result.kind == "self" else [result.kind]  # an encoder-decoder's three parts save apart
    name = file_stem(model, *part, "bertviz-model-view", "layers", "-".join(map(str, page.layers)))
    st.download_button("Save this view (standalone HTML)",
                       lambda: _page(result_id, tuple(page.layers), tuple(page.heads), title, True, result).html,
                       file_name=f"{name}.html", mime="text/html", key=f"{prefix}bv_export", on_click="ignore")


NOT_SUPPORTED = ("BertViz's neuron view needs heads whose score is the scaled dot product of their query and key "
                 "vectors (BERT, RoBERTa, ELECTRA, MiniLM, DistilBERT, GPT-2, OPT, GPT-Neo); this model adds a "
                 "rotation or a position bias to it, or computes attention in a way AttnScope does not read.")
NOT_FINITE = ("This head's attention holds NaN or infinite weights (the model's weights or activations overflowed), "
              "so its query and key vectors cannot be shown meeting; the diagnosis names such weights.")


class _Busy(Exception):
    """The model is held by another run: raised out of the cached page, which is then not kept, and asked again
    once the model looks free (``_waited_page``)."""


@st.cache_data(max_entries=16, show_spinner="Reading the query and key vectors…")
def _neuron_page(result_id: str, model_key: tuple, layer: int, head: int, title: str, inline: bool,
                 _result: core.AttentionResult) -> str | None:
    """The page, or None when q·k does not give the head's attention (a rotation or bias was added)."""
    loaded = cache.load_model(*model_key)
    if not loaded.lock.acquire(timeout=0.25):
        raise _Busy
    try:
        queries, keys, scale = query_key_vectors(loaded.model, _result.token_ids, layer, head,  # (t, d) each
                                                 _result.token_type_ids)
    finally:
        loaded.lock.release()
    window = _result.windows[layer] if _result.windows else None  # a local layer's (GPT-Neo)
    if not reproduces(queries, keys, _result.attentions[layer, head], _result.causal, scale, window, _result.dtype):
        return None
    return neuron_view_page(_result.attentions[layer, head], queries, keys, list(_result.tokens),
                            list(_result.keys), _result.causal, title, inline)


def _waited_page(notice, result_id, model_key, *args) -> str | None:
    """``_neuron_page(result_id, model_key, *args)``, asked again once the model looks free while another run holds
    it (looked at every 0.25 s); ``notice`` (an ``st.empty()``, or None) says so when that run is a Diagnose or
    Compare: one look before the wait missed a run that took the model after another session's Inspect, and the
    view waited out the whole diagnosis without a word."""
    loaded, told = cache.load_model(*model_key), False
    while True:
        try:
            page = _neuron_page(result_id, model_key, *args)
            break
        except _Busy:
            while loaded.lock.locked():
                told = told or (notice is not None and cache.say_if_busy(loaded, notice))
                time.sleep(0.25)
    if told:
        notice.empty()
    return page


def neuron_view_ui(prefix: str, result_id: str, result: core.AttentionResult, layer: int, head: int, model: str,
                   model_key: tuple) -> None:
    """The selected head's query and key vectors meeting (where their scaled dot product is the score), of the
    model ``model_key`` (``(source, stamp, n_heads)``) the result was read from, not of a folder's newer files."""
    loaded = cache.load_model(*model_key)
    if result.encoder is not None or not supports_neuron_view(loaded.model):
        st.info(NOT_SUPPORTED)
        return
    if not result.attentions[layer, head].isfinite().all():  # (q, k)
        st.info(NOT_FINITE)
        return
    if not neuron_view_fits(len(result.tokens), len(result.keys)):
        shapes = NEURON_PER_PAIR * len(result.tokens) * len(result.keys)
        st.info(f"BertViz's neuron view draws about {NEURON_PER_PAIR} shapes per query–key pair: {shapes:,} at "
                f"{len(result.keys)} tokens, more than the {MAX_DRAWN:,} a browser draws in about 3 seconds (the "
                f"page waits while it draws). It draws inputs of up to about {NEURON_VIEW_MAX_TOKENS} tokens; the "
                "head view shows this one.")
        return
    title = f"{model}: BertViz neuron view, layer {layer}, head {head}"
    page = _waited_page(st.empty(), result_id, model_key, layer, head, title, False, result)
    if page is None:
        st.info(NOT_SUPPORTED)
        return
    st.caption(f"BertViz neuron view of layer {layer}, head {head}: hover a query token to see its query vector "
               f"meet every key vector (elementwise product, dot product, softmax). {MOUSE_ONLY}")
    st.iframe(page, height=min(900, 120 + 26 * len(result.tokens)), alt=title)
    name = file_stem(model, "bertviz-neuron-view", f"layer-{layer}", f"head-{head}")
    st.download_button("Save this view (standalone HTML)",
                       lambda: _waited_page(None, result_id, model_key, layer, head, title, True, result),
                       file_name=f"{name}.html", mime="text/html", key=f"{prefix}nv_export", on_click="ignore")
