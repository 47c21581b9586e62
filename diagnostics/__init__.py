"""AttnScope diagnostics: per-head attention metrics, pattern labels, findings and reports.

Pure Python/torch; never imports streamlit.
"""

from diagnostics.diagnose import diagnose
from diagnostics.compare import CompareReport, HeadChange, compare
from diagnostics.findings import Finding
from diagnostics.measure.metrics import HeadMetrics, MetricAccumulator, head_metrics
from diagnostics.classify.patterns import PATTERNS, HeadPattern, classify_head, classify_heads, classify_metrics
from diagnostics.reports.report import Report
from diagnostics.streaming import StreamResult, stream_statistics, stream_token_statistics
from diagnostics.texts import FINDING_TEXTS, PATTERN_TEXTS

__all__ = [
    "CompareReport",
    "FINDING_TEXTS",
    "PATTERNS",
    "PATTERN_TEXTS",
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
