"""The inputs a user typed or picked outlive the runs that do not draw them.

Streamlit drops a widget's value when a run does not draw the widget: after the Model radio was switched away and
back, or after a visit to another page, a picker showed its default again while the page still showed the result
of the old choice. Each value is copied to a key of its own at the start of every run, and given back to the widget
on a run after one that did not draw it. The widget's own key is written only then: every write is pushed to the
browser as a forced value, and writing it on every run (Streamlit's documented way) put back the last Run's text over
one typed in the sidebar form and not yet run whenever anything else reran the page. Uploaders, buttons and chart
selections cannot be set this way and are not listed; widgets listed here take no default argument (a default would
clash with the stored value), so set one with ``st.session_state.setdefault`` instead.
"""

import streamlit as st

SOURCE_PICKERS = ("diag", "cmp_a", "cmp_b")  # app.server.sources.source_ui prefixes
VIEW_OPTIONS = ("mode", "hide_special", "log_scale")  # app.views.head_detail.options_ui, per page prefix
KEPT = ("model_kind", "demo_model", "model_path", "model_heads", "text", "pair", "target",  # Inspect's sidebar
        *(f"{prefix}_{part}" for prefix in SOURCE_PICKERS for part in ("kind", "known", "path")),
        "diag_probes", "diag_heads", "cmp_probes", "cmp_heads",  # Diagnose and Compare
        "tl_kind", "tl_paths", "tl_folder",  # Timeline
        # the choices made on a shown result: the same head and view on a return to its page
        "part", "layer", "head", *(f"{page}_{option}" for page in ("inspect", "diag") for option in VIEW_OPTIONS),
        "diag_part", "diag_layer", "diag_head", "diag_sample", "cmp_part", "cmp_layer", "cmp_head", "cmp_probe",
        "tl_metric", "tl_part", "tl_layer")
COPY = "kept/"  # the prefix of each value's copy, a key no widget has


def keep_inputs() -> None:
    """Copy every listed widget value, or give it back to a widget the last run did not draw."""
    s = st.session_state
    for key in KEPT:
        if key in s:
            s[COPY + key] = s[key]
        elif COPY + key in s:
            s[key] = s[COPY + key]
