"""Text on coloured cells reads at WCAG AA (4.5:1) in the HTML reports and the app's distance grid: white on the
pattern map's green was 3.2:1, on the warning badge's orange 2.8:1, plotly's grey on a middle red 3.1:1."""

import math
import re
from dataclasses import replace

import pytest

from diagnostics import PATTERN_TEXTS, diagnose
from diagnostics.compare import CompareReport, HeadChange
from diagnostics.findings import Finding
from diagnostics.reports.contrast import contrast, over_page, text_on
from diagnostics.reports.html_report import SEVERITY_COLORS
from tiny import tiny_bert, wordpiece_tokenizer

AA = 4.5
PAINTED = re.compile(r"style='background:([^;']+)(?:;color:([^;']+))?'")


def _painted_text(html: str) -> list[tuple[str, str | None]]:
    """``(background, colour)`` of every element that paints a background; colour None where none is set."""
    return [(bg, colour or None) for bg, colour in PAINTED.findall(html)]


def test_wcag_contrast_of_known_pairs():
    assert contrast("#000000", "#ffffff") == pytest.approx(21.0)
    assert contrast("#777777", "#ffffff") == pytest.approx(4.48, abs=0.01)  # the "no label" cell with white text
    assert contrast("rgb(255, 255, 255)", "#ffffff") == pytest.approx(1.0)
    assert over_page("#C0392B", 1.0) == "#c0392b" and over_page("#C0392B", 0.0) == over_page("#C0392B", math.nan)


def test_black_or_white_reads_on_any_background():
    steps = range(0, 256, 17)
    backgrounds = [f"#{r:02x}{g:02x}{b:02x}" for r in steps for g in steps for b in steps]
    assert min(contrast(text_on(bg), bg) for bg in backgrounds) >= AA


@pytest.fixture(scope="module")
def report():
    """A diagnosis with an info, a warning and an error badge besides its own findings, and a head with no label."""
    result = diagnose((tiny_bert(), wordpiece_tokenizer()))
    extra = [Finding("dead_heads", severity, [[0, 0]], "m", "s") for severity in SEVERITY_COLORS]
    heads = [replace(result.heads[0], pattern=None)] + result.heads[1:]
    return replace(result, findings=result.findings + extra, heads=heads)


def test_every_coloured_cell_badge_and_legend_of_the_html_report_reads_at_aa(report):
    painted = _painted_text(report.to_html())
    backgrounds = {bg for bg, _ in painted}
    assert {t.color for t in PATTERN_TEXTS.values()} | set(SEVERITY_COLORS.values()) | {"#777"} <= backgrounds
    assert [(bg, colour) for bg, colour in painted if colour is None or contrast(colour, bg) < AA] == []


def test_every_cell_of_the_comparison_html_reads_at_aa(report):
    distances = [0.0, 0.1, 0.2, 0.26, 0.3, 0.35, 0.41, 0.5, 0.7, math.nan]
    fields = {"pattern": "sparse", "confidence": 0.5, "roles": [], "entropy": 0.5, "sink_score": 0.1}
    heads = [HeadChange("self", 0, h, d, True, ["distance"], fields, fields) for h, d in enumerate(distances)]
    html = CompareReport(report, report, heads=heads, appeared=[], disappeared=[], streamed=False).to_html()
    painted = _painted_text(html)
    assert len(painted) == len(distances)
    assert [(bg, colour) for bg, colour in painted if colour is None or contrast(colour, bg) < AA] == []


def test_every_number_of_the_app_s_distance_grid_reads_on_its_cell():
    from plotly.colors import sample_colorscale

    from app.views.compare_plots import NO_DISTANCE, distance_grid_figure

    values = [[0.0, 0.1, 0.2, 0.26], [0.3, 0.35, 0.41, 0.5], [0.05, 0.15, 0.45, math.nan]]
    grey, heat, cells = distance_grid_figure(values).data
    assert heat.text is None and heat.texttemplate is None  # the numbers are the cells' markers' own text
    # the NaN cell alone is painted grey: it had been the theme's background, its black "n/a" unreadable on a dark one
    painted = [[v == v for v in row] for row in grey.z]
    assert painted == [[False] * 4, [False] * 4, [False] * 3 + [True]] and grey.colorscale[0][1] == NO_DISTANCE
    scale = [list(stop) for stop in heat.colorscale]  # the figure holds tuples, which plotly reads as one colour
    shown = [(float(heat.z[l][h]), colour) for (l, h), colour in zip(cells.customdata, cells.textfont.color)]
    for value, colour in shown:
        cell = NO_DISTANCE if value != value else sample_colorscale(scale, [value / heat.zmax])[0]
        assert contrast(colour, cell) >= AA, (value, colour, cell)
