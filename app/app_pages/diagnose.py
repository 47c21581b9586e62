"""Diagnose: upload a checkpoint (or give a folder), label every head, list findings."""

from contextlib import nullcontext

import streamlit as st

import core
from app import errors, report_view, session, uploads
from core.cancel import stop_between_layers, stoppable
from diagnostics.diagnose import diagnose


def source_ui():
    """Upload or folder path; returns ``(checkpoint input, name to show)``, or None."""
    kind = st.radio("Checkpoint", ["Upload", "Local folder"], key="diag_kind", horizontal=True)
    if kind == "Upload":
        return upload_ui()
    path = st.text_input("Model folder, archive, weights or .gguf file", key="diag_path",
                         placeholder="/models/my-bert")
    return (path.strip(), path.strip()) if path.strip() else None


def upload_ui():
    """The uploader; what it receives goes to disk at once (``uploads``), and the widget starts empty again."""
    s = st.session_state
    s.setdefault("diag_upload_round", 0)
    limits = core.Limits()
    files = st.file_uploader(
        "A .zip / .tar.gz of a model folder, or its files together (config.json, model.safetensors or "
        "pytorch_model.bin, tokenizer files), a .gguf file, or a custom model's safetensors + config JSON",
        accept_multiple_files=True, key=f"diag_upload_{s.diag_upload_round}")
    st.caption(f"Limits: {st.get_option('server.maxUploadSize'):,} MB per upload, a model of "
               f"{limits.max_model_bytes / 1e9:g} GB, {limits.max_total_bytes / 1e9:g} GB unpacked. "
               "Drop all files of a model together; a new upload replaces the last. Python files in an upload are "
               "never run.")
    if files:
        s.diag_staged = uploads.stage(s.get("diag_staged"), files)
        uploads.release(files)
        s.diag_upload_round += 1  # a fresh, empty uploader: Streamlit's copy of the files is dropped
        st.rerun()
    staged = s.get("diag_staged")
    if staged is None:
        return None
    names = ", ".join(staged.names)
    cols = st.columns([4, 1])
    cols[0].text(f"Uploaded: {names} ({staged.size / 1e6:,.1f} MB)")
    if cols[1].button("Clear", key="diag_clear"):
        staged.remove()
        del s.diag_staged
        st.rerun()
    return staged, names


def options_ui():
    with st.expander("Options"):
        probes = st.text_area("Probe sentences, one per line (empty: AttnScope's default probes)", key="diag_probes")
        heads = st.number_input("Heads per layer (only for a bare weights file without a config)", 0, 256, 0,
                                key="diag_heads")
    return [line for line in probes.splitlines() if line.strip()] or None, int(heads) or None


def run(inputs, name, texts, n_heads) -> None:
    """Load and diagnose with a progress bar; the report (or the error) goes into session state."""
    st.session_state.pop("report", None)
    bar = st.progress(0.0, text="Loading the checkpoint…")
    should_stop = session.stop_when_gone()
    try:
        loading = lambda fraction, message: bar.progress(min(1.0, fraction), text=f"Loading: {message}")  # noqa: E731
        with inputs.opened() if isinstance(inputs, uploads.Staged) else nullcontext(inputs) as source:
            checkpoint = core.load_untrusted(source, n_heads=n_heads, progress=stoppable(loading, should_stop))
        progress = stoppable(lambda fraction, message: bar.progress(min(1.0, fraction), text=message), should_stop)
        with stop_between_layers(checkpoint.model, should_stop):  # the session may end mid-probe
            report = diagnose((checkpoint.model, checkpoint.tokenizer), texts, progress=progress)
        st.session_state.report = report
        st.session_state.report_notes = checkpoint.notes
        st.session_state.report_name = name
    except Exception as err:  # noqa: BLE001  every error becomes a message on the page
        errors.show(err)
    finally:
        bar.empty()


st.title("Diagnose a checkpoint")
source = source_ui()
texts, n_heads = options_ui()
if st.button("Diagnose", type="primary", key="diag_run"):
    if source is None:
        st.error("Upload a checkpoint or give a folder path first.", icon="⚠️")
    else:
        run(*source, texts, n_heads)
if st.session_state.get("report") is not None:
    try:
        report_view.report_ui(st.session_state.report, st.session_state.get("report_name", ""),
                              st.session_state.get("report_notes", []))
    except Exception as err:  # noqa: BLE001
        errors.show(err)
