"""Inspect: run a model on a sentence and look at every head.

The inputs sit in the sidebar, so the first heatmap is in view at 1280 × 800.
The head explorer (layer, head, view, map, extra views, exports) is a fragment:
a head or view switch reruns only it, and every array it draws is cached
(``app.views.derived``, ``app.server.cache``).
"""

import streamlit as st

import core
from app import errors
from app.views import bertviz_ui, derived, head_detail, plots
from app.server import cache
from app.names import display_name
from app.plain import for_markdown

EXAMPLE = "The cat sat on the mat because it was tired."
MODEL_KINDS = ("Known model", "Hugging Face id", "Local folder")
MAX_CHARS = 5000  # about 1,000 tokens; models truncate to their own limit and say so
INTRO = ("Run a model on a sentence and see where every attention head looks: click a head in the overview, "
         "switch views, and export any map.")
EXTRA_VIEWS = ("Head view", "BertViz model view", "BertViz neuron view", "None")
HEAD_VIEW_FIRST_UP_TO = 128  # tokens; a longer input opens with no extra view: a 512-row head view is hard to
# read in its frame, and redrawing it doubled the head-switch time with 4 sessions (docs/app.md)


def inputs_ui() -> None:
    """Model and texts; "Run" stores them in ``st.session_state.inputs``."""
    st.session_state.setdefault("inputs", {"source": core.DEFAULT_MODEL, "text": EXAMPLE, "pair": "", "target": ""})
    kind = st.radio("Model", MODEL_KINDS, key="model_kind")
    with st.form("inputs_form", border=False):
        if kind == MODEL_KINDS[0]:  # the two real models first, then the demo models
            st.selectbox("Model", core.MODEL_CHOICES, key="demo_model",
                         format_func=lambda name: f"{name} — {core.describe_model(name)}")
        else:
            hint = "e.g. bert-base-uncased" if kind == "Hugging Face id" else "e.g. /models/my-bert or model.gguf"
            st.text_input(kind, key="model_path", placeholder=hint)
        st.text_area("Text", EXAMPLE, key="text", help=f"Up to {MAX_CHARS:,} characters")
        with st.expander("Second sentence / target text"):
            st.text_input("Second sentence (pair models such as BERT)", key="pair")
            st.text_input("Target text (encoder-decoder models; default: the text)", key="target")
        st.form_submit_button("Run", type="primary", key="run", on_click=_submit)


def _submit() -> None:
    s = st.session_state
    too_long = [(name, len(s.get(key) or "")) for name, key in (("Text", "text"), ("Second sentence", "pair"),
                                                               ("Target text", "target"))
                if len(s.get(key) or "") > MAX_CHARS]
    if too_long:  # never drop the new text silently and show the old one: say so, and run nothing
        name, length = too_long[0]
        s.input_error = (f"Not run: {name} has {length:,} characters, over the limit of {MAX_CHARS:,}. "
                         "Shorten it and press Run again.")
        return
    s.pop("input_error", None)
    source = s.demo_model if s.model_kind == MODEL_KINDS[0] else s.get("model_path", "")
    s.inputs = {"source": source.strip(), "text": s.text, "pair": s.pair, "target": s.target}
    s.pop("failed", None)  # a fresh Run retries whatever failed before


def attention_or_error():
    """The attention for the stored inputs, or None after showing why not (a failure is not retried until Run)."""
    args = tuple(st.session_state.inputs.values())
    failed = st.session_state.get("failed")
    if failed and failed[0] == args:
        errors.shown(failed[1])
        return None
    try:
        return cache.attention(*args)
    except Exception as err:  # noqa: BLE001  every error becomes a message on the page
        st.session_state.failed = (args, errors.message(err))
        errors.shown(st.session_state.failed[1])
        return None


def part_ui(result: core.AttentionResult) -> tuple[str, core.AttentionResult]:
    if result.encoder is None:
        return "self", result
    part = st.radio("Attention", ["encoder", "decoder", "cross"], key="part", horizontal=True)
    return part, result.part(part)


def selectors_ui(result: core.AttentionResult, columns) -> tuple[int, int]:
    s = st.session_state
    # Write a selector's state only to clamp it: every write is pushed to the browser as a forced value,
    # and one from a run still in flight would undo the user's newer choice there.
    for key, count in (("layer", result.n_layers), ("head", result.n_heads)):
        if s.get(key, 0) >= count:
            s[key] = count - 1
    layer = columns[0].selectbox("Layer", range(result.n_layers), key="layer")
    head = columns[1].selectbox("Head", range(result.n_heads), key="head")
    return layer, head


def _pick_from_overview() -> None:
    points = st.session_state.overview.selection.points
    if points:
        st.session_state.layer, st.session_state.head = points[0]["customdata"]


def overview_ui(result_id: str, result: core.AttentionResult, patterns) -> None:
    st.subheader("Model overview")
    st.caption("Every head at a glance, framed in its pattern's colour. Click a head to inspect it.")
    sheet = derived.thumbnail_sheet(result_id, result, patterns)
    figure = plots.overview_figure(sheet, patterns, (result.n_layers, result.n_heads), None)
    st.plotly_chart(figure, key="overview", width="content", on_select=_pick_from_overview,
                    selection_mode="points", config={"displayModeBar": False})


def head_summary(result_id: str, result: core.AttentionResult, layer: int, head: int):
    """``(metrics, pattern)`` of one head: from the every-head table once the overview has made it."""
    table = derived.head_table(result_id, result) if st.session_state.get("table_for") == result_id else None
    if table is None:  # the first heatmap does not wait for every head to be measured
        return derived.head_summary(result_id, layer, head, result)
    patterns, metrics = table
    return metrics[layer][head], patterns[layer][head]


@st.fragment
def explorer_ui(result_id: str, result: core.AttentionResult, model: str) -> None:
    """Layer, head and view pickers, the map and what describes it; a change here reruns only this."""
    layer, head = selectors_ui(result, cols := st.columns([1, 1, 4, 1.4, 1.4], vertical_alignment="bottom"))
    options = head_detail.options_ui("inspect_", result, cols[2:])
    view = head_detail.build_view(result_id, result, layer, head, options, model)
    st.subheader(view.heading)
    metrics, pattern = head_summary(result_id, result, layer, head) if view.mode == "head" else ({}, None)
    map_col, about_col = st.columns([3, 2])
    with map_col:
        head_detail.heatmap_ui("inspect_", view, options["log_scale"])
    with about_col:
        if view.mode == "head":
            head_detail.pattern_ui(pattern)
            head_detail.metrics_ui(metrics, list(result.keys), per_row=2)
    head_detail.exports_ui("inspect_", view, head_detail.export_info(view, layer, head, metrics, pattern))
    extra_views_ui(result_id, result, layer, head, model)


def extra_views_ui(result_id: str, result: core.AttentionResult, layer: int, head: int, model: str) -> None:
    """One more picture of the layer, drawn only when chosen (each is a page of its own)."""
    default = EXTRA_VIEWS[0] if len(result.tokens) <= HEAD_VIEW_FIRST_UP_TO else "None"
    shown = st.segmented_control("More views", EXTRA_VIEWS, default=default, key="inspect_extra_view")
    if shown == "Head view":
        head_detail.head_view_ui("inspect_", result_id, result, layer, head)
    elif shown == "BertViz model view":
        bertviz_ui.model_view_ui("inspect_", result_id, result, layer, head, model)
    elif shown == "BertViz neuron view":
        bertviz_ui.neuron_view_ui("inspect_", result_id, result, layer, head, model,
                                  st.session_state.inputs["source"])


def results_ui(full: core.AttentionResult) -> None:
    for warning in full.warnings:
        st.warning(for_markdown(warning))
    part, result = part_ui(full)
    result_id = f"{tuple(st.session_state.inputs.values())}/{part}"
    explorer_ui(result_id, result, display_name(st.session_state.inputs["source"]))
    table = derived.head_table(result_id, result)
    st.session_state.table_for = result_id
    overview_ui(result_id, result, table and table[0])


st.title("Inspect attention")
st.caption(INTRO)
with st.sidebar:
    inputs_ui()
if st.session_state.get("input_error"):
    st.error(st.session_state.input_error, icon="⚠️")
else:
    full = attention_or_error()
    if full is not None:
        try:
            results_ui(full)
        except Exception as err:  # noqa: BLE001
            errors.show(err)
