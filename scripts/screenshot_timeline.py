"""Screenshot of the Timeline page showing the two example logs side by side (docs/training.md).

Starts ``streamlit run app/streamlit_app.py`` on a free port, opens the Timeline
page in Debian's Chromium (Playwright) at 1280×800, loads
docs/training/healthy.jsonl and docs/training/qk_x10.jsonl by path, and saves
the view of the two heatmaps to docs/training/timeline.png.

    python scripts/screenshot_timeline.py [--out docs/training/timeline.png]
"""

import argparse
import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
LOGS = ("docs/training/healthy.jsonl", "docs/training/qk_x10.jsonl")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_for(url: str, seconds: float = 120) -> None:
    deadline = time.time() + seconds
    while time.time() < deadline:
        try:
            urllib.request.urlopen(url, timeout=2)
            return
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"the app did not answer at {url}")


def shoot(url: str, out: Path) -> None:
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path="/usr/bin/chromium", args=["--no-sandbox", "--disable-gpu"])
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
    port = free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "ATTNSCOPE_ALLOWED_ROOTS": str(ROOT)}
    cmd = [sys.executable, "-m", "streamlit", "run", "app/streamlit_app.py", "--server.port", str(port),
           "--server.headless", "true", "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    server = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}"
        wait_for(url)
        shoot(url, args.out)
    finally:
        server.terminate()
        server.wait(timeout=30)
    print(f"saved {args.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
