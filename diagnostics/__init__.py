"""AttnScope diagnostics: per-head attention metrics, pattern labels, findings and reports.

Pure Python/torch; never imports streamlit. Each public name below imports its module (and torch) on first use
(``core.lazy``).
"""

import sys
import types

from core.lazy import lazy_names

_WHERE = {
    "diagnose": ".diagnose",
    "CompareReport": ".compare", "HeadChange": ".compare", "compare": ".compare",
    "Finding": ".findings",
    "HeadMetrics": ".measure.metrics", "MetricAccumulator": ".measure.metrics", "head_metrics": ".measure.metrics",
    "PATTERNS": ".classify.patterns", "HeadPattern": ".classify.patterns", "classify_head": ".classify.patterns",
    "classify_heads": ".classify.patterns", "classify_metrics": ".classify.patterns",
    "Report": ".reports.report",
    "StreamResult": ".streaming", "stream_statistics": ".streaming", "stream_token_statistics": ".streaming",
    "ROLES": ".classify.roles", "Role": ".classify.roles",
    "FINDING_TEXTS": ".texts", "PATTERN_TEXTS": ".texts", "ROLE_TEXTS": ".texts",
}
__all__ = list(_WHERE)
__getattr__, __dir__ = lazy_names(__name__, _WHERE)


class _Package(types.ModuleType):
    """``diagnostics.diagnose`` and ``diagnostics.compare`` are the functions, as ``from diagnostics import
    diagnose`` promises, although modules of the same names exist: the import system sets a submodule as its
    package's attribute when it first imports it, and this keeps that from replacing the function."""

    def __setattr__(self, name, value):
        if not (name in ("diagnose", "compare") and isinstance(value, types.ModuleType)):
            super().__setattr__(name, value)


sys.modules[__name__].__class__ = _Package
