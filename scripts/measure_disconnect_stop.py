"""Does the server stop working when the browser goes away? CPU of the app server after the tab closes.

    python scripts/measure_disconnect_stop.py                       # this checkout, the Diagnose page
    python scripts/measure_disconnect_stop.py --page compare        # the Compare page
    python scripts/measure_disconnect_stop.py --app-root OTHER      # another checkout, for comparison

Starts the app and, in Chromium, diagnoses the known SmolLM2 on 25 long probes, or compares it with itself on
them (demo-bert, the model diagnosed before, read its 25 probes of at most 512 tokens in ~5 s: the second probe
could pass before the script saw it, and the run end on its own); closes the tab once the second probe runs,
and prints one JSON line: the server's CPU seconds in successive windows after the close, and the load average.
A server that stops spends ~0 s per window soon after.
"""

import argparse
import json
import os
import time
from pathlib import Path

from app_server import launch_chromium, open_diagnose_page, start_app, stop_app

ROOT = Path(__file__).resolve().parents[1]
PROBE = " ".join(["the cat sat on the mat because it was tired and the dog barked"] * 30)
WINDOWS = (2, 5, 10, 20)  # seconds after the close
PROBES = 25  # 47,225 characters: within the app's 50,000 (40 of them, joined without blank lines, were one probe
# of 75,599 characters, which the page refused: the tab was never closed mid-run)


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def fill_probes(page) -> None:
    probes = page.get_by_role("textbox", name="Probe texts", exact=False)
    probes.fill("\n\n".join([PROBE] * PROBES))  # a blank line between probes
    probes.press("Control+Enter")
    time.sleep(1)


def start_diagnose(page) -> None:
    page.locator(".st-key-diag_kind").get_by_text("Known model", exact=True).click()
    page.locator(".st-key-diag_known").wait_for()
    time.sleep(2)  # the rerun that drew the picker may still be replacing it
    page.locator(".st-key-diag_known").click()
    page.get_by_role("option").filter(has_text="SmolLM2").first.click()
    time.sleep(1)
    page.get_by_text("Options").first.click()
    fill_probes(page)
    page.get_by_role("button", name="Diagnose", exact=True).click()


def start_compare(page) -> None:
    page.get_by_role("link", name="Compare", exact=True).click()
    page.get_by_role("heading", name="Compare two models").wait_for()
    for side in ("a", "b"):
        page.locator(f".st-key-cmp_{side}_kind").get_by_text("Known model", exact=True).click()
        page.locator(f".st-key-cmp_{side}_known").wait_for()
        time.sleep(2)  # the rerun that drew the picker may still be replacing it
        page.locator(f".st-key-cmp_{side}_known").click()
        page.get_by_role("option").filter(has_text="SmolLM2").first.click()
        time.sleep(1)
    fill_probes(page)
    page.get_by_role("button", name="Compare", exact=True).click()


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--app-root", type=Path, default=ROOT)
    parser.add_argument("--page", choices=("diagnose", "compare"), default="diagnose")
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    url, proc = start_app(args.app_root)
    result = {"app_root": str(args.app_root), "page": args.page}
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = open_diagnose_page(browser, url)
            (start_compare if args.page == "compare" else start_diagnose)(page)
            page.get_by_text("probe 2/", exact=False).first.wait_for(timeout=300_000)
            page.close()
            browser.close()
        closed = cpu_seconds(proc.pid)
        last, elapsed = closed, 0
        for window in WINDOWS:
            time.sleep(window - elapsed)
            now = cpu_seconds(proc.pid)
            result[f"cpu_s_{elapsed}_to_{window}s"] = round(now - last, 2)
            last, elapsed = now, window
    finally:
        stop_app(proc)
    result["load_average"] = os.getloadavg()[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
