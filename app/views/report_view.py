"""The Diagnose page's results: summary, pattern counts, findings, head explorer, report downloads."""

import uuid
import weakref

import streamlit as st

from app import errors
from app.views import head_detail, picking, plots
from app.names import file_stem
from app.plain import for_markdown
from app.kept import KEEP
from core.extraction.tokens import visible
from diagnostics.findings import head_names
from diagnostics.reports.markdown_report import causal_text, shape_text
from diagnostics.texts import BORDERLINE_MARK, PATTERN_TEXTS, borderline_note

SEVERITY_BADGE = {"error": ":red-badge[:material/error: error]", "warning": ":orange-badge[:material/warning: warning]",
                  "info": ":blue-badge[:material/info: info]"}


def report_ui(report, name: str = "", notes: list[str] = ()) -> None:
    """Everything a ``diagnostics.Report`` holds, for the part the user picks."""
    summary_ui(report, name, list(notes))
    parts = report.parts  # none when nothing was probed (an encoder-decoder without a tokenizer)
    part = (st.radio("Part", parts, key="diag_part", persist_state=KEEP, horizontal=True) if len(parts) > 1
            else next(iter(parts), None))
    if part is not None:
        pattern_counts_ui(report, part)
    findings_ui(report)
    explorer_ui(report, part)
    downloads_ui(report, name)


def summary_ui(report, name: str, notes: list[str]) -> None:
    model = report.model
    st.subheader(f"Report: {for_markdown(name or model.get('name', 'model'))}")
    st.caption(f"architecture: {for_markdown(model['architecture'])}, layers × heads: {shape_text(model)}, "
               f"parameters: {model['parameters']:,}, causal: {causal_text(model)}")
    for note in notes:
        st.info(for_markdown(note))


def pattern_counts_ui(report, part: str) -> None:
    """Heads per pattern, and captions for the heads without one and the borderline ones."""
    labels = [label for row in report.pattern_grid(part) for label in row]
    for col, (label, text) in zip(st.columns(len(PATTERN_TEXTS)), PATTERN_TEXTS.items()):
        col.metric(text.title, labels.count(label))
    unlabelled = labels.count(None)
    if unlabelled:
        st.caption(f"{unlabelled} of {len(labels)} heads have no pattern: their attention is NaN or infinite "
                   "(see the findings).")
    borderline = len(report.borderline_heads(part))
    if borderline:
        where = f"marked {BORDERLINE_MARK} in the pattern map" if report.samples else "the pattern map's hover says so"
        st.caption(f"{borderline} of {len(labels)} heads are borderline: the probe texts disagree on their pattern "
                   f"or roles ({where}; Guide → Borderline heads).")


def findings_ui(report) -> None:
    st.subheader("Findings")
    if not report.findings:
        st.success("No findings: every check passed.")
    for i, f in enumerate(report.findings):  # already most severe first
        with st.container(border=True, key=f"finding_{i}"):
            st.markdown(f"{SEVERITY_BADGE.get(f.severity, f.severity)} **{f.title}** — {for_markdown(f.body)}")
            st.markdown(f"**Suggestion:** {for_markdown(f.suggestion)}")
            if f.heads:  # the message names the first few; this, folded, every one
                with st.expander(f"All {len(f.heads)} heads"):
                    st.text(head_names(f.heads, f.part, limit=len(f.heads)))


def report_key(report, part: str, sample: int = 0) -> str:
    """Cache key of one report's map. The caches are shared by every session, so the key is a random id given
    to the report object once (``id(report)`` alone is reused once a report is freed: another user's maps)."""
    return f"report/{_report_id(report)}/{part}/{sample}"


_REPORT_IDS = {}  # id(report) -> (weak reference to it, its random id); an entry goes with its report


def _report_id(report) -> str:
    entry = _REPORT_IDS.get(id(report))
    if entry is None or entry[0]() is not report:
        key = id(report)
        entry = (weakref.ref(report, lambda _: _REPORT_IDS.pop(key, None)), uuid.uuid4().hex)
        _REPORT_IDS[key] = entry
    return entry[1]


@st.cache_data(max_entries=16, show_spinner=False)
def _thumbnails(key: str, _attentions, _labels) -> bytes:
    return plots.thumbnail_sheet(_attentions, _labels)


def pattern_map_ui(report, part: str, heads) -> None:
    """The same thumbnails as Inspect's overview (on the first probe), or coloured squares without maps."""
    shape = (len(heads), len(heads[0]))
    heads = [[h if h.pattern is not None else None for h in row] for row in heads]  # None: no label (NaN maps)
    min_width = None  # the pattern map writes no text in its cells
    if report.samples:
        sample = report.samples[0].part(part)
        labels = [[plots.pattern_label(h) for h in row] for row in heads]
        sheet = _thumbnails(report_key(report, part), sample.attentions, labels)
        figure = plots.overview_figure(sheet, heads, shape)  # a head switch reruns only the explorer
        min_width = plots.overview_min_width(shape[1])
        st.caption("Every head on the first probe text, framed in its pattern's colour (over all probes). "
                   "Click a head to open it below.")
    else:
        figure = plots.pattern_map_figure(heads)
        st.caption("Click a head in the pattern map to open it below.")
    picking.head_chart(figure, "pattern_map", ("diag_layer", "diag_head"), "Pattern map: every head's pattern, by "
                       "layer (rows) and head (columns); the findings above list the heads they name", "below",
                       min_width, width="content")


def explorer_ui(report, part: str | None) -> None:
    st.subheader("Head explorer")
    if part is None:
        st.info(_no_maps_text(report))
        return
    heads = [[report.head(l, h, part) for h in range(len(row))] for l, row in enumerate(report.pattern_grid(part))]
    s = st.session_state
    s.diag_layer = min(s.get("diag_layer", 0), len(heads) - 1)
    s.diag_head = min(s.get("diag_head", 0), len(heads[0]) - 1)
    pattern_map_ui(report, part, heads)
    head_ui(report, part, heads)


@st.fragment
@errors.caught
def head_ui(report, part: str, heads) -> None:
    """One head (or layer view) of one probe; a change here reruns only this."""
    cols = st.columns(3)
    layer = cols[0].selectbox("Layer", range(len(heads)), key="diag_layer", persist_state=KEEP)
    head = cols[1].selectbox("Head", range(len(heads[0])), key="diag_head", persist_state=KEEP)
    if not report.samples:  # what the report knows of the head needs no map
        st.subheader(head_detail.heading("head", layer, head, len(heads[0]), part))
        _head_summary_ui(heads[layer][head], [])
        st.info(_no_maps_text(report))
        return
    texts = [p.get("text", "") for p in report.probes] or [f"sample {i}" for i in range(len(report.samples))]
    sample = cols[2].selectbox("Probe text", range(len(report.samples)),
                               format_func=lambda i: visible(texts[i][:60], spaces=False), key="diag_sample",
                               persist_state=KEEP)
    result = report.samples[sample].part(part)
    options = head_detail.options_ui("diag_", result)
    model = report.model.get("name", "model")
    view = head_detail.build_view(report_key(report, part, sample), result, layer, head, options, model)
    view.probe = f"probe {sample + 1}"  # its exports are not another probe's, nor Inspect's of the same head
    st.subheader(view.heading)
    if view.mode == "head":
        _head_summary_ui(heads[layer][head], list(result.keys))
        st.caption("Pattern and metrics are over all probe texts; the heatmap shows the chosen one.")
    head_detail.heatmap_ui("diag_", view, options["log_scale"])
    info = head_detail.export_info(view, layer, head, heads[layer][head].metrics, heads[layer][head])
    info["probe"] = {"index": sample, "text": texts[sample]}  # the map is this probe's
    if view.mode == "head":
        info["metrics_over_all_probe_texts"] = True
    head_detail.exports_ui("diag_", view, info, options["log_scale"])


def _head_summary_ui(head, keys: list[str]) -> None:
    """A head's pattern, roles, borderline note and metrics, over all probe texts (``keys``: a map's, or none)."""
    head_detail.pattern_ui(head)
    if head.borderline:
        st.caption(borderline_note(head.metrics))
    head_detail.metrics_ui(head.metrics, keys)


def _no_maps_text(report) -> str:
    if report.model.get("streamed"):
        return ("No attention maps to show: the probes were too long to keep their maps in memory, so they were "
                "streamed and only their statistics kept.")
    if report.probes or report.heads:  # probes ran (on text, or on random ids without a tokenizer), whole maps: the
        # page kept none (app.server.cache.report_maps_bytes)
        return ("No attention maps to show: they were larger than this server keeps for one report; the labels "
                "and findings above cover every probe.")
    return "No attention maps to show: the model had no tokenizer, so only its weights were checked."


def downloads_ui(report, name: str) -> None:
    name = file_stem(name or report.model.get("name", "model"))
    files = [("Report (JSON)", "json", "application/json", report.to_json),
             ("Report (Markdown)", "md", "text/markdown", report.to_markdown),
             ("Report (HTML)", "html", "text/html", report.to_html)]
    for col, (label, ext, mime, make) in zip(st.columns(len(files)), files):
        col.download_button(label, make, file_name=f"attnscope-{name}.{ext}", mime=mime, key=f"diag_report_{ext}",
                            on_click="ignore")
