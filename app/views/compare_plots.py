"""Plotly figures of the Compare and Timeline pages: a distance grid, a map difference, metrics over steps.

Token and head names are HTML-escaped before they become labels (plotly renders
a subset of HTML in them); big maps are block-max pooled as in ``plots``.
"""

from __future__ import annotations

import numpy as np
import plotly.graph_objects as go
from plotly.colors import get_colorscale, sample_colorscale

from app.plain import for_plotly

from core.views import pool_map, pool_signed
from diagnostics.reports.compare_report import number_text
from diagnostics.reports.contrast import text_on
from app.views.plots import MAX_CELLS, axis_labels, slant_room, title_lines

GRID_COLOURS = get_colorscale("Reds")
NO_DISTANCE = "rgb(217, 217, 217)"  # a diverged head's cell, in a light and a dark theme alike
GRID_MIN_CELL_PX = 44  # the narrowest grid cell whose number stays apart from its neighbours


def cell_colour(value: float, top: float) -> str:
    """The colour of a distance grid's cell of ``value`` (``GRID_COLOURS`` from 0 to ``top``; ``NO_DISTANCE`` for
    NaN)."""
    if value != value:
        return NO_DISTANCE
    return sample_colorscale(GRID_COLOURS, [min(max(value / top, 0.0), 1.0)])[0]


def _no_distance_cells(z) -> list:
    """A grey heatmap under the cells with no distance (a diverged head), or none: plotly leaves a NaN cell
    unpainted, and its "n/a" in black was unreadable on a dark theme's background."""
    if not np.isnan(z).any():
        return []
    grey = np.where(np.isnan(z), 0.0, np.nan)
    return [go.Heatmap(z=grey, x=list(range(z.shape[1])), y=list(range(z.shape[0])), showscale=False,
                       colorscale=[[0, NO_DISTANCE], [1, NO_DISTANCE]], hoverinfo="skip")]


def grid_min_width(n_heads: int) -> int:
    """The grid's narrowest width (px) before its cells' numbers ("0.123", 31 px at 12 px) run into each other."""
    return GRID_MIN_CELL_PX * n_heads + 140  # 140: the margins and the colour bar


def distance_grid_figure(grid, selected=None, ceiling: float = 0.5) -> go.Figure:
    """Layers × heads coloured by JS distance (``grid`` ``[layers][heads]``); a click selects a head."""
    z = np.asarray(grid, dtype=np.float64)  # float32 labels printed as 0.29899999499320984
    n_layers, n_heads = z.shape
    top = max(ceiling, float(np.nanmax(z, initial=0.0)))
    fig = go.Figure(_no_distance_cells(z) + [go.Heatmap(
        z=z, x=list(range(n_heads)), y=list(range(n_layers)), zmin=0, zmax=top, colorscale=GRID_COLOURS,
        colorbar=dict(title="JS"), hoverinfo="skip")])
    # Streamlit selects no heatmap cell (streamlit#8760): one invisible marker per cell takes the click and the
    # hover, and prints the cell's number in black or white, whichever reads on its red
    cells = [(l, h) for l in range(n_layers) for h in range(n_heads)]
    fig.add_trace(go.Scatter(
        x=[h for _, h in cells], y=[l for l, _ in cells], customdata=cells, mode="markers+text", showlegend=False,
        marker=dict(symbol="square", size=28, color="rgba(0,0,0,0.01)"),
        text=[number_text(z[l, h]) for l, h in cells], textposition="middle center",
        textfont=dict(size=12, color=[text_on(cell_colour(z[l, h], top)) for l, h in cells]),
        hovertext=[f"layer {l}, head {h}<br>JS distance {number_text(z[l, h])}" for l, h in cells], hoverinfo="text"))
    if selected is not None:
        fig.add_shape(type="rect", x0=selected[1] - 0.5, x1=selected[1] + 0.5, y0=selected[0] - 0.5,
                      y1=selected[0] + 0.5, line=dict(color="#1f77b4", width=3))
    fig.update_xaxes(title="head", dtick=1, range=[-0.5, n_heads - 0.5])  # the markers had widened it to -1
    fig.update_yaxes(title="layer", dtick=1, autorange="reversed")
    # the markers are smaller than the cells of a wide grid: the nearest one answers anywhere (hover and click)
    fig.update_layout(height=32 * n_layers + 140, margin=dict(l=10, r=10, t=30, b=10), hoverdistance=-1)
    return fig


def map_figure(weights, queries, keys, title: str, difference: bool = False) -> go.Figure:
    """One ``[q, k]`` map (or a difference B − A, in a diverging scale), queries down, keys across."""
    if difference:
        pooled, bq, bk = pool_signed(weights, MAX_CELLS)
        z = pooled.numpy()
        top = float(np.abs(z).max()) or 1.0
        trace = dict(zmin=-top, zmax=top, colorscale="RdBu_r")
    else:
        pooled, bq, bk = pool_map(weights, MAX_CELLS)
        z, trace = pooled.numpy(), dict(zmin=0, colorscale="Viridis")
    value = "B − A %{z:+.4f}" if difference else f"{for_plotly(title)} %{{z:.4f}}"
    x, y = (axis_labels([str(t) for t in tokens], block, range(len(tokens)))
            for tokens, block in ((keys, bk), (queries, bq)))
    fig = go.Figure(go.Heatmap(z=z.astype(np.float32), x=x, y=y, **trace,
                               hovertemplate=f"query %{{y}}<br>key %{{x}}<br>{value}<extra></extra>"))
    fig.update_xaxes(type="category", tickangle=-60)
    fig.update_yaxes(type="category", autorange="reversed")
    text, lines = title_lines(title)
    fig.update_layout(title=text, height=min(700, 200 + 12 * len(z)) + 20 * (lines - 1) + slant_room(x),
                      margin=dict(l=10, r=10, t=20 + 20 * lines, b=10))
    return fig


def steps_heatmap_figure(values, steps, title: str) -> go.Figure:
    """A metric ``[steps, layers, heads]`` as one heatmap: a row per head (L0H0, L0H1, ...), a column per step."""
    n_steps, n_layers, n_heads = values.shape
    z = values.reshape(n_steps, n_layers * n_heads).T  # (L*H, S)
    names = [f"L{l}H{h}" for l in range(n_layers) for h in range(n_heads)]
    fig = go.Figure(go.Heatmap(z=z.astype(np.float32), x=[str(s) for s in steps], y=names, zmin=0, zmax=1,
                               colorscale="Viridis", hovertemplate="step %{x}<br>%{y}: %{z:.3f}<extra></extra>"))
    fig.update_xaxes(title="step", type="category")
    fig.update_yaxes(autorange="reversed", type="category")
    fig.update_layout(title=for_plotly(title), height=min(800, 160 + 14 * len(names)),
                      margin=dict(l=10, r=10, t=40, b=10))
    return fig


def steps_lines_figure(values, steps, layer: int, title: str, metric: str = "") -> go.Figure:
    """One line per head of ``layer``: a metric ``[steps, layers, heads]`` (at most 1) over the steps, on one axis
    from 0 to 1 whatever the values (runs drawn side by side had axes of 0.85-1 and 0-2 beside each other), lower
    where a sink score is negative (a model with learned sinks: its rows sum to less than 1), never below -1, the
    least an excess mass can be (a hand-edited -1e30 drew every other head flat on 0)."""
    fig = go.Figure([go.Scatter(x=list(steps), y=values[:, layer, h].astype(np.float32), mode="lines+markers",
                                name=f"L{layer}H{h}") for h in range(values.shape[2])])
    fig.update_xaxes(title="step")
    low = min(0.0, float(np.nanmin(values[:, layer]))) if values[:, layer].size else 0.0  # a learned sink: < 0
    low = max(low, -1.0)
    fig.update_yaxes(range=[low - 0.02, 1.02], title=for_plotly(metric))
    fig.update_layout(title=for_plotly(title), height=320, margin=dict(l=10, r=10, t=40, b=10))
    return fig
