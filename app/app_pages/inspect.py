"""Inspect: run a model on a sentence and look at every head."""

import streamlit as st

import core
from app import cache, errors, head_detail, plots

EXAMPLE = "The cat sat on the mat because it was tired."
MODEL_KINDS = ("Known model", "Hugging Face id", "Local folder")
MAX_CHARS = 5000  # about 1,000 tokens; models truncate to their own limit and say so


def inputs_ui() -> None:
    """Model and texts; "Run" stores them in ``st.session_state.inputs``."""
    st.session_state.setdefault("inputs", {"source": core.DEFAULT_MODEL, "text": EXAMPLE, "pair": "", "target": ""})
    kind = st.radio("Model", MODEL_KINDS, key="model_kind", horizontal=True)
    with st.form("inputs_form"):
        if kind == MODEL_KINDS[0]:  # the two real models first, then the demo models
            st.selectbox("Model", core.MODEL_CHOICES, key="demo_model",
                         format_func=lambda name: f"{name} — {core.describe_model(name)}")
        else:
            hint = "e.g. bert-base-uncased" if kind == "Hugging Face id" else "e.g. /models/my-bert or model.gguf"
            st.text_input(kind, key="model_path", placeholder=hint)
        st.text_area("Text", EXAMPLE, key="text", max_chars=MAX_CHARS)
        with st.expander("Second sentence / target text"):
            st.text_input("Second sentence (pair models such as BERT)", key="pair")
            st.text_input("Target text (encoder-decoder models; default: the text)", key="target")
        st.form_submit_button("Run", type="primary", key="run", on_click=_submit)


def _submit() -> None:
    s = st.session_state
    source = s.demo_model if s.model_kind == MODEL_KINDS[0] else s.get("model_path", "")
    s.inputs = {"source": source.strip(), "text": s.text, "pair": s.pair, "target": s.target}
    s.pop("failed", None)  # a fresh Run retries whatever failed before


def attention_or_error():
    """The attention for the stored inputs, or None after showing why not (a failure is not retried until Run)."""
    args = tuple(st.session_state.inputs.values())
    failed = st.session_state.get("failed")
    if failed and failed[0] == args:
        st.error(failed[1], icon="⚠️")
        return None
    try:
        return cache.attention(*args)
    except Exception as err:  # noqa: BLE001  every error becomes a message on the page
        st.session_state.failed = (args, errors.message(err))
        st.error(st.session_state.failed[1], icon="⚠️")
        return None


def part_ui(result: core.AttentionResult) -> tuple[str, core.AttentionResult]:
    if result.encoder is None:
        return "self", result
    part = st.radio("Attention", ["encoder", "decoder", "cross"], key="part", horizontal=True)
    return part, result.part(part)


def selectors_ui(result: core.AttentionResult) -> tuple[int, int]:
    s = st.session_state
    # Write a selector's state only to clamp it: every write is pushed to the browser as a forced value,
    # and one from a run still in flight would undo the user's newer choice there.
    for key, count in (("layer", result.n_layers), ("head", result.n_heads)):
        if s.get(key, 0) >= count:
            s[key] = count - 1
    cols = st.columns(2)
    layer = cols[0].selectbox("Layer", range(result.n_layers), key="layer")
    head = cols[1].selectbox("Head", range(result.n_heads), key="head")
    return layer, head


def _pick_from_overview() -> None:
    points = st.session_state.overview.selection.points
    if points:
        st.session_state.layer, st.session_state.head = points[0]["customdata"]


def overview_ui(result_id: str, result: core.AttentionResult, patterns, selected) -> None:
    st.subheader("Model overview")
    st.caption("Every head at a glance, framed in its pattern's colour. Click a head to inspect it.")
    sheet = cache.thumbnail_sheet(result_id, result, patterns)
    figure = plots.overview_figure(sheet, patterns, (result.n_layers, result.n_heads), selected)
    st.plotly_chart(figure, key="overview", width="content", on_select=_pick_from_overview,
                    selection_mode="points", config={"displayModeBar": False})


def detail_ui(result_id: str, result: core.AttentionResult, layer: int, head: int) -> None:
    st.subheader(f"Layer {layer}, head {head}")
    metrics, pattern = cache.head_summary(result_id, layer, head, result)
    head_detail.pattern_ui(pattern)
    head_detail.metrics_ui(metrics, list(result.keys))
    options = head_detail.options_ui("inspect_", result)
    view = head_detail.build_view(result, layer, head, options)
    heatmap_tab, view_tab = st.tabs(["Heatmap", "Head view"])
    with heatmap_tab:
        head_detail.heatmap_ui("inspect_", view, options["log_scale"])
    with view_tab:
        head_detail.head_view_ui("inspect_", result, layer, head)
    info = {"model": result.model_name, "layer": layer, "head": head, "view": options["mode"], "metrics": metrics,
            "pattern": None if pattern is None else {"label": pattern.label, "confidence": pattern.confidence}}
    head_detail.exports_ui("inspect_", view, info)


st.title("Inspect attention")
inputs_ui()
full = attention_or_error()
if full is not None:
    try:
        for warning in full.warnings:
            st.warning(warning)
        part, result = part_ui(full)
        result_id = f"{tuple(st.session_state.inputs.values())}/{part}"
        layer, head = selectors_ui(result)
        overview_slot = st.container(key="overview_box")  # filled last: labelling every head is the slow part
        detail_ui(result_id, result, layer, head)
        with overview_slot:
            overview_ui(result_id, result, cache.head_patterns(result_id, result), (layer, head))
    except Exception as err:  # noqa: BLE001
        errors.show(err)
