"""Standalone HTML rendering of a ``Report``: one file, inline CSS and SVG, no scripts, no CDN.

The page holds the model summary, the findings (wording from ``texts``), the
pattern map of each part (layers × heads, coloured by pattern) and, for every
finding that names heads, heatmaps of up to ``HEATMAPS_PER_FINDING`` of them on
the first probe text, drawn as inline SVG so the file opens offline.
"""

from html import escape

from core.extraction.tokens import visible
from diagnostics.findings import NAMED_HEADS, head_names
from diagnostics.reports.contrast import painted
from diagnostics.reports.markdown_report import causal_text, severity_counts, shape_text
from diagnostics.texts import (
    BORDERLINE_MARK, BORDERLINE_TEXT, FINDING_TEXTS, PATTERN_TEXTS, ROLE_TEXTS, SEVERITY_TITLES, role_label, vote_label,
)

HEATMAPS_PER_FINDING = 4
HEATMAP_PX = 180  # side of one heatmap
MAX_CELLS = 64  # longer probes are shown on their first 64 tokens
SEVERITY_COLORS = {"error": "#C0392B", "warning": "#D68910", "info": "#2874A6"}

CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;
margin:2rem auto;max-width:1100px;color:#222;padding:0 1rem}
h1{font-size:1.5rem}h2{margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0}td,th{padding:.25rem .5rem;border:1px solid #ddd;font-size:.85rem}
.grid td{width:5.5rem;text-align:center;font-weight:600;font-size:.75rem}
.finding{border-left:5px solid;padding:.25rem 1rem;margin:1rem 0;background:#fafafa}
.badge{border-radius:3px;padding:0 .4rem;font-size:.8rem;margin-right:.4rem}
.maps{display:flex;flex-wrap:wrap;gap:1rem}.maps figure{margin:0}.maps figcaption{font-size:.8rem;text-align:center}
.legend span{display:inline-block;padding:.1rem .5rem;margin:.1rem;border-radius:3px;font-size:.8rem}
"""


def plain(value) -> str:
    """``value`` as HTML text: markup escaped and control and invisible characters written out (ESC as ``\\x1b``, a
    right-to-left override as ``\\u202e``): a folder named with terminal escapes drove the terminal an HTML report
    was printed to, C0 controls are no valid HTML, and an override turned "A → B" around."""
    return escape(visible(str(value), spaces=False))


def render_html(report):
    m = report.model
    body = [f"<h1>AttnScope diagnosis: {plain(str(m['name']))}</h1>", _summary(report)]
    counts = severity_counts(report)
    body.append(f"<h2>Findings ({counts})</h2>")
    if not report.findings:
        body.append("<p>No findings: every head looks ordinary on the probe texts.</p>")
    body += [_finding(report, f) for f in report.findings]
    for part in report.parts:
        body.append(_grid(report, part))
    body.append(_legend())
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>AttnScope diagnosis: {plain(str(m['name']))}</title><style>{CSS}</style></head>"
            f"<body>{''.join(body)}</body></html>")


def _summary(report):
    m = report.model
    rows = [("architecture", f"{m['architecture']} ({m.get('model_type') or 'custom'})"),
            ("layers × heads", shape_text(m)), ("parameters", f"{m['parameters']:,}"), ("causal", causal_text(m)),
            ("device", m["device"]), ("probes", report.probed_with),
            ("time", f"{m['elapsed_s']:.1f} s")]
    return "<table>" + "".join(f"<tr><th>{k}</th><td>{plain(str(v))}</td></tr>" for k, v in rows) + "</table>"


def _finding(report, f):
    color = SEVERITY_COLORS[f.severity]
    text = FINDING_TEXTS[f.code]
    maps = _finding_maps(report, f)
    return (f"<div class='finding' style='border-color:{color}'><h3><span class='badge' style='{painted(color)}'>"
            f"{SEVERITY_TITLES[f.severity]}</span>{plain(text.title)} <code>{f.code}</code></h3>"
            f"<p>{plain(f.body)}</p><p><em>What it means:</em> {plain(text.meaning)}</p>"
            f"<p><em>What to do:</em> {plain(f.suggestion)}</p>{_all_heads(f)}{maps}</div>")


def _all_heads(f):
    """Every head of a finding whose message names only the first few."""
    if len(f.heads) <= NAMED_HEADS:
        return ""
    return f"<p><em>All {len(f.heads)} heads:</em> {plain(head_names(f.heads, f.part, limit=len(f.heads)))}</p>"


def _finding_maps(report, f):
    sample = _sample(report, f.part)
    if sample is None or not f.heads:
        return ""
    figures = []
    for layer, head in f.heads[:HEATMAPS_PER_FINDING]:
        if layer < sample.n_layers and head < sample.n_heads:
            caption = f"L{layer}H{head}" if f.part == "self" else f"{f.part} L{layer}H{head}"
            figures.append(f"<figure>{heatmap_svg(sample.attentions[layer, head])}"
                           f"<figcaption>{caption}</figcaption></figure>")
    return f"<div class='maps'>{''.join(figures)}</div>"


def _sample(report, part):
    if not report.samples:
        return None
    first = report.samples[0]
    return first.part(part) if first.encoder is not None else first


def heatmap_svg(weights, size=HEATMAP_PX):
    """An inline SVG heatmap of one map ``[q, k]`` (white = 0, dark blue = the map's max)."""
    w = weights[:MAX_CELLS, :MAX_CELLS].float()
    q, k = w.shape
    top = float(w.max()) or 1.0
    cw, ch = size / k, size / q
    rects = []
    for i in range(q):
        for j in range(k):
            v = float(w[i, j]) / top
            if v > 0.02:
                shade = int(255 * (1 - v))
                rects.append(f"<rect x='{j * cw:.1f}' y='{i * ch:.1f}' width='{cw + 0.3:.1f}' height='{ch + 0.3:.1f}' "
                             f"fill='rgb({shade},{shade},255)'/>")
    return (f"<svg xmlns='http://www.w3.org/2000/svg' width='{size}' height='{size}' viewBox='0 0 {size} {size}'>"
            f"<rect width='{size}' height='{size}' fill='#fff' stroke='#999'/>{''.join(rects)}</svg>")


def _grid(report, part):
    grid = report.pattern_grid(part)
    title = "Pattern map" if part == "self" else f"Pattern map: {part}"
    head_row = "<tr><th>layer</th>" + "".join(f"<th>H{h}</th>" for h in range(len(grid[0]))) + "</tr>"
    rows = []
    for layer, labels in enumerate(grid):
        cells = []
        for h, label in enumerate(labels):
            head = report.head(layer, h, part)
            offset = f" {head.offset:+d}" if head.offset is not None else ""
            color = PATTERN_TEXTS[label].color if label in PATTERN_TEXTS else "#777"
            short = f"<br><small>{plain(role_label(head.roles, short=True))}</small>" if head.roles else ""
            mark = BORDERLINE_MARK if head.borderline else ""
            cells.append(f"<td style='{painted(color)}' title='{_tip(head)}'>{label or 'no label'}{mark}{offset}"
                         f"{short}</td>")
        rows.append(f"<tr><th>L{layer}</th>{''.join(cells)}</tr>")
    return f"<h2>{plain(title)}</h2><table class='grid'>{head_row}{''.join(rows)}</table>{_borderline(report, part)}"


def _tip(head):
    """A pattern-map cell's tooltip: confidence, entropy, roles and votes (escaped)."""
    if head.pattern is None:
        return "no label: NaN or infinite attention"
    roles = ", ".join(f"{r.role} {r.score:.2f}" for r in head.roles)
    votes = f"; borderline: {vote_label(head.metrics)}" if head.borderline else ""
    return plain(f"confidence {head.confidence:.2f}, entropy {head.metrics['entropy']:.2f}"
                  + (f"; roles: {roles}" if roles else "") + votes)


def _borderline(report, part):
    heads = report.borderline_heads(part)
    if not heads:
        return ""
    items = "".join(f"<li>L{h.layer}H{h.head}: {plain(vote_label(h.metrics))}</li>" for h in heads)
    return (f"<p><strong>Borderline heads ({len(heads)}, marked {BORDERLINE_MARK} in the map).</strong> "
            f"{plain(BORDERLINE_TEXT)}</p><ul>{items}</ul>")


def _legend():
    spans = "".join(f"<span style='{painted(t.color)}'>{plain(t.title)}</span>" for t in PATTERN_TEXTS.values())
    rows = "".join(f"<tr><th>{plain(t.title)}</th><td>{plain(t.looks_like)}</td><td>{plain(t.reading)}</td>"
                   f"<td>{plain(t.action)}</td></tr>" for t in PATTERN_TEXTS.values())
    roles = "".join(f"<tr><th>{plain(t.title)} ({plain(t.short)})</th><td>{plain(t.meaning)}</td></tr>"
                    for t in ROLE_TEXTS.values())
    return (f"<h2>Patterns</h2><p class='legend'>{spans}</p><table><tr><th>pattern</th><th>looks like</th>"
            f"<th>usual reading</th><th>what to do</th></tr>{rows}</table>"
            f"<h2>Roles</h2><table><tr><th>role</th><th>meaning</th></tr>{roles}</table>")
