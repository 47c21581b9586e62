"""Charts whose points pick a head: the Inspect overview, the Diagnose pattern map, the Compare distance grid.

Plotly reads a click on the selected point as a deselection, so clicking a head a second time, after another
head was chosen with the pickers, did nothing. Each pick gives the chart a fresh key: its selection starts empty
again and every click is a pick. The chart sits in a container keyed ``{key}_box`` (a stable handle for tests).

A chart that writes text in every cell has a narrowest width at which that text stays apart; Streamlit shrinks a
chart to its column, so on a phone the overview's captions ran into each other. Below that width the box scrolls
sideways instead (a page style: Streamlit sizes a chart by the element that holds it).
"""

import streamlit as st

PICK_HINT = "; click a head to open it, or choose it with the Layer and Head boxes"


def head_chart(figure, key: str, targets: tuple[str, str], alt: str, opened: str, min_width: int | None = None,
               **options) -> None:
    """Draw ``figure``; a click on a point stores its ``customdata`` ``(layer, head)`` in the two ``targets`` keys
    of the session state, and a toast says where the head opened (``opened``: "above", "below"): the head opened
    out of view, and nothing on screen changed. ``alt`` names the chart for screen readers; the page's Layer and
    Head boxes are the keyboard's way to a head. ``min_width`` (px): narrower than this, the box scrolls sideways
    instead of shrinking the chart."""
    s = st.session_state
    round_key = f"{key}_round"
    chart_key = f"{key}_{s.setdefault(round_key, 0)}"

    def pick() -> None:
        points = s[chart_key].selection.points
        if points:
            s[targets[0]], s[targets[1]] = layer, head = points[0]["customdata"]
            s[round_key] += 1
            st.toast(f"Layer {layer}, head {head} opened {opened}")

    if min_width:
        st.html(f"<style>.st-key-{key}_box {{overflow-x: auto}} "
                f".st-key-{key}_box .stElementContainer {{min-width: {int(min_width)}px}}</style>")
    with st.container(key=f"{key}_box"):
        st.plotly_chart(figure, key=chart_key, on_select=pick, selection_mode="points",
                        config={"displayModeBar": False}, alt=alt + PICK_HINT, **options)
