"""Guide: what each pattern means and what to do about each finding (texts from diagnostics.texts)."""

import streamlit as st

from diagnostics.texts import FINDING_TEXTS, PATTERN_TEXTS


def patterns_ui() -> None:
    st.header("Head patterns")
    for label, text in PATTERN_TEXTS.items():
        swatch = f"<span style='color:{text.color}'>■</span>"  # the colour maps and reports use
        st.markdown(f"#### {swatch} {text.title} (`{label}`)", unsafe_allow_html=True)
        st.markdown(f"**Looks like:** {text.looks_like}\n\n**Reading:** {text.reading}\n\n"
                    f"**What to do:** {text.action}")


def findings_ui() -> None:
    st.header("Findings")
    for code, text in FINDING_TEXTS.items():
        with st.expander(f"{text.title} (`{code}`)"):
            st.markdown(f"**Meaning:** {text.meaning}\n\n**Suggestion:** {text.suggestion}")


st.title("Guide")
st.caption("The same texts the reports and the command line use.")
patterns_ui()
findings_ui()
