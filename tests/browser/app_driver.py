"""Driving the Streamlit app in Playwright: start it, open pages that refuse outside requests, wait for idle,
retry lost clicks, download, upload, screenshots."""

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
LOCAL_HOSTS = {"localhost", "127.0.0.1"}
WAIT_MS = 30_000
VIEWPORT = {"width": 1280, "height": 800}  # the "first five minutes" screen: the first heatmap must be in view
TOKEN_LABELS = '.st-key-inspect_heatmap .ytick text'
TOKENS_CHANGED = f"""before => {{
    const now = [...document.querySelectorAll('{TOKEN_LABELS}')].map(e => e.textContent);
    return now.length > 0 && now.join('|') !== before.join('|');
}}"""


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(log_name: str = "streamlit.log", allowed: Path | None = None):
    """``(url, process)`` of ``streamlit run app/streamlit_app.py`` on a free port, once healthy.

    ``allowed`` is one more folder the app may read models from (the tests' temp folder), besides the
    repository and the home folder.
    """
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    if allowed is not None:
        roots = [str(ROOT), str(Path.home()), str(allowed)]
        env["ATTNSCOPE_ALLOWED_ROOTS"] = ":".join(roots + [r for r in [os.environ.get("ATTNSCOPE_ALLOWED_ROOTS")] if r])
    cmd = [sys.executable, "-m", "streamlit", "run", "app/streamlit_app.py", "--server.port", str(port),
           "--server.headless", "true", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]  # other edits must not reload modules mid-test
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / log_name, "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    proc.log = log
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
    except Exception:
        stop_app(proc)
        raise
    return url, proc


def stop_app(proc) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
    proc.log.close()


def _wait_healthy(url: str, proc, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}; see test-artifacts/")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("streamlit did not become healthy in time")


def open_page(browser, url: str, viewport: dict = VIEWPORT):
    """A new context's page on ``url`` whose outside requests are aborted and listed in ``page.blocked``."""
    context = browser.new_context(viewport=viewport)
    pg = context.new_page()
    pg.blocked = []

    def route(r):
        if urlparse(r.request.url).hostname in LOCAL_HOSTS or r.request.url.startswith(("data:", "blob:")):
            r.continue_()
        else:
            pg.blocked.append(r.request.url)
            r.abort()

    context.route("**/*", route)
    pg.set_default_timeout(WAIT_MS)
    pg.goto(url)
    return pg


def assert_no_outside_requests(pg) -> None:
    assert not pg.blocked, f"the page asked for something outside the machine: {pg.blocked[:5]}"


def shot(pg, name: str, full_page: bool = True) -> None:
    ARTIFACTS.mkdir(exist_ok=True)
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=full_page)


def charts(pg):
    return pg.locator('[data-testid="stPlotlyChart"]')


def heatmap(pg):
    return pg.locator('[data-testid="stPlotlyChart"] .heatmaplayer')


def no_errors(pg) -> None:
    assert pg.locator('[data-testid="stException"]').count() == 0


def idle(pg) -> None:
    """Wait until no script run is in flight.

    Streamlit marks its root with the run state; the "Running…" status widget is
    no signal, as it appears only after a run has lasted 500 ms. Right after an
    interaction the state still reads idle until the server has answered, so wait
    for an effect of the interaction first (or use ``until_shown``).
    """
    pg.locator('[data-testid="stApp"][data-test-connection-state="CONNECTED"]'
               '[data-test-script-state="notRunning"]').wait_for()


def until_shown(pg, act, shows, tries: int = 3) -> None:
    """Do ``act`` on an idle app until ``shows`` appears; re-do it only when the app went idle without it.

    An interaction that lands while a rerun replaces the widget under it is lost.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(tries):
        idle(pg)
        act()
        try:
            shows.wait_for(timeout=10_000)
            return
        except PlaywrightTimeout:
            idle(pg)  # a slow run is not a lost interaction
            try:
                shows.wait_for(timeout=2_000)
                return
            except PlaywrightTimeout:
                if attempt == tries - 1:
                    raise


def download(pg, button, tries: int = 2):
    """Click a download button on an idle app and return the download.

    Streamlit gives a deferred download a new file id on every run and drops the
    old one when the run ends: a click that still holds the old id yields nothing.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(tries):
        idle(pg)
        try:
            with pg.expect_download(timeout=60_000) as event:  # made server-side only when clicked
                button.click()
            return event.value
        except PlaywrightTimeout:
            if attempt == tries - 1:
                raise


def token_labels(pg) -> list[str]:
    return pg.locator(TOKEN_LABELS).all_text_contents()


def click_point(pg, point, shows, tries: int = 3) -> None:
    """Click a plotly marker (its drag layer covers it, so by position) until ``shows`` appears (``tries`` clicks at
    most: 1 where a second click would hide a bug)."""
    def click():
        point.scroll_into_view_if_needed()
        box = point.bounding_box()
        pg.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)

    until_shown(pg, click, shows, tries)


def upload(pg, path: Path, shows) -> None:
    """Put one file in the Diagnose uploader and press Diagnose until ``shows`` appears."""
    pg.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(path))
    pg.get_by_text(path.name).first.wait_for()
    # a click during the upload's own rerun can be lost
    until_shown(pg, pg.get_by_role("button", name="Diagnose", exact=True).click, shows)


def run_inspect(pg, source: str, text: str, shows) -> None:
    """Inspect ``source`` (a local folder) on ``text`` from the sidebar form."""
    idle(pg)
    pg.locator(".st-key-model_kind").get_by_text("Local folder", exact=True).click()
    box = pg.locator(".st-key-model_path input")
    box.wait_for()
    box.fill(source)
    pg.get_by_label("Text", exact=True).fill(text)
    until_shown(pg, pg.get_by_role("button", name="Run").click, shows)


def ink(png: bytes) -> float:
    """Share of pixels that are not (near) white."""
    import io

    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("L")
    pixels = list(img.getdata())
    return sum(p < 230 for p in pixels) / len(pixels)
