"""The app as a shared server, in a real Chromium: path refusals on both pages, two uploads in a row.

Starts its own ``streamlit run`` whose allowed roots are the repository, the home folder and one temporary
folder holding a symlink to /etc; every request outside localhost fails the test (conftest's ``page``).
"""

from pathlib import Path

import pytest

from app_driver import ROOT, idle, start_app, stop_app, until_shown

pytestmark = pytest.mark.browser

OUTSIDE = "is outside the folders AttnScope may read, or does not exist there"


@pytest.fixture(scope="module")
def roots(tmp_path_factory):
    folder = tmp_path_factory.mktemp("roots")
    (folder / "escape").symlink_to("/etc")
    return folder


@pytest.fixture(scope="module")
def app_url(roots):
    url, proc = start_app(log_name="streamlit_security.log", allowed=roots)
    yield url
    stop_app(proc)


def _error_text(pg, path: str) -> str:
    error = pg.locator('[data-testid="stAlertContentError"]').filter(has_text=OUTSIDE)
    error.first.wait_for()
    text = error.first.inner_text().strip()
    assert path in text, text
    return text.replace(path, "PATH")


def _inspect_refusal(pg, path: str) -> str:
    pg.get_by_role("heading", name="Inspect attention").wait_for()
    idle(pg)
    until_shown(pg, lambda: pg.get_by_text("Local folder", exact=True).first.click(),
                 pg.get_by_role("textbox", name="Local folder", exact=True))
    pg.get_by_role("textbox", name="Local folder", exact=True).fill(path)
    run = pg.get_by_role("button", name="Run", exact=True)
    until_shown(pg, run.click, pg.locator('[data-testid="stAlertContentError"]').filter(has_text=OUTSIDE))
    return _error_text(pg, path)


def _diagnose_refusal(pg, path: str) -> str:
    pg.get_by_role("link", name="Diagnose", exact=True).click()
    pg.get_by_role("heading", name="Diagnose a checkpoint").wait_for()
    idle(pg)
    field = pg.get_by_role("textbox", name="Model folder, archive", exact=False)
    until_shown(pg, lambda: pg.get_by_text("Local folder", exact=True).first.click(), field)
    field.fill(path)
    field.press("Enter")
    button = pg.get_by_role("button", name="Diagnose", exact=True)
    until_shown(pg, button.click, pg.locator('[data-testid="stAlertContentError"]').filter(has_text=OUTSIDE))
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
        idle(page)
        _upload(page, path)
        report = page.get_by_role("heading", name=f"Report: {name}")  # this upload's report, not the last one's
        until_shown(page, page.get_by_role("button", name="Diagnose", exact=True).click, report)
        page.get_by_role("heading", name="Findings").wait_for()
        assert page.locator('[data-testid="stAlertContentError"]').count() == 0
        assert page.locator('[data-testid="stException"]').count() == 0
    idle(page)  # the last run's elements (a heatmap titled "first.zip: …") stay until the new run replaces them
    assert page.get_by_text("Uploaded: second.zip").count() == 1
    assert page.get_by_text("first.zip").count() == 0
