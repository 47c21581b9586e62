"""``Exports``: the JSON, Markdown and HTML forms shared by ``Report`` and ``CompareReport``."""

import json
import math


def strict_json(data, **dumps_options) -> str:
    """JSON any parser reads: NaN and infinite numbers (a diverged checkpoint's metrics) become null; Python's
    json would write bare ``NaN``, which browsers' ``JSON.parse`` and most other parsers reject."""
    return json.dumps(_finite(data), allow_nan=False, **dumps_options)


def _finite(value):
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_finite(v) for v in value]
    return value


class Exports:
    """``to_json`` / ``to_markdown`` / ``to_html`` of a report that has ``to_dict``.

    A subclass names its renderers: ``render_markdown`` and ``render_html``, functions of the report
    (set as ``staticmethod``s).
    """

    render_markdown = render_html = None

    def to_json(self, indent=2):
        return strict_json(self.to_dict(), indent=indent, ensure_ascii=False)

    def to_markdown(self):
        return self.render_markdown(self)

    def to_html(self):
        return self.render_html(self)
