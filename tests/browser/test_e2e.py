"""End to end in a real Chromium (Playwright): any request outside localhost fails the test (conftest).

Starts ``streamlit run app/streamlit_app.py`` on a free port. Debian's chromium
is used (Playwright's own browser download does not work offline).
Screenshots go to test-artifacts/.
"""

import json
import re
import time
from pathlib import Path

import pytest
from playwright.sync_api import expect

from app_driver import (
    ARTIFACTS, TOKENS_CHANGED, click_point, download, heatmap, idle, ink, no_errors, open_page, run_inspect, shot,
    token_labels, until_shown, upload,
)
from tiny import MARKUP_TOKENS
from tiny_checkpoints import save_markup_bert

pytestmark = pytest.mark.browser

COLD_START_MS = 120_000  # the server's first run imports torch/transformers and loads the model: slow on a busy CPU
SENTENCE = "The quick brown fox jumps over the lazy dog."


def test_run_sentence_switch_head_and_head_view(page):
    start = time.perf_counter()
    heatmap(page).first.wait_for(timeout=COLD_START_MS)  # the default model runs on the example sentence at start
    first_heatmap_s = time.perf_counter() - start  # includes the server's first import of torch/transformers
    start = time.perf_counter()
    page.reload()
    heatmap(page).first.wait_for()
    warm_s = time.perf_counter() - start  # a new session on a running server: model and result cached
    (ARTIFACTS / "timings.json").write_text(json.dumps(
        {"time_to_first_heatmap_s": round(first_heatmap_s, 2), "time_to_heatmap_warm_server_s": round(warm_s, 2)}))
    idle(page)
    box = heatmap(page).first.bounding_box()
    assert box["y"] < 800 - 100, f"the first heatmap starts at y={box['y']:.0f}: not in view at 1280×800"
    shot(page, "inspect_first_screen", full_page=False)
    page.get_by_label("Text", exact=True).fill(SENTENCE)
    example_tokens = token_labels(page)
    page.get_by_role("button", name="Run").click()
    page.wait_for_function(TOKENS_CHANGED, arg=example_tokens)  # the heatmap now shows the new sentence's tokens
    heatmap(page).first.wait_for()
    idle(page)
    shot(page, "inspect_heatmap")

    def choose_head_2():
        page.locator(".st-key-head").click()
        page.get_by_role("option", name="2", exact=True).click()

    until_shown(page, choose_head_2, page.get_by_role("heading", name="Layer 0, head 2"))
    heatmap(page).first.wait_for()
    shot(page, "inspect_head_2")
    png = download(page, page.get_by_role("button", name="PNG", exact=True))
    assert Path(png.path()).read_bytes()[:4] == b"\x89PNG"
    assert "Layer-0-head-2" in png.suggested_filename and "/" not in png.suggested_filename

    frame = page.frame_locator('.st-key-inspect_extra_view ~ div [data-testid="stIFrame"], [data-testid="stIFrame"]')
    frame.first.locator("svg#view text.tok").first.wait_for()
    assert frame.first.locator("svg#view line").count() > 0
    frame_png = page.locator('[data-testid="stIFrame"]').first.screenshot(path=str(ARTIFACTS / "head_view.png"))
    assert ink(frame_png) > 0.01, "the head view frame is blank"
    no_errors(page)


def test_bertviz_model_view_renders_offline_and_exports(page, tmp_path):
    heatmap(page).first.wait_for(timeout=COLD_START_MS)
    until_shown(page, page.get_by_text("BertViz model view", exact=True).click,
                page.get_by_role("button", name="Save this view (standalone HTML)"))
    frame = page.frame_locator('[data-testid="stIFrame"]').first
    frame.locator("#vis svg text").first.wait_for(state="attached")  # d3/jQuery came from /app/static: bertviz drew
    assert "Heads" in frame.locator("#vis svg").first.text_content()
    png = page.locator('[data-testid="stIFrame"]').first.screenshot(path=str(ARTIFACTS / "bertviz_model_view.png"))
    assert ink(png) > 0.01, "the BertViz frame is blank"
    saved = download(page, page.get_by_role("button", name="Save this view (standalone HTML)"))
    assert saved.suggested_filename.endswith(".html") and "bertviz-model-view" in saved.suggested_filename
    offline = page.context.browser.new_context()  # the saved file alone, nothing served: it must still draw
    offline.route("**/*", lambda r: r.continue_() if r.request.url.startswith("file:") else r.abort())
    standalone = offline.new_page()
    saved.save_as(tmp_path / saved.suggested_filename)  # Playwright's own copy has no .html ending
    standalone.goto((tmp_path / saved.suggested_filename).as_uri())
    standalone.locator("#vis svg text").first.wait_for(state="attached")
    offline.close()

    until_shown(page, page.get_by_text("BertViz neuron view", exact=True).click,
                page.get_by_text("BertViz neuron view of layer 0, head 0"))  # the default MiniLM is a BERT
    neuron = page.frame_locator('[data-testid="stIFrame"]').first
    neuron.locator("#vis svg text", has_text="q ∙ k").first.wait_for(state="attached")  # the new frame, drawn
    no_errors(page)


def test_overview_click_selects_a_head(page):
    overview = page.locator('.st-key-overview_box [data-testid="stPlotlyChart"], '
                            '[data-testid="stPlotlyChart"]:has(.scatterlayer .point)').first
    points = overview.locator(".scatterlayer .point")  # one per head, layer by layer
    points.first.wait_for(timeout=COLD_START_MS)
    click_point(page, points.nth(1), page.get_by_role("heading", name="Layer 0, head 1"))
    expect(page.get_by_test_id("stToast")).to_contain_text("Layer 0, head 1 opened above")  # its map is out of view
    shot(page, "inspect_overview_click")

    def choose_head_5():
        page.mouse.wheel(0, -5000)  # back to the top: the picker's menu opens in view
        page.locator(".st-key-head").click()
        page.get_by_role("option", name="5", exact=True).click()
    until_shown(page, choose_head_5, page.get_by_role("heading", name="Layer 0, head 5"))
    # the same head again, with one click: plotly had read it as a deselection, and nothing happened
    click_point(page, points.nth(1), page.get_by_role("heading", name="Layer 0, head 1"), tries=1)


def test_a_phone_scrolls_the_overview_sideways_instead_of_running_its_captions_together(browser, app_url):
    """At 390 px Streamlit shrank MiniLM's 12-head overview to the column, and the 9 px captions of neighbouring
    heads ran into each other ("diagonalsparse"); the box now scrolls, and a head out of view is still a click away."""
    phone = open_page(browser, app_url, {"width": 390, "height": 844})
    try:
        captions = phone.locator(".st-key-overview_box .textpoint text")  # one per head, layer by layer
        captions.nth(11).wait_for(state="attached", timeout=COLD_START_MS)
        boxes = phone.evaluate("""() => [...document.querySelectorAll('.st-key-overview_box .textpoint text')]
            .slice(0, 12).map(t => { const r = t.getBBox(); return [r.x, r.x + r.width]; })""")  # layer 0
        gaps = [right[0] - left[1] for left, right in zip(boxes, boxes[1:])]
        assert min(gaps) > 0, f"captions of neighbouring heads overlap: gaps {gaps}"
        box = phone.locator(".st-key-overview_box").bounding_box()
        assert box["x"] + box["width"] <= 390, "the page itself got wider than the phone"
        points = phone.locator(".st-key-overview_box .scatterlayer .point")
        click_point(phone, points.nth(10), phone.get_by_role("heading", name="Layer 0, head 10"))
        no_errors(phone)
    finally:
        shot(phone, "phone_overview")
        blocked = list(phone.blocked)
        phone.context.close()
    assert not blocked, f"the page asked for something outside the machine: {blocked[:5]}"


def test_text_typed_and_not_yet_run_outlives_a_rerun_of_the_page(page):
    """Every run wrote the sidebar form's values back to their widgets (to keep them across pages), and each write
    reached the browser as a forced value: switching the Model kind put the last Run's text over the one typed."""
    heatmap(page).first.wait_for(timeout=COLD_START_MS)
    idle(page)
    text = page.get_by_label("Text", exact=True)
    text.fill("Typed, not yet run.")
    path_box = page.locator(".st-key-model_path input")
    until_shown(page, page.locator(".st-key-model_kind").get_by_text("Local folder", exact=True).click, path_box)
    idle(page)
    assert page.get_by_label("Text", exact=True).input_value() == "Typed, not yet run."


def test_a_page_round_trip_keeps_what_the_page_showed(page):
    """Values written back to their widgets each run reached the server, not the browser: after a visit to Diagnose
    the Text box was empty (the next Run said "text is empty") and a head picked in the explorer was lost."""
    heatmap(page).first.wait_for(timeout=COLD_START_MS)
    idle(page)
    page.get_by_label("Text", exact=True).fill(SENTENCE)
    example_tokens = token_labels(page)
    page.get_by_role("button", name="Run").click()
    page.wait_for_function(TOKENS_CHANGED, arg=example_tokens)

    def choose_head_2():
        page.locator(".st-key-head").click()
        page.get_by_role("option", name="2", exact=True).click()
    until_shown(page, choose_head_2, page.get_by_role("heading", name="Layer 0, head 2"))
    until_shown(page, page.get_by_role("link", name="Diagnose").click, page.locator(".st-key-diag_kind"))
    until_shown(page, page.get_by_role("link", name="Inspect").click, heatmap(page).first)
    idle(page)
    assert page.get_by_label("Text", exact=True).input_value() == SENTENCE
    assert page.locator(".st-key-head input").input_value() == "2"
    assert page.get_by_role("heading", name="Layer 0, head 2").count() == 1


def test_markup_tokens_show_as_text(page, tmp_path):
    folder = save_markup_bert(tmp_path / "markup-bert")
    heatmap(page).first.wait_for(timeout=COLD_START_MS)
    labels = page.locator(".st-key-inspect_heatmap .xtick text")
    run_inspect(page, str(folder), "|".join(MARKUP_TOKENS), labels.filter(has_text='<a href="http').first)
    idle(page)
    texts = labels.all_text_contents()
    assert any('<a href="http://127…' in t for t in texts), texts  # the characters, shown (cut at 20)
    assert page.locator(".st-key-inspect_heatmap a").count() == 0  # ... and no link made of them
    assert any("<!--" in t for t in texts) and any("**bold**" in t for t in texts)
    frame = page.frame_locator('[data-testid="stIFrame"]').first
    frame.locator("svg#view text.tok").first.wait_for()  # "<!--" did not blank the head view
    shown = frame.locator("svg#view text.tok").evaluate_all("els => els.map(e => e.getAttribute('aria-label'))")
    assert "<!--" in shown and "</script>" in shown and "<img src=x onerror=alert(1)>" in shown
    assert frame.locator("svg#view img, svg#view a").count() == 0  # said as text, drawn as text
    heading = page.locator(".st-key-inspect_heatmap .gtitle").first.text_content()
    assert folder.name in heading and str(tmp_path) not in heading  # a name, not a server path
    shot(page, "inspect_markup_tokens")
    no_errors(page)


def test_text_over_the_limit_gets_a_message(page):
    heatmap(page).first.wait_for(timeout=COLD_START_MS)
    idle(page)
    page.get_by_label("Text", exact=True).fill("word " * 10_000)  # 50,000 characters pasted
    error = page.locator('[data-testid="stAlertContentError"]').filter(has_text="over the limit")
    until_shown(page, page.get_by_role("button", name="Run").click, error.first)
    assert "50,000 characters" in error.first.inner_text()
    shot(page, "inspect_text_over_limit")


def test_diagnose_upload_then_bad_upload(page, tmp_path, bert_zip):
    page.get_by_role("link", name="Diagnose", exact=True).click()
    page.get_by_role("heading", name="Diagnose a checkpoint").wait_for()
    good = tmp_path / "tiny-bert.zip"
    good.write_bytes(bert_zip)
    upload(page, good, page.get_by_role("heading", name="Findings"))
    assert page.get_by_role("heading", name="Report: tiny-bert.zip").count() == 1
    pattern_map = page.locator('.st-key-pattern_map_box [data-testid="stPlotlyChart"]')
    pattern_map.locator(".scatterlayer .point").first.wait_for()
    click_point(page, pattern_map.locator(".scatterlayer .point").nth(1),
                page.get_by_role("heading", name="Layer 0, head 1"))  # the explorer opens that head
    shot(page, "diagnose_report")

    bad = tmp_path / "broken.zip"
    bad.write_bytes(b"this is not a zip archive")
    page.reload()  # a new session: an empty uploader
    page.get_by_role("heading", name="Diagnose a checkpoint").wait_for()
    error = page.locator('[data-testid="stAlertContentError"]')
    upload(page, bad, error.filter(has_text=re.compile("zip", re.IGNORECASE)).first)  # not "upload … first"
    assert "zip" in error.first.inner_text().lower()
    shot(page, "diagnose_bad_upload")

    page.get_by_role("link", name="Inspect", exact=True).click()  # the app still works after the error
    heatmap(page).first.wait_for()
    no_errors(page)


def _known_model(page, side: str, name: str) -> None:
    """Pick ``name`` as Compare's model ``side`` ("a" or "b")."""
    page.locator(f".st-key-cmp_{side}_kind").get_by_text("Known model", exact=True).click()
    box = page.locator(f".st-key-cmp_{side}_known")
    box.wait_for()
    idle(page)
    box.click()
    page.get_by_role("option").filter(has_text=name).first.click()
    idle(page)


def test_compare_two_known_models_on_a_running_server(page):
    """Compare on a real server, where the session's stop check and the per-layer hooks are live."""
    page.get_by_role("link", name="Compare", exact=True).click()
    page.get_by_role("heading", name="Compare two models").wait_for(timeout=COLD_START_MS)
    _known_model(page, "a", "demo-gpt2")
    _known_model(page, "b", "demo-gpt2")
    until_shown(page, page.get_by_role("button", name="Compare", exact=True).click,
                page.get_by_role("heading", name="JS distance per head"))
    assert "0 / 16" in page.locator('[data-testid="stMetricValue"]').first.inner_text()
    page.locator('.st-key-cmp_grid_box [data-testid="stPlotlyChart"]').wait_for()
    shot(page, "compare_report")
    # a click on the grid opens that head's maps: Streamlit selects no heatmap cell, and they stayed on L0 H0
    cells = page.locator(".st-key-cmp_grid_box .scatterlayer .point")  # one per head, layer by layer
    click_point(page, cells.nth(4 + 3), page.get_by_role("heading", name="Layer 1, head 3"))

    def off_centre():  # a wide grid's cells are far larger than their markers: the nearest one answers
        box = cells.nth(4 + 2).bounding_box()
        page.mouse.click(box["x"] + box["width"] / 2 + 50, box["y"] + box["height"] / 2 + 8)
    until_shown(page, off_centre, page.get_by_role("heading", name="Layer 1, head 2"), 1)
    no_errors(page)


def test_timeline_of_an_uploaded_monitor_log(page):
    log = Path(__file__).resolve().parents[2] / "docs" / "training" / "healthy.jsonl"
    page.get_by_role("link", name="Timeline", exact=True).click()
    page.get_by_role("heading", name="Training timeline").wait_for(timeout=COLD_START_MS)
    page.locator('[data-testid="stFileUploaderDropzoneInput"]').set_input_files(str(log))
    page.get_by_text(log.name).first.wait_for()
    until_shown(page, page.get_by_role("button", name="Load", exact=True).click,
                page.get_by_role("heading", name="healthy.jsonl"))
    page.locator('[data-testid="stPlotlyChart"]').first.wait_for()  # drawn after the heading: wait, not count
    shot(page, "timeline_healthy")
    no_errors(page)
