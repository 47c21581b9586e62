"""The fonts the PNG and SVG exports draw with, and the characters none of them has.

matplotlib's own DejaVu Sans has Latin, Greek, Cyrillic, Arabic and Hebrew, but no CJK or Indic scripts: a Japanese
token came out as a box. The exports draw each character with the first font that has it: DejaVu Sans, then every
Noto Sans font on the server (Google's family for every script; the Docker image installs ``fonts-noto-cjk``). What
none of them has is said beside the download buttons (``undrawn``).
"""

from __future__ import annotations

import os
from functools import lru_cache

FIRST = "DejaVu Sans"
FALLBACK_PREFIX = "Noto Sans"  # "Noto Sans CJK JP", "Noto Sans Devanagari", ...: labels are sans-serif
SCALABLE = (".ttf", ".otf", ".ttc")  # outline fonts: "Noto Color Emoji" has bitmaps matplotlib cannot scale
ISOLATES = "\u2068\u2069"  # FSI and PDI around right-to-left labels (``app.plain.isolated``): layout, not glyphs


@lru_cache(maxsize=1)
def families() -> tuple[str, ...]:
    """Font families in the order the exports try them, character by character (matplotlib's font fallback)."""
    _add_server_fonts()
    return (FIRST, *sorted({entry.name for entry in _fallback_entries()}))


def _add_server_fonts() -> None:
    """The server's fallback fonts that matplotlib's font list lacks, added to it: matplotlib lists the fonts it
    found when it first ran (``~/.cache/matplotlib``), so fonts-noto-cjk installed later went unused while the page
    said to install it."""
    from matplotlib import font_manager, ft2font

    known = {entry.fname for entry in font_manager.fontManager.ttflist}
    for path in font_manager.findSystemFonts():
        if path in known or not path.lower().endswith(SCALABLE):
            continue
        try:
            name = font_manager.ttfFontProperty(ft2font.FT2Font(path)).name
        except (OSError, RuntimeError, ValueError):  # a font file FreeType cannot read: not one to draw with
            continue
        if name.startswith(FALLBACK_PREFIX):
            font_manager.fontManager.addfont(path)


def _fallback_entries():
    from matplotlib import font_manager

    return [entry for entry in font_manager.fontManager.ttflist
            if entry.name.startswith(FALLBACK_PREFIX) and "Mono" not in entry.name
            and entry.fname.lower().endswith(SCALABLE) and os.path.isfile(entry.fname)]  # listed, then uninstalled


@lru_cache(maxsize=1)
def _drawn() -> frozenset[int]:
    """Every code point some font of ``families`` has a glyph for."""
    from matplotlib import font_manager, ft2font

    names = set(families())
    codes: set[int] = set()
    for entry in font_manager.fontManager.ttflist:  # the upright faces: the bold and italic ones hold the same
        if entry.name in names and entry.style == "normal" and entry.fname.lower().endswith(SCALABLE):
            try:
                codes.update(ft2font.FT2Font(entry.fname).get_charmap())
            except (OSError, RuntimeError, ValueError):  # gone since matplotlib listed it, or unreadable: not drawn
                continue
    return frozenset(codes)


def undrawn(labels) -> list[str]:
    """The characters of ``labels`` that no font of ``families`` has, so the images draw them as boxes; each once,
    in order of first use."""
    drawn = _drawn()
    missing = dict.fromkeys(ch for label in labels for ch in label
                            if not ch.isspace() and ch not in ISOLATES and ord(ch) not in drawn)
    return list(missing)
