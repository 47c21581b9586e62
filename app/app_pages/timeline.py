"""Timeline: a model's heads over training steps, from monitor logs or a folder of Trainer checkpoints."""

from pathlib import Path

import pandas as pd
import streamlit as st

from app import errors
from app.plain import for_markdown
from app.server import logs, session, sources, uploads
from app.views import compare_plots
from app.kept import KEEP
from core.cancel import stoppable
from core.errors import size_text
from diagnostics import timeline as tl

KINDS = ("Upload monitor logs", "Monitor log paths", "Checkpoints folder")
METRICS = {"entropy": "Entropy (0 = one-hot, 1 = uniform)", "sink_score": "Sink score (excess mass on one key)"}


def inputs_ui():
    """``(kind, value)`` of what to load, or None."""
    kind = st.radio("Source", KINDS, key="tl_kind", persist_state=KEEP, horizontal=True)
    if kind == KINDS[0]:
        files = uploaded_ui()
        return (kind, files) if files else None
    if kind == KINDS[1]:
        text = st.text_area("One .jsonl path per line", key="tl_paths", persist_state=KEEP,
                            placeholder="/runs/baseline/attention.jsonl")
        paths = [line.strip() for line in text.splitlines() if line.strip()]
        return (kind, paths) if paths else None
    folder = st.text_input("Trainer output folder (holds checkpoint-<step>/ folders)", key="tl_folder",
                           persist_state=KEEP)
    return (kind, folder.strip()) if folder.strip() else None


def uploaded_ui() -> list:
    """The logs uploaded, held by the page until Load or Clear: the uploader's own value went with a visit to
    another page, with no word."""
    s = st.session_state
    round_key = s.setdefault("tl_upload_round", 0)
    limit = sources.upload_limit(tl.MAX_LOG_BYTES)  # the box refuses a bigger log before it is sent
    if limit is None:
        sources.bad_upload_size_ui()
        return []
    files = st.file_uploader("Monitor logs (.jsonl written by diagnostics.monitor.AttentionMonitor); read when you "
                             "press Load, then dropped; a new upload replaces the last", type=["jsonl"],
                             accept_multiple_files=True, key=f"tl_upload_{round_key}", max_upload_size=limit[1])
    st.caption(f"Limits: {size_text(limit[0])} per log, {size_text(tl.MAX_LOG_BYTES)} of logs together.")
    if files:
        drop_uploaded()
        s.tl_uploaded, s.tl_refused = logs.held_within_budget(files)  # [(run name, file)], problems
        uploads.release([f for f in files if not any(f is kept for _, kept in s.tl_uploaded)])
        s.tl_upload_round += 1  # a fresh, empty uploader: the page holds the files
        st.rerun()
    for problem in s.get("tl_refused") or []:  # over the cap: not held
        errors.shown(problem)
    held = s.get("tl_uploaded") or []
    if held and sources.held_ui([name for name, _ in held], sum(f.size for _, f in held), "tl_clear"):
        drop_uploaded()
        st.rerun()
    return held


def drop_uploaded() -> None:
    """Streamlit's copies of the held logs dropped (2 × 300 MB held for the session: +0.6 GB), and what was said of
    the logs refused with them."""
    st.session_state.pop("tl_refused", None)
    uploads.release([f for _, f in st.session_state.pop("tl_uploaded", None) or []])


def load(kind, value) -> tuple[dict, list[str]]:
    """``({run name: Timeline}, problems)``: a log that cannot be read is one problem naming it, and the others
    still load (one empty log among three showed none, and did not say which); checkpoints are diagnosed one by
    one under a progress bar."""
    if kind == KINDS[0]:
        return logs.read_uploaded(value)
    if kind == KINDS[1]:
        return logs.read_paths(value)
    bar = st.progress(0.0, text="Loading checkpoints…")
    try:  # stops between checkpoints and probes once the browser session has ended
        progress = stoppable(lambda fraction, message: bar.progress(min(1.0, fraction), text=message),
                             session.stop_when_gone())

        def waiting(held: int, count: int, limit: int) -> None:  # told while it waits: raises once the tab is gone
            progress(0.0, sources.waiting_text(held, count, limit))
        with sources.run_models.places(1, sources.run_models_limit(), waiting):  # a checkpoint is loaded at a time
            return {Path(value).name or value: tl.from_checkpoints(value, progress=progress)}, []
    finally:
        bar.empty()


@errors.caught  # one run that cannot be drawn is one line: the runs after it had not been drawn either
def run_ui(name, timeline, metric, layer, part) -> None:
    st.subheader(for_markdown(name))  # a file name: plain text
    for note in timeline.notes:
        st.info(for_markdown(note))
    if part in timeline.parts:
        charts_ui(name, timeline, metric, layer, part)
    else:
        st.info(f"This run has no {for_markdown(part)} heads." if part else NO_HEADS)
    findings_ui(name, timeline)


NO_HEADS = ("This log measured no heads (a monitor without a tokenizer on an encoder-decoder checks the weights "
            "only); its findings are below.")


def _kept(name, what, compute):
    """``compute()`` once per loaded run (``name``) and ``what``, until the next Load: every widget change computed
    them all again (a 250 MB log: 2 s a rerun, where a layer switch redraws one line chart)."""
    kept = st.session_state.setdefault("tl_kept", {})
    if (name, what) not in kept:
        kept[(name, what)] = compute()
    return kept[(name, what)]


def charts_ui(name, timeline, metric, layer, part) -> None:
    values = _kept(name, ("metric", metric, part), lambda: timeline.metric(metric, part))  # (steps, layers, heads)
    st.plotly_chart(compare_plots.steps_heatmap_figure(values, timeline.steps, METRICS[metric]),
                    key=f"tl_heat_{name}", alt=f"{METRICS[metric]} of every head (rows) at each training step "
                                               "(columns); the findings table below says when each began")
    if layer < values.shape[1]:
        st.plotly_chart(compare_plots.steps_lines_figure(values, timeline.steps, layer, f"Layer {layer}",
                                                         METRICS[metric]),
                        key=f"tl_lines_{name}", alt=f"{METRICS[metric]} of each head of layer {layer} over the "
                                                    "training steps, one line per head")


def findings_ui(name, timeline) -> None:
    st.markdown("**Findings: first step**")
    findings = _kept(name, "findings", timeline.first_findings)
    columns = ["part"] * (len(timeline.parts) > 1) + ["code", "severity", "first_step", "first_error_step", "last_step",
                                                      "new_heads", "message"]
    st.dataframe(pd.DataFrame(findings)[columns] if findings else pd.DataFrame(), hide_index=True,
                 key=f"tl_findings_{name}")
    changes = _kept(name, "changes", lambda: pd.DataFrame(timeline.pattern_changes()))
    with st.expander(f"Pattern and role changes ({len(changes)})"):
        st.dataframe(changes, hide_index=True, key=f"tl_changes_{name}")


st.title("Training timeline")
st.caption("How entropy, sinks, patterns and findings moved while a model trained. Log with "
           "`diagnostics.monitor.AttentionMonitor` (docs/training.md), or point at a Trainer's checkpoints.")
source = inputs_ui()
if st.button("Load", type="primary", key="tl_run"):
    st.session_state.pop("timelines", None)
    st.session_state.pop("tl_problems", None)
    st.session_state.pop("tl_kept", None)
    if source is None:
        st.error("Upload a log, give a path or a folder first.", icon="⚠️")
    else:
        refused = (st.session_state.get("tl_refused") or []) if source[0] == KINDS[0] else []
        try:
            timelines, problems = load(*source)
            st.session_state.timelines, st.session_state.tl_problems = timelines, refused + problems
        except Exception as err:  # noqa: BLE001  every error becomes a message on the page
            st.session_state.tl_problems = refused + [errors.message(err)]
        if source[0] == KINDS[0]:  # read: dropped, refused ones too, and the page drawn again without them
            drop_uploaded()
            st.rerun()
for problem in st.session_state.get("tl_problems", []):  # the logs that could not be read, while the rest show
    errors.shown(problem)
timelines = st.session_state.get("timelines")
if timelines:
    try:
        parts = list(dict.fromkeys(part for t in timelines.values() for part in t.parts))
        cols = st.columns(3 if len(parts) > 1 else 2)
        metric = cols[0].radio("Metric", list(METRICS), format_func=METRICS.get, key="tl_metric", persist_state=KEEP,
                               horizontal=True)
        part = (cols[2].radio("Part", parts, format_func=for_markdown, key="tl_part", persist_state=KEEP,  # log's names
                              horizontal=True)
                if len(parts) > 1 else (parts or [None])[0])
        layers = max((t.shape(part)[0] for t in timelines.values() if part in t.parts), default=0)
        layer = (cols[1].selectbox("Layer for the lines", range(layers), key="tl_layer", persist_state=KEEP) if layers
                 else 0)
        for column, (name, timeline) in zip(st.columns(len(timelines)), timelines.items()):
            with column:
                run_ui(name, timeline, metric, layer, part)
    except Exception as err:  # noqa: BLE001
        errors.show(err)
