"""Server RSS while one browser inspects a known model on several long texts, one after another.

    python scripts/measure_result_memory.py [--model SmolLM2] [--runs 6]

Starts the app, opens Inspect in Debian's Chromium, picks ``--model`` in the sidebar and runs it on
``--runs`` different texts of about 4,990 characters (the default probes, shifted by a few words each
time). Prints one JSON line per run: seconds until the page is idle again and the server's RSS
(``/proc/PID/status``). Each result is cached by the server (``app.server.cache.result_cache``), so
the RSS shows what the result cache holds.
"""

import argparse
import json
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "tests" / "browser"))

from app_driver import idle, open_page, start_app, stop_app  # noqa: E402
from diagnostics.probe_texts import DEFAULT_PROBES  # noqa: E402
from scripts.app_server import launch_chromium  # noqa: E402

CHARS = 4990  # under the Inspect page's 5,000-character limit


def rss_gb(pid: int) -> float:
    status = Path(f"/proc/{pid}/status").read_text()
    return int(status.split("VmRSS:")[1].split()[0]) * 1024 / 1e9


def texts(runs: int) -> list[str]:
    words = (" ".join(p.text for p in DEFAULT_PROBES) * 2).split()
    return [" ".join(words[7 * i:])[:CHARS] for i in range(runs)]


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--model", default="SmolLM2", help="text of the sidebar's known-model option to pick")
    parser.add_argument("--runs", type=int, default=6)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    url, proc = start_app("measure_result_memory.log")
    try:
        with sync_playwright() as playwright:
            browser = launch_chromium(playwright)
            page = open_page(browser, url)
            page.get_by_role("heading", name="Inspect attention").wait_for(timeout=300_000)
            idle(page)
            print(json.dumps({"run": "start", "rss_gb": round(rss_gb(proc.pid), 2)}), flush=True)
            page.locator(".st-key-demo_model").click()
            page.get_by_role("option").filter(has_text=args.model).first.click()
            idle(page)
            for i, text in enumerate(texts(args.runs)):
                page.get_by_label("Text", exact=True).fill(text)
                start = time.time()
                page.get_by_role("button", name="Run").click()
                time.sleep(2)  # the run starts: until then the page still reads idle
                idle(page)
                print(json.dumps({"run": i, "seconds": round(time.time() - start, 1),
                                  "rss_gb": round(rss_gb(proc.pid), 2)}), flush=True)
            browser.close()
    finally:
        stop_app(proc)


if __name__ == "__main__":
    main()
