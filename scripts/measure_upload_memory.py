"""Peak server memory while a large file is uploaded on the Diagnose page, in a real Chromium.

    python scripts/measure_upload_memory.py --gb 2            # this checkout
    python scripts/measure_upload_memory.py --gb 2 --app-root /path/to/other/checkout

Starts ``streamlit run app/streamlit_app.py``, opens the Diagnose page, uploads a
sparse file of ``--gb`` GB named ``model.safetensors`` (its content does not
matter for the upload), and samples the server's RSS every 50 ms from
/proc/PID/status until the upload has been handled and the page is idle again,
then presses Diagnose (the loader refuses the zero bytes at once). Prints one
JSON line: baseline, peak during the upload, after it, and after Diagnose, in
GB, with the load average.
"""

import argparse
import json
import os
import tempfile
import threading
import time
from pathlib import Path

from app_server import launch_chromium, open_diagnose_page, start_app, stop_app

ROOT = Path(__file__).resolve().parents[1]


def rss_gb(pid: int) -> float:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) * 1024 / 1e9
    return 0.0


class Sampler(threading.Thread):
    def __init__(self, pid):
        super().__init__(daemon=True)
        self.pid, self.peak, self.running = pid, 0.0, True

    def run(self):
        while self.running:
            self.peak = max(self.peak, rss_gb(self.pid))
            time.sleep(0.05)

    def take(self) -> float:
        peak, self.peak = self.peak, rss_gb(self.pid)
        return peak


def idle(page):
    page.locator('[data-testid="stApp"][data-test-script-state="notRunning"]').wait_for(timeout=600_000)


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--gb", type=float, default=2.0)
    parser.add_argument("--app-root", type=Path, default=ROOT)
    args = parser.parse_args()
    from playwright.sync_api import sync_playwright

    folder = Path(tempfile.mkdtemp())
    upload = folder / "model.safetensors"
    with open(upload, "wb") as f:
        f.truncate(int(args.gb * 1e9))  # sparse: costs no disk
    url, proc = start_app(args.app_root, ["--server.maxUploadSize", "4000"])
    sampler = Sampler(proc.pid)
    result = {"upload_gb": args.gb, "app_root": str(args.app_root)}
    try:
        with sync_playwright() as p:
            browser = launch_chromium(p)
            page = open_diagnose_page(browser, url)
            idle(page)
            time.sleep(2)
            result["baseline_gb"] = round(rss_gb(proc.pid), 2)
            sampler.start()
            start_time = time.perf_counter()
            sent = lambda r: "upload_file" in r.url and r.request.method == "PUT"  # noqa: E731
            with page.expect_response(sent, timeout=600_000):
                page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(upload))
            time.sleep(1)
            idle(page)
            time.sleep(2)
            result["upload_s"] = round(time.perf_counter() - start_time, 1)
            result["peak_during_upload_gb"] = round(sampler.take(), 2)
            result["after_upload_gb"] = round(rss_gb(proc.pid), 2)
            page.get_by_role("button", name="Diagnose", exact=True).click()
            time.sleep(1)
            idle(page)
            time.sleep(2)
            result["peak_during_diagnose_gb"] = round(sampler.take(), 2)
            result["after_diagnose_gb"] = round(rss_gb(proc.pid), 2)
            browser.close()
    finally:
        sampler.running = False
        stop_app(proc)
        upload.unlink()
        folder.rmdir()
    result["load_average"] = os.getloadavg()[0]
    print(json.dumps(result))


if __name__ == "__main__":
    main()
