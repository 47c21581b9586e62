"""Markdown rendering of a ``Report``: model summary, findings, pattern map (with roles) per part, legends.

All wording about patterns and findings comes from ``texts``. What comes from the model or the user (its name and
architecture, finding messages that quote tokens) is escaped with ``md``: a folder or an uploaded file may be named
``<img src=x onerror=...>`` or ``[click](https://...)``.
"""

import re

from core.errors import counted
from core.extraction.tokens import visible
from diagnostics.findings import NAMED_HEADS, head_names
from diagnostics.texts import (
    BORDERLINE_MARK, BORDERLINE_TEXT, FINDING_TEXTS, PATTERN_TEXTS, ROLE_TEXTS, SEVERITY_TITLES, role_label, vote_label,
)


# Markdown's special characters, "$" (GitHub's math) and ":" before a non-space (":skull:" shortcodes)
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]<>()#+!|~$]|:(?=\S))")

def md(text) -> str:
    """``text`` with markdown's special characters and ``&`` escaped (``&amp;`` shows as typed, not as ``&``), its
    control and invisible characters made visible (``core.extraction.tokens.visible``: an ESC from a file name would
    drive a terminal, a right-to-left override would turn the rest of a title around), on one line."""
    text = visible(" ".join(str(text).split()), spaces=False).replace("&", "&amp;")
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text)


def severity_counts(report) -> str:
    """``"0 errors, 1 warning, 2 info"``: the report's findings counted by severity."""
    return ", ".join([counted(report.count("error"), "error"), counted(report.count("warning"), "warning"),
                      f"{report.count('info')} info"])


def render_markdown(report):
    m = report.model
    lines = [f"# AttnScope diagnosis: {md(m['name'])}", ""]
    lines += [
        "| | |", "|---|---|",
        f"| architecture | {md(m['architecture'])} ({md(m.get('model_type') or 'custom')}) |",
        f"| layers × heads | {shape_text(m)} |",
        f"| parameters | {m['parameters']:,} |",
        f"| causal | {causal_text(m)} |",
        f"| device | {md(m['device'])} |",
        f"| probes | {report.probed_with} |",
        f"| time | {m['elapsed_s']:.1f} s |", "",
    ]
    counts = severity_counts(report)
    lines += [f"## Findings ({counts})", ""]
    if not report.findings:
        lines += ["No findings: every head looks ordinary on the probe texts.", ""]
    for f in report.findings:
        lines += [f"### {SEVERITY_TITLES[f.severity]}: {FINDING_TEXTS[f.code].title} (`{f.code}`)", "",
                  md(f.body), "", f"*What it means:* {FINDING_TEXTS[f.code].meaning}", "",
                  f"*What to do:* {md(f.suggestion)}", ""]
        if len(f.heads) > NAMED_HEADS:  # the message names the first few
            lines += [f"*All {len(f.heads)} heads:* {head_names(f.heads, f.part, limit=len(f.heads))}", ""]
    for part in report.parts:
        lines += _pattern_table(report, part)
    lines += ["## Patterns", "", "| pattern | looks like | usual reading | what to do |", "|---|---|---|---|"]
    lines += [f"| {t.title} | {t.looks_like} | {t.reading} | {t.action} |" for t in PATTERN_TEXTS.values()]
    lines += ["", "## Roles", "", "| role | meaning |", "|---|---|"]
    lines += [f"| {t.title} ({t.short}) | {t.meaning} |" for t in ROLE_TEXTS.values()]
    return "\n".join(lines) + "\n"


def shape_text(model: dict) -> str:
    """Every part's ``layers × heads``: ``"encoder: 3 × 4, decoder: 2 × 2, cross: 2 × 2"`` (the summary's ``layers``
    and ``heads`` are the first part's alone)."""
    return ", ".join(f"{p}: {s['layers']} × {s['heads']}" for p, s in model["parts"].items()) or "unknown"


def causal_text(model: dict) -> str:
    """Whether the model's attention is causal: ``"yes"``, ``"no"``, or ``"decoder only"`` for an encoder-decoder
    (the summary's ``causal`` is the self part's, False when it has none)."""
    if "self" not in model["parts"] and "decoder" in model["parts"]:
        return "decoder only"
    return "yes" if model["causal"] else "no"


def _pattern_table(report, part):
    grid = report.pattern_grid(part)
    title = "Pattern map" if part == "self" else f"Pattern map: {part}"
    lines = [f"## {title}", "", "| layer | " + " | ".join(f"H{h}" for h in range(len(grid[0]))) + " |",
             "|---" * (len(grid[0]) + 1) + "|"]
    for layer, row in enumerate(grid):
        cells = []
        for h, label in enumerate(row):
            head = report.head(layer, h, part)
            offset = f" {head.offset:+d}" if head.offset is not None else ""
            roles = f" ({role_label(head.roles, short=True)})" if head.roles else ""
            cells.append(f"{label or 'no label'}{BORDERLINE_MARK if head.borderline else ''}{offset}{roles}")
        lines.append(f"| L{layer} | " + " | ".join(cells) + " |")
    borderline = report.borderline_heads(part)
    if borderline:
        lines += ["", f"**Borderline heads ({len(borderline)}, marked {BORDERLINE_MARK} in the map).** "
                  f"{BORDERLINE_TEXT}", ""]
        lines += [f"- L{h.layer}H{h.head}: {vote_label(h.metrics)}" for h in borderline]
    return lines + [""]
