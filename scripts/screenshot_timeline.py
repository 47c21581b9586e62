"""Screenshot of the Timeline page showing the two example logs side by side (docs/training.md).

Starts ``streamlit run app/streamlit_app.py`` on a free port, opens the Timeline
page in Debian's Chromium (Playwright) at 1280×800, loads
docs/training/healthy.jsonl and docs/training/qk_x10.jsonl by path, and saves
the view of the two heatmaps to docs/training/timeline.png.

    python scripts/screenshot_timeline.py [--out docs/training/timeline.png]
"""

import argparse
import sys
import time
from pathlib import Path

from app_server import launch_chromium, start_app, stop_app

ROOT = Path(__file__).resolve().parent.parent
LOGS = ("docs/training/healthy.jsonl", "docs/training/qk_x10.jsonl")


def shoot(url: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = launch_chromium(p)
        page = browser.new_page(viewport={"width": 1280, "height": 800})
        page.goto(f"{url}/timeline", timeout=120_000)
        page.get_by_text("Monitor log paths").click(timeout=180_000)
        page.locator("textarea").first.fill("\n".join(LOGS))
        page.keyboard.press("Control+Enter")
        page.get_by_role("button", name="Load").click()
        page.locator(".js-plotly-plot").nth(3).wait_for(timeout=120_000)
        time.sleep(2)  # let plotly finish drawing
        page.locator("h3", has_text="healthy.jsonl").evaluate("e => e.scrollIntoView({block: 'start'})")
        time.sleep(1)
        page.screenshot(path=str(out))
        browser.close()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "training" / "timeline.png")
    args = parser.parse_args(argv)
    url, server = start_app(env={"ATTNSCOPE_ALLOWED_ROOTS": str(ROOT)})
    try:
        shoot(url, args.out)
    finally:
        stop_app(server)
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
