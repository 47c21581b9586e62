"""AttnScope diagnostics: per-head attention metrics, pattern labels, findings and reports.

Pure Python/torch; never imports streamlit.
"""

import sys

try:
    from diagnostics.diagnose import diagnose
    from diagnostics.compare import CompareReport, HeadChange, compare
    from diagnostics.findings import Finding
    from diagnostics.measure.metrics import HeadMetrics, MetricAccumulator, head_metrics
    from diagnostics.classify.patterns import PATTERNS, HeadPattern, classify_head, classify_heads, classify_metrics
    from diagnostics.reports.report import Report
    from diagnostics.streaming import StreamResult, stream_statistics, stream_token_statistics
    from diagnostics.classify.roles import ROLES, Role
    from diagnostics.texts import FINDING_TEXTS, PATTERN_TEXTS, ROLE_TEXTS
except KeyboardInterrupt:  # Ctrl-C while torch and transformers import (seconds): under `python -m` (argv[0] is
    if sys.argv[:1] != ["-m"]:  # "-m" while the package imports) one line and 130, as the CLI ends later;
        raise  # a program importing diagnostics gets it as it was
    print("error: interrupted", file=sys.stderr)
    raise SystemExit(130) from None

__all__ = [
    "CompareReport",
    "FINDING_TEXTS",
    "PATTERNS",
    "PATTERN_TEXTS",
    "ROLES",
    "ROLE_TEXTS",
    "Role",
    "Finding",
    "HeadChange",
    "HeadMetrics",
    "HeadPattern",
    "MetricAccumulator",
    "Report",
    "StreamResult",
    "classify_head",
    "classify_heads",
    "classify_metrics",
    "compare",
    "diagnose",
    "head_metrics",
    "stream_statistics",
    "stream_token_statistics",
]
