"""Guide: what each pattern and role means and what to do about each finding (texts from diagnostics.texts)."""

import streamlit as st

from diagnostics.texts import BORDERLINE_TEXT, FINDING_TEXTS, PATTERN_TEXTS, ROLE_TEXTS


def patterns_ui() -> None:
    st.header("Head patterns")
    for label, text in PATTERN_TEXTS.items():
        swatch = f"<span style='color:{text.color}'>■</span>"  # the colour maps and reports use
        st.markdown(f"#### {swatch} {text.title} (`{label}`)", unsafe_allow_html=True)
        st.markdown(f"**Looks like:** {text.looks_like}\n\n**Reading:** {text.reading}\n\n"
                    f"**What to do:** {text.action}")
    st.markdown("#### Borderline heads")
    st.markdown("A diagnosis labels every head, and gives it roles, on each probe text. "
                f"{BORDERLINE_TEXT} The report lists these heads with the votes (e.g. *sparse 4/7, vertical 3/7; "
                "roles: sink 4/7*), and the head explorer says so above the metrics.")


def roles_ui() -> None:
    st.header("Head roles")
    st.markdown("Besides its pattern, a head gets every role it shows, each with its score. The pattern "
                "describes what a head does besides its sink; the sink is a role.")
    for role, text in ROLE_TEXTS.items():
        st.markdown(f"**{text.title}** (`{role}`, shown as *{text.short}*): {text.meaning}")


def findings_ui() -> None:
    st.header("Findings")
    for code, text in FINDING_TEXTS.items():
        with st.expander(f"{text.title} (`{code}`)"):
            st.markdown(f"**Meaning:** {text.meaning}\n\n**Suggestion:** {text.suggestion}"
                        + (f"\n\n**In a report:** {text.variants}" if text.variants else ""))


st.title("Guide")
st.caption("The same texts the reports and the command line use.")
patterns_ui()
roles_ui()
findings_ui()
