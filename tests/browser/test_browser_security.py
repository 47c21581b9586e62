"""The app as a shared server, in a real Chromium: path refusals on both pages, two uploads in a row.

Starts its own ``streamlit run`` whose allowed roots are the repository and one
temporary folder holding a symlink to /etc; every request outside localhost is
blocked and fails the test. Without /usr/bin/chromium the tests skip, except
under CI=true, where they fail.
"""

import os
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
WAIT_MS = 60_000
OUTSIDE = "is outside the folders AttnScope may read, or does not exist there"


@pytest.fixture(scope="module")
def roots(tmp_path_factory) -> Path:
    folder = tmp_path_factory.mktemp("roots")
    (folder / "escape").symlink_to("/etc")
    return folder


@pytest.fixture(scope="module")
def app_url(roots):
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1",
           "ATTNSCOPE_ALLOWED_ROOTS": os.pathsep.join([str(ROOT), str(roots)])}
    cmd = [sys.executable, "-m", "streamlit", "run", "app/streamlit_app.py", "--server.port", str(port),
           "--server.headless", "true", "--browser.gatherUsageStats", "false", "--server.fileWatcherType", "none"]
    ARTIFACTS.mkdir(exist_ok=True)
    with open(ARTIFACTS / "streamlit_security.log", "w") as log:
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


def _wait_healthy(url: str, proc, timeout: float = 90) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"streamlit exited with {proc.returncode}; see test-artifacts/streamlit_security.log")
        try:
            with urllib.request.urlopen(f"{url}/_stcore/health", timeout=2) as r:
                if r.status == 200:
                    return
        except OSError:
            time.sleep(0.5)
    raise RuntimeError("streamlit did not become healthy in time")


@pytest.fixture(scope="module")
def browser():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing; install it (apt-get install -y chromium)")
        pytest.skip(f"{CHROMIUM} is missing")
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
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
    pg.screenshot(path=str(ARTIFACTS / f"security_{request.node.name}.png"), full_page=True)
    context.close()
    assert not pg.blocked, f"requests left the machine: {pg.blocked}"


def _idle(pg) -> None:
    pg.locator('[data-testid="stApp"][data-test-connection-state="CONNECTED"]'
               '[data-test-script-state="notRunning"]').wait_for()


def _until_shown(pg, act, shows, tries: int = 3) -> None:
    """Do ``act`` on an idle app until ``shows`` appears (an interaction during a rerun can be lost)."""
    from playwright.sync_api import TimeoutError as PlaywrightTimeout

    for attempt in range(tries):
        _idle(pg)
        act()
        try:
            shows.wait_for(timeout=15_000)
            return
        except PlaywrightTimeout:
            if attempt == tries - 1:
                raise


def _error_text(pg, path: str) -> str:
    error = pg.locator('[data-testid="stAlertContentError"]').filter(has_text=OUTSIDE)
    error.first.wait_for()
    text = error.first.inner_text().strip()
    assert path in text, text
    return text.replace(path, "PATH")


def _inspect_refusal(pg, path: str) -> str:
    pg.get_by_role("heading", name="Inspect attention").wait_for()
    _idle(pg)
    _until_shown(pg, lambda: pg.get_by_text("Local folder", exact=True).first.click(),
                 pg.get_by_role("textbox", name="Local folder", exact=True))
    pg.get_by_role("textbox", name="Local folder", exact=True).fill(path)
    run = pg.get_by_role("button", name="Run", exact=True)
    _until_shown(pg, run.click, pg.locator('[data-testid="stAlertContentError"]').filter(has_text=OUTSIDE))
    return _error_text(pg, path)


def _diagnose_refusal(pg, path: str) -> str:
    pg.get_by_role("link", name="Diagnose", exact=True).click()
    pg.get_by_role("heading", name="Diagnose a checkpoint").wait_for()
    _idle(pg)
    field = pg.get_by_role("textbox", name="Model folder, archive", exact=False)
    _until_shown(pg, lambda: pg.get_by_text("Local folder", exact=True).first.click(), field)
    field.fill(path)
    field.press("Enter")
    button = pg.get_by_role("button", name="Diagnose", exact=True)
    _until_shown(pg, button.click, pg.locator('[data-testid="stAlertContentError"]').filter(has_text=OUTSIDE))
    return _error_text(pg, path)


@pytest.mark.parametrize("kind", ["etc", "missing", "symlink"])
def test_paths_outside_the_roots_get_one_refusal_on_both_pages(page, app_url, roots, kind):
    path = {"etc": "/etc", "missing": "/nonexistent-attnscope-outside", "symlink": str(roots / "escape")}[kind]
    on_inspect = _inspect_refusal(page, path)
    on_diagnose = _diagnose_refusal(page, path)
    assert on_inspect == on_diagnose
    assert "does not exist" in on_inspect  # the same words whether the path exists or not
    assert str(roots) not in on_inspect.replace("PATH", "") and str(ROOT) not in on_inspect  # roots not revealed


def _upload(pg, path: Path) -> None:
    pg.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(path))
    pg.get_by_text(f"Uploaded: {path.name}").wait_for()


def test_two_uploads_in_a_row(page, tmp_path, bert_zip):
    page.get_by_role("link", name="Diagnose", exact=True).click()
    page.get_by_role("heading", name="Diagnose a checkpoint").wait_for()
    for name in ("first.zip", "second.zip"):
        path = tmp_path / name
        path.write_bytes(bert_zip)
        _idle(page)
        _upload(page, path)
        report = page.get_by_role("heading", name=f"Report: {name}")  # this upload's report, not the last one's
        _until_shown(page, page.get_by_role("button", name="Diagnose", exact=True).click, report)
        page.get_by_role("heading", name="Findings").wait_for()
        assert page.locator('[data-testid="stAlertContentError"]').count() == 0
        assert page.locator('[data-testid="stException"]').count() == 0
    _idle(page)  # the last run's elements (a heatmap titled "first.zip: …") stay until the new run replaces them
    assert page.get_by_text("Uploaded: second.zip").count() == 1
    assert page.get_by_text("first.zip").count() == 0
