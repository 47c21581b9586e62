"""Diagnose: upload a checkpoint (or give a folder, or pick a known model), label every head, list findings."""

import streamlit as st

from app import errors
from app.views import report_view
from app.server import cache, session, sources
from app.kept import KEEP
from core.cancel import progress_span, stop_between_layers, stoppable
from diagnostics.diagnose import diagnose


def options_ui():
    with st.expander("Options"):
        texts = sources.probes_ui("diag_probes")
        heads = st.number_input("Heads per layer (only for a bare weights file without a config)", 0, 256,
                                key="diag_heads", persist_state=KEEP)
    return texts, int(heads) or None


def run(inputs, name, texts, n_heads) -> None:
    """Load and diagnose with a progress bar; the report (or the error) goes into session state."""
    st.session_state.pop("report", None)
    st.session_state.report_source = sources.source_key((inputs, name))
    bar = st.progress(0.0, text="Loading the checkpoint…")
    should_stop = session.stop_when_gone()
    try:
        budget = cache.report_maps_bytes()  # a bad ATTNSCOPE_REPORT_MAPS_BYTES is told before the work, not after
        to_bar = lambda fraction, message: bar.progress(min(1.0, fraction), text=message)  # noqa: E731
        progress = stoppable(to_bar, should_stop)
        # loading is the bar's first 5 %, as in diagnose() of a model by name (it went to 100 %, then back to 0)
        opened = sources.opened_models([inputs], n_heads, [progress_span(progress, 0.0, 0.05, "Loading")])
        with opened as [(model, tokenizer, notes)], stop_between_layers(model, should_stop):  # may end mid-probe
            report = diagnose((model, tokenizer), texts, progress=progress)
        report.model["name"] = name  # the upload's file or the folder's name, never the server's temp path
        st.session_state.report_notes = notes + cache.keep_maps_within([report], budget)
        st.session_state.report_name = name
        st.session_state.report = report  # last: the page draws it with this run's name and notes
    except Exception as err:  # noqa: BLE001  every error becomes a message on the page
        errors.show(err)
    finally:
        bar.empty()


st.title("Diagnose a checkpoint")
source = sources.source_ui("diag")
texts, n_heads = options_ui()
if st.button("Diagnose", type="primary", key="diag_run"):
    problem = ("Upload a checkpoint, give a folder path or pick a known model first." if source is None
               else sources.probes_problem(texts))
    if problem:
        st.session_state.pop("report", None)  # an earlier result must not pass for this run's
        st.error(problem, icon="⚠️")
    else:
        run(*source, texts, n_heads)
if st.session_state.get("report") is not None:
    sources.stale_note_ui(st.session_state.get("report_source"), sources.source_key(source), "Diagnose")
    try:
        report_view.report_ui(st.session_state.report, st.session_state.get("report_name", ""),
                              st.session_state.get("report_notes", []))
    except Exception as err:  # noqa: BLE001
        errors.show(err)
