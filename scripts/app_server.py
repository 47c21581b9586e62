"""Start the app for the measurement and screenshot scripts: ``streamlit run`` on a free port, once healthy.

    url, proc = start_app()          # http://127.0.0.1:PORT, the server's Popen
    ...
    stop_app(proc)

``launch_chromium(playwright)`` starts Debian's Chromium (``playwright install`` cannot download browsers here);
``open_diagnose_page(browser, url)`` opens the Diagnose page once its heading is drawn.

``app_root`` runs another checkout (to measure the code before a change);
``extra_args`` are more ``streamlit run`` options; ``env`` adds variables.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
CHROMIUM = "/usr/bin/chromium"  # apt-get install -y chromium
START_S = 120  # importing torch and transformers on a busy 2-core machine


def start_app(app_root: Path = ROOT, extra_args=(), env: dict | None = None) -> tuple[str, subprocess.Popen]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    cmd = [sys.executable, "-m", "streamlit", "run", "app/streamlit_app.py", "--server.port", str(port),
           "--server.headless", "true", "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none",
           *extra_args]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
    proc = subprocess.Popen(cmd, cwd=app_root, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    deadline = time.time() + START_S
    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2):
                return url, proc
        except OSError:
            time.sleep(0.5)
    proc.kill()
    raise RuntimeError(f"the app in {app_root} did not start within {START_S} s")


def stop_app(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()


def launch_chromium(playwright, gpu: bool = False):
    """A headless Debian Chromium browser from a ``sync_playwright()`` context."""
    args = ["--no-sandbox"] + ([] if gpu else ["--disable-gpu"])
    return playwright.chromium.launch(executable_path=CHROMIUM, args=args)


def open_diagnose_page(browser, url: str):
    """A new page on ``url``'s Diagnose page, once its heading is drawn (the first run imports torch)."""
    page = browser.new_page()
    page.goto(f"{url}/diagnose")
    page.get_by_role("heading", name="Diagnose a checkpoint").wait_for(timeout=300_000)
    return page
