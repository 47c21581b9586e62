"""Seconds Chromium takes to draw the BertViz views, and their SVG shapes, by tokens and heads (docs/app.md).

    python scripts/measure_bertviz_draw.py

Needs the test dependencies (Playwright) and Debian's Chromium at /usr/bin/chromium. The maps are random softmax
rows; the pages are the standalone files the app saves, opened offline.
"""

import argparse
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from app.views.bertviz_view import model_view_page, neuron_view_page  # noqa: E402

MODEL_VIEWS = [(128, 12), (256, 1), (256, 4), (512, 1)]  # (tokens, heads)
NEURON_VIEWS = [64, 128, 256]  # tokens


def _attention(heads: int, n: int) -> torch.Tensor:
    g = torch.Generator().manual_seed(0)
    return torch.softmax(torch.randn(1, heads, n, n, generator=g) * 3, -1)  # (1, H, n, n)


def _pages():
    for n, heads in MODEL_VIEWS:
        tokens = [f"t{i}" for i in range(n)]
        yield f"model view, {heads} head(s) x {n} tokens", model_view_page(
            _attention(heads, n), tokens, tokens, [0], list(range(heads)), inline=True).html
    for n in NEURON_VIEWS:
        tokens = [f"t{i}" for i in range(n)]
        vectors = torch.randn(2, n, 64, generator=torch.Generator().manual_seed(1))  # (2, n, d)
        yield f"neuron view, {n} tokens", neuron_view_page(_attention(1, n)[0, 0], vectors[0], vectors[1], tokens,
                                                           tokens, causal=False, inline=True)


def main() -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p, tempfile.TemporaryDirectory() as folder:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
        for i, (name, html) in enumerate(_pages()):
            path = Path(folder) / f"{i}.html"
            path.write_text(html)
            page = browser.new_page()
            start = time.perf_counter()
            page.goto(path.as_uri(), timeout=300_000)
            page.locator("#vis svg text").first.wait_for(state="attached", timeout=300_000)
            shapes = page.evaluate("document.querySelectorAll('svg *').length")
            print(f"{name}: {time.perf_counter() - start:.1f} s, {shapes:,} SVG shapes", flush=True)
            page.close()
        browser.close()


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    main()
