"""Compare: two models of one vocabulary, head by head — which heads did fine-tuning change?"""

import pandas as pd
import streamlit as st

from app import errors
from app.names import file_stem
from app.plain import for_markdown
from core.extraction.tokens import visible
from app.views import compare_plots, picking
from app.server import cache, session, sources
from app.kept import KEEP
from core.cancel import progress_span, stop_between_layers, stoppable
from diagnostics.compare import compare
from diagnostics.reports.compare_report import first_changed, pattern_name, severity_title


def run(source_a, source_b, texts, n_heads=None) -> None:
    """Load both models and compare them with a progress bar; the result (or the error) goes to session state.

    The work stops (``core.Cancelled``) between layers and probes once the browser session has ended."""
    st.session_state.pop("comparison", None)
    st.session_state.pop("comparison_notes", None)
    st.session_state.comparison_source = _sources_key(source_a, source_b)
    bar = st.progress(0.0, text="Loading model A…")
    should_stop = session.stop_when_gone()
    progress = stoppable(lambda fraction, message: bar.progress(min(1.0, fraction), text=message), should_stop)
    try:
        budget = cache.report_maps_bytes()  # a bad ATTNSCOPE_REPORT_MAPS_BYTES is told before the work, not after
        loading = [progress_span(progress, 0.0, 0.1, "Loading model A"),
                   progress_span(progress, 0.1, 0.2, "Loading model B")]
        labels = [f"Model A ({source_a[1]})", f"Model B ({source_b[1]})"]
        opened = sources.opened_models([source_a[0], source_b[0]], n_heads, loading, labels, job="comparison")
        with opened as [(model_a, tok_a, notes_a), (model_b, tok_b, notes_b)], \
                stop_between_layers(model_a, should_stop), stop_between_layers(model_b, should_stop):
            report = compare((model_a, tok_a), (model_b, tok_b), texts, progress=progress_span(progress, 0.2, 1.0))
        report.a.model["name"], report.b.model["name"] = source_a[1], source_b[1]
        st.session_state.comparison_notes = ([f"A: {n}" for n in notes_a] + [f"B: {n}" for n in notes_b]
                                             + cache.keep_maps_within([report.a, report.b], budget))
        st.session_state.comparison = report  # last: the page draws it with this run's notes
    except Exception as err:  # noqa: BLE001  every error becomes a message on the page
        errors.show(err)
    finally:
        bar.empty()


def summary_ui(report, notes) -> None:
    for note in notes:  # what loading inferred, borrowed or ignored (an architecture read from the weights)
        st.info(for_markdown(note))
    cols = st.columns(3)
    cols[0].metric("Heads changed", f"{len(report.changed)} / {len(report.heads)}")
    cols[1].metric("Findings appeared", len(report.appeared))
    cols[2].metric("Findings disappeared", len(report.disappeared))
    if report.changed:
        st.markdown(for_markdown(first_changed(report)))  # a count of knock-on changes: where they start
    for title, findings in (("Appeared in B", report.appeared), ("Disappeared from A", report.disappeared)):
        for f in findings:
            st.markdown(f"**{title}** · {severity_title(f)}: {f.title} (`{f.code}`)")
            st.text(f.body)  # plain text: messages name heads and tokens
            if findings is report.appeared and f.suggestion:
                st.markdown(f"**Suggestion:** {for_markdown(f.suggestion)}")
    for models, f in report.notes:  # short probes cap every finding above at info: said, not left to guess
        st.info(for_markdown(f"Probes ({models}): {f.title}: {f.body}"))


def grid_ui(report, part) -> tuple[int, int]:
    st.subheader("JS distance per head")
    grid, s = report.distance_grid(part), st.session_state
    s.cmp_layer = min(s.get("cmp_layer", 0), len(grid) - 1)
    s.cmp_head = min(s.get("cmp_head", 0), len(grid[0]) - 1)
    st.markdown("Click a head in the grid, or pick it below, to open its maps.")  # not a caption's 3.9:1 grey
    picking.head_chart(compare_plots.distance_grid_figure(grid, (s.cmp_layer, s.cmp_head)), "cmp_grid",
                       ("cmp_layer", "cmp_head"), "Distance grid: the JS distance between A's and B's attention of "
                       "every head, by layer (rows) and head (columns), its number in each cell; the table below "
                       "lists the heads that changed", "below", compare_plots.grid_min_width(len(grid[0])))
    cols = st.columns(2)  # the keyboard's way to a head: the grid's points take a mouse
    layer = cols[0].selectbox("Layer", range(len(grid)), key="cmp_layer", persist_state=KEEP)
    head = cols[1].selectbox("Head", range(len(grid[0])), key="cmp_head", persist_state=KEEP)
    rows = [{"head": f"L{h.layer}H{h.head}", "distance": h.js_distance, "why": ", ".join(h.reasons),
             "pattern": f"{pattern_name(h.before)} → {pattern_name(h.after)}", "Δ entropy": h.entropy_delta,
             "Δ sink": h.sink_delta,
             "roles": f"{', '.join(h.before['roles']) or '–'} → {', '.join(h.after['roles']) or '–'}"}
            for h in report.changed if h.part == part]
    if rows:
        st.dataframe(pd.DataFrame(rows), hide_index=True, placeholder="n/a")  # a head whose map is not finite
    return layer, head


NOT_FINITE_MAP = ("No map of {title}: this head's attention holds NaN or infinite weights there (a weight or "
                  "activation overflowed), so there is nothing to draw.")


def maps_ui(report, part, layer, head) -> None:
    st.subheader(f"Layer {layer}, head {head}")
    if not report.a.samples:
        st.info("The probes were too long to keep their maps in memory, so they were streamed: distances are exact, "
                "but no maps were kept to draw." if report.a.model.get("streamed") else
                "No maps to draw: they were larger than this server keeps for one page; the distances cover every "
                "probe.")
        return
    probes = [p["text"] for p in report.a.probes] or [f"random ids {i}" for i in range(len(report.a.samples))]
    i = st.selectbox("Probe", range(len(report.a.samples)), format_func=lambda i: visible(probes[i][:80], spaces=False),
                     key="cmp_probe", persist_state=KEEP)
    sa, sb = report.a.samples[i].part(part), report.b.samples[i].part(part)
    map_a, map_b = sa.attentions[layer, head], sb.attentions[layer, head]  # (q, k) each
    # one map per tab, at the page's width: three columns left a 190-token map 64 px wide at 1280 px
    maps = (("A", map_a, False), ("B", map_b, False), ("B − A", map_b - map_a, True))
    for tab, (title, weights, diff) in zip(st.tabs([title for title, _, _ in maps]), maps):
        if not bool(weights.isfinite().all()):  # plotly drew a blank white box, axes and all gone
            tab.info(NOT_FINITE_MAP.format(title=title))
            continue
        tab.plotly_chart(compare_plots.map_figure(weights, sa.tokens, sa.keys, title, diff), key=f"cmp_map_{title}",
                         alt=f"{title}: attention map of layer {layer}, head {head}, queries (rows) by keys (columns)")


def _sources_key(source_a, source_b) -> str:
    return f"{sources.source_key(source_a)} | {sources.source_key(source_b)}"


def downloads_ui(report) -> None:
    """The report in three formats, named after both models (the shown names: never a server path)."""
    stem = file_stem(report.a.model["name"], "vs", report.b.model["name"])
    cols = st.columns(3)
    for col, (label, data, mime, ext) in zip(cols, (("JSON", report.to_json(), "application/json", "json"),
                                                  ("Markdown", report.to_markdown(), "text/markdown", "md"),
                                                  ("HTML", report.to_html(), "text/html", "html"))):
        col.download_button(f"Comparison ({label})", data, f"attnscope-compare_{stem}.{ext}", mime,
                            key=f"cmp_dl_{ext}")


st.title("Compare two models")
st.caption("Two checkpoints of one model (same vocabulary), e.g. before and after fine-tuning: which heads changed?")
columns = st.columns(2)
with columns[0]:
    source_a = sources.source_ui("cmp_a", "Model A (before)")
with columns[1]:
    source_b = sources.source_ui("cmp_b", "Model B (after)")
texts = sources.probes_ui("cmp_probes")
n_heads = st.number_input("Heads per layer (only for bare weights files without a config)", 0, 256,
                          key="cmp_heads", persist_state=KEEP)
clicked = st.button("Compare", type="primary", key="cmp_run")
# what a run draws (its bar, an error) goes in a slot every run makes: drawn in the page's flow, it moved what
# follows down one place on the run's page only, and the next rerun rebuilt the Layer and Head boxes (a keyboard
# user's focus went to the top of the page)
with st.empty().container():
    if clicked:
        problem = ("Choose both models first." if source_a is None or source_b is None
                   else sources.probes_problem(texts))
        if problem:
            st.session_state.pop("comparison", None)  # an earlier result must not pass for this run's
            st.error(problem, icon="⚠️")
        else:
            run(source_a, source_b, texts, int(n_heads) or None)
comparison = st.session_state.get("comparison")
if comparison is not None:
    sources.stale_note_ui(st.session_state.get("comparison_source"), _sources_key(source_a, source_b), "Compare")
    try:
        summary_ui(comparison, st.session_state.get("comparison_notes", []))
        parts = list(dict.fromkeys(h.part for h in comparison.heads))
        part = (st.radio("Attention", parts, key="cmp_part", persist_state=KEEP, horizontal=True) if len(parts) > 1
                else parts[0])
        maps_ui(comparison, part, *grid_ui(comparison, part))
        downloads_ui(comparison)
    except Exception as err:  # noqa: BLE001
        errors.show(err)
