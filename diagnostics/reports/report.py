"""``Report``: the result of ``diagnose``, and its versioned JSON form.

``to_dict()`` follows the schema ``attnscope.report/2`` documented in
docs/report_schema.md; a field is only ever added within a version, and a
rename or removal bumps the version. ``samples`` (the probe texts'
``AttentionResult``s, for the app's head explorer) are never serialised.
Markdown and HTML renderings live in ``markdown_report`` and ``html_report``.
"""

from dataclasses import dataclass, field

from core.errors import InputError
from diagnostics.findings import SEVERITIES, Finding
from diagnostics.reports import html_report, markdown_report
from diagnostics.reports.exports import Exports

SCHEMA = "attnscope.report/2"


@dataclass
class HeadReport:
    part: str  # "self", "encoder", "decoder" or "cross"
    layer: int
    head: int
    pattern: str | None  # one of patterns.PATTERNS; None where the head's attention is NaN or infinite
    confidence: float | None  # mean classifier confidence over the probes that voted for `pattern`
    offset: int | None  # the diagonal's offset (+1 = next token), diagonal heads only
    metrics: dict  # averaged metrics (see docs/report_schema.md)
    roles: list = field(default_factory=list)  # diagnostics.classify.roles.Role, strongest first

    @property
    def role_names(self) -> list[str]:
        return [r.role for r in self.roles]

    @property
    def borderline(self) -> bool:
        """True when the probe texts disagree on this head's pattern or roles (``metrics["votes"]``,
        ``metrics["role_votes"]``)."""
        votes = self.metrics.get("votes", {})
        total = sum(votes.values())
        return len(votes) > 1 or any(n < total for n in self.metrics.get("role_votes", {}).values())

    def to_dict(self):
        return {"part": self.part, "layer": self.layer, "head": self.head, "pattern": self.pattern,
                "confidence": self.confidence, "offset": self.offset, "roles": [r.to_dict() for r in self.roles],
                "metrics": self.metrics}


@dataclass
class Report(Exports):
    model: dict  # name, architecture, model_type, layers, heads, parts, parameters, causal, device, ...
    heads: list[HeadReport]
    findings: list[Finding]  # most severe first
    samples: list = field(default_factory=list, repr=False)  # AttentionResult per probe; not serialised
    probes: list[dict] = field(default_factory=list)  # {"text", "text_pair"} per probe
    render_markdown = staticmethod(markdown_report.render_markdown)
    render_html = staticmethod(html_report.render_html)

    @property
    def parts(self):
        """The parts with heads, in model order ("self", or "encoder", "decoder", "cross")."""
        return list(dict.fromkeys(h.part for h in self.heads))

    @property
    def probed_with(self) -> str:
        """What the model was probed with, for the summaries: probe texts (and whether they were streamed, which
        keeps no maps: the HTML report then has no heatmaps), random token ids, or nothing."""
        borrowed = self.model.get("borrowed_tokenizer")
        lent = f", in {borrowed}'s tokens (borrowed: the model came without a tokenizer)" if borrowed else ""
        if self.probes:
            streamed = ", streamed (no attention maps kept)" if self.model.get("streamed") else ""
            return f"{len(self.probes)}{streamed}{lent}"
        return "random token ids" if self.heads else "none (weights only)"

    def pattern_grid(self, part=None):
        """Pattern labels (None: no label) as ``[layers][heads]`` of ``part`` (default: the first part)."""
        part = part or (self.parts[0] if self.parts else "self")
        chosen = [h for h in self.heads if h.part == part]
        if not chosen:
            raise InputError(f"this report has no part {part!r}; it has {self.parts}")
        grid = [[""] * (max(h.head for h in chosen) + 1) for _ in range(max(h.layer for h in chosen) + 1)]
        for h in chosen:
            grid[h.layer][h.head] = h.pattern
        return grid

    def head(self, layer, head, part=None):
        part = part or (self.parts[0] if self.parts else "self")
        for h in self.heads:
            if (h.part, h.layer, h.head) == (part, layer, head):
                return h
        raise InputError(f"no head L{layer}H{head} in part {part!r}")

    def borderline_heads(self, part=None):
        """The heads of ``part`` (default: the first) whose pattern or roles the probe texts disagree on."""
        part = part or (self.parts[0] if self.parts else "self")
        return [h for h in self.heads if h.part == part and h.borderline]

    def count(self, severity):
        return sum(f.severity == severity for f in self.findings)

    @property
    def has_errors(self):
        return self.count("error") > 0

    def finding(self, code):
        """The first finding with ``code``, or None."""
        return next((f for f in self.findings if f.code == code), None)

    def to_dict(self):
        patterns = {}
        for h in self.heads:
            counts = patterns.setdefault(h.part, {})
            if h.pattern is not None:  # a head without a label counts as no pattern
                counts[h.pattern] = counts.get(h.pattern, 0) + 1
        return {
            "schema": SCHEMA,
            "model": self.model,
            "summary": {**{s: self.count(s) for s in SEVERITIES}, "patterns": patterns},
            "probes": self.probes,
            "heads": [h.to_dict() for h in self.heads],
            "findings": [f.to_dict() for f in self.findings],
        }
