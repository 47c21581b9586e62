"""The app as a shared server: one loading path on both pages, two uploads in a row, the bounded model cache."""

import io
import pwd
import re
import shutil
import threading
from pathlib import Path
from types import SimpleNamespace

import pytest
from streamlit.testing.v1 import AppTest

from app.server.cache import BoundedCache, LoadedModel, model_bytes, result_bytes
from core.checkpoints.checkpoint import OUTSIDE, resolve_roots

from app_runner import started_app as _app


def _errors(at: AppTest) -> list[str]:
    """Error texts as the user reads them: markdown escapes (``\\.``) undone."""
    return [re.sub(r"\\(.)", r"\1", e.value) for e in at.error]


def _inspect_error(kind: str, source: str) -> list[str]:
    at = _app()
    at.radio(key="model_kind").set_value(kind).run()
    at.text_input(key="model_path").set_value(source)
    at.button(key="run").click().run()
    assert not at.exception
    return _errors(at)


def _diagnose_error(source: str) -> list[str]:
    at = _app()
    at.switch_page("app_pages/diagnose.py").run()
    at.radio(key="diag_kind").set_value("Local folder").run()
    at.text_input(key="diag_path").set_value(source)
    at.button(key="diag_run").click().run()
    assert not at.exception
    return _errors(at)


@pytest.fixture(scope="module")
def escaping_link(tmp_path_factory) -> str:
    """A symlink inside the allowed roots (pytest's temporary folder) that points at /etc."""
    link = tmp_path_factory.mktemp("links") / "escape"
    link.symlink_to("/etc")
    return str(link)


@pytest.mark.parametrize("path", ["/etc", "/nonexistent-attnscope-outside", "link"])
def test_paths_outside_the_roots_get_one_refusal_on_both_pages(path, escaping_link):
    path = escaping_link if path == "link" else path
    expected = [OUTSIDE.format(path=path, env="ATTNSCOPE_ALLOWED_ROOTS")]
    assert _inspect_error("Local folder", path) == expected
    assert _diagnose_error(path) == expected
    assert _inspect_error("Hugging Face id", path) == expected  # a path typed as an id takes the same door


@pytest.mark.parametrize("path", ["a" * 300, "a" * 300 + "/model"], ids=["long-name", "long-folder"])
def test_paths_no_file_can_have_get_the_same_line_on_both_pages(path):
    """A name over 255 characters was "Something went wrong (OSError … File name too long: '/work/main/aaa…')",
    showing the server's folder."""
    [inspect_error] = _inspect_error("Local folder", path)
    assert [inspect_error] == _diagnose_error(path)
    shown = path[:66] + "…" + path[-133:]  # cut in the middle (core.errors.one_line): the end names the file
    assert inspect_error.startswith(f"{shown} does not exist; give the path")


def test_an_unknown_user_and_a_real_account_outside_the_roots_get_the_same_line():
    """An unknown ~user was left as typed and resolved in the working folder: "does not exist", where a real
    account's home outside the roots gave OUTSIDE, so the page told which accounts the server has. (It was a
    RuntimeError on Inspect before that.)"""
    roots = resolve_roots(None)
    account = next(p.pw_name for p in pwd.getpwall() if p.pw_name.isidentifier() and p.pw_dir.startswith("/")
                   and not any(Path(p.pw_dir).resolve().is_relative_to(root) for root in roots))
    for path in (f"~{account}/model", "~nosuchuser-attnscope/model"):
        expected = [OUTSIDE.format(path=path, env="ATTNSCOPE_ALLOWED_ROOTS")]
        assert _inspect_error("Local folder", path) == expected
        assert _diagnose_error(path) == expected


def test_home_is_named_as_typed_not_by_the_server_s_user(monkeypatch, tmp_path):
    """``~`` was named by the home folder it expands to: "alice holds no model", the server's user name."""
    home = tmp_path / "alice"
    home.mkdir()
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    [error] = _diagnose_error("~")
    assert error.startswith("~ holds no model") and "alice" not in error


def test_an_unexpected_os_error_shows_its_reason_not_the_server_s_path():
    from app.errors import message

    shown = message(OSError(36, "File name too long", "/srv/attnscope/private/" + "a" * 300))
    assert "File name too long" in shown and "/srv" not in shown


def test_an_uncached_hub_id_is_refused_without_a_download(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "0")  # even when online is allowed, the app never downloads
    [inspect_error] = _inspect_error("Hugging Face id", "bert-base-uncased-attnscope-test")
    [diagnose_error] = _diagnose_error("bert-base-uncased-attnscope-test")
    assert inspect_error == diagnose_error
    assert "not a model this server knows" in inspect_error and "never downloads" in inspect_error
    assert inspect_error.endswith("or upload it (Diagnose and Compare take uploads)")  # Inspect has no uploader


def _upload_and_run(at: AppTest, name: str, data: bytes) -> AppTest:
    at.file_uploader[0].upload(name, data).run()
    return at.button(key="diag_run").click().run()


def test_two_uploads_in_a_row_each_give_a_report(bert_zip):
    at = _app()
    at.switch_page("app_pages/diagnose.py").run()
    at = _upload_and_run(at, "first.zip", bert_zip)
    assert not at.exception and not _errors(at), _errors(at)
    first = at.session_state["diag_staged"].folder
    assert not at.file_uploader[0].value  # a fresh uploader: Streamlit no longer holds the file
    at = _upload_and_run(at, "second.zip", bert_zip)
    assert not at.exception and not _errors(at), _errors(at)  # was: "holds no model … among its 2 files"
    assert any(s.value == "Findings" for s in at.subheader)
    assert at.session_state["diag_staged"].names == ["second.zip"]
    assert not first.exists()  # the first upload's folder is gone
    assert any("Uploaded: second.zip" in t.value for t in at.text)


def test_a_tokenizer_that_panics_on_the_probes_gives_one_line_and_the_page_goes_on(tmp_path, monkeypatch):
    """tokenizers' panic is a BaseException: it passed the page's `except Exception` and ended Streamlit's script
    thread, the Diagnose page left "running" with no message until another page was opened."""
    from core.checkpoints import tokenizer as checkpoint_tokenizer
    from tiny_checkpoints import PANICKING_PATTERN, save_splitting_bert, zip_folder

    monkeypatch.setattr(checkpoint_tokenizer, "_risky", lambda tree: "")  # as a panic the check misses
    at = _app()
    at.switch_page("app_pages/diagnose.py").run()
    at = _upload_and_run(at, "panics.zip", zip_folder(save_splitting_bert(tmp_path / "panics", PANICKING_PATTERN)))
    assert not at.exception
    [error] = _errors(at)
    assert error.startswith("The tokenizer failed on this text (PanicException: Onig: Regex search error: ")
    at.switch_page("app_pages/inspect.py").run()  # the session goes on
    assert not at.exception and not _errors(at)


def test_a_panic_on_inspect_is_kept_as_its_failure_and_not_run_again_on_every_rerun(tmp_path, monkeypatch):
    """The panic passed Inspect's `except Exception`, so its failure was not kept: every rerun of the page (any
    click) tokenized the text again and panicked again."""
    from app.server import cache
    from core.checkpoints import tokenizer as checkpoint_tokenizer
    from tiny_checkpoints import PANICKING_PATTERN, save_splitting_bert

    monkeypatch.setattr(checkpoint_tokenizer, "_risky", lambda tree: "")  # as a panic the check misses
    calls, attention = [], cache.attention
    monkeypatch.setattr(cache, "attention", lambda key: calls.append(key) or attention(key))
    at = _app()
    at.radio(key="model_kind").set_value("Local folder").run()
    at.text_input(key="model_path").set_value(str(save_splitting_bert(tmp_path / "panics", PANICKING_PATTERN)))
    at.text_area(key="text").set_value("The cat sat on the mat because it was warm, and the birds sang. " * 8)
    at.button(key="run").click().run()
    at.run()
    at.run()
    assert not at.exception and len([key for key in calls if "birds" in str(key)]) == 1  # no digit: it panics
    [error] = _errors(at)
    assert error.startswith("The tokenizer failed on this text (PanicException: ")


def test_clear_removes_the_staged_upload(bert_zip):
    at = _app()
    at.switch_page("app_pages/diagnose.py").run()
    at.file_uploader[0].upload("tiny.zip", bert_zip).run()
    folder = at.session_state["diag_staged"].folder
    assert folder.exists()
    at.button(key="diag_clear").click().run()
    assert not folder.exists() and "diag_staged" not in at.session_state


def test_an_upload_removed_while_its_tab_was_away_is_said_to_be_gone(bert_zip):
    """A tab back after its upload was swept (``uploads.remove_abandoned``) got FileNotFoundError from the line
    naming it (stop-51 review)."""
    at = _app()
    at.switch_page("app_pages/diagnose.py").run()
    at.file_uploader[0].upload("tiny.zip", bert_zip).run()
    at.session_state["diag_staged"].remove()  # as the sweep does
    at.run()
    assert not at.exception and "diag_staged" not in at.session_state
    assert any("removed from the server while this tab was away" in i.value for i in at.info)


# ---------------------------------------------------------------- the model cache

class Sized:
    """A stand-in model of ``n`` float32 parameters."""

    def __init__(self, n):
        import torch

        self.p = torch.nn.Parameter(torch.zeros(n))

    def parameters(self):
        return [self.p]

    def buffers(self):
        return []


def _load(n, loads):
    def load():
        loads.append(n)
        return LoadedModel(Sized(n), None)
    return load


def test_model_cache_evicts_the_least_recently_used_by_count_and_by_bytes():
    cache, loads = BoundedCache(max_items=2, max_bytes=10_000, size_of=model_bytes), []
    cache.get("a", _load(100, loads))
    cache.get("b", _load(100, loads))
    cache.get("a", _load(100, loads))  # a is now the most recent
    cache.get("c", _load(100, loads))
    assert cache.keys() == ["a", "c"] and loads == [100, 100, 100]
    cache.get("big", _load(2000, loads))  # 8,000 bytes: within the budget, but a third model: a goes
    assert cache.keys() == ["c", "big"]
    cache.get("huge", _load(2400, loads))  # 9,600 bytes: with big (8,000) over the budget
    assert cache.keys() == ["huge"] and cache.total_bytes == 9600


def test_a_dropped_model_still_in_use_is_found_again_not_loaded_twice():
    """A model dropped from the cache while a session still ran on it was loaded again by the next session: two
    copies in memory, each with its own lock, above the budget."""
    import gc

    cache, loads = BoundedCache(max_items=1, max_bytes=10**9, size_of=model_bytes), []
    in_use = cache.get("a", _load(100, loads))
    cache.get("b", _load(100, loads))  # "a" is dropped, but a session still holds it
    assert cache.keys() == ["b"] and cache.get("a", _load(100, loads)) is in_use and loads == [100, 100]
    assert cache.keys() == ["a"]
    del in_use
    cache.get("b", _load(100, loads))
    gc.collect()  # nobody holds "a" now: it is gone, and loaded afresh when asked for
    cache.get("a", _load(100, loads))
    assert loads == [100, 100, 100, 100]


def test_model_cache_loads_a_source_once_for_concurrent_sessions():
    cache, loads, started = BoundedCache(max_items=3, max_bytes=10**9, size_of=model_bytes), [], threading.Event()

    def slow_load():
        started.set()
        threading.Event().wait(0.2)
        loads.append(1)
        return LoadedModel(Sized(10), None)

    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get("m", slow_load))) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert loads == [1] and len({id(r) for r in results}) == 1


def test_a_failed_load_is_not_kept_and_is_tried_again():
    cache = BoundedCache(max_items=3, max_bytes=10**9, size_of=model_bytes)

    def failing():
        raise OSError("disk gone")

    with pytest.raises(OSError):
        cache.get("m", failing)
    assert cache.keys() == [] and cache.get("m", _load(10, [])).model.p.numel() == 10


def test_after_a_failed_load_the_callers_waiting_for_the_key_load_it_once():
    """The failing caller dropped the key's lock: the caller waiting on it loaded, and one arriving then made a
    new lock and loaded the same key at the same time (two forward passes, two copies of a result)."""
    cache, loads, failing = BoundedCache(max_items=3, max_bytes=10**9, size_of=model_bytes), [], threading.Event()
    waiting = threading.Event()

    def fail():
        failing.set()
        waiting.wait(5)  # until the second caller waits on the key
        raise OSError("the first caller's browser went away")

    def slow_load():
        loads.append(1)
        threading.Event().wait(0.3)
        return LoadedModel(Sized(10), None)

    first = threading.Thread(target=lambda: pytest.raises(OSError, cache.get, "m", fail))
    first.start()
    failing.wait(5)
    results = []
    threads = [threading.Thread(target=lambda: results.append(cache.get("m", slow_load))) for _ in range(3)]
    threads[0].start()
    threading.Event().wait(0.1)
    waiting.set()
    threading.Event().wait(0.05)
    for t in threads[1:]:  # they arrive while the second caller loads
        t.start()
    for t in [first, *threads]:
        t.join()
    assert loads == [1] and len({id(r) for r in results}) == 1 and not cache._loading


def test_attention_results_are_bounded_in_bytes_not_only_in_count(monkeypatch):
    """Four long results of a large model held 5 GB; the result cache keeps what fits its byte budget."""
    import torch

    import core
    from app.server import cache as app_cache

    def result(layers, n):
        return core.AttentionResult([str(i) for i in range(n)], torch.zeros(layers, 2, n, n), False,
                                    [False] * n, [False] * n)

    budget = result_bytes(result(2, 100)) * 3  # 3 small results, or one large one
    results = BoundedCache(app_cache.MAX_RESULTS, budget, result_bytes)
    for text in "abc":
        results.get(("m", text), lambda: result(2, 100))
    assert results.keys() == [("m", "a"), ("m", "b"), ("m", "c")]
    results.get(("big", "d"), lambda: result(6, 100))  # 3 × the small ones: alone it fills the budget
    assert results.keys() == [("big", "d")] and results.total_bytes == budget

    monkeypatch.setenv(app_cache.ENV_RESULT_CACHE, "1000000")
    assert app_cache.result_budget_bytes() == 1_000_000
    monkeypatch.delenv(app_cache.ENV_RESULT_CACHE)
    assert app_cache.result_budget_bytes() == app_cache.RESULT_BUDGET_BYTES


def test_the_rollouts_kept_fit_the_result_budget(monkeypatch):
    """Rollouts were kept by count only (the last 4, of any size): one of a one-head model is as large as its
    result, so four took four times the result budget (SmolLM2 at ~1,335 tokens: 0.86 GB beside it)."""
    import gc
    import weakref

    import streamlit as st
    import torch

    import core
    from app.server import cache as app_cache
    from app.views import derived

    def result(n):
        return core.AttentionResult([str(i) for i in range(n)], torch.full((1, 1, n, n), 1 / n), False,
                                    [False] * n, [False] * n)

    first, second = result(100), result(100)  # (1, 1, 100, 100): 40 kB, and so is each rollout
    monkeypatch.setenv(app_cache.ENV_RESULT_CACHE, str(result_bytes(first) * 3 // 2))
    st.cache_resource.clear()
    try:
        kept = weakref.ref(derived.rollouts("first", first))
        again = derived.rollouts("second", second)
        gc.collect()
        assert kept() is None  # dropped: two do not fit
        assert derived.rollouts("second", second) is again
        assert torch.allclose(again, (torch.full((1, 100, 100), 0.01) + torch.eye(100)) / 2)  # half the residual
    finally:
        st.cache_resource.clear()


# ---------------------------------------------------------------- the session's end stops the work

def test_stop_when_gone_follows_the_runtime_and_the_stop_request(monkeypatch):
    from types import SimpleNamespace

    from streamlit.runtime.scriptrunner_utils.script_requests import ScriptRequests

    from app.server import session

    active = {"s1"}
    requests = ScriptRequests()
    runtime = SimpleNamespace(is_active_session=lambda sid: sid in active)
    monkeypatch.setattr(session, "get_script_run_ctx", lambda: SimpleNamespace(session_id="s1",
                                                                               script_requests=requests))
    monkeypatch.setattr(session.Runtime, "exists", staticmethod(lambda: True))
    monkeypatch.setattr(session.Runtime, "instance", staticmethod(lambda: runtime))
    gone = session.stop_when_gone()
    assert not gone()
    active.clear()  # the browser disconnected: the runtime dropped the session
    assert gone()
    active.add("s1")
    requests.request_stop()  # the session is shutting down its script
    assert gone()


def test_outside_a_served_session_nothing_stops():
    from app.server import session

    assert session.stop_when_gone() is None  # plain Python, AppTest: no runtime, no hooks


def _click_now():
    """What a widget change sends the session's script while it runs: a rerun request."""
    from streamlit.runtime.scriptrunner_utils.script_requests import RerunData
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    get_script_run_ctx().script_requests.request_rerun(RerunData())


def _shared_work_script():
    import streamlit as st

    import core
    from app.server import cache

    try:
        cache.attention(("m", (), None, "a text", "", ""))
    except core.AttnScopeError as err:
        st.error(str(err))


@pytest.mark.parametrize("clicked_in", ["load", "extract", "a load that fails"])
def test_a_click_during_shared_work_keeps_what_was_finished_and_reruns(monkeypatch, clicked_in):
    """The rerun a click sends was raised by the next spinner or progress bar, inside the cache's load: the loaded
    model or the extracted maps were thrown away, and the session (and every other waiting for them) ran it all
    again. Held until the work is kept, it was then dropped when the load failed: the click was lost."""
    import torch

    from app.server import cache

    calls, runs = [], []

    def load_untrusted(source, n_heads, progress):
        calls.append("load")
        if clicked_in != "extract" and len(calls) == 1:
            _click_now()
        progress(0.5, "half way")  # the bar drawn after the click
        if clicked_in == "a load that fails":
            raise cache.core.CheckpointError("the file is broken")
        return LoadedModel(torch.nn.Linear(1, 1), None)

    def extract_attention(*args):
        calls.append("extract")
        if clicked_in == "extract":
            _click_now()
        return "maps"

    monkeypatch.setattr(cache.core, "load_untrusted", load_untrusted)
    monkeypatch.setattr(cache.core, "extract_attention", extract_attention)
    monkeypatch.setattr(cache, "_check_result_size", lambda *args: None)
    monkeypatch.setattr(cache, "source_stamp", lambda source: ())
    models, results = BoundedCache(3, 10**9, model_bytes), BoundedCache(2, 10**9, lambda r: 1)
    monkeypatch.setattr(cache, "model_cache", lambda: models)
    monkeypatch.setattr(cache, "result_cache", lambda: runs.append(1) or results)
    at = AppTest.from_function(_shared_work_script, default_timeout=10).run()
    assert not at.exception and len(runs) == 2  # the click's rerun ran the page again
    if clicked_in == "a load that fails":
        assert calls == ["load", "load"] and [e.value for e in at.error] == ["the file is broken"]
    else:
        assert calls == ["load", "extract"] and len(results.keys()) == 1 and len(models.keys()) == 1


def _fragment_script():
    import streamlit as st
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    from app.server import cache

    tick = st.checkbox("Tick", key="tick")

    @st.fragment
    def explorer():  # as Inspect's head explorer: its own widgets rerun it alone
        st.session_state.setdefault("layers_seen", []).append(st.text_input("Layer", "0", key="layer"))

    explorer()
    st.session_state.fragment = list(get_script_run_ctx().fragment_storage._fragments)[0]
    st.session_state.setdefault("seen", []).append(tick)
    if st.session_state.get("load") and not st.session_state.get("loaded"):
        st.session_state.loaded = True
        cache.load_model("m")


def test_a_later_pick_inside_a_fragment_wins_over_a_click_made_during_a_load(monkeypatch):
    """A click's rerun held through the load was raised over a later pick in a fragment (a rerun that does not
    stop the page): the map went back to the old layer while the browser showed the new one."""
    import torch
    from streamlit.proto.WidgetStates_pb2 import WidgetStates
    from streamlit.runtime.scriptrunner_utils.script_requests import RerunData
    from streamlit.runtime.scriptrunner_utils.script_run_context import get_script_run_ctx

    from app.server import cache

    ids = {}

    def send(layer, fragment=None):
        states = WidgetStates()
        box, text = states.widgets.add(), states.widgets.add()
        box.id, box.bool_value, text.id, text.string_value = ids["tick"], True, ids["layer"], layer
        get_script_run_ctx().script_requests.request_rerun(RerunData(widget_states=states, fragment_id=fragment))

    def load_untrusted(source, n_heads, progress):
        send("0")  # the box is ticked: a rerun of the page, taken by the bar
        progress(0.3, "a third")
        send("2", ids["fragment"])  # then layer 2 is picked inside the fragment
        progress(0.6, "two thirds")
        return LoadedModel(torch.nn.Linear(1, 1), None)

    monkeypatch.setattr(cache.core, "load_untrusted", load_untrusted)
    monkeypatch.setattr(cache, "source_stamp", lambda source: ())
    models = BoundedCache(3, 10**9, model_bytes)
    monkeypatch.setattr(cache, "model_cache", lambda: models)
    at = AppTest.from_function(_fragment_script, default_timeout=10).run()
    ids.update(tick=at.checkbox[0].id, layer=at.text_input[0].id, fragment=at.session_state["fragment"])
    at.session_state["load"] = True
    at.run()
    assert not at.exception and at.session_state["seen"][-1] is True
    assert at.session_state["layer"] == "2" and at.session_state["layers_seen"][-1] == "2"


def test_a_closed_tab_does_not_stop_a_result_another_session_waits_for(monkeypatch):
    """The extraction stopped when the tab that started it closed, though another session waited for the same
    result: that one started again from layer 0."""
    import time

    import core
    from app.server import cache, session
    from tiny import tiny_gpt2, wordpiece_tokenizer

    loaded = LoadedModel(tiny_gpt2(), wordpiece_tokenizer())
    gone = {"A": threading.Event(), "B": threading.Event()}
    monkeypatch.setattr(session, "stop_when_gone", lambda: gone[threading.current_thread().name].is_set)
    monkeypatch.setattr(cache, "load_model", lambda *args: loaded)
    monkeypatch.setattr(cache, "_check_result_size", lambda *args: None)
    monkeypatch.setattr(cache, "result_cache", lambda: results)
    results, started, outcome = BoundedCache(2, 10**9, lambda r: 1), [], {}
    real_extract = core.extract_attention

    def slow_extract(model, *args):
        started.append(threading.current_thread().name)
        blocks = core.cancel.layer_blocks(model)
        slow = [block.register_forward_pre_hook(lambda *_: time.sleep(0.3)) for block in blocks]
        try:
            return real_extract(model, *args)
        finally:
            for handle in slow:
                handle.remove()

    def run(text="the cat sat"):
        try:
            outcome[threading.current_thread().name] = cache.attention(("m", (), None, text, "", "")).tokens
        except core.Cancelled:
            outcome[threading.current_thread().name] = "cancelled"

    monkeypatch.setattr(cache.core, "extract_attention", slow_extract)
    def both_asking(text):  # A extracts, B waits for the same text (polled: sleeps alone flaked on a busy CPU)
        key = ("m", (), None, text, "", "")
        for _ in range(200):
            if started and len(cache._askers.get(key, ())) == 2:
                return
            time.sleep(0.02)
        raise AssertionError("the two sessions never both asked")

    first, second = threading.Thread(target=run, name="A"), threading.Thread(target=run, name="B")
    first.start()
    second.start()
    both_asking("the cat sat")
    gone["A"].set()  # A's tab closes; B still waits for the same text
    first.join()
    second.join()
    assert len(started) == 1 and outcome["A"] == outcome["B"] != "cancelled"
    gone["A"].clear()
    started.clear()
    threads = [threading.Thread(target=run, name=name, args=("the cow sat",)) for name in "AB"]
    for thread in threads:
        thread.start()
    both_asking("the cow sat")
    gone["A"].set()
    gone["B"].set()  # both tabs close (one user's two tabs): nobody waits, the work stops
    for thread in threads:
        thread.join()
    assert outcome == {"A": "cancelled", "B": "cancelled"}
    assert results.keys() == [("m", (), None, "the cat sat", "", "")]
    monkeypatch.setattr(session, "stop_when_gone", lambda: lambda: True)  # alone, a closed tab still stops its work
    with pytest.raises(core.Cancelled):
        cache.attention(("m", (), None, "the dog sat", "", ""))


def test_the_per_run_copy_of_an_upload_shares_its_bytes():
    import copy

    from streamlit.runtime.uploaded_file_manager import UploadedFile, UploadedFileRec

    import app.server.uploads  # noqa: F401  installs the shared deepcopy

    original = UploadedFile(UploadedFileRec("id", "model.safetensors", "application/octet-stream", b"abcdef"), None)
    original.seek(2)
    twin = copy.deepcopy(original)
    assert twin.getvalue() is original.getvalue()  # one buffer, not two
    assert (twin.name, twin.file_id, twin.size, twin.tell()) == ("model.safetensors", "id", 6, 2)
    twin.write(b"XY")  # copy on write: the original is untouched
    assert original.getvalue() == b"abcdef" and twin.getvalue() == b"abXYef"


def test_an_upload_name_in_an_error_is_plain_text():
    at = _app()
    at.switch_page("app_pages/diagnose.py").run()
    at = _upload_and_run(at, "[click](javascript:alert) **x**.zip", b"not a zip")
    [raw] = [e.value for e in at.error]
    assert r"\[click\]\(javascript\:alert\) \*\*x\*\*.zip is not a readable zip" in raw  # app.plain.for_markdown


# ---------------------------------------------------------------- known models shared by the pages

class _RecordingLock:
    def __init__(self, name, taken):
        self.name, self.taken = name, taken

    def acquire(self, timeout=-1):
        self.taken.append(self.name)
        return True

    def release(self):
        self.taken.append(f"/{self.name}")

    def locked(self):
        return False


def test_pages_lock_shared_known_models_once_each_and_in_name_order(monkeypatch):
    """Compare takes two known models from the cache: in name order, so two runs cannot wait on each other,
    and a model on both sides once (its lock is not re-entrant)."""
    import core
    from app.server import cache, sources

    x, y = sorted(core.MODEL_CHOICES)[:2]
    taken = []
    shared = {n: LoadedModel(Sized(1), f"{n} tokenizer", _RecordingLock(n, taken)) for n in (x, y)}
    monkeypatch.setattr(cache, "load_model", lambda name: shared[name])
    with sources.opened_models([y, x], None, [None, None]) as [(model_y, tok_y, _), (model_x, _, _)]:
        assert taken == [x, y] and model_y is shared[y].model and tok_y == f"{y} tokenizer"
    assert taken == [x, y, f"/{y}", f"/{x}"]
    taken.clear()
    with sources.opened_models([x, x], None, [None, None]) as [(first, _, _), (second, _, _)]:
        assert first is second and taken == [x]


def test_report_maps_are_cached_under_a_random_id_not_the_object_s_address():
    """The map caches are shared by every session; id(report) is reused once a report is freed."""
    import gc
    from dataclasses import replace

    from app.views import report_view
    from diagnostics import diagnose
    from tiny import tiny_bert, wordpiece_tokenizer

    report = diagnose((tiny_bert(), wordpiece_tokenizer()), ["the quick brown fox jumps over the lazy dog"])
    again = replace(report)  # the same content, elapsed time included: the old key could not tell them apart
    key = report_view.report_key(report, "self")
    assert report_view.report_key(report, "self") == key != report_view.report_key(again, "self")
    assert re.fullmatch(r"report/[0-9a-f]{32}/self/0", key)
    address = id(again)
    del again
    gc.collect()
    assert address not in report_view._REPORT_IDS  # nothing kept for a freed report


# ---------------------------------------------------------------- what the caches are keyed on

def test_a_model_file_rewritten_in_place_levels_down_changes_the_stamp(tmp_path):
    """The loader finds a model in a subfolder; a file rewritten in place (cp) leaves the folders' mtimes: the
    stamp held only the top folder's entries, so the old model and its results were served."""
    import os

    from app.server.cache import source_stamp

    model = tmp_path / "top" / "model"
    model.mkdir(parents=True)
    (model / "config.json").write_text("{}")
    weights = model / "model.safetensors"
    weights.write_bytes(b"old weights")
    before, top_mtime = source_stamp(str(tmp_path / "top")), (tmp_path / "top").stat().st_mtime_ns
    with open(weights, "r+b") as f:  # in place: same size, same folder entries
        f.write(b"new weights")
    os.utime(weights, ns=(weights.stat().st_atime_ns, weights.stat().st_mtime_ns + 10**9))
    assert (tmp_path / "top").stat().st_mtime_ns == top_mtime
    assert source_stamp(str(tmp_path / "top")) != before
    assert source_stamp("demo-bert") == () and source_stamp(str(weights))[0][1] == len(b"new weights")



def test_a_hub_id_is_stamped_as_the_loader_reads_it(tmp_path, monkeypatch):
    """A folder in the server's folder named like a Hub id, outside the allowed roots, was stamped while the loader
    read the Hub cache's snapshot: a newer refs/main was never noticed. Under the roots the folder is what loads."""
    from huggingface_hub import constants

    from app.server.cache import source_stamp

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    snapshot = tmp_path / "hub" / "models--acme--tiny-bert" / "snapshots" / ("a" * 40)
    snapshot.mkdir(parents=True)
    (snapshot / "config.json").write_text("{}")
    (tmp_path / "hub" / "models--acme--tiny-bert" / "refs").mkdir()
    (tmp_path / "hub" / "models--acme--tiny-bert" / "refs" / "main").write_text("a" * 40)
    (tmp_path / "server" / "acme" / "tiny-bert").mkdir(parents=True)
    (tmp_path / "server" / "acme" / "tiny-bert" / "notes.txt").write_text("not the model")
    monkeypatch.chdir(tmp_path / "server")
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path / "elsewhere"))
    assert source_stamp("acme/tiny-bert") == (str(snapshot),)
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path / "server"))
    assert [part[0] for part in source_stamp("acme/tiny-bert")] == [".", "notes.txt"]

def test_one_known_model_spelt_two_ways_is_one_cache_entry(monkeypatch):
    """'Demo-BERT' and 'demo-bert' were two copies of the model, with two locks, in a 3-model cache."""
    from app.server import cache

    asked = []
    recorder = type("Recorder", (), {"get": lambda self, key, load: asked.append(key)})()
    monkeypatch.setattr(cache, "model_cache", lambda: recorder)
    for name in ("demo-bert", "Demo-BERT", " DEMO-BERT "):
        cache.load_model(name)
    assert asked == [("demo-bert", (), None)] * 3
    assert cache.result_key("Demo-BERT", "a text") == cache.result_key("demo-bert", "a text")


def test_the_size_check_reads_the_shared_tokenizer_under_the_model_lock(monkeypatch):
    """A fast tokenizer keeps its truncation setting between calls: the check, outside the lock, turned another
    session's truncation off mid-extraction ('The expanded size of the tensor (402) must match ... (64)')."""
    import contextlib

    from app.server import cache

    loaded, held = LoadedModel(Sized(1), None), []
    monkeypatch.setattr(cache, "load_model", lambda source, stamp, n_heads: loaded)
    monkeypatch.setattr(cache, "_check_result_size", lambda *args: held.append(loaded.lock.locked()))
    monkeypatch.setattr(cache, "stop_between_layers", lambda *args: contextlib.nullcontext())
    monkeypatch.setattr(cache.core, "extract_attention", lambda *args: held.append(loaded.lock.locked()) or "maps")
    monkeypatch.setattr(cache, "result_cache", lambda: BoundedCache(2, 10**9, lambda r: 1))
    assert cache.attention(("m", (), None, "a text", "", "")) == "maps" and held == [True, True]



def test_an_inspect_waiting_for_a_known_model_another_run_holds_says_so(monkeypatch):
    """A Diagnose of a known model holds it for its whole run: another session's Inspect of the same model waited
    on the spinner (a minute, behind 20 probes) without a word of why."""
    import contextlib
    import time

    import core
    from app.server import cache, sources

    loaded, told, results = LoadedModel(Sized(1), None), [], []

    class Notice:  # st.empty()'s placeholder: what it shows, "" once emptied
        def info(self, text):
            told.append(text)

        def empty(self):
            told.append("")
    monkeypatch.setattr(cache, "load_model", lambda *args: loaded)
    monkeypatch.setattr(cache.st, "empty", Notice)
    monkeypatch.setattr(cache, "_check_result_size", lambda *args: None)
    monkeypatch.setattr(cache, "stop_between_layers", lambda *args: contextlib.nullcontext())
    monkeypatch.setattr(cache.core, "extract_attention", lambda *args: "maps")
    monkeypatch.setattr(cache, "result_cache", lambda: BoundedCache(2, 10**9, lambda r: 1))
    with sources.opened_models([core.MODEL_CHOICES[0]], None, [None]):  # a diagnosis holds the model
        inspect = threading.Thread(target=lambda: results.append(cache.attention(("m", (), None, "a text", "", ""))))
        inspect.start()
        deadline = time.monotonic() + 30
        while not told and time.monotonic() < deadline:
            time.sleep(0.01)
        assert told == [cache.BUSY.format(job="diagnosis")] and inspect.is_alive()
    inspect.join(30)
    assert results == ["maps"] and told[-1] == "" and loaded.job == ""
    told.clear()
    loaded.lock.acquire()  # another session's Inspect holds the model: nothing to say yet
    inspect = threading.Thread(target=lambda: results.append(cache.attention(("m", (), None, "a text", "", ""))))
    inspect.start()
    time.sleep(0.6)
    assert told == [] and inspect.is_alive()
    loaded.job = "comparison"  # then a run holds it (a look before the wait alone never told)
    deadline = time.monotonic() + 30
    while not told and time.monotonic() < deadline:
        time.sleep(0.01)
    assert told == [cache.BUSY.format(job="comparison")]
    loaded.job = ""
    loaded.lock.release()
    inspect.join(30)
    assert results == ["maps", "maps"] and told[-1] == ""


def test_a_run_waiting_for_a_known_model_says_who_holds_it_and_stops_when_its_visitor_has_gone(monkeypatch):
    """A Diagnose of a known model another session's run held waited on a plain acquire: its bar said "Loading the
    checkpoint…" for that run's whole minute, and a closed tab's run held its places and upload until it ended."""
    import core
    from app.server import cache, sources

    loaded, told, outcome = LoadedModel(Sized(1), None), [], []
    monkeypatch.setattr(cache, "load_model", lambda *args: loaded)

    def progress(fraction, message):  # the run's bar: stoppable, so it raises once the tab is gone
        told.append(message)
        if len(told) == 3:
            raise core.Cancelled("the visitor left")

    def run():
        try:
            with sources.opened_models([core.MODEL_CHOICES[0]], None, [progress]):
                outcome.append("ran")
        except core.Cancelled:
            outcome.append("stopped")
    loaded.lock.acquire()
    loaded.job = "diagnosis"  # another session's run holds it
    waiter = threading.Thread(target=run)
    try:
        waiter.start()
        waiter.join(10)
        assert outcome == ["stopped"] and told == [cache.BUSY.format(job="diagnosis")] * 3
    finally:
        loaded.job = ""
        loaded.lock.release()
        waiter.join(10)
    assert not loaded.lock.locked()


def test_every_session_waiting_for_a_held_model_is_told(monkeypatch):
    """Two sessions asking for the same text while a diagnosis held the model: the one reading it was told, the
    other waited behind it on the result cache, on the spinner alone."""
    import contextlib
    import time

    import core
    from app.server import cache, sources

    loaded, told, results = LoadedModel(Sized(1), None), [], []

    class Notice:
        def info(self, text):
            told.append((threading.current_thread().name, text))

        def empty(self):
            told.append((threading.current_thread().name, ""))
    monkeypatch.setattr(cache, "load_model", lambda *args: loaded)
    monkeypatch.setattr(cache, "model_cache", lambda: SimpleNamespace(peek=lambda key: loaded))
    monkeypatch.setattr(cache.st, "empty", Notice)
    monkeypatch.setattr(cache, "_check_result_size", lambda *args: None)
    monkeypatch.setattr(cache, "stop_between_layers", lambda *args: contextlib.nullcontext())
    monkeypatch.setattr(cache.core, "extract_attention", lambda *args: "maps")
    shared = BoundedCache(2, 10**9, lambda r: 1)
    monkeypatch.setattr(cache, "result_cache", lambda: shared)
    ask = lambda: results.append(cache.attention(("m", (), None, "the same text", "", "")))  # noqa: E731
    with sources.opened_models([core.MODEL_CHOICES[0]], None, [None]):
        sessions = [threading.Thread(target=ask, name=name) for name in ("B", "C")]
        for session in sessions:
            session.start()
        deadline = time.monotonic() + 30
        while len({name for name, text in told if text}) < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert {name for name, text in told if text} == {"B", "C"}
    for session in sessions:
        session.join(30)
    assert results == ["maps", "maps"] and {name for name, text in told if not text} == {"B", "C"}


def test_the_neuron_view_waiting_for_a_held_model_is_told(monkeypatch):
    """It looked once before it waited: behind another session's Inspect it said nothing, then waited out the
    diagnosis that took the model next. It looks every 0.25 s, and says so once a run holds it."""
    import time

    from app.views import bertviz_ui

    loaded, told, pages = LoadedModel(Sized(1), None), [], []
    monkeypatch.setattr(bertviz_ui.cache, "load_model", lambda *args: loaded)
    monkeypatch.setattr(bertviz_ui, "query_key_vectors", lambda *args: pages.append("read") or (None, None, 1.0))
    monkeypatch.setattr(bertviz_ui, "reproduces", lambda *args: False)  # the page: None, as for a rotated head
    notice = type("Notice", (), {"info": lambda self, text: told.append(text), "empty": lambda self: told.append("")})()
    result = SimpleNamespace(token_ids=None, token_type_ids=None, windows=None, attentions={(0, 0): None}, causal=False,
                             dtype=None)
    view = threading.Thread(target=lambda: pages.append(bertviz_ui._waited_page(
        notice, "r", ("m",), 0, 0, "title", False, result)))
    with loaded.lock:  # another session's Inspect holds the model: nothing to say yet
        view.start()
        time.sleep(0.6)
        assert told == [] and view.is_alive()
        loaded.job = "diagnosis"  # then a run holds it
        deadline = time.monotonic() + 30
        while not told and time.monotonic() < deadline:
            time.sleep(0.01)
        assert told == [bertviz_ui.cache.BUSY.format(job="diagnosis")]
        loaded.job = ""
    view.join(30)
    assert pages == ["read", None] and told[-1] == ""

class _FullDisk:
    name = "second.zip"

    def seek(self, offset):
        pass

    def read(self, size=-1):
        raise OSError(28, "No space left on device")


def test_an_upload_that_cannot_be_stored_keeps_the_one_before(bert_zip, monkeypatch):
    """The upload before was removed first: the session pointed at a deleted folder (FileNotFoundError on every
    run, no Clear button), and the error showed the server's private path."""
    import tempfile
    from pathlib import Path

    from app.server import uploads

    at = _app()
    at.switch_page("app_pages/diagnose.py").run()
    at.file_uploader[0].upload("first.zip", bert_zip).run()
    first = at.session_state["diag_staged"]
    folders = set(Path(tempfile.gettempdir()).glob("attnscope-upload-*"))
    real_add = uploads.Staged.add
    monkeypatch.setattr(uploads.Staged, "add", lambda self, name, stream: real_add(self, name, _FullDisk()))
    at.file_uploader[0].upload("second.zip", bert_zip).run()
    assert not at.exception
    assert _errors(at) == ["the upload could not be stored on the server (No space left on device); try again, or "
                           "ask the server's operator for disk space"]
    assert at.session_state["diag_staged"] is first and first.folder.exists() and first.names == ["first.zip"]
    assert set(Path(tempfile.gettempdir()).glob("attnscope-upload-*")) == folders  # the part-copy is gone
    monkeypatch.setattr(uploads.Staged, "add", real_add)
    at.button(key="diag_run").click().run()
    assert not at.exception and not _errors(at) and at.subheader


class _Upload:
    """A stand-in for Streamlit's UploadedFile."""

    def __init__(self, name, data):
        self.name, self.size, self._data = name, len(data), io.BytesIO(data)
        self.seek, self.read = self._data.seek, self._data.read


def test_files_over_the_upload_limit_together_are_refused_before_any_is_stored(monkeypatch, tmp_path):
    """Streamlit caps each file alone: five files of 0.9 MB under a 1 MB limit went to disk in full (4.5 MB) and
    stayed there until the next upload; a full disk when the upload's folder is made was a raw OSError."""
    import tempfile

    from app.server import uploads
    from core import CheckpointError, Limits

    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    previous = uploads.stage(None, [_Upload("first.zip", b"x" * 10)], Limits(max_upload_bytes=10**6))
    parts = [_Upload(f"part{i}.bin", b"x" * 900_000) for i in range(5)]
    with pytest.raises(CheckpointError, match="^the 5 uploaded files are together 4,500,000 bytes, more than the 1,0"):
        uploads.stage(previous, parts, Limits(max_upload_bytes=10**6))
    assert sorted(tmp_path.iterdir()) == [previous.folder] and previous.names == ["first.zip"]

    def full(*args, **kwargs):
        raise OSError(28, "No space left on device", str(tmp_path / "attnscope-upload-x"))

    monkeypatch.setattr(tempfile, "mkdtemp", full)
    with pytest.raises(CheckpointError, match=r"^the upload could not be stored on the server \(No space left"):
        uploads.stage(previous, parts[:1], Limits(max_upload_bytes=10**6))
    assert previous.folder.exists() and previous.names == ["first.zip"]


def test_every_session_s_staged_uploads_together_are_capped(monkeypatch, tmp_path):
    """Each upload was checked alone: one tab may hold three of up to 2 GB, and 24 staged uploads (238 MB at a
    10 MB limit) were all kept, so a few dozen tabs filled the server's disk."""
    import gc
    import tempfile

    from app import errors
    from app.server import uploads
    from core import CheckpointError, Limits

    gc.collect()  # other tests' sessions
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv(uploads.ENV_MAX_STAGED, str(uploads.staged_bytes() + 2500))
    limits = Limits(max_upload_bytes=10**6)
    first = uploads.stage(None, [_Upload("a.zip", b"x" * 1000)], limits)
    second = uploads.stage(None, [_Upload("b.zip", b"x" * 1000)], limits)  # another session's
    with pytest.raises(CheckpointError) as refused:
        uploads.stage(None, [_Upload("c.zip", b"x" * 1000)], limits)
    assert "would pass the" in errors.message(refused.value)
    assert "whoever runs this AttnScope server can raise the limit (ATTNSCOPE_MAX_STAGED_BYTES)" in \
        errors.message(refused.value)
    assert sorted(tmp_path.iterdir()) == sorted([first.folder, second.folder])  # nothing of it was written
    second = uploads.stage(second, [_Upload("b2.zip", b"x" * 1400)], limits)  # replacing its own: the old one goes
    first.remove()  # Clear: its room is free again
    assert uploads.stage(None, [_Upload("c.zip", b"x" * 1000)], limits).names == ["c.zip"]


def test_a_closed_tab_s_uploads_go_once_streamlit_would_no_longer_resume_it(monkeypatch, tmp_path):
    """Streamlit drops a closed tab's state, and with it its uploads, only when another tab disconnects: on a quiet
    server a closed tab's uploads stayed on disk for good and counted against the cap, so a new visitor was
    refused until some other tab closed (stop-51 growth audit). A tab back before the session's time is up keeps
    them; the sweep runs without anyone's upload."""
    import gc
    import tempfile
    import time
    from types import SimpleNamespace

    from app.server import uploads
    from core import CheckpointError, Limits

    gc.collect()  # other tests' sessions
    active = {"tab-1", "tab-2"}
    runtime = SimpleNamespace(is_active_session=lambda session_id: session_id in active)
    monkeypatch.setattr(uploads, "Runtime", SimpleNamespace(exists=lambda: True, instance=lambda: runtime))
    monkeypatch.setattr(uploads, "config", SimpleNamespace(get_option=lambda name: 0.2))  # the sessions' TTL, s
    monkeypatch.setattr(uploads, "SWEEP_S", 0.05)
    monkeypatch.setattr(uploads, "_sweeper", [])  # not an earlier test's sweep, asleep for 30 s
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    monkeypatch.setenv(uploads.ENV_MAX_STAGED, str(uploads.staged_bytes() + 2500))
    limits, tab = Limits(max_upload_bytes=10**6), {"id": "tab-1"}
    monkeypatch.setattr(uploads, "get_script_run_ctx", lambda: SimpleNamespace(session_id=tab["id"]))
    first = uploads.stage(None, [_Upload("a.zip", b"x" * 1000)], limits)
    tab["id"] = "tab-2"
    second = uploads.stage(None, [_Upload("b.zip", b"x" * 1000)], limits)
    assert (first.session_id, second.session_id) == ("tab-1", "tab-2")
    active.discard("tab-1")  # tab 1 closed ...
    uploads.remove_abandoned(now=0.0)
    uploads.remove_abandoned(now=0.1)
    active.add("tab-1")  # ... and came back in time
    uploads.remove_abandoned(now=0.15)
    uploads.remove_abandoned(now=0.5)
    assert first.alive and first.gone_since is None
    tab["id"] = "tab-3"
    with pytest.raises(CheckpointError, match="would pass the"):
        uploads.stage(None, [_Upload("c.zip", b"x" * 1000)], limits)
    active.discard("tab-1")  # closed for good: the sweep removes its upload, with no other tab's help
    deadline = time.monotonic() + 10
    while first.folder.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not first.folder.exists() and not first.alive and second.alive
    assert uploads.stage(None, [_Upload("c.zip", b"x" * 1000)], limits).names == ["c.zip"]
    second.remove()


def test_the_upload_sweep_outlives_a_failed_check(monkeypatch, tmp_path, caplog):
    """A check that raised (another session's upload added while the set was read: "Set changed size during
    iteration") ended the sweep thread for good, and closed tabs' uploads then stayed (stop-51 review)."""
    import gc
    import tempfile
    import time
    from types import SimpleNamespace

    from app.server import uploads
    from core import Limits

    gc.collect()
    checks, real = [], uploads.remove_abandoned

    def flaky():
        checks.append(1)
        if len(checks) == 1:
            raise RuntimeError("Set changed size during iteration")
        real()

    monkeypatch.setattr(uploads, "Runtime", SimpleNamespace(exists=lambda: True, instance=lambda: SimpleNamespace(
        is_active_session=lambda session_id: False)))
    monkeypatch.setattr(uploads, "config", SimpleNamespace(get_option=lambda name: 0.1))
    monkeypatch.setattr(uploads, "SWEEP_S", 0.05)
    monkeypatch.setattr(uploads, "_sweeper", [])
    monkeypatch.setattr(uploads, "get_script_run_ctx", lambda: SimpleNamespace(session_id="gone"))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))
    staged = uploads.stage(None, [_Upload("a.zip", b"x" * 10)], Limits(max_upload_bytes=10**6))
    monkeypatch.setattr(uploads, "remove_abandoned", flaky)
    deadline = time.monotonic() + 10
    while staged.folder.exists() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert not staged.folder.exists() and len(checks) >= 2
    assert "the upload sweep failed once" in caplog.text


def test_models_loaded_for_one_run_alone_are_capped_across_sessions(monkeypatch):
    """Uploads and folders are loaded for their run, outside the model cache: N sessions at once held N models
    of up to 2 GB each, with no bound (two runs on one folder: two copies)."""
    import time
    from types import SimpleNamespace

    from app.server import sources

    monkeypatch.setenv(sources.ENV_RUN_MODELS, "2")
    held, most, told = [], [], []
    monkeypatch.setattr(sources, "load_source", lambda x, n_heads, tell: held.append(x) or most.append(len(held))
                        or SimpleNamespace(model=x, tokenizer=None, notes=[]))
    compare_in, compare_out = threading.Event(), threading.Event()

    def compare_run():
        with sources.opened_models(["/a", "/b"], None, [None, None]):
            compare_in.set()
            compare_out.wait(5)
            held.clear()

    def diagnose_run():
        with sources.opened_models(["/c"], None, [lambda fraction, message: told.append(message)]):
            held.clear()

    first = threading.Thread(target=compare_run)
    first.start()
    compare_in.wait(5)
    second = threading.Thread(target=diagnose_run)
    second.start()
    time.sleep(1.5)
    assert told and told[0] == ("waiting: other runs hold 2 of the 2 uploaded or local models this server loads at "
                                "once, and this run needs 1 (runs go in the order they asked)")
    assert second.is_alive() and most == [1, 2]  # it waits, not loaded
    compare_out.set()
    first.join()
    second.join(5)
    assert not second.is_alive() and most == [1, 2, 1] and sources.run_models.held == 0
    monkeypatch.setenv(sources.ENV_RUN_MODELS, "two")
    with pytest.raises(Exception, match="ATTNSCOPE_MAX_RUN_MODELS='two' must be a whole number"):
        sources.opened_models(["/c"], None, [None]).__enter__()


def test_a_timeline_of_checkpoints_takes_a_place_of_the_models_loaded_at_once(monkeypatch):
    """The Timeline loaded its checkpoints (up to 2 GB each) outside the cap: every session could hold one."""
    import time

    import core
    from app.app_pages import timeline as page
    from app.server import sources

    monkeypatch.setenv(sources.ENV_RUN_MODELS, "1")
    loaded, results = [], []
    monkeypatch.setattr(page.tl, "from_checkpoints", lambda folder, progress: loaded.append(folder) or "timeline")
    full, release = threading.Event(), threading.Event()

    def upload_run():
        with sources.run_models.places(1, 1, lambda *args: None):
            full.set()
            release.wait(5)

    holder = threading.Thread(target=upload_run)
    holder.start()
    full.wait(5)
    runner = threading.Thread(target=lambda: results.append(page.load(page.KINDS[2], "/runs/out")))
    runner.start()
    time.sleep(1.5)
    assert runner.is_alive() and not loaded  # it waits for the place
    release.set()
    holder.join(5)
    runner.join(5)
    assert loaded == ["/runs/out"] and results == [({"out": "timeline"}, [])] and sources.run_models.held == 0
    monkeypatch.setattr(page.session, "stop_when_gone", lambda: (lambda: True))  # its browser tab has closed
    full.clear(), release.clear()
    holder = threading.Thread(target=upload_run)
    holder.start()
    full.wait(5)
    start = time.monotonic()
    with pytest.raises(core.Cancelled):  # it stops waiting, as Diagnose does, instead of taking a place nobody wants
        page.load(page.KINDS[2], "/runs/out")
    assert time.monotonic() - start < 3 and loaded == ["/runs/out"]
    release.set()
    holder.join(5)
    assert sources.run_models.held == 0 and not sources.run_models.queue


def test_a_folder_s_new_files_drop_its_old_copy_but_a_slow_load_of_old_files_drops_nothing(monkeypatch):
    """Each save and Run kept another copy of a training folder, pushing other sessions' models out; dropping every
    other copy after any load then let a slow load of the older files drop the newest copy and keep its own."""
    import contextlib
    from types import SimpleNamespace

    import torch

    from app.server import cache

    source, stamp, gate, reading = "/srv/runs/attnscope-race", {"now": ("S2",)}, threading.Event(), threading.Event()
    monkeypatch.setattr(cache, "source_stamp", lambda name: stamp["now"] if name == source else ())
    models = cache.BoundedCache(3, 10**9, cache.model_bytes)
    monkeypatch.setattr(cache, "model_cache", lambda: models)
    bar = SimpleNamespace(progress=lambda *a, **k: None, empty=lambda: None)  # no page: threads draw nothing
    monkeypatch.setattr(cache.st, "empty", lambda: bar)
    monkeypatch.setattr(cache.st, "spinner", lambda *a, **k: contextlib.nullcontext())

    def load_untrusted(name, n_heads=None, progress=None):
        if threading.current_thread().name == "slow":
            stamp["now"] = ("S3",)  # the trainer saves again while this load reads S2's files
            reading.set()
            gate.wait(5)
        return SimpleNamespace(model=torch.nn.Linear(1, 1), tokenizer=None, notes=[])

    monkeypatch.setattr(cache.core, "load_untrusted", load_untrusted)
    stamps = lambda: sorted(key[1] for key in models.keys())  # noqa: E731
    slow = threading.Thread(name="slow", target=lambda: cache.load_model(source, ("S2",)))
    slow.start()
    reading.wait(5)
    cache.load_model(source, ("S3",))  # another session's Run reads the new files first
    assert stamps() == [("S3",)]
    gate.set()
    slow.join(5)
    assert stamps() == [("S2",), ("S3",)]  # the newest copy stays
    stamp["now"] = ("S4",)
    cache.load_model(source)
    assert stamps() == [("S4",)]  # the next save's Run drops both


def test_a_run_of_known_models_alone_takes_no_place_and_never_waits(monkeypatch):
    """Known models come from the shared cache: such a run waited in the queue behind runs of uploads, then failed
    with an IndexError (its wait message named the first of its no uploads)."""
    import time

    from app.server import sources

    monkeypatch.setattr(sources.cache, "load_model", lambda name: LoadedModel(name, None))
    monkeypatch.setenv(sources.ENV_RUN_MODELS, "1")
    full, release = threading.Event(), threading.Event()

    def upload_run():
        with sources.run_models.places(2, 1, lambda *args: None):  # a run alone goes, past the limit
            full.set()
            release.wait(5)

    holder = threading.Thread(target=upload_run)
    holder.start()
    full.wait(5)
    start = time.monotonic()
    with sources.opened_models(["demo-bert"], None, [None]) as [(model, _, _)]:
        assert model == "demo-bert" and time.monotonic() - start < 0.5
    release.set()
    holder.join(5)
    assert sources.run_models.held == 0


def test_runs_take_their_model_places_in_the_order_they_asked():
    """A Compare run (two models) waited for ever while one-model runs kept overlapping: each later one fitted the
    one free place and went first."""
    import time

    from app.server.sources import _RunModels

    places, entered, leave = _RunModels(), [], {name: threading.Event() for name in ("one", "compare", "later")}

    def run(name, count):
        with places.places(count, 2, lambda *args: None):
            entered.append(name)
            leave[name].wait(5)

    threads = {name: threading.Thread(target=run, args=(name, count))
               for name, count in (("one", 1), ("compare", 2), ("later", 1))}
    for name in ("one", "compare", "later"):
        threads[name].start()
        time.sleep(0.2)
    assert entered == ["one"]  # "later" fits the free place, but "compare" asked first
    leave["one"].set()
    time.sleep(0.3)
    assert entered == ["one", "compare"]
    leave["compare"].set()
    for thread in threads.values():
        leave["later"].set()
        thread.join(5)
    assert entered == ["one", "compare", "later"] and places.held == 0 and not places.queue


def test_a_limit_on_a_page_is_the_server_s_to_raise_not_the_user_s(monkeypatch, tmp_path):
    """core tells a library or CLI user to raise a limit with an environment variable or ``Limits(...)``; a web
    user of a shared server can do neither, and was told to."""
    from app import errors
    from app.server import uploads
    from core import CheckpointError, Limits
    from core.checkpoints import archive, build, checkpoint
    from core.checkpoints.gguf import load as gguf_load

    class Any(dict):
        def __missing__(self, key):
            return archive.ENV_MAX_MODEL if key == "env" else 1

    templates = [archive.TOO_BIG, archive.TOO_LARGE_UNPACKED, build.TOO_BIG, build.BIG_BUFFERS, build.HEAVY,
                 checkpoint.TOO_MUCH_WEIGHT, gguf_load.TOO_BIG]
    for template in templates:
        shown = errors.message(CheckpointError(template.format_map(Any())))
        assert "Limits(" not in shown and "raise it with" not in shown and "raise the limit with" not in shown
        assert re.search(r"whoever runs this AttnScope server can raise the limit \(ATTNSCOPE_MAX_\w+_BYTES\)",
                         shown), shown
    monkeypatch.setattr("tempfile.tempdir", str(tmp_path))
    with pytest.raises(CheckpointError) as refused:
        uploads.stage(None, [_Upload("big.zip", b"x" * 20)], Limits(max_upload_bytes=10))
    assert errors.message(refused.value) == ("big.zip is 20 bytes, more than the 10-byte upload limit; whoever runs "
                                             "this AttnScope server can raise the limit (ATTNSCOPE_MAX_UPLOAD_BYTES)")


def test_a_model_is_not_loaded_under_a_stamp_its_files_no_longer_have(bert_folder, monkeypatch, tmp_path):
    """The neuron view asked for the model of an old result after it had left the cache: the folder's new weights
    were loaded and kept under the old stamp, and the page said the model 'adds a rotation'."""
    from app.server import cache
    from core import InputError

    folder = shutil.copytree(bert_folder, tmp_path / "bert")
    monkeypatch.setattr(cache, "model_cache", lambda: BoundedCache(3, 10**9, model_bytes))
    stamp = cache.source_stamp(str(folder))
    assert cache.load_model(str(folder), stamp).model is not None
    monkeypatch.setattr(cache, "model_cache", lambda: BoundedCache(3, 10**9, model_bytes))  # evicted
    (folder / "config.json").write_text((folder / "config.json").read_text() + " ")
    with pytest.raises(InputError, match="changed since its attention was read; press Run"):
        cache.load_model(str(folder), stamp)


def test_the_neuron_view_of_a_nan_head_says_so_rather_than_blame_the_architecture(monkeypatch):
    import torch

    import tiny
    from app.server import cache
    from app.views import bertviz_ui

    shown = []
    monkeypatch.setattr(cache, "load_model", lambda *key: LoadedModel(tiny.tiny_bert(), None))
    monkeypatch.setattr(bertviz_ui.st, "info", shown.append)
    result = type("Result", (), {"encoder": None, "attentions": torch.full((2, 4, 3, 3), float("nan"))})()
    bertviz_ui.neuron_view_ui("t_", "id", result, 0, 0, "model", ("/models/bert", ()))
    assert shown == [bertviz_ui.NOT_FINITE]


def test_the_neuron_view_reads_the_model_its_result_came_from(monkeypatch):
    """It loaded the source's files as they are now, which may be newer than the maps it is drawn beside."""
    from app.server import cache
    from app.views import bertviz_ui

    asked = []
    import torch

    monkeypatch.setattr(cache, "load_model", lambda *key: asked.append(key) or LoadedModel(torch.nn.Linear(1, 1), None))
    result = type("Result", (), {"encoder": None})()
    bertviz_ui.neuron_view_ui("t_", "id", result, 0, 0, "model", ("/models/bert", (("config.json", 2, 7),)))
    assert asked == [("/models/bert", (("config.json", 2, 7),))]


def test_a_known_model_s_loading_bar_shows_each_phase_of_the_load_not_each_number(monkeypatch):
    """The bar drew a message only when it moved a twentieth: "reading the GGUF metadata" (~3 s of SmolLM2) and a
    wait for another GGUF file's conversion, both told where "checking" had been, were never drawn."""
    import core
    from app.server import cache

    drawn = []

    class Bar:
        def progress(self, fraction, text):
            drawn.append(text.split(": ", 1)[1])

        def empty(self):
            pass

    def load(source, n_heads=None, progress=None):
        for fraction, message in ((0.0, "checking"), (0.02, "reading the metadata"), (0.02, "waiting"),
                                  (0.02, "waiting"), (0.03, "dequantising 1/9"), (0.04, "dequantising 2/9"),
                                  (0.5, "dequantising 5/9"), (0.51, "dequantising 6/9")):
            progress(fraction, message)
        return SimpleNamespace(model=Sized(1), tokenizer=None, notes=[])
    monkeypatch.setattr(cache.st, "empty", Bar)
    monkeypatch.setattr(cache.core, "load_untrusted", load)
    monkeypatch.setattr(cache, "model_cache", lambda: BoundedCache(2, 10**9, lambda m: 1))
    monkeypatch.setattr(cache, "source_stamp", lambda source: ())
    cache.load_model(core.MODEL_CHOICES[0])
    assert drawn == ["checking", "reading the metadata", "waiting", "dequantising 1/9", "dequantising 5/9"]
