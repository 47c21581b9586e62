"""Inspect: run a model on a sentence and look at every head.

The inputs sit in the sidebar, so the first heatmap is in view at 1280 × 800;
the results (head explorer, overview) are ``app.views.inspect_view``.
"""

import streamlit as st

import core
from app import errors
from app.server import cache
from app.views.inspect_view import results_ui
from app.kept import KEEP
from core.errors import is_failure

EXAMPLE = "The cat sat on the mat because it was tired."
MODEL_KINDS = ("Known model", "Hugging Face id", "Local folder")
MAX_CHARS = 5000  # about 1,000 English tokens; models truncate to their own limit and say so, and a text whose
# maps would pass the result budget (digits, CJK: a token a character) is refused (cache._check_result_size)
INTRO = ("Run a model on a sentence and see where every attention head looks: click a head in the overview, "
         "switch views, and export any map.")


def inputs_ui() -> None:
    """Model and texts; "Run" stores them in ``st.session_state.inputs``."""
    st.session_state.setdefault("inputs", {"source": core.DEFAULT_MODEL, "text": EXAMPLE, "pair": "", "target": ""})
    kind = st.radio("Model", MODEL_KINDS, key="model_kind", persist_state=KEEP)
    with st.form("inputs_form", border=False):
        if kind == MODEL_KINDS[0]:  # the two real models first, then the demo models
            st.selectbox("Known model", core.MODEL_CHOICES, key="demo_model", persist_state=KEEP,
                         format_func=lambda name: f"{name} — {core.describe_model(name)}")
        else:
            hint = "e.g. bert-base-uncased" if kind == "Hugging Face id" else "e.g. /models/my-bert or model.gguf"
            st.text_input(kind, key="model_path", persist_state=KEEP, placeholder=hint)
        if kind == MODEL_KINDS[2]:  # bare weights name no head count (Diagnose and the CLI ask for it too)
            st.number_input("Heads per layer (only for a bare weights file without a config)", 0, 256,
                            key="model_heads", persist_state=KEEP)
        st.session_state.setdefault("text", EXAMPLE)
        st.text_area("Text", key="text", persist_state=KEEP, help=f"Up to {MAX_CHARS:,} characters")
        with st.expander("Second sentence / target text"):
            st.text_input("Second sentence (pair models such as BERT)", key="pair", persist_state=KEEP)
            st.text_input("Target text (encoder-decoder models; default: the text)", key="target", persist_state=KEEP)
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
    heads = int(s.get("model_heads") or 0) or None if s.model_kind == MODEL_KINDS[2] else None
    s.inputs = {"source": source.strip(), "text": s.text, "pair": s.pair, "target": s.target, "heads": heads}
    s.pop("failed", None)  # a fresh Run retries whatever failed before
    s.pop("run_key", None)  # and reads a folder's files as they are then


def attention_or_error():
    """``(attention, its cache key)`` for the stored inputs, or None after showing why not (a failure is not
    retried until Run)."""
    args = tuple(st.session_state.inputs.values())
    failed = st.session_state.get("failed")
    if failed and failed[0] == args:
        errors.shown(failed[1])
        return None
    try:
        kept = st.session_state.get("run_key")  # the files as they were at Run: a folder saved again while the
        key = kept[1] if kept and kept[0] == args else cache.result_key(*args)  # result shows is read on the next Run
        st.session_state.run_key = (args, key)
        return cache.attention(key), key
    except BaseException as err:  # every error, a native library's panic too, becomes a message on the page
        if not is_failure(err):  # Streamlit's rerun and stop signals
            raise
        st.session_state.failed = (args, errors.message(err))
        errors.shown(st.session_state.failed[1])
        return None


st.title("Inspect attention")
st.caption(INTRO)
with st.sidebar:
    inputs_ui()
if st.session_state.get("input_error"):
    st.error(st.session_state.input_error, icon="⚠️")
else:
    got = attention_or_error()
    if got is not None:
        try:
            results_ui(*got)
        except Exception as err:  # noqa: BLE001
            errors.show(err)
