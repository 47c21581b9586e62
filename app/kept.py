"""The inputs a user typed or picked outlive the runs that do not draw them.

Streamlit drops a widget's value when a run does not draw the widget: after the Model radio was switched away and
back, or after a visit to another page, a picker showed its default again while the page still showed the result
of the old choice. Storing each value again at the start of every run (Streamlit's documented way) keeps it until
the user changes it. Uploaders, buttons and chart selections cannot be set this way and are not listed; widgets
listed here take no default argument (a default would clash with the stored value), so set one with
``st.session_state.setdefault`` instead.
"""

import streamlit as st

SOURCE_PICKERS = ("diag", "cmp_a", "cmp_b")  # app.server.sources.source_ui prefixes
KEPT = ("model_kind", "demo_model", "model_path", "model_heads", "text", "pair", "target",  # Inspect's sidebar
        *(f"{prefix}_{part}" for prefix in SOURCE_PICKERS for part in ("kind", "known", "path")),
        "diag_probes", "diag_heads", "cmp_probes", "cmp_heads",  # Diagnose and Compare
        "tl_kind", "tl_paths", "tl_folder")  # Timeline


def keep_inputs() -> None:
    """Store every listed widget value again, so that Streamlit keeps it while the widget is not drawn."""
    for key in KEPT:
        if key in st.session_state:
            st.session_state[key] = st.session_state[key]
