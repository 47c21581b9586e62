"""End to end in a real Chromium (Playwright) with every request outside localhost blocked.

Starts ``streamlit run app/streamlit_app.py`` on a free port. Debian's chromium
is used (Playwright's own browser download does not work offline). Without
/usr/bin/chromium the tests skip, except under CI=true, where they fail.
Screenshots go to test-artifacts/.
"""

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest

pytestmark = pytest.mark.browser

ROOT = Path(__file__).resolve().parents[2]
ARTIFACTS = ROOT / "test-artifacts"
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
LOCAL_HOSTS = {"localhost", "127.0.0.1"}
WAIT_MS = 30_000
COLD_START_MS = 120_000  # the server's first run imports torch/transformers and loads the model: slow on a busy CPU
SENTENCE = "The quick brown fox jumps over the lazy dog."


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@pytest.fixture(scope="module")
def chromium_path():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing; install it (apt-get install -y chromium)")
        pytest.skip(f"{CHROMIUM} is missing")
    return CHROMIUM


@pytest.fixture(scope="module")
def app_url():
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "streamlit", "run", "app/streamlit_app.py", "--server.port", str(port),
           "--server.headless", "true", "--browser.gatherUsageStats", "false",
           "--server.fileWatcherType", "none"]  # other edits must not reload modules mid-test
    ARTIFACTS.mkdir(exist_ok=True)
    log = open(ARTIFACTS / "streamlit.log", "w")
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        _wait_healthy(url, proc)
        yield url
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
        log.close()


def _wait_healthy(url: str, proc, timeout: float = 60) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}; see test-artifacts/streamlit.log")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("streamlit did not become healthy in time")


@pytest.fixture(scope="module")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture()
def page(browser, app_url, request):
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    pg = context.new_page()
    pg.blocked = []

    def route(r):
        if urlparse(r.request.url).hostname in LOCAL_HOSTS:
            r.continue_()
        else:
            pg.blocked.append(r.request.url)
            r.abort()

    pg.route("**/*", route)
    pg.set_default_timeout(WAIT_MS)
    pg.goto(app_url)
    yield pg
    _shot(pg, f"end_{request.node.name}")  # the last state, pass or fail
    context.close()


def _shot(pg, name: str) -> None:
    pg.screenshot(path=str(ARTIFACTS / f"{name}.png"), full_page=True)


def _charts(pg):
    return pg.locator('[data-testid="stPlotlyChart"]')


def _heatmap(pg):
    return pg.locator('[data-testid="stPlotlyChart"] .heatmaplayer')


def _no_errors(pg) -> None:
    assert pg.locator('[data-testid="stException"]').count() == 0


def test_run_sentence_switch_head_and_head_view(page):
    start = time.perf_counter()
    _heatmap(page).first.wait_for(timeout=COLD_START_MS)  # the demo model runs on the example sentence at start
    first_heatmap_s = time.perf_counter() - start  # includes the server's first import of torch/transformers
    start = time.perf_counter()
    page.reload()
    _heatmap(page).first.wait_for()
    warm_s = time.perf_counter() - start  # a new session on a running server: model and result cached
    (ARTIFACTS / "timings.json").write_text(json.dumps(
        {"time_to_first_heatmap_s": round(first_heatmap_s, 2), "time_to_heatmap_warm_server_s": round(warm_s, 2)}))
    _idle(page)
    page.get_by_label("Text", exact=True).fill(SENTENCE)
    page.get_by_text("fox", exact=False).first.wait_for()
    example_tokens = _token_labels(page)
    page.get_by_role("button", name="Run").click()
    page.wait_for_function(TOKENS_CHANGED, arg=example_tokens)  # the heatmap now shows the new sentence's tokens
    _heatmap(page).first.wait_for()
    _idle(page)
    _shot(page, "inspect_heatmap")

    def choose_head_2():
        page.locator(".st-key-head").click()
        page.get_by_role("option", name="2", exact=True).click()

    _until_shown(page, choose_head_2, page.get_by_role("heading", name="Layer 0, head 2"))
    _heatmap(page).first.wait_for()
    _shot(page, "inspect_head_2")
    download = _download(page, page.get_by_role("button", name="PNG", exact=True))
    assert Path(download.path()).read_bytes()[:4] == b"\x89PNG"

    page.get_by_role("tab", name="Head view").click()
    frame = page.frame_locator('[data-testid="stIFrame"]')
    frame.locator("svg#view text.tok").first.wait_for()
    assert frame.locator("svg#view line").count() > 0
    frame_el = page.locator('[data-testid="stIFrame"]')
    png = frame_el.screenshot(path=str(ARTIFACTS / "head_view.png"))
    assert _ink(png) > 0.01, "the head view frame is blank"
    _no_errors(page)
    assert not page.blocked or all(urlparse(u).hostname not in LOCAL_HOSTS for u in page.blocked)


def _ink(png: bytes) -> float:
    """Share of pixels that are not (near) white."""
    import io

    from PIL import Image

    img = Image.open(io.BytesIO(png)).convert("L")
    pixels = list(img.getdata())
    return sum(p < 230 for p in pixels) / len(pixels)


def test_overview_click_selects_a_head(page):
    overview = page.locator('.st-key-overview_box [data-testid="stPlotlyChart"]')
    points = overview.locator(".scatterlayer .point")  # one per head, layer by layer
    points.first.wait_for()
    _click_point(page, points.nth(1), page.get_by_role("heading", name="Layer 0, head 1"))
    _shot(page, "inspect_overview_click")


def _idle(pg) -> None:
    """Wait until no script run is in flight.

    Streamlit marks its root with the run state; the "Running…" status widget is
    no signal, as it appears only after a run has lasted 500 ms. Right after an
    interaction the state still reads idle until the server has answered, so wait
    for an effect of the interaction first (or use ``_until_shown``).
    """
    pg.locator('[data-testid="stApp"][data-test-connection-state="CONNECTED"]'
               '[data-test-script-state="notRunning"]').wait_for()


def _until_shown(pg, act, shows, tries: int = 3) -> None:
    """Do ``act`` on an idle app until ``shows`` appears; re-do it only when the app went idle without it.

    An interaction that lands while a rerun replaces the widget under it is lost.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(tries):
        _idle(pg)
        act()
        try:
            shows.wait_for(timeout=10_000)
            return
        except PlaywrightTimeout:
            _idle(pg)  # a slow run is not a lost interaction
            try:
                shows.wait_for(timeout=2_000)
                return
            except PlaywrightTimeout:
                if attempt == tries - 1:
                    raise


def _download(pg, button, tries: int = 2):
    """Click a download button on an idle app and return the download.

    Streamlit gives a deferred download a new file id on every run and drops the
    old one when the run ends: a click that still holds the old id yields nothing.
    """
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(tries):
        _idle(pg)
        try:
            with pg.expect_download(timeout=60_000) as download:  # made server-side only when clicked
                button.click()
            return download.value
        except PlaywrightTimeout:
            if attempt == tries - 1:
                raise


def _token_labels(pg) -> list[str]:
    return pg.locator(TOKEN_LABELS).all_text_contents()


TOKEN_LABELS = '.st-key-inspect_heatmap .ytick text'
TOKENS_CHANGED = f"""before => {{
    const now = [...document.querySelectorAll('{TOKEN_LABELS}')].map(e => e.textContent);
    return now.length > 0 && now.join('|') !== before.join('|');
}}"""


def _click_point(pg, point, shows) -> None:
    """Click a plotly marker (its drag layer covers it, so by position) until ``shows`` appears.

    A click that lands while the chart is still being redrawn is lost, hence ``_until_shown``.
    """
    def click():
        point.scroll_into_view_if_needed()
        box = point.bounding_box()
        pg.mouse.click(box["x"] + box["width"] / 2, box["y"] + box["height"] / 2)

    _until_shown(pg, click, shows)


def _upload(pg, path: Path, shows) -> None:
    """Put one file in the Diagnose uploader and press Diagnose until ``shows`` appears."""
    pg.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(path))
    pg.get_by_text(path.name).first.wait_for()
    # a click during the upload's own rerun can be lost
    _until_shown(pg, pg.get_by_role("button", name="Diagnose", exact=True).click, shows)


def test_diagnose_upload_then_bad_upload(page, tmp_path, bert_zip):
    page.get_by_role("link", name="Diagnose", exact=True).click()
    page.get_by_role("heading", name="Diagnose a checkpoint").wait_for()
    good = tmp_path / "tiny-bert.zip"
    good.write_bytes(bert_zip)
    _upload(page, good, page.get_by_role("heading", name="Findings"))
    pattern_map = page.locator('.st-key-pattern_map_box [data-testid="stPlotlyChart"]')
    pattern_map.locator(".scatterlayer .point").first.wait_for()
    _click_point(page, pattern_map.locator(".scatterlayer .point").nth(1),
                 page.locator(".gtitle").filter(has_text="layer 0, head 1").first)  # the explorer opens that head
    _shot(page, "diagnose_report")

    bad = tmp_path / "broken.zip"
    bad.write_bytes(b"this is not a zip archive")
    page.reload()  # a new session: an empty uploader
    page.get_by_role("heading", name="Diagnose a checkpoint").wait_for()
    error = page.locator('[data-testid="stAlertContentError"]')
    _upload(page, bad, error.filter(has_text=re.compile("zip", re.IGNORECASE)).first)  # not "upload … first"
    assert "zip" in error.first.inner_text().lower()
    _shot(page, "diagnose_bad_upload")

    page.get_by_role("link", name="Inspect", exact=True).click()  # the app still works after the error
    _heatmap(page).first.wait_for()
    _no_errors(page)
