"""Diagnose: upload a checkpoint (or give a folder), label every head, list findings."""

import streamlit as st

import core
from app import errors, report_view
from diagnostics.diagnose import diagnose


def source_ui():
    """Upload or folder path; returns ``(checkpoint input, name to show)``, or None."""
    kind = st.radio("Checkpoint", ["Upload", "Local folder"], key="diag_kind", horizontal=True)
    if kind == "Upload":
        limit_mb = st.get_option("server.maxUploadSize")
        unpacked = core.Limits().max_total_bytes / 1e9
        files = st.file_uploader(
            "A .zip / .tar.gz of a model folder, or its files together (config.json, model.safetensors or "
            "pytorch_model.bin, tokenizer files), a .gguf file, or a custom model's safetensors + config JSON",
            accept_multiple_files=True, key="diag_upload")
        st.caption(f"Limits: {limit_mb:,} MB per upload (server.maxUploadSize in .streamlit/config.toml), "
                   f"{unpacked:g} GB unpacked. Python files in an upload are never run.")
        return ([(f.name, f.getvalue()) for f in files], ", ".join(f.name for f in files)) if files else None
    path = st.text_input("Model folder, archive, weights or .gguf file", key="diag_path",
                         placeholder="/models/my-bert")
    return (path.strip(), path.strip()) if path.strip() else None


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
    try:
        loading = lambda fraction, message: bar.progress(min(1.0, fraction), text=f"Loading: {message}")  # noqa: E731
        checkpoint = core.load_checkpoint(inputs, n_heads=n_heads, progress=loading)
        progress = lambda fraction, message: bar.progress(min(1.0, fraction), text=message)  # noqa: E731
        st.session_state.report = diagnose((checkpoint.model, checkpoint.tokenizer), texts, progress=progress)
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
