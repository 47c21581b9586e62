"""Plotly figures and PNG thumbnails of attention maps; the browser gets only what it can draw.

Big maps are block-max pooled (``core.views.pool_map``) to ``MAX_CELLS`` per
side before they become a figure, and numbers travel as float32 arrays (plotly
encodes numpy arrays as base64), so a 512-token head costs a few hundred KB,
not the 262,144 JSON numbers of the full map. Exports use the full map.
"""

from __future__ import annotations

import base64
import html
import io

import numpy as np
import plotly.graph_objects as go
import torch
from PIL import Image

from app.plain import for_plotly, isolated, short_label
from core.views import pool_map
from diagnostics.texts import BORDERLINE_MARK, PATTERN_TEXTS, role_label, vote_label

MAX_CELLS = 128  # heatmap cells per side sent to the browser; bigger maps are pooled
THUMB_PX = 40  # side of one head's thumbnail, in pixels
TILE_PLOT_PX = 80  # width of one head's cell in the overview figure
TILE_PLOT_H = 92  # its height: the thumbnail (~60 px) and two caption lines, the pattern and the roles
LOG_FLOOR = 1e-4  # weights below this share the bottom colour of the log scale
UNKNOWN_COLOR = "#999999"
HOVER = "query %{{y}}<br>key %{{x}}<br>weight %{{{weight}:.4f}}<extra></extra>"


def label_color(label: str | None) -> str:
    return PATTERN_TEXTS[label].color if label in PATTERN_TEXTS else UNKNOWN_COLOR


def _viridis_lut() -> np.ndarray:
    from matplotlib import colormaps  # imported on first use: it is only needed for pixels

    return (colormaps["viridis"](np.linspace(0, 1, 256))[:, :3] * 255).astype(np.uint8)  # (256, 3)


FRAME_PX = 3  # pattern-coloured frame around each thumbnail
CAPTION_COLOR = "#31333F"  # Streamlit's text colour: 12.5:1 on white
LABEL_PX = 24  # room under each thumbnail for its two-line caption, drawn by plotly
CAPTION_MIN_PX = 60  # the narrowest cell whose captions stay apart: three roles ("next, sink, self") are 53 px wide


def _hex_rgb(color: str) -> tuple[int, int, int]:
    return tuple(int(color[i:i + 2], 16) for i in (1, 3, 5))


def thumbnail_sheet(attentions: torch.Tensor, labels) -> bytes:
    """One PNG holding a ``THUMB_PX`` thumbnail per head, framed in its pattern's colour.

    ``attentions`` is ``[layers, heads, q, k]``; ``labels`` is ``[layers][heads]``
    of pattern names or None. Each map is scaled to its own maximum. One image
    for all heads keeps the figure small and quick to build (a layout image per
    head costs plotly a validation pass each).
    """
    n_layers, n_heads = attentions.shape[:2]
    pooled, _, _ = pool_map(attentions, THUMB_PX)  # (L, H, <=THUMB_PX, <=THUMB_PX)
    peak = pooled.amax(dim=(-2, -1), keepdim=True).clamp(min=1e-12)  # (L, H, 1, 1)
    levels = (pooled / peak * 255).round().to(torch.uint8).numpy()
    rgb = _viridis_lut()[levels]  # (L, H, s, s, 3)
    tile, cell_h = THUMB_PX + 2 * FRAME_PX, THUMB_PX + 2 * FRAME_PX + LABEL_PX
    sheet = Image.new("RGB", (n_heads * tile, n_layers * cell_h), "white")
    for layer in range(n_layers):
        for head in range(n_heads):
            x, y = head * tile, layer * cell_h
            color = label_color(labels[layer][head] if labels else None)
            sheet.paste(Image.new("RGB", (tile, tile), _hex_rgb(color)), (x, y))
            thumb = Image.fromarray(rgb[layer, head]).resize((THUMB_PX, THUMB_PX), Image.NEAREST)
            sheet.paste(thumb, (x + FRAME_PX, y + FRAME_PX))
    buf = io.BytesIO()
    sheet.save(buf, format="PNG")
    return buf.getvalue()


def _data_uri(png: bytes) -> str:
    return "data:image/png;base64," + base64.b64encode(png).decode("ascii")


def pattern_label(pattern) -> str | None:
    """The label of a ``HeadPattern`` (``.label``) or a report's ``HeadReport`` (``.pattern``)."""
    return None if pattern is None else getattr(pattern, "label", None) or getattr(pattern, "pattern", None)


def _pattern_text(pattern) -> str:
    if pattern is None:
        return "no label"
    roles = role_label(getattr(pattern, "roles", []))
    votes = f"; borderline: {vote_label(pattern.metrics)}" if getattr(pattern, "borderline", False) else ""
    return f"{pattern_label(pattern)} {pattern.confidence:.0%}" + (f"; roles: {roles}" if roles else "") + votes


def caption(pattern) -> str:
    """A thumbnail's caption: its pattern ("sparse?" where the probes disagreed on it: borderline), and under it its
    roles' short names ("prev, sink"), as plain text."""
    if pattern is None:
        return ""
    roles = role_label(getattr(pattern, "roles", []), short=True)
    mark = BORDERLINE_MARK if getattr(pattern, "borderline", False) else ""
    return pattern_label(pattern) + mark + (f"<br>{roles}" if roles else "")


def overview_figure(sheet: bytes, patterns, shape: tuple[int, int]) -> go.Figure:
    """The thumbnail sheet under one invisible marker per head: hover names it, a click selects it.

    ``patterns`` is ``[layers][heads]`` of ``HeadPattern`` or None; ``shape`` is
    ``(layers, heads)``. Layer 0 is the top row.
    """
    n_layers, n_heads = shape
    cells = [(layer, head) for layer in range(n_layers) for head in range(n_heads)]
    row = lambda layer: n_layers - 1 - layer  # noqa: E731  layer 0 drawn at the top
    hover = [f"layer {l}, head {h}: {_pattern_text(patterns[l][h] if patterns else None)}" for l, h in cells]
    caption_y = 0.5 - LABEL_PX / (THUMB_PX + 2 * FRAME_PX + LABEL_PX) / 2  # the middle of the caption band
    fig = go.Figure(go.Scatter(
        x=[h for _, h in cells], y=[row(l) - caption_y for l, _ in cells], customdata=cells, mode="markers+text",
        text=[caption(patterns[l][h] if patterns else None) for l, h in cells],
        textfont=dict(size=9, color=CAPTION_COLOR),  # the frame carries the pattern's colour: captions in it were
        # 2.1-3.4:1 on white (WCAG asks 4.5:1)
        marker=dict(symbol="square", size=36, color="rgba(0,0,0,0.01)"), hovertext=hover, hoverinfo="text",
    ))
    fig.update_layout(
        images=[dict(source=_data_uri(sheet), x=-0.5, y=n_layers - 0.5, sizex=n_heads, sizey=n_layers, xref="x",
                     yref="y", sizing="stretch", layer="below")],
        width=TILE_PLOT_PX * n_heads + 50, height=TILE_PLOT_H * n_layers + 50,
        margin=dict(l=40, r=10, t=40, b=10), showlegend=False, plot_bgcolor="white",
        hoverdistance=40, dragmode=False,
    )
    fig.update_xaxes(range=[-0.5, n_heads - 0.5], tickvals=list(range(n_heads)),
                     ticktext=[f"H{h}" for h in range(n_heads)],
                     showgrid=False, zeroline=False, side="top", fixedrange=True)
    fig.update_yaxes(range=[-0.5, n_layers - 0.5], tickvals=[row(l) for l in range(n_layers)],
                     ticktext=[f"L{l}" for l in range(n_layers)], showgrid=False, zeroline=False, fixedrange=True)
    return fig


def overview_min_width(n_heads: int) -> int:
    """The overview's narrowest width (px) before its captions run into each other (``picking.head_chart``)."""
    return CAPTION_MIN_PX * n_heads + 50  # 50: the margins, as in the figure's own width


def axis_labels(tokens: list[str], block: int, positions: list[int]) -> list[str]:
    """Unique category labels (plotly merges equal ones): ``"3 the"`` or ``"8–11 the…"`` when pooled, numbered by
    ``positions``, each token's position in the whole input (a zoom window, hidden special tokens).

    Tokens are escaped: plotly renders tags and entities in labels and hover text; and cut (``short_label``): the
    position keeps two tokens of one beginning apart.
    """
    if block == 1:
        return [f"{p} {isolated(for_plotly(short_label(t)))}" for p, t in zip(positions, tokens)]
    starts = range(0, len(tokens), block)
    return [f"{positions[i]}–{positions[min(i + block, len(tokens)) - 1]} {isolated(_first_of_block(tokens[i]))}"
            if i + 1 < len(tokens) else f"{positions[i]} {isolated(for_plotly(short_label(tokens[i])))}"  # block of 1
            for i in starts]


def _first_of_block(token: str) -> str:
    """A pooled block's first token and "…" for the rest: one "…", not two, when the token's label was cut."""
    label = short_label(token)
    return for_plotly(label) if label != token else for_plotly(token) + "…"


def slant_room(labels: list[str]) -> int:
    """Height in px that x labels slanted at -60° take past a short one's ("12 the", which a map's height leaves
    room for): ~6 px a character. Without it two 20-character labels took the map's rows (7 of 13 labelled)."""
    longest = max((len(html.unescape(label)) for label in labels), default=0)
    return 6 * max(0, longest - 8)


# Characters of a chart title's line: plotly does not wrap titles, and a longer one was cut at the chart's edge
# ("…Layer 1, head 8 (special tok" in a 1,280 px window), the layer and the hidden-tokens note lost.
TITLE_CHARS = 60


def title_lines(title: str) -> tuple[str, int]:
    """``(title for plotly, lines)``: escaped (``for_plotly``) and broken at spaces into lines of at most
    ``TITLE_CHARS`` characters where it can be."""
    lines = []
    for word in str(title).split(" "):
        if lines and len(lines[-1]) + 1 + len(word) <= TITLE_CHARS:
            lines[-1] += " " + word
        else:
            lines.append(word)
    return "<br>".join(for_plotly(line) for line in lines), len(lines)


def heatmap_figure(weights: torch.Tensor, queries: list[str], keys: list[str], log_scale: bool = False,
                   title: str = "", positions: tuple[list[int], list[int]] | None = None) -> go.Figure:
    """Heatmap of one ``[q, k]`` map, queries down, keys across; hover names both tokens and the weight.
    ``positions``: the queries' and keys' positions in the whole input (default 0, 1, …)."""
    pooled, bq, bk = pool_map(weights, MAX_CELLS)
    z = pooled.numpy().astype(np.float32)
    q_at, k_at = positions or (range(len(queries)), range(len(keys)))
    heat = dict(x=axis_labels(keys, bk, list(k_at)), y=axis_labels(queries, bq, list(q_at)), colorscale="Viridis")
    if log_scale:
        ticks = np.arange(np.log10(LOG_FLOOR), 0.5)
        trace = go.Heatmap(z=np.log10(np.maximum(z, LOG_FLOOR)).astype(np.float32), customdata=z, zmin=ticks[0], zmax=0,
                           colorbar=dict(tickvals=ticks, ticktext=[f"≤ {10 ** t:g}" if t == ticks[0] else f"{10 ** t:g}"
                                                                   for t in ticks]),  # the floor holds all below
                           hovertemplate=HOVER.format(weight="customdata"), **heat)
    else:
        trace = go.Heatmap(z=z, zmin=0, hovertemplate=HOVER.format(weight="z"), **heat)
    fig = go.Figure(trace)
    fig.update_xaxes(type="category", title="key", tickangle=-60)
    fig.update_yaxes(type="category", title="query", autorange="reversed")
    side = min(900, 220 + 14 * len(heat["y"]))
    text, lines = title_lines(title)
    fig.update_layout(title=text, height=side + 20 * (lines - 1) + slant_room(heat["x"]),
                      margin=dict(l=10, r=10, t=20 + 20 * lines, b=10))
    return fig


# the pattern map's marker per pattern: told apart by shape too, not by colour alone (diffuse and "no label" are
# both grey; deuteranopia draws vertical and "no label" alike)
PATTERN_SYMBOLS = {"diagonal": "diamond", "block": "square", "diffuse": "circle", "sparse": "star",
                   "vertical": "triangle-down"}


def pattern_map_figure(patterns) -> go.Figure:
    """Layers × heads as coloured marks, one shape per pattern: the Diagnose map when no attention maps were kept
    (streamed probes)."""
    n_layers, n_heads = len(patterns), len(patterns[0])
    size = max(10, min(34, 500 // max(n_heads, n_layers)))  # marker side in px
    fig = go.Figure()
    for label in (*PATTERN_TEXTS, None):  # None: a head of NaN maps has no label, but a square to pick it by
        cells = [(l, h) for l in range(n_layers) for h in range(n_heads) if pattern_label(patterns[l][h]) == label]
        if label is None and not cells:
            continue
        fig.add_trace(go.Scatter(
            x=[h for _, h in cells], y=[l for l, _ in cells], customdata=cells, mode="markers",
            name=label or "no label",
            marker=dict(symbol=PATTERN_SYMBOLS.get(label, "x"), size=size, color=label_color(label)),
            hovertext=[f"layer {l}, head {h}: {_pattern_text(patterns[l][h])}" for l, h in cells], hoverinfo="text",
        ))
    fig.update_xaxes(title="head", range=[-0.6, n_heads - 0.4], dtick=1, fixedrange=True, zeroline=False)
    fig.update_yaxes(title="layer", range=[n_layers - 0.4, -0.6], dtick=1, fixedrange=True, zeroline=False)
    fig.update_layout(height=40 * n_layers + 120, margin=dict(l=10, r=10, t=30, b=10), dragmode=False,
                      legend=dict(orientation="h", y=1.02, yanchor="bottom"), plot_bgcolor="white")
    return fig


def figure_bytes(fig: go.Figure) -> int:
    """Size of the JSON the browser receives for ``fig``."""
    return len(fig.to_json().encode())
