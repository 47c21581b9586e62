"""The detail of one map, shared by Inspect and Diagnose: heading, heatmap, metrics, head view, exports.

A map is one of three views of a layer (``MODES``): the selected head, the
average of the layer's heads, or the attention rollout up to it. Each view has
its own heading and export names; only the selected head has a pattern badge
and metrics. Every array transform comes from ``core.views`` (through the
cached ``app.views.derived``) and every number or word about a head from
``diagnostics``; this module only lays them out.
"""

from __future__ import annotations

from bisect import bisect_left
from dataclasses import dataclass, field

import streamlit as st
import torch

import core
from app.views import derived, exports, plots
from app.views.head_view import frame_height
from app.names import file_stem
from app.plain import for_markdown
from app.kept import KEEP
from core import views
from core.errors import counted
from diagnostics.measure.metrics import SINK_REFERENCE_KEYS
from diagnostics.texts import PATTERN_TEXTS, ROLE_TEXTS

MODES = {"head": "Selected head", "average": "Layer average (all heads)",
         "rollout": "Attention rollout (up to this layer)"}
BADGES = {"diagonal": "blue", "block": "orange", "diffuse": "gray", "sparse": "green", "vertical": "violet"}
ROLLOUT_NOTE = ("Rollout (Abnar & Zuidema 2020): per layer the heads are averaged, the identity is added for the "
                "residual path, rows are renormalised, and the layers are multiplied up to this one.")
HIDDEN_TITLE = " (special tokens hidden, rows renormalised)"  # a map whose weights are no longer the model's
HIDDEN_STEM = "no-special"  # its export names: not to be taken for (or saved over) the full map
AVERAGE_NOTE = "The mean of every head's map in this layer; no single head's pattern or metrics apply to it."
UNDRAWN_SHOWN = 12  # characters the export caption lists


@dataclass
class MapView:
    weights: torch.Tensor  # (q, k) as shown
    queries: list[str]
    keys: list[str]
    mode: str  # a key of MODES
    heading: str  # what the map shows, e.g. "Layer 2, head 5" or "Cross-attention, layer 2, head 5"
    model: str  # the model's display name (never a server path)
    notes: list[str] = field(default_factory=list)
    part: str = "self"  # AttentionResult.kind: cross maps zoom queries and keys apart
    # each shown token's position in the input (hidden special tokens leave gaps), and the input's length
    query_positions: list[int] | None = None
    key_positions: list[int] | None = None
    lengths: tuple[int, int] | None = None  # (queries, keys) of the whole input
    hidden: list[str] = field(default_factory=list)  # special tokens hidden from the map, its rows renormalised
    probe: str = ""  # which of a diagnosis's texts the map is of ("probe 2"), in its title and export names

    def __post_init__(self):
        self.query_positions = self.query_positions or list(range(len(self.queries)))
        self.key_positions = self.key_positions or list(range(len(self.keys)))
        self.lengths = self.lengths or (self.query_positions[-1] + 1, self.key_positions[-1] + 1)

    @property
    def title(self) -> str:
        probe = f" ({self.probe})" if self.probe else ""
        return f"{self.model}: {self.heading}{probe}" + (HIDDEN_TITLE if self.hidden else "")

    @property
    def file_stem(self) -> str:
        return file_stem(self.model, self.heading, self.probe, HIDDEN_STEM if self.hidden else "")


PARTS = {"encoder": "Encoder", "decoder": "Decoder", "cross": "Cross-attention"}


def heading(mode: str, layer: int, head: int, n_heads: int, part: str = "self") -> str:
    """The heading a view shows above its map (and the base of its export names); an encoder-decoder's part first."""
    if mode == "average":
        text = f"Layer {layer}, average of {n_heads} heads"
    elif mode == "rollout":
        text = f"Attention rollout through layer {layer}"
    else:
        text = f"Layer {layer}, head {head}"
    return f"{PARTS[part]}, {text[0].lower()}{text[1:]}" if part in PARTS else text


def view_title(model: str, part: str, view: str) -> str:
    """The title of a saved view: its model, the view and, of an encoder-decoder, which part it shows."""
    return f"{model}: {view}" + (f" ({PARTS[part].lower()})" if part in PARTS else "")


def options_ui(prefix: str, result: core.AttentionResult, columns=None) -> dict:
    """Mode, special tokens and colour scale for the heatmap (in ``columns`` when given: one for each)."""
    cols = columns or st.columns([2, 1, 1])
    # rollout multiplies self-attention maps; a cross map is square whenever the decoder text is the encoder's
    rollout_ok = result.kind != "cross" and result.attentions.shape[-1] == result.attentions.shape[-2]
    modes = [m for m in MODES if m != "rollout" or rollout_ok]
    mode = cols[0].radio("Show", modes, format_func=MODES.get, key=f"{prefix}mode", persist_state=KEEP, horizontal=True)
    hide = cols[1].checkbox("Hide special tokens", key=f"{prefix}hide_special", persist_state=KEEP)
    log = cols[2].checkbox("Log colour scale", key=f"{prefix}log_scale", persist_state=KEEP)
    return {"mode": mode, "hide_special": hide, "log_scale": log}


def build_view(result_id: str, result: core.AttentionResult, layer: int, head: int, options: dict,
               model: str) -> MapView:
    """The map the options ask for, with the notes the page must state."""
    mode = options["mode"]
    weights, (queries, kept_q), (keys, kept_k), hidden = derived.view_map(result_id, mode, layer, head,
                                                                         options["hide_special"], result)
    notes = {"average": [AVERAGE_NOTE], "rollout": [ROLLOUT_NOTE]}.get(mode, [])
    if options["hide_special"]:
        if hidden:
            shown = ", ".join(for_markdown(t) for t in hidden)  # an st.info note is markdown
            notes.append(f"Special tokens hidden ({shown}); each row is renormalised to sum to 1 "
                         "over the remaining keys.")
        else:
            notes.append("This input has no special tokens; nothing was hidden.")
    return MapView(weights, queries, keys, mode, heading(mode, layer, head, result.n_heads, result.kind), model, notes,
                   result.kind, kept_q, kept_k, (len(result.tokens), len(result.keys)), hidden)


def heatmap_ui(prefix: str, view: MapView, log_scale: bool) -> None:
    for note in view.notes:
        st.info(note)
    weights, (q0, q1), (k0, k1) = view.weights, (0, len(view.queries)), (0, len(view.keys))
    if max(weights.shape) > plots.MAX_CELLS:  # zoom windows are input positions: hiding tokens keeps them
        cross = view.part == "cross"  # queries are decoder tokens, keys encoder tokens: each axis its own window
        # the labels say what is cut: "query tokens" zoomed the keys of self-attention too (a causal head's earlier
        # keys, its sink among them, left the rows), and the end is the first token not shown
        window = _window("Zoom to query tokens [from, to)" if cross else "Zoom to tokens [from, to), queries and keys",
                         view.lengths[0], f"{prefix}window")
        q0, q1 = _shown_between(view.query_positions, *window)
        if cross:
            window = _window("Zoom to key tokens [from, to)", view.lengths[1], f"{prefix}key_window")
        k0, k1 = _shown_between(view.key_positions, *window)  # self-attention: the same tokens on both axes
        weights = weights[q0:q1, k0:k1]  # (q', k')
        bq, bk = views.pool_factor(q1 - q0, plots.MAX_CELLS), views.pool_factor(k1 - k0, plots.MAX_CELLS)
        if bq * bk > 1:
            st.caption(f"{q1 - q0} × {k1 - k0} tokens: each cell shows the largest weight of a {bq}×{bk} block. "
                       "Narrow the zoom window for full detail; the CSV, NPZ and JSON exports hold every weight.")
        elif tuple(weights.shape) != tuple(view.weights.shape):  # the exports are not what is shown
            st.caption(f"Zoomed to {q1 - q0} × {k1 - k0} of {len(view.queries)} × {len(view.keys)} tokens; "
                       "the exports hold the whole map.")
    figure = plots.heatmap_figure(weights, view.queries[q0:q1], view.keys[k0:k1], log_scale, view.title,
                                  (view.query_positions[q0:q1], view.key_positions[k0:k1]))
    st.plotly_chart(figure, key=f"{prefix}heatmap", alt=f"{view.title}: attention heatmap, queries (rows) by keys "
                                                         "(columns); the CSV and JSON exports below hold every weight")


def _window(label: str, n: int, key: str) -> tuple[int, int]:
    """A zoom slider's ``(start, end)`` over ``n`` input positions."""
    return st.slider(label, 0, n, (0, n), key=key)


def _shown_between(positions: list[int], start: int, end: int) -> tuple[int, int]:
    """The slice of the shown tokens whose positions lie in ``[start, end)``; never empty (the nearest token)."""
    i, j = bisect_left(positions, start), bisect_left(positions, end)
    i = min(i, len(positions) - 1)
    return i, max(j, i + 1)


def pattern_ui(pattern) -> None:
    """Label, confidence and advice of a ``HeadPattern`` or a report's ``HeadReport``."""
    label = plots.pattern_label(pattern)
    if label not in PATTERN_TEXTS:  # a map with more queries than keys is never measured (derived.unmeasurable)
        st.caption("No pattern: this head's attention is NaN or infinite (a weight or activation overflowed).")
        return
    text = PATTERN_TEXTS[label]
    offset = f", offset {pattern.offset:+d}" if pattern.offset is not None else ""
    badge = f":{BADGES.get(label, 'gray')}[{text.title}]"
    st.markdown(f"**Pattern: {badge}** — confidence {pattern.confidence:.0%}{offset}")
    st.markdown(f"{text.looks_like} {text.reading}\n\n**Suggestion:** {text.action}")
    roles = getattr(pattern, "roles", [])
    if roles:
        st.markdown("**Roles:** " + ", ".join(f"{ROLE_TEXTS[r.role].title} ({r.score:.2f})" for r in roles),
                    help="\n\n".join(f"{ROLE_TEXTS[r.role].title}: {ROLE_TEXTS[r.role].meaning}" for r in roles))


def metrics_ui(m: dict, keys: list[str], per_row: int = 5) -> None:
    """A head's metrics (``HeadMetrics.scalars()`` or a report's averaged ``HeadReport.metrics``), ``per_row`` a row."""
    if not m:
        return
    cols = [col for _ in range(0, 5, per_row) for col in st.columns(per_row)]
    cols[0].metric("Entropy (0–1)", f"{m['entropy']:.2f}",
                   help="Mean row entropy / log(keys): 1 = uniform, 0 = one-hot")
    cols[1].metric("Row max", f"{m['confidence']:.2f}", help="Mean of each row's largest weight (the report's "
                   "`confidence` metric; not the pattern's confidence above)")
    offset = m.get("best_offset")  # None: a head of NaN or infinite weights has none
    cols[2].metric("Best offset mass" if offset is None else f"Offset {offset:+d} mass", f"{m['best_offset_mass']:.2f}",
                   help="Mass on the best diagonal offset (+1 = next token)")
    sink = m.get("sink_token") or (keys[m["sink_key"]] if m.get("sink_key", len(keys)) < len(keys) else "?")
    cols[3].metric("Sink score", f"{m['sink_score']:.2f}",
                   help=f"What the strongest key, “{for_markdown(sink)}”, draws beyond an even spread over the keys "
                        "each query sees (0 = no key stands out; the sink role's score is the first token's or special "
                        f"tokens' share, as it would be on a {SINK_REFERENCE_KEYS}-token text)")
    cols[4].metric("Mean distance", f"{m['mean_distance']:.1f}", help="Expected |query − key| in tokens")


def head_view_ui(prefix: str, result_id: str, result: core.AttentionResult, layer: int, head: int,
                 model: str) -> None:
    title = view_title(model, result.kind, f"head view, layer {layer}")
    page = derived.head_view(result_id, layer, head, result, title)  # self-contained: its script and data inline
    st.iframe(page, height=frame_height(result.tokens, result.keys), alt=title)
    part = [] if result.kind == "self" else [result.kind]
    st.download_button("Save this view (standalone HTML)", page, mime="text/html", key=f"{prefix}hv_export",
                       file_name=f"{file_stem(model, *part, 'head-view', f'layer-{layer}', f'head-{head}')}.html",
                       on_click="ignore")


def export_info(view: MapView, layer: int, head: int, metrics: dict, pattern) -> dict:
    """What the JSON export says about its map: the head, its metrics and pattern only for a head's own map, and
    whether special tokens were hidden (the weights then differ from the model's: each row renormalised)."""
    info = {"model": view.model, "part": view.part, "view": view.mode, "heading": view.heading, "layer": layer}
    if view.hidden:
        info.update(special_tokens_hidden=True, rows_renormalised=True, hidden_tokens=list(view.hidden))
    if view.mode == "head":
        info.update(head=head, metrics=metrics,
                    pattern=None if pattern is None else {"label": plots.pattern_label(pattern),
                                                          "confidence": pattern.confidence})
        if view.hidden:  # measured on the model's own map, before any token was hidden
            info["metrics_include_special_tokens"] = True
    return info


def exports_ui(prefix: str, view: MapView, info: dict, log_scale: bool = False) -> None:
    """Download buttons named after the view; each file is made only when its button is clicked. The images use
    the page's colour scale (``log_scale``)."""
    w, q, k, name = view.weights, view.queries, view.keys, view.file_stem
    at = (view.query_positions, view.key_positions)  # positions in the input: hidden tokens leave gaps
    files = [("PNG", "png", "image/png", lambda: exports.image_bytes(w, q, k, view.title, "png", at, log_scale)),
             ("SVG", "svg", "image/svg+xml", lambda: exports.image_bytes(w, q, k, view.title, "svg", at, log_scale)),
             ("CSV", "csv", "text/csv", lambda: exports.csv_text(w, q, k, at)),
             ("NPZ", "npz", "application/octet-stream", lambda: exports.npz_bytes(w, q, k, at)),
             ("JSON", "json", "application/json", lambda: exports.json_text(w, q, k, info, at))]
    for col, (label, ext, mime, make) in zip(st.columns(len(files)), files):
        col.download_button(label, make, file_name=f"{name}.{ext}", mime=mime, key=f"{prefix}export_{ext}",
                            on_click="ignore")
    missing = exports.undrawn_characters(q, k, view.title, at)
    if missing:
        shown = " ".join(missing[:UNDRAWN_SHOWN]) + (" …" if len(missing) > UNDRAWN_SHOWN else "")
        st.caption(for_markdown(
            f"The PNG and SVG draw {counted(len(missing), 'character')} as boxes ({shown}): no font on this server "
            "has them. The CSV, NPZ and JSON hold the tokens as they are; the server's operator can install Noto "
            "fonts (Debian: fonts-noto-cjk, fonts-noto-core)."))
