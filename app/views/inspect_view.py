"""Inspect's results: the head explorer (a fragment: layer, head, view, map, extra views, exports) and the overview.

``results_ui(result)`` draws everything below the inputs for one ``AttentionResult``.
A head or view switch reruns only ``explorer_ui``, and every array it draws is cached
(``app.views.derived``, ``app.server.cache``).
"""

import streamlit as st

import core
from app import errors
from app.names import display_name
from app.plain import for_markdown
from app.views import bertviz_ui, derived, head_detail, picking, plots
from app.kept import KEEP

EXTRA_VIEWS = ("Head view", "BertViz model view", "BertViz neuron view", "None")
HEAD_VIEW_FIRST_UP_TO = 128  # tokens; a longer input opens with no extra view: a 512-row head view is hard to
# read in its frame, and redrawing it doubled the head-switch time with 4 sessions (docs/app.md)


def part_ui(result: core.AttentionResult) -> tuple[str, core.AttentionResult]:
    if result.encoder is None:
        return "self", result
    part = st.radio("Attention", ["encoder", "decoder", "cross"], key="part", persist_state=KEEP, horizontal=True)
    return part, result.part(part)


def selectors_ui(result: core.AttentionResult, columns) -> tuple[int, int]:
    s = st.session_state
    # Write a selector's state only to clamp it: every write is pushed to the browser as a forced value,
    # and one from a run still in flight would undo the user's newer choice there.
    for key, count in (("layer", result.n_layers), ("head", result.n_heads)):
        if s.get(key, 0) >= count:
            s[key] = count - 1
    layer = columns[0].selectbox("Layer", range(result.n_layers), key="layer", persist_state=KEEP)
    head = columns[1].selectbox("Head", range(result.n_heads), key="head", persist_state=KEEP)
    return layer, head


def overview_ui(result_id: str, result: core.AttentionResult, patterns) -> None:
    st.subheader("Model overview")
    st.caption("Every head at a glance, framed in its pattern's colour. Click a head to inspect it.")
    sheet = derived.thumbnail_sheet(result_id, result, patterns)
    figure = plots.overview_figure(sheet, patterns, (result.n_layers, result.n_heads))
    picking.head_chart(figure, "overview", ("layer", "head"), "Overview: a thumbnail of every head's attention "
                       "map, by layer (rows) and head (columns), its pattern and roles written under it", "above",
                       plots.overview_min_width(result.n_heads), width="content")


def head_summary(result_id: str, result: core.AttentionResult, layer: int, head: int):
    """``(metrics, pattern)`` of one head: from the every-head table once the overview has made it."""
    table = derived.head_table(result_id, result) if st.session_state.get("table_for") == result_id else None
    if table is None:  # the first heatmap does not wait for every head to be measured
        return derived.head_summary(result_id, layer, head, result)
    patterns, metrics = table
    return metrics[layer][head], patterns[layer][head]


@st.fragment
@errors.caught
def explorer_ui(result_id: str, result: core.AttentionResult, model: str, model_key: tuple) -> None:
    """Layer, head and view pickers, the map and what describes it; a change here reruns only this."""
    cols = st.columns([1, 1, 3.6, 2.2], vertical_alignment="bottom")
    layer, head = selectors_ui(result, cols)
    options = head_detail.options_ui("inspect_", result, [cols[2], cols[3], cols[3]])  # the checkboxes stacked
    view = head_detail.build_view(result_id, result, layer, head, options, model)
    st.subheader(view.heading)
    metrics, pattern = head_summary(result_id, result, layer, head) if view.mode == "head" else ({}, None)
    map_col, about_col = st.columns([3, 2])
    with map_col:
        head_detail.heatmap_ui("inspect_", view, options["log_scale"])
    with about_col:
        if view.mode == "head" and derived.unmeasurable(result):
            st.caption(derived.unmeasurable(result))
        elif view.mode == "head":
            head_detail.pattern_ui(pattern)
            head_detail.metrics_ui(metrics, list(result.keys), per_row=2)
    head_detail.exports_ui("inspect_", view, head_detail.export_info(view, layer, head, metrics, pattern),
                           options["log_scale"])
    extra_views_ui(result_id, result, layer, head, model, model_key)


def extra_views_ui(result_id: str, result: core.AttentionResult, layer: int, head: int, model: str,
                   model_key: tuple) -> None:
    """One more picture of the layer, drawn only when chosen (each is a page of its own); ``model_key`` is the
    ``(source, stamp)`` the result was read from (the neuron view reads that model's query and key vectors)."""
    long = len(result.tokens) > HEAD_VIEW_FIRST_UP_TO
    # a long input has a control of its own: the one key kept the short example's head view, and the default was
    # never read (a 1,320-token text opened with a 337 kB head view)
    shown = st.segmented_control("More views", EXTRA_VIEWS, default="None" if long else EXTRA_VIEWS[0],
                                 key="inspect_extra_view_long" if long else "inspect_extra_view", persist_state=KEEP)
    if shown == "Head view":
        head_detail.head_view_ui("inspect_", result_id, result, layer, head, model)
    elif shown == "BertViz model view":
        bertviz_ui.model_view_ui("inspect_", result_id, result, layer, head, model)
    elif shown == "BertViz neuron view":
        bertviz_ui.neuron_view_ui("inspect_", result_id, result, layer, head, model, model_key)


def results_ui(full: core.AttentionResult, key: tuple) -> None:
    """Everything Inspect shows of ``full``, the result cached under ``key`` (``cache.result_key``)."""
    for warning in full.warnings:
        st.warning(for_markdown(warning))
    part, result = part_ui(full)
    result_id = f"{key}/{part}"  # what is derived from a result is cached under its inputs and files
    explorer_ui(result_id, result, display_name(st.session_state.inputs["source"]), key[:3])
    table = derived.head_table(result_id, result)
    st.session_state.table_for = result_id
    overview_ui(result_id, result, table and table[0])
