"""Downloads of one attention map at full resolution: PNG, SVG, CSV, NPZ and JSON.

Images are drawn server-side with matplotlib (Agg backend), so export works
offline; plotly's own image export needs kaleido, which downloads Chrome.
"""

from __future__ import annotations

import csv
import io
import textwrap

import numpy as np
import torch

from app.plain import isolated, short_label
from app.views import export_fonts
from app.views.plots import LOG_FLOOR
from core.extraction.tokens import visible
from core.views import pool_map
from diagnostics.reports.exports import strict_json

LABELLED_TOKENS = 64  # above this many tokens an axis labels only every n-th one
# Cells per side of an image: a 14-inch map at 150 dpi has ~2,000 pixels, and past them nearest-neighbour drawing
# kept about one row and column a pixel and skipped the rest (a previous-token line at 4,007 tokens: 55 % drawn;
# a key that took every query's weight: not drawn at all); longer maps are block-max pooled, as on the page
EXPORT_CELLS = 1_500
MIN_SIDE_IN = 4.0  # room for the labels, axis titles, title and colour bar of a map of a few queries or keys
# A title's line, in characters per inch of the image: a one-line title of a short input's map ran past both edges
TITLE_CHARS_PER_INCH = 11


def numbered(tokens: list[str], positions=None) -> list[str]:
    """``"3 the"``: unique labels (a sentence repeats tokens), and none starts with a spreadsheet formula sign.
    ``positions``: each token's position in the input (default 0, 1, …; hidden special tokens leave gaps)."""
    positions = range(len(tokens)) if positions is None else positions
    return [f"{p} {t}" for p, t in zip(positions, tokens)]


def _positions(positions, queries: list[str], keys: list[str]) -> tuple[list[int], list[int]]:
    return positions or (list(range(len(queries))), list(range(len(keys))))


def _mpl_text(text: str) -> str:
    """``$`` escaped (matplotlib reads $…$ as math) and control characters shown (raw, they make the SVG ill-formed
    XML): tokens already are (``prettify_token``), a title holds the model's name."""
    return visible(text).replace("$", r"\$")


def _figure(weights: torch.Tensor, queries: list[str], keys: list[str], title: str, positions=None,
            log_scale: bool = False):
    """The map as the page draws it: colours from 0 to its largest weight (log scale: ``LOG_FLOOR`` to 1), tokens
    numbered by their positions in the input (hidden special tokens leave gaps)."""
    import matplotlib

    matplotlib.use("Agg")
    from matplotlib.colors import LogNorm, Normalize
    from matplotlib.figure import Figure

    q, k = weights.shape
    side = min(14.0, 3.0 + 0.18 * max(q, k))
    height = max(MIN_SIDE_IN, side * q / max(q, k) + 1.0)  # a 3 × 400 cross map cut off its labels and title
    width = max(MIN_SIDE_IN, side * k / max(q, k) + 1.5)  # and a 400 × 3 one its title and colour bar
    fig = Figure(figsize=(width, height))
    ax = fig.add_subplot()
    top = float(np.nan_to_num(weights.numpy()).max(initial=0.0)) or 1.0
    scale = LogNorm(LOG_FLOOR, 1.0) if log_scale else Normalize(0.0, top)  # as on the page
    pooled, bq, bk = pool_map(weights, EXPORT_CELLS)  # (q/bq, k/bk)
    shown = pooled.clamp(min=LOG_FLOOR) if log_scale else pooled
    rows, cols = shown.shape
    image = ax.imshow(shown.numpy(), cmap="viridis", interpolation="nearest", aspect="auto", norm=scale,
                      extent=(-0.5, cols * bk - 0.5, rows * bq - 0.5, -0.5))  # in tokens: each block over its own
    ax.set_xlim(-0.5, k - 0.5)  # a ragged last block ends with the map
    ax.set_ylim(q - 0.5, -0.5)
    if bq * bk > 1:
        title += f" (each cell the largest weight of {bq}×{bk} tokens)"
    bar = fig.colorbar(image, ax=ax, fraction=0.04)
    if log_scale:
        bar.set_label(f"weight (log; below {LOG_FLOOR:g} drawn as {LOG_FLOOR:g})", fontsize=7)
    q_at, k_at = _positions(positions, queries, keys)
    for tokens, at, ticks in ((keys, k_at, ax.set_xticks), (queries, q_at, ax.set_yticks)):
        ticks(*_tick_labels(tokens, at), fontsize=7)
    ax.tick_params(axis="x", labelrotation=90)
    ax.set_xlabel("key")
    ax.set_ylabel("query")
    lines = textwrap.wrap(title, int(width * TITLE_CHARS_PER_INCH))  # before _mpl_text: a break inside its "\$"
    ax.set_title("\n".join(_mpl_text(line) for line in lines), fontsize=9)  # drew a "\" (its line breaks as text)
    fig.tight_layout()
    return fig


def image_bytes(weights: torch.Tensor, queries: list[str], keys: list[str], title: str, fmt: str, positions=None,
                log_scale: bool = False) -> bytes:
    """The heatmap as ``fmt`` ("png" or "svg") bytes; ``positions`` as ``csv_text``'s, ``log_scale`` as the page's."""
    import matplotlib

    buf = io.BytesIO()
    with matplotlib.rc_context({"font.family": list(export_fonts.families())}):  # drawn at savefig: both inside
        _figure(weights, queries, keys, title, positions, log_scale).savefig(buf, format=fmt, dpi=150)
    return buf.getvalue()


def _tick_labels(tokens: list[str], at) -> tuple[range, list[str]]:
    """An axis's ticks and their labels: every token (cut: ``short_label``), or every n-th past ``LABELLED_TOKENS``;
    a right-to-left token isolated (``isolated``), or matplotlib drew "1 بيت" with the 1 on the right."""
    step = max(1, len(tokens) // LABELLED_TOKENS)
    return range(0, len(tokens), step), numbered([isolated(_mpl_text(short_label(t))) for t in tokens], at)[::step]


def undrawn_characters(queries: list[str], keys: list[str], title: str, positions=None) -> list[str]:
    """The characters of the images' labels and title that no export font has: the PNG and SVG draw them as
    boxes (``export_fonts``). Only the labels drawn count: past ``LABELLED_TOKENS`` an axis labels every n-th
    token."""
    q_at, k_at = _positions(positions, queries, keys)
    drawn = [*_tick_labels(queries, q_at)[1], *_tick_labels(keys, k_at)[1], _mpl_text(title)]
    return export_fonts.undrawn(drawn)


def csv_text(weights: torch.Tensor, queries: list[str], keys: list[str], positions=None) -> str:
    """One row per query: its label, then its weight on every key (header: key labels, ``"3 the"``, numbered by
    ``positions``: ``(query positions, key positions)`` in the input, default 0, 1, …)."""
    q_at, k_at = _positions(positions, queries, keys)
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(["query \\ key", *numbered(keys, k_at)])
    for token, row in zip(numbered(queries, q_at), weights.tolist()):
        writer.writerow([token, *(f"{w:.6g}" for w in row)])
    return out.getvalue()


def npz_bytes(weights: torch.Tensor, queries: list[str], keys: list[str], positions=None) -> bytes:
    q_at, k_at = _positions(positions, queries, keys)
    buf = io.BytesIO()
    np.savez_compressed(buf, weights=weights.numpy().astype(np.float32), query_tokens=np.array(queries),
                        key_tokens=np.array(keys), query_positions=np.array(q_at, dtype=np.int64),
                        key_positions=np.array(k_at, dtype=np.int64))
    return buf.getvalue()


def json_text(weights: torch.Tensor, queries: list[str], keys: list[str], info: dict, positions=None) -> str:
    """The map plus whatever describes it (model, layer, head, metrics, pattern) and its tokens' positions."""
    q_at, k_at = _positions(positions, queries, keys)
    return strict_json({**info, "query_tokens": queries, "key_tokens": keys, "query_positions": q_at,
                        "key_positions": k_at,  # NaN weights become null
                        "weights": [[float(f"{w:.6g}") for w in row] for row in weights.tolist()]})  # as the CSV
