"""The README's screenshot: the app on the real all-MiniLM-L6-v2, in Chromium at 1280 × 800.

    python scripts/screenshot_app.py            # writes docs/app_screenshot.png

Starts the app on a free port, keeps its default model (the installed
all-MiniLM-L6-v2) or runs the folder given by ``--model`` on the example
sentence, picks a head, and saves what the first screen shows. Every
request outside localhost is refused; the script fails if one was made.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from app_server import launch_chromium, start_app, stop_app

ROOT = Path(__file__).resolve().parents[1]
IDLE = '[data-testid="stApp"][data-test-connection-state="CONNECTED"][data-test-script-state="notRunning"]'


def shoot(model: str, out: Path, layer: int, head: int) -> None:
    from playwright.sync_api import sync_playwright

    url, proc = start_app()
    outside = []
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p, gpu=True)
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.route("**/*", lambda r: r.continue_() if "127.0.0.1" in r.request.url
                       else (outside.append(r.request.url), r.abort()))
            page.set_default_timeout(180_000)
            page.goto(url)
            page.locator(".heatmaplayer").first.wait_for()
            page.locator(IDLE).wait_for()
            if model:
                page.locator(".st-key-model_kind").get_by_text("Local folder", exact=True).click()
                page.locator(".st-key-model_path input").fill(model)
                page.get_by_role("button", name="Run").click()
                page.get_by_text(Path(model).name, exact=False).first.wait_for()
            for key, value in (("layer", layer), ("head", head)):
                page.locator(IDLE).wait_for()
                page.locator(f".st-key-{key}").click()
                page.get_by_role("option", name=str(value), exact=True).click()
                page.get_by_role("heading", name=f"Layer {layer}, head").first.wait_for()
            page.get_by_role("heading", name=f"Layer {layer}, head {head}").wait_for()
            page.mouse.move(5, 790)  # no hover toolbar over the heatmap
            page.wait_for_timeout(1500)
            page.locator(IDLE).wait_for()
            page.screenshot(path=str(out))
            browser.close()
    finally:
        stop_app(proc)
    if outside:
        raise SystemExit(f"requests outside the machine: {outside}")
    print(f"wrote {out}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--model", default="", help="a model folder to run instead of the app's default")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "app_screenshot.png")
    parser.add_argument("--layer", type=int, default=0)
    parser.add_argument("--head", type=int, default=2)
    args = parser.parse_args()
    shoot(args.model, args.out, args.layer, args.head)


if __name__ == "__main__":
    main()
