"""``Exports``: the JSON, Markdown and HTML forms shared by ``Report`` and ``CompareReport``."""

import json


class Exports:
    """``to_json`` / ``to_markdown`` / ``to_html`` of a report that has ``to_dict``.

    A subclass names its renderers: ``render_markdown`` and ``render_html``, functions of the report
    (set as ``staticmethod``s).
    """

    render_markdown = render_html = None

    def to_json(self, indent=2):
        return json.dumps(self.to_dict(), indent=indent, ensure_ascii=False)

    def to_markdown(self):
        return self.render_markdown(self)

    def to_html(self):
        return self.render_html(self)
