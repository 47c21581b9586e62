"""``Exports``: the JSON, Markdown and HTML forms shared by ``Report`` and ``CompareReport``."""

import json
import math
import os
from pathlib import Path


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


def unwritable(path: Path, make_folders: bool = False) -> str | None:
    """Why a file cannot be written at ``path`` (a folder, a missing folder, a file in the way, no permission), or
    None; with ``make_folders`` the missing folders are the writer's to make (the nearest existing one is checked).
    A file already there needs only its own permission: the writers write it in place where its folder takes no
    new file."""
    try:
        return _unwritable(path, make_folders)
    except OSError as err:  # a name too long, a folder that cannot be searched
        return (err.strerror or str(err)).lower()


def _unwritable(path: Path, make_folders: bool) -> str | None:
    if path.is_dir():
        return "it is a folder; give a file name"
    folder = path.parent
    while make_folders and not folder.exists() and folder != folder.parent:
        folder = folder.parent
    if not folder.exists():
        return f"the folder {folder} does not exist"
    if not folder.is_dir():
        return f"{folder} is a file, not a folder"
    if not os.access(path if path.exists() else folder, os.W_OK):
        return "permission denied"
    return None


class Exports:
    """``to_json`` / ``to_markdown`` / ``to_html`` of a report that has ``to_dict``.

    A subclass names its renderers: ``render_markdown`` and ``render_html``, functions of the report
    (set as ``staticmethod``s).
    """

    render_markdown = render_html = None

    def to_json(self, indent=2):
        """The report as JSON (``to_dict``; docs/report_schema.md): strict, NaN written as null."""
        return strict_json(self.to_dict(), indent=indent, ensure_ascii=False)

    def to_markdown(self):
        """The report as Markdown text, every token and name written as plain text."""
        return self.render_markdown(self)

    def to_html(self):
        """The report as one self-contained HTML page (no outside requests), every token and name escaped."""
        return self.render_html(self)
