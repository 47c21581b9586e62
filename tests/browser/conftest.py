"""Browser-test fixtures: the app on a free port, Debian's Chromium, and pages that fail on outside requests.

Every request a page makes is routed: localhost goes through, anything else is
aborted and recorded, and the test that made it FAILS at teardown (the app
promises that nothing leaves the machine). Without /usr/bin/chromium the tests
skip, except under CI=true, where they fail.
"""

import os
from pathlib import Path

import pytest

from app_driver import open_page, shot, start_app, stop_app
from tiny_checkpoints import save_tiny_bert, zip_folder

CHROMIUM = "/usr/bin/chromium"
CHROMIUM_ARGS = ["--no-sandbox", "--disable-gpu", "--disable-background-networking", "--disable-component-update",
                 "--disable-sync", "--no-first-run"]


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


@pytest.fixture(scope="module")
def app_url(tmp_path_factory):
    # the tests' own model folders live under pytest's temp folder: let the app's path check admit it
    url, proc = start_app(allowed=tmp_path_factory.getbasetemp())
    yield url
    stop_app(proc)


@pytest.fixture(scope="module")  # one Playwright per module: a module may start its own (test_browser_security.py)
def browser(chromium_path):
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium_path, args=CHROMIUM_ARGS)
        yield b
        b.close()


@pytest.fixture()
def page(browser, app_url, request):
    pg = open_page(browser, app_url)
    yield pg
    shot(pg, f"end_{request.node.name}")  # the last state, pass or fail
    blocked = list(pg.blocked)
    pg.context.close()
    assert not blocked, f"the page asked for something outside the machine: {blocked[:5]}"
