"""Browser-test fixtures: the app on a free port, Debian's Chromium, and pages that fail on outside requests.

Every request a page makes is routed: localhost goes through, anything else is
aborted and recorded, and the test that made it FAILS at teardown (the app
promises that nothing leaves the machine). Without /usr/bin/chromium the tests
skip, except under CI=true, where they fail.
"""

import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path
from urllib.parse import urlparse

import pytest

from app_driver import ARTIFACTS, shot
from tiny_checkpoints import save_tiny_bert, zip_folder

ROOT = Path(__file__).resolve().parents[2]
CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]
LOCAL_HOSTS = {"localhost", "127.0.0.1"}
WAIT_MS = 30_000
VIEWPORT = {"width": 1280, "height": 800}  # the "first five minutes" screen: the first heatmap must be in view


@pytest.fixture(scope="session")
def bert_zip(tmp_path_factory) -> bytes:
    return zip_folder(save_tiny_bert(tmp_path_factory.mktemp("tiny-bert")))


@pytest.fixture(scope="session")
def chromium_path():
    if not Path(CHROMIUM).exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"{CHROMIUM} is missing; install it (apt-get install -y chromium)")
        pytest.skip(f"{CHROMIUM} is missing")
    return CHROMIUM


def _free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_app(log_name: str = "streamlit.log", env: dict | None = None):
    """``(url, process)`` of ``streamlit run app/streamlit_app.py`` on a free port, once healthy."""
    port = _free_port()
    env = {**os.environ, "HF_HUB_OFFLINE": "1", "PYTHONUNBUFFERED": "1", **(env or {})}
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


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    # the tests' own model folders live under pytest's temp folder: let the app's path check admit it
    url, proc = start_app(env={"ATTNSCOPE_ALLOWED_ROOTS": str(tmp_path_factory.getbasetemp())})
    yield url
    stop_app(proc)


@pytest.fixture(scope="session")
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield b
        b.close()


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


@pytest.fixture()
def page(browser, app_url, request):
    pg = open_page(browser, app_url)
    yield pg
    shot(pg, f"end_{request.node.name}")  # the last state, pass or fail
    blocked = list(pg.blocked)
    pg.context.close()
    assert not blocked, f"the page asked for something outside the machine: {blocked[:5]}"
