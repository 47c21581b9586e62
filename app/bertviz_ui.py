"""BertViz's model view in the app: pick layers and heads, see them, save them as one offline HTML file."""

from __future__ import annotations

import streamlit as st

import core
from app.bertviz_view import MAX_BYTES, model_view_page
from app.names import file_stem

FRAME_PX = 280  # frame height per layer shown (bertviz draws one row of thumbnails per layer)
MAX_FRAME_PX = 900


@st.cache_data(max_entries=16, show_spinner="Drawing the BertViz model view…")
def _page(result_id: str, layers: tuple[int, ...], heads: tuple[int, ...], title: str, inline: bool,
          _result: core.AttentionResult):
    return model_view_page(_result.attentions, list(_result.tokens), list(_result.keys), list(layers), list(heads),
                           title, inline)


def model_view_ui(prefix: str, result_id: str, result: core.AttentionResult, layer: int, head: int,
                  model: str) -> None:
    """Layers default to the selected one, heads to all of them; the page holds what fits in ``MAX_BYTES``."""
    cols = st.columns(2)
    layers = cols[0].multiselect("Layers", range(result.n_layers), default=[layer], key=f"{prefix}bv_layers")
    heads = cols[1].multiselect("Heads", range(result.n_heads), default=list(range(result.n_heads)),
                                key=f"{prefix}bv_heads")
    if not layers or not heads:
        st.info("Choose at least one layer and one head.")
        return
    layers, heads = tuple(sorted(layers)), tuple(sorted(heads))
    page = _page(result_id, layers, heads, f"{model}: BertViz model view", False, result)
    st.caption("BertViz (Vig 2019): one thumbnail per layer × head; click a thumbnail to enlarge it. "
               f"Weights rounded to 0.01; the view holds at most {MAX_BYTES / 1e6:g} MB of weights.")
    if page.note:
        st.info(page.note)
    st.iframe(page.html, height=min(MAX_FRAME_PX, 60 + FRAME_PX * len(page.layers)))
    name = file_stem(model, "bertviz-model-view", "layers", "-".join(map(str, page.layers)))
    st.download_button("Save this view (standalone HTML)",
                       lambda: _page(result_id, tuple(page.layers), tuple(page.heads),
                                     f"{model}: BertViz model view", True, result).html,
                       file_name=f"{name}.html", mime="text/html", key=f"{prefix}bv_export", on_click="ignore")
