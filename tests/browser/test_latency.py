"""Head and view switches on a warm session, 512 tokens, a 12-layer × 12-head BERT-base-sized model.

The model is random-init BERT-base (hidden 768, 12 × 12, vocabulary cut to
1,000 so the folder is 0.35 GB) built in-process and saved to a temp folder;
the text is cut to its 512 positions. After the first heatmap and the
overview, each switch is timed from the click until the new heading and
heatmap title are shown and the app is idle again, with 1 session and with 4
sessions switching at the same moment. Timings go to
test-artifacts/latency.json; docs/app.md quotes them.

    python -m pytest tests/browser/test_latency.py -m browser -s
"""

import copy
import json
import statistics
import time

import pytest

from app_driver import ARTIFACTS, heatmap, idle, open_page, run_inspect, start_app, stop_app
from tiny import CORPUS, wordpiece_tokenizer

pytestmark = [pytest.mark.browser, pytest.mark.slow]

HEAD_SWITCH_S = 0.5  # issue 12: a head switch on a warm session at 512 tokens, 12 × 12 model
VIEW_SWITCH_S = 1.0  # issue 12: a view switch (selected head / layer average / rollout)
CONCURRENT = 4
SWITCHES = 5  # head switches per measurement (the median is asserted)
# The idle build machine measured 0.48 s (head) and 0.48 s (view), so the 0.5 s target holds with little margin;
# a shared CI runner's noise must not fail the run, so the assertion allows 2x and the file records the truth.
CI_ALLOWANCE = 2.0
READY_MS = 300_000  # first run: import, load 0.35 GB, extract 512 tokens, label 144 heads, on a busy CPU
IDLE = '[data-testid="stApp"][data-test-connection-state="CONNECTED"][data-test-script-state="notRunning"]'


@pytest.fixture(scope="module")
def base_model_folder(tmp_path_factory):
    import torch
    from transformers import BertConfig, BertModel

    torch.manual_seed(0)
    config = BertConfig(vocab_size=1000, max_position_embeddings=512)  # BERT-base: hidden 768, 12 layers, 12 heads
    folder = tmp_path_factory.mktemp("bert-base-random") / "bert-base-random"
    BertModel(config, add_pooling_layer=False).save_pretrained(folder)
    tokenizer = copy.deepcopy(wordpiece_tokenizer())
    tokenizer.model_max_length = 512
    tokenizer.save_pretrained(folder)
    return folder


@pytest.fixture(scope="module")
def latency_app(tmp_path_factory):
    url, proc = start_app("streamlit-latency.log", allowed=tmp_path_factory.getbasetemp())
    yield url
    stop_app(proc)


def _long_text() -> str:
    text = " ".join(CORPUS * 8)
    return text[:4900]  # under the 5,000-character limit, well over 512 tokens


def _ready(pg, folder) -> None:
    heatmap(pg).first.wait_for(timeout=READY_MS)
    run_inspect(pg, str(folder), _long_text(), pg.get_by_text("truncated to the model's limit").first)
    pg.locator(".st-key-overview_box .scatterlayer .point, [data-testid='stPlotlyChart'] .scatterlayer .point") \
        .first.wait_for(timeout=READY_MS)  # the overview: every head labelled, the session is warm
    idle(pg)


def _shown(pg, heading: str) -> bool:
    return (pg.get_by_role("heading", name=heading, exact=True).count() == 1
            and pg.locator(".st-key-inspect_heatmap .gtitle").filter(has_text=heading).count() == 1
            and pg.locator(IDLE).count() == 1)


def _timed(pages, act, heading: str, timeout_s: float = 60) -> list[float]:
    """Do ``act(page)`` on every page at once, then poll all of them: seconds until each shows ``heading``."""
    starts = {}
    for pg in pages:
        starts[id(pg)] = time.perf_counter()
        act(pg)
    done = {}
    deadline = time.perf_counter() + timeout_s
    while len(done) < len(pages) and time.perf_counter() < deadline:
        for pg in pages:
            if id(pg) not in done and _shown(pg, heading):
                done[id(pg)] = time.perf_counter() - starts[id(pg)]
    assert len(done) == len(pages), f"{heading!r} did not show within {timeout_s} s"
    return [done[id(pg)] for pg in pages]


def _open_head_menu(pg) -> None:
    pg.locator(".st-key-head").click()


def _measure(pages) -> dict:
    heads = []
    for head in range(1, SWITCHES + 1):
        for pg in pages:
            _open_head_menu(pg)  # opening the menu is the user's move, not the app's time
        heads += _timed(pages, lambda pg, h=head: pg.get_by_role("option", name=str(h), exact=True).click(),
                        f"Layer 0, head {head}")
    views = []
    for label, heading in (("Layer average (all heads)", "Layer 0, average of 12 heads"),
                           ("Attention rollout (up to this layer)", "Attention rollout through layer 0"),
                           ("Selected head", f"Layer 0, head {SWITCHES}")):
        views += _timed(pages, lambda pg, t=label: pg.locator(".st-key-inspect_mode").get_by_text(t).click(),
                        heading)
    return {"sessions": len(pages), "head_switch_s": [round(t, 3) for t in heads],
            "view_switch_s": [round(t, 3) for t in views], "head_switch_median_s": round(statistics.median(heads), 3),
            "view_switch_median_s": round(statistics.median(views), 3)}


def _load() -> str:
    with open("/proc/loadavg") as f:
        return " ".join(f.read().split()[:3])


def test_head_and_view_switch_latency(browser, latency_app, base_model_folder):
    pages = [open_page(browser, latency_app) for _ in range(CONCURRENT)]
    try:
        for pg in pages:
            _ready(pg, base_model_folder)
        one = _measure(pages[:1])
        four = _measure(pages)  # head 1..5 again from head 5: every switch is a change
        results = {"model": "random-init BERT-base, 12 layers x 12 heads, hidden 768", "tokens": 512,
                   "load_average": _load(), "one_session": one, "four_sessions": four}
        ARTIFACTS.mkdir(exist_ok=True)
        (ARTIFACTS / "latency.json").write_text(json.dumps(results, indent=1))
        print(json.dumps(results, indent=1))
        blocked = [u for pg in pages for u in pg.blocked]
        assert not blocked, f"outside requests: {blocked[:5]}"
        assert one["head_switch_median_s"] <= HEAD_SWITCH_S * CI_ALLOWANCE, one
        assert one["view_switch_median_s"] <= VIEW_SWITCH_S * CI_ALLOWANCE, one
    finally:
        for pg in pages:
            pg.context.close()
