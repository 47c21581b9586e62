"""Text that stays readable on coloured cells: black or white, whichever contrasts more (WCAG 2.1).

WCAG's contrast ratio is ``(L1 + 0.05) / (L2 + 0.05)`` of the two colours' relative luminances; normal text needs
4.5:1 (level AA). Black or white, whichever is higher, gives at least 4.58:1 on any background, while one fixed
colour cannot: white on the pattern map's green was 3.2:1, plotly's grey on a middle red 3.1:1.
"""

from __future__ import annotations

import math

from plotly.colors import hex_to_rgb, unlabel_rgb

BLACK, WHITE = "#000000", "#ffffff"
PAGE = (255, 255, 255)  # the reports' and the app's background


def rgb(colour: str) -> tuple[float, float, float]:
    """``"#rrggbb"`` or ``"rgb(r, g, b)"`` as three channels of 0-255."""
    return tuple(float(c) for c in (hex_to_rgb(colour) if colour.startswith("#") else unlabel_rgb(colour)))


def luminance(colour: str) -> float:
    """WCAG 2.1's relative luminance, 0 (black) to 1 (white)."""
    linear = [c / 255 / 12.92 if c / 255 <= 0.04045 else ((c / 255 + 0.055) / 1.055) ** 2.4 for c in rgb(colour)]
    return 0.2126 * linear[0] + 0.7152 * linear[1] + 0.0722 * linear[2]


def contrast(a: str, b: str) -> float:
    """WCAG's contrast ratio of two colours, 1 to 21."""
    light, dark = sorted((luminance(a), luminance(b)), reverse=True)
    return (light + 0.05) / (dark + 0.05)


def text_on(background: str) -> str:
    """Black or white, whichever reads better on ``background``."""
    return BLACK if contrast(BLACK, background) >= contrast(WHITE, background) else WHITE


def painted(background: str) -> str:
    """The inline style of text on a ``background`` colour: it, and black or white text, whichever reads better."""
    return f"background:{background};color:{text_on(background)}"


def over_page(colour: str, alpha: float) -> str:
    """``colour`` at opacity ``alpha`` (NaN: 0) over the white page, as ``#rrggbb``."""
    alpha = 0.0 if math.isnan(alpha) else min(max(alpha, 0.0), 1.0)
    mixed = (round(alpha * c + (1 - alpha) * p) for c, p in zip(rgb(colour), PAGE))
    return "#" + "".join(f"{c:02x}" for c in mixed)
