"""Markdown and standalone HTML renderings of a ``compare.CompareReport``.

Both list the two models, the findings that appeared (with what to do) or disappeared, the notes on the
probes (short probes cap every finding at info), a
layer × head grid of distances, and a table of the heads that changed (pattern
and roles before → after, entropy and sink deltas). Model names, roles and
messages are escaped: they come from files and uploads.
"""


from diagnostics.reports.contrast import over_page, painted
from diagnostics.reports.html_report import plain
from diagnostics.reports.markdown_report import md
from diagnostics.texts import FINDING_TEXTS, SEVERITY_TITLES

DISTANCE_RED = "#C0392B"  # a head's cell: this red at opacity distance / 0.5 over the page
CSS = """
body{font-family:system-ui,-apple-system,Segoe UI,sans-serif;
margin:2rem auto;max-width:1100px;color:#222;padding:0 1rem}
h1{font-size:1.5rem}h2{margin-top:2rem;border-bottom:1px solid #ddd}
table{border-collapse:collapse;margin:.5rem 0}td,th{padding:.25rem .5rem;border:1px solid #ddd;font-size:.85rem}
.grid td{width:4rem;text-align:center;font-size:.75rem}
"""
def _roles(fields):
    return ", ".join(fields["roles"]) or "–"


def pattern_name(fields):
    """A head's pattern in a before/after column; None (NaN or infinite attention) is "no label"."""
    return fields["pattern"] or "no label"


def _head_name(h):
    return f"L{h.layer}H{h.head}" if h.part == "self" else f"{h.part} L{h.layer}H{h.head}"


def _changed(report) -> str:
    """"9 of 16 heads changed (JS distance ≥ 0.05, ...)": what counts as changed, the non-finite maps too when a
    head changed for that (they have no distance, and the line had counted them under a rule they do not meet)."""
    non_finite = any("non_finite" in h.reasons for h in report.changed)
    return (f"{len(report.changed)} of {len(report.heads)} heads changed (JS distance ≥ "
            f"{report.thresholds['changed_js']}, or a new pattern or role at distance ≥ "
            f"{report.thresholds['label_change_js']}{', or a map finite in one model only' if non_finite else ''})")


def first_changed(report) -> str:
    """"The first layer whose heads changed is 3. ..." (two sentences), or "" when no head changed: the count
    alone read as if every changed head had been changed by itself."""
    first = report.first_changed_layers
    if not first:
        return ""
    where = ", ".join(f"{layer}" if part == "self" else f"{layer} of the {part}" for part, layer in first.items())
    return (f"The first layer whose heads changed is {where}. The change is there or in what comes before it (a "
            "layer's values, output projection or MLP, and the embeddings, show only in later layers' maps); later "
            "layers read its output, so their heads may have changed with it rather than by themselves, unless "
            "their distances jump.")


def render_markdown(report):
    a, b = report.a.model, report.b.model
    lines = [f"# AttnScope comparison: {md(a['name'])} → {md(b['name'])}", "",
             f"{_changed(report)}; "
             f"probes: {len(report.a.probes) or 'random token ids'}{', streamed' if report.streamed else ''}."
             + (f" {first_changed(report)}" if report.changed else ""), ""]
    lines += _findings_markdown("Findings that appeared in B", report.appeared, advice=True)
    lines += _findings_markdown("Findings that disappeared from A", report.disappeared)
    lines += _notes_markdown(report.notes)
    for part in dict.fromkeys(h.part for h in report.heads):
        grid = report.distance_grid(part)
        lines += [f"## JS distance per head{'' if part == 'self' else f': {part}'}", "",
                  "| layer | " + " | ".join(f"H{h}" for h in range(len(grid[0]))) + " |",
                  "|---" * (len(grid[0]) + 1) + "|"]
        lines += [f"| L{layer} | " + " | ".join(number_text(v) for v in row) + " |" for layer, row in enumerate(grid)]
        lines.append("")
    lines += ["## Changed heads", ""]
    if not report.changed:
        return "\n".join(lines + ["No head changed beyond the thresholds.", ""])
    lines += ["| head | distance | why | pattern | roles | Δ entropy | Δ sink |", "|---|---|---|---|---|---|---|"]
    for h in report.changed:
        lines.append(f"| {_head_name(h)} | {number_text(h.js_distance)} | {', '.join(h.reasons)} | "
                     f"{pattern_name(h.before)} → {pattern_name(h.after)} | "
                     f"{md(_roles(h.before))} → {md(_roles(h.after))} | "
                     f"{number_text(h.entropy_delta, '+.3f')} | {number_text(h.sink_delta, '+.3f')} |")
    return "\n".join(lines) + "\n"


def severity_title(finding) -> str:
    """A compared finding's severity, with A's where B raised it ("Error (warning in A)"): a warning raised to an
    error had read as an error A lacked."""
    was = finding.details.get("severity_in_a")
    return SEVERITY_TITLES[finding.severity] + (f" ({was} in A)" if was else "")


def _findings_markdown(title, findings, advice=False):
    """A list of findings; ``advice``: each with its "What to do" (findings that appeared)."""
    lines = [f"## {title} ({len(findings)})", ""]
    for f in findings:
        title = md(FINDING_TEXTS[f.code].title)
        lines.append(f"- **{severity_title(f)}**: {title} (`{f.code}`): {md(f.body)}")
        if advice and f.suggestion:
            lines.append(f"  *What to do:* {md(f.suggestion)}")
    return lines + ([""] if findings else ["None.", ""])


def _notes_markdown(notes):
    """The notes on the probes, which say when findings are capped: short probes keep every finding at info."""
    if not notes:
        return []
    lines = ["## Notes on the probes", ""]
    lines += [f"- {models}: {md(FINDING_TEXTS[f.code].title)} (`{f.code}`): {md(f.body)}" for models, f in notes]
    return lines + [""]


def render_html(report):
    a, b = report.a.model, report.b.model
    title = f"AttnScope comparison: {plain(str(a['name']))} → {plain(str(b['name']))}"
    body = [f"<h1>{title}</h1>",
            f"<p>{_changed(report)}. {plain(first_changed(report))}</p>"]
    body += _findings_html("Findings that appeared in B", report.appeared, advice=True)
    body += _findings_html("Findings that disappeared from A", report.disappeared)
    if report.notes:
        body.append("<h2>Notes on the probes</h2><ul>" + "".join(
            f"<li>{models}: {plain(FINDING_TEXTS[f.code].title)} (<code>{plain(f.code)}</code>): {plain(f.body)}</li>"
            for models, f in report.notes) + "</ul>")
    for part in dict.fromkeys(h.part for h in report.heads):
        body.append(_grid_html(report, part))
    rows = "".join(
        f"<tr><td>{plain(_head_name(h))}</td><td>{number_text(h.js_distance)}</td>"
        f"<td>{plain(', '.join(h.reasons))}</td>"
        f"<td>{plain(pattern_name(h.before))} → {plain(pattern_name(h.after))}</td>"
        f"<td>{plain(_roles(h.before))} → {plain(_roles(h.after))}</td>"
        f"<td>{number_text(h.entropy_delta, '+.3f')}</td><td>{number_text(h.sink_delta, '+.3f')}</td></tr>"
        for h in report.changed)
    body.append("<h2>Changed heads</h2>" + (
        "<table><tr><th>head</th><th>distance</th><th>why</th><th>pattern</th><th>roles</th><th>Δ entropy</th>"
        f"<th>Δ sink</th></tr>{rows}</table>" if rows else "<p>No head changed beyond the thresholds.</p>"))
    return ("<!DOCTYPE html><html lang='en'><head><meta charset='utf-8'>"
            f"<title>{title}</title><style>{CSS}</style></head><body>{''.join(body)}</body></html>")


def _findings_html(title, findings, advice=False):
    items = "".join(f"<li><strong>{severity_title(f)}</strong>: {plain(FINDING_TEXTS[f.code].title)} "
                    f"(<code>{plain(f.code)}</code>): {plain(f.body)}"
                    + (f"<br><em>What to do:</em> {plain(f.suggestion)}" if advice and f.suggestion else "")
                    + "</li>" for f in findings)
    return [f"<h2>{plain(title)} ({len(findings)})</h2>", f"<ul>{items}</ul>" if items else "<p>None.</p>"]


def _grid_html(report, part):
    grid = report.distance_grid(part)
    head_row = "<tr><th>layer</th>" + "".join(f"<th>H{h}</th>" for h in range(len(grid[0]))) + "</tr>"
    rows = []
    for layer, values in enumerate(grid):
        shades = [over_page(DISTANCE_RED, v / 0.5) for v in values]  # NaN (a diverged head): unshaded
        cells = "".join(f"<td style='{painted(shade)}'>{number_text(v)}</td>"
                        for shade, v in zip(shades, values))
        rows.append(f"<tr><th>L{layer}</th>{cells}</tr>")
    title = "JS distance per head" + ("" if part == "self" else f": {plain(part)}")
    return f"<h2>{title}</h2><table class='grid'>{head_row}{''.join(rows)}</table>"


def number_text(value, spec=".3f") -> str:
    """``value`` formatted, or "n/a" for a diverged head's NaN (no distance, no entropy)."""
    return "n/a" if value != value else format(value, spec)
