"""The README's screenshot: the app on the real all-MiniLM-L6-v2, in Chromium at 1280 × 800.

    python scripts/screenshot_app.py            # writes docs/app_screenshot.png

Starts the app on a free port, keeps its default model (the installed
all-MiniLM-L6-v2) or runs the folder given by ``--model`` on the example
sentence, picks a head, and saves what the first screen shows. Every
request outside localhost is refused; the script fails if one was made.
"""

from __future__ import annotations

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
IDLE = '[data-testid="stApp"][data-test-connection-state="CONNECTED"][data-test-script-state="notRunning"]'


def _start(port: int):
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    cmd = [sys.executable, "-m", "streamlit", "run", "app/streamlit_app.py", "--server.port", str(port),
           "--server.headless", "true", "--server.fileWatcherType", "none"]
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    for _ in range(120):
        try:
            urllib.request.urlopen(f"http://127.0.0.1:{port}/_stcore/health", timeout=2)
            return proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise SystemExit("the app did not start")


def shoot(model: str, out: Path, layer: int, head: int) -> None:
    from playwright.sync_api import sync_playwright

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    proc = _start(port)
    outside = []
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1280, "height": 800})
            page.route("**/*", lambda r: r.continue_() if "127.0.0.1" in r.request.url
                       else (outside.append(r.request.url), r.abort()))
            page.set_default_timeout(180_000)
            page.goto(f"http://127.0.0.1:{port}")
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
        proc.terminate()
        try:
            proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
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
