"""Tokens, file names and model names as plain text, wherever the app shows them.

A tokenizer's pieces and an upload's file name are user data: ``<a href=…>``
in a plotly label becomes a link, ``<!--`` in a page's inline JSON ends the
script, ``**bold**`` in ``st.markdown`` is bold. Each helper here makes a string
show as the characters it holds in one rendering context.
"""

from __future__ import annotations

import html
import json
import re
import unicodedata

import regex

from core.extraction.tokens import visible

# Characters that make markup anywhere in a line; ":" only before a non-space (":red[", ":material/…:", ":smile:").
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#|<>~$&]|:(?=\S))")
_LINE_START = re.compile(r"^(\s*)([-+=>])")  # a list, quote or heading underline if it began a line
_NUMBERED = re.compile(r"^(\s*\d+)([.)])")  # "1." would start a numbered list


# Characters of a token shown as an axis or head-view label: SmolLM2 has 80-character "####…" pieces, and one such
# label took a 13-token heatmap's whole width (its plot 64 px wide, 8 of 13 labels dropped, its own among them)
LABEL_CHARS = 20


# An escape of core.extraction.tokens.visible: cut short at a label's end, "\u200" would read as another character
_ESCAPE = re.compile(r"\\(x[0-9a-f]{2}|u[0-9a-f]{4}|U[0-9a-f]{8})")
_CHARACTER = regex.compile(r"\X")  # a user-perceived character: Unicode's extended grapheme cluster (UAX #29)


def short_label(token: str) -> str:
    """A token's label cut to ``LABEL_CHARS`` characters, "…" last when cut (the whole token stays in the head
    view's tooltip, the CSV and the JSON). Characters, as a reader counts them: a letter with its marks, a flag, a
    Hangul syllable of jamo or an emoji joined with others is one and is never cut in two (a family of four cut to
    three is another emoji), nor is an escape (``\u200d``)."""
    characters = _CHARACTER.findall(token)
    if len(characters) <= LABEL_CHARS:
        return token
    kept = "".join(characters[:LABEL_CHARS - 1])  # a prefix of the token
    start = kept.rfind("\\")
    escape = _ESCAPE.match(token, start) if start >= 0 else None
    return (kept[:start] if escape and escape.end() > len(kept) else kept) + "…"


def isolated(label: str) -> str:
    """``label`` between Unicode's first-strong isolate marks (FSI … PDI) when it holds right-to-left letters, so
    that it reads as one unit in its own direction beside the position number before it: "1 ب__<0xD9>" was drawn
    "1 0>__بxD9>", the escape's digits taken into the Arabic run. Labels of left-to-right text stay as they are."""
    if any(unicodedata.bidirectional(ch) in ("R", "AL") for ch in label):
        return f"\u2068{label}\u2069"
    return label


def for_plotly(text: str) -> str:
    """Text for plotly labels, titles and hover: plotly renders a subset of HTML (links, tags, entities)."""
    return html.escape(str(text), quote=False)


def for_markdown(text: str) -> str:
    """Text for ``st.markdown`` and friends (titles, help, alerts): markdown metacharacters escaped.

    ``:`` before a non-space is escaped too, so ``:red[…]`` and ``:material/…:`` directives stay text;
    ``.``, ``-`` and ``+`` only where they would start a list. Every line break (``\\r`` and U+2028 too, which
    markdown also reads as one) becomes a space: one line, whose only start is the text's. Control and invisible
    characters are written out (``core.extraction.tokens.visible``): a right-to-left override in a typed path
    turned the whole error message around.
    """
    text = _MARKDOWN_SPECIAL.sub(r"\\\1", visible(" ".join(str(text).splitlines()), spaces=False))
    return _NUMBERED.sub(r"\1\\\2", _LINE_START.sub(r"\1\\\2", text))


def json_for_html(data) -> str:
    """JSON safe inside ``<script>``: ``<``, ``>`` and ``&`` as ``\\u`` escapes, so no ``</script>`` or ``<!--``.
    A NaN is a ValueError here, not JSON that the page's ``JSON.parse`` refuses (a blank view, no message)."""
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False, allow_nan=False)
    return text.replace("<", "\\u003c").replace(">", "\\u003e").replace("&", "\\u0026")
