"""Every page under streamlit's AppTest: good input draws, bad input is one st.error, never an exception."""

import importlib
import json
import pytest

from streamlit.testing.v1 import AppTest

from app_runner import TIMEOUT
from app_runner import started_app as _app


def _inspect(at: AppTest, source: str, text: str = "The quick brown fox jumps over the lazy dog.") -> AppTest:
    at.radio(key="model_kind").set_value("Local folder").run()
    at.text_input(key="model_path").set_value(source)
    at.text_area(key="text").set_value(text)
    return at.button(key="run").click().run()


def _charts(at: AppTest):
    return at.get("plotly_chart")


def _headings(at: AppTest) -> list[str]:
    return [h.value for h in at.subheader]


def _errors(at: AppTest) -> list[str]:
    return [e.value for e in at.error]


def test_inspect_starts_with_minilm():
    at = _app()
    assert not at.exception
    assert not _errors(at), _errors(at)
    assert at.selectbox(key="demo_model").value == "sentence-transformers/all-MiniLM-L6-v2"
    assert len(_charts(at)) == 2  # overview + heatmap
    _every_view_is_named(at)


def _every_view_is_named(at) -> None:
    """Charts and frames named for screen readers: every one was announced as "st.iframe" or not at all."""
    alts = [c.proto.alt for c in _charts(at)] + [f.proto.alt for f in at.get("iframe")]
    assert alts and all(len(alt) > 20 for alt in alts), alts


def test_inspect_local_folder_draws_every_section(bert_folder):
    at = _inspect(_app(), str(bert_folder))
    assert not at.exception and not _errors(at)
    assert len(_charts(at)) == 2
    assert [m.label for m in at.metric][:2] == ["Entropy (0–1)", "Row max"]  # "Confidence" as the pattern's was
    assert any("Pattern:" in m.value for m in at.markdown)
    assert len(at.get("iframe")) == 1  # the head view: saved as it is shown, so it must need nothing besides itself
    assert "Save this view (standalone HTML)" in {b.label for b in at.download_button}  # README said so; it was not
    assert "src=" not in at.get("iframe")[0].proto.srcdoc and "href=" not in at.get("iframe")[0].proto.srcdoc
    assert f"<title>{bert_folder.name}: head view, layer 0</title>" in at.get("iframe")[0].proto.srcdoc
    at.segmented_control(key="inspect_extra_view").set_value("BertViz model view").run()
    assert not at.exception and not _errors(at)
    frame = at.get("iframe")[0].proto.srcdoc
    assert "/app/static/js/d3-5.7.0.min.js" in frame and "cdnjs" not in frame
    # BertViz answers the mouse alone: the page says so, and where the keyboard's way is
    assert any("answers the mouse only; from the keyboard, the Head view" in c.value for c in at.caption)
    at.segmented_control(key="inspect_extra_view").set_value("BertViz neuron view").run()
    assert not at.exception and not _errors(at)
    assert any("answers the mouse only" in c.value for c in at.caption)
    assert "bertviz_params" in at.get("iframe")[0].proto.srcdoc and "cdnjs" not in at.get("iframe")[0].proto.srcdoc
    assert "<html lang='en'>" in at.get("iframe")[0].proto.srcdoc
    _every_view_is_named(at)
    assert {b.label for b in at.download_button} == {"PNG", "SVG", "CSV", "NPZ", "JSON",
                                                     "Save this view (standalone HTML)"}


def test_the_exports_say_which_characters_their_images_draw_as_boxes(monkeypatch):
    """Characters no font on the server has came out of the PNG and SVG as boxes, with no word of it."""
    from app.views import exports

    monkeypatch.setattr(exports, "undrawn_characters", lambda queries, keys, title, at: list("東京*"))
    captions = [c.value.replace("\\", "") for c in _app().caption]  # markdown's escapes taken out
    assert ("The PNG and SVG draw 3 characters as boxes (東 京 *): no font on this server has them. The CSV, NPZ "
            "and JSON hold the tokens as they are; the server's operator can install Noto fonts (Debian: "
            "fonts-noto-cjk, fonts-noto-core).") in captions, captions


def test_inspect_bare_weights_with_the_heads_field(monkeypatch, tmp_path):
    """The loader asked for "the Heads per layer field", which Inspect lacked: a folder of weights and a
    tokenizer but no config.json could be diagnosed, not inspected."""
    from safetensors.torch import save_file
    from tiny import tiny_bert, wordpiece_tokenizer

    folder = tmp_path / "bare"
    wordpiece_tokenizer().save_pretrained(folder)
    save_file({k: v.contiguous() for k, v in tiny_bert().state_dict().items()}, str(folder / "model.safetensors"))
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    at = _inspect(_app(), str(folder))
    assert not at.exception and any("Heads per layer field" in e for e in _errors(at)), _errors(at)
    at.number_input(key="model_heads").set_value(4)
    at = at.button(key="run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    assert len(_charts(at)) == 2 and at.selectbox(key="head").options == ["0", "1", "2", "3"]


def _nan_bert_folder(folder):
    """A tiny BERT whose attention is NaN in 5 of its 8 heads (L0H0, then all of layer 1), saved to ``folder``."""
    import torch
    from tiny import tiny_bert, wordpiece_tokenizer

    model = tiny_bert()
    with torch.no_grad():
        model.encoder.layer[0].attention.self.query.weight[:8] = float("nan")  # head 0 of layer 0, then all of layer 1
    model.save_pretrained(folder)
    wordpiece_tokenizer().save_pretrained(folder)
    return folder


def test_inspect_heads_with_nan_attention_have_no_pattern(tmp_path):
    """A diverged checkpoint's NaN maps were labelled 'Sparse (focused) — confidence nan%', with its advice."""
    at = _inspect(_app(), str(_nan_bert_folder(tmp_path)))
    assert not at.exception and not _errors(at), _errors(at)
    text = " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)
    assert "No pattern: this head's attention is NaN or infinite" in text  # L0H0 is open
    assert "**Pattern:" not in text and "nan%" not in text
    overview = _charts(at)[-1].proto.spec
    assert "layer 0, head 0: no label" in overview and "layer 0, head 1: " in overview
    at.selectbox(key="head").set_value(1).run()
    assert not at.exception and any(m.value.startswith("**Pattern:") for m in at.markdown)


def test_neuron_view_of_a_gpt2_head():
    """GPT-2's fused c_attn: before, "BertViz's neuron view needs BERT-style query and key layers"."""
    at = _app()
    at.selectbox(key="demo_model").set_value("demo-gpt2")
    at.button(key="run").click().run()
    at.selectbox(key="layer").set_value(2)
    at.selectbox(key="head").set_value(1).run()
    at.segmented_control(key="inspect_extra_view").set_value("BertViz neuron view").run()
    assert not at.exception and not _errors(at) and not at.info
    assert "bertviz_params" in at.get("iframe")[0].proto.srcdoc
    assert any("neuron view of layer 2, head 1" in c.value for c in at.caption)


def test_a_one_token_input_is_not_measured():
    """A 1×1 map showed "Confidence 0.00" and a "Sparse 60%" badge: nothing about one weight of 1 is measurable."""
    at = _app()
    at.selectbox(key="demo_model").set_value("demo-gpt2")
    at.text_area(key="text").set_value("The")
    at.button(key="run").click().run()
    assert not at.exception and not _errors(at)
    assert not at.metric and not any("Pattern:" in m.value for m in at.markdown)
    assert any("one-token input has nothing to measure" in c.value for c in at.caption)


def test_inspect_switch_head_and_options(bert_folder):
    at = _inspect(_app(), str(bert_folder))
    at.selectbox(key="layer").set_value(1)
    at.selectbox(key="head").set_value(3).run()
    assert _headings(at)[0] == "Layer 1, head 3"
    assert at.metric and any("Pattern:" in m.value for m in at.markdown)
    at.checkbox(key="inspect_hide_special").check().run()
    assert any("renormalised" in i.value for i in at.info)
    for mode, heading in (("average", "Layer 1, average of 4 heads"), ("rollout", "Attention rollout through layer 1")):
        at.radio(key="inspect_mode").set_value(mode).run()
        assert not at.exception and not _errors(at)
        assert _headings(at)[0] == heading  # the view says what it shows ...
        assert not at.metric and not any("Pattern:" in m.value for m in at.markdown)  # ... and no head's numbers
        assert f"{mode}" in at.info[0].value.lower() or "mean" in at.info[0].value.lower()
    at.checkbox(key="inspect_log_scale").check().run()
    assert not at.exception and len(_charts(at)) == 2
    heatmap = next(d for c in _charts(at) for d in json.loads(c.proto.spec)["data"] if d["type"] == "heatmap")
    assert heatmap["colorbar"]["ticktext"][0] == "≤ 0.0001"  # the floor holds every smaller weight (it said 0.0001)


def test_a_rollout_is_computed_once_for_every_layer_and_rerun(bert_folder, monkeypatch):
    """The rollout is cut from the rollout cache at each rerun (outside view_map's st.cache_data, which would have
    replayed its spinner); computed once per result while it is kept."""
    from core import views

    computed, rollout = [], views.attention_rollout
    monkeypatch.setattr(views, "attention_rollout", lambda a: computed.append(1) or rollout(a))
    at = _inspect(_app(), str(bert_folder), text="A rollout of its own.")
    at.radio(key="inspect_mode").set_value("rollout").run()
    at.selectbox(key="layer").set_value(1).run()
    at.checkbox(key="inspect_log_scale").check().run()
    assert not at.exception and not _errors(at) and _headings(at)[0] == "Attention rollout through layer 1"
    assert len(computed) == 1 and not any("Computing the attention rollout" in m.value for m in at.markdown)


def test_the_bertviz_model_view_starts_afresh_for_a_new_result_and_layer(bert_folder):
    """Its pickers kept the choice made on the previous result (layer 3 of 4 on a 2-layer model: 'Choose at least
    one layer'), and ignored the explorer's layer once opened."""
    at = _app()
    at.radio(key="model_kind").set_value("Known model").run()
    at.selectbox(key="demo_model").set_value("demo-bert")
    at.button(key="run").click().run()
    at.segmented_control(key="inspect_extra_view").set_value("BertViz model view").run()
    at.selectbox(key="layer").set_value(3).run()
    layers = next(m for m in at.multiselect if m.label == "Layers")
    assert layers.value == [3]
    layers.set_value([2, 3]).run()
    at = _inspect(at, str(bert_folder))  # 2 layers × 4 heads
    assert not at.exception and not any("Choose at least one" in i.value for i in at.info)
    assert [m.value for m in at.multiselect] == [[at.selectbox(key="layer").value], [0, 1, 2, 3]]


def test_the_neuron_view_of_a_long_input_says_why_it_is_not_drawn():
    """At 512 tokens it drew 1.9 M shapes on the app page's own thread: 20-48 s with the page frozen."""
    at = _app()
    at.radio(key="model_kind").set_value("Known model").run()
    at.selectbox(key="demo_model").set_value("demo-bert")
    at.text_area(key="text").set_value("the cat sat on the mat . " * 40)  # 240 words: over 181 tokens
    at.button(key="run").click().run()
    at.segmented_control(key="inspect_extra_view_long").set_value("BertViz neuron view").run()
    assert not at.exception and not at.get("iframe")
    assert any("neuron view draws about 8 shapes per query–key pair" in i.value for i in at.info), at.info


def test_the_model_view_of_an_input_past_512_tokens_says_why_it_is_not_drawn(tmp_path, monkeypatch):
    """One head of 513 tokens or more is over the 262,144 lines the view keeps to: it was drawn anyway (SmolLM2 at
    1,089 tokens: 1.19 M lines, ~13 s with the page frozen) under a note saying it fit."""
    import copy

    from tiny import long_bpe_tokenizer, tiny_gpt2

    tiny_gpt2(max_positions=600).save_pretrained(tmp_path)
    copy.deepcopy(long_bpe_tokenizer(600)).save_pretrained(tmp_path)
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    at = _inspect(_app(), str(tmp_path), "the cat sat on the mat . " * 100)  # 600 tokens after the cut
    at.segmented_control(key="inspect_extra_view_long").set_value("BertViz model view").run()
    assert not at.exception and not _errors(at) and not at.get("iframe")
    assert any("model view draws a line per query–key pair of each head" in i.value for i in at.info), at.info


def test_inputs_keep_their_values_while_their_widgets_are_not_drawn(bert_folder):
    """Streamlit forgets a widget that a run does not draw: after the Model radio went away and back, or after a
    visit to another page, the pickers showed their defaults (MiniLM, an empty path, the example text) beside the
    result of what the user had chosen."""
    at = _app()
    at.radio(key="model_kind").set_value("Known model").run()
    at.selectbox(key="demo_model").set_value("demo-gpt2")
    at.button(key="run").click().run()
    at.radio(key="model_kind").set_value("Local folder").run()
    at.radio(key="model_kind").set_value("Known model").run()
    assert at.selectbox(key="demo_model").value == "demo-gpt2"
    at = _inspect(at, str(bert_folder), "A text of my own.")
    at.number_input(key="model_heads").set_value(4)
    at.button(key="run").click().run()
    at.radio(key="model_kind").set_value("Known model").run()
    at.radio(key="model_kind").set_value("Local folder").run()
    assert at.text_input(key="model_path").value == str(bert_folder)
    assert at.number_input(key="model_heads").value == 4  # was 0: Run on bare weights then lacked its head count
    at.switch_page("app_pages/diagnose.py").run()
    at.radio(key="diag_kind").set_value("Known model").run()
    at.selectbox(key="diag_known").set_value("demo-bert").run()
    at.text_area(key="diag_probes").set_value("A probe of mine.").run()
    at.switch_page("app_pages/guide.py").run()
    at.switch_page("app_pages/inspect.py").run()
    assert not at.exception
    assert (at.radio(key="model_kind").value, at.text_area(key="text").value) == ("Local folder", "A text of my own.")
    at.switch_page("app_pages/diagnose.py").run()
    assert (at.selectbox(key="diag_known").value, at.text_area(key="diag_probes").value) == ("demo-bert",
                                                                                             "A probe of mine.")


def test_a_page_round_trip_keeps_the_head_and_view_chosen_on_a_result(bert_folder):
    """The result was kept, but its Layer, Head, Probe and Log colour scale went back to their defaults."""
    from tiny_checkpoints import zip_folder

    at = _inspect(_app(), str(bert_folder), "A text of my own.")
    at.selectbox(key="layer").set_value(1).run()
    at.selectbox(key="head").set_value(2).run()
    at.checkbox(key="inspect_log_scale").check().run()
    at.segmented_control(key="inspect_extra_view").set_value("BertViz model view").run()
    at = _diagnose(at, "bert.zip", zip_folder(bert_folder))
    at.selectbox(key="diag_head").set_value(3).run()
    at.selectbox(key="diag_sample").set_value(2).run()
    at.switch_page("app_pages/guide.py").run()
    at.switch_page("app_pages/inspect.py").run()
    assert (at.selectbox(key="layer").value, at.selectbox(key="head").value) == (1, 2)
    assert at.checkbox(key="inspect_log_scale").value
    assert at.segmented_control(key="inspect_extra_view").value == "BertViz model view"
    at.switch_page("app_pages/diagnose.py").run()
    assert (at.selectbox(key="diag_head").value, at.selectbox(key="diag_sample").value) == (3, 2)
    assert not at.exception and not _errors(at)


def test_a_report_says_so_once_its_checkpoint_is_no_longer_the_one_chosen(bert_folder):
    """A new upload of the same name left the old report on the page, under the same title, with nothing to say
    that it was of the file replaced."""
    from tiny_checkpoints import zip_folder

    stale = "This result is of the checkpoint chosen before"
    at = _diagnose(_app(), "model.zip", zip_folder(bert_folder))
    assert at.session_state["report"] is not None and not any(stale in i.value for i in at.info)
    at.file_uploader[0].upload("model.zip", zip_folder(bert_folder)).run()  # the same name, a new upload
    assert any(stale in i.value for i in at.info)
    at.button(key="diag_run").click().run()
    assert not any(stale in i.value for i in at.info)
    at.radio(key="diag_kind").set_value("Known model").run()
    assert any(stale in i.value for i in at.info)


def test_inspect_text_over_the_limit_says_so_and_runs_nothing(bert_folder):
    at = _inspect(_app(), str(bert_folder), text="word " * 2000)
    assert not at.exception
    assert any("over the limit of 5,000" in e for e in _errors(at)), _errors(at)
    assert not _charts(at)  # not the previous text's attention, as if nothing happened
    at.text_area(key="text").set_value("Short again.")
    at.button(key="run").click().run()
    assert not _errors(at) and len(_charts(at)) == 2


def test_inspect_text_whose_maps_would_pass_the_result_budget_is_refused_before_running(bert_folder, monkeypatch):
    """5,000 characters of digits are 5,000 SmolLM2 tokens, 27 GB of maps: characters did not bound the result.
    The count is the text's own, not the model's limit ("8,192 tokens" of a 20,000-token text: cutting it to the
    size asked still passed the limit)."""
    monkeypatch.setenv("ATTNSCOPE_RESULT_CACHE_BYTES", "100000")  # tiny BERT, 2 x 4 heads: 55 tokens fit
    at = _inspect(_app(), str(bert_folder), text="1 " * 200)
    assert not at.exception and not _charts(at)
    assert any(e.startswith("this text is 202 tokens for this model, which reads the first 64;") for e in _errors(at))
    assert any("over the 100 kB a result may take" in e and "shorten it to about 55 tokens" in e  # "0.0 GB" it said
               and "sets the limit with ATTNSCOPE\\_RESULT\\_CACHE\\_BYTES" in e for e in _errors(at)), _errors(at)
    at.text_area(key="text").set_value("Short again.")
    at.button(key="run").click().run()
    assert not _errors(at) and len(_charts(at)) == 2


def test_a_target_text_too_long_for_the_result_budget_is_named(monkeypatch):
    """An encoder-decoder's longer input is its target: the refusal said "this text", the Text box."""
    import pytest

    import core
    from app.server import cache
    from tiny import tiny_bart, wordpiece_tokenizer

    monkeypatch.setenv("ATTNSCOPE_RESULT_CACHE_BYTES", "100000")
    loaded = cache.LoadedModel(tiny_bart(), wordpiece_tokenizer())
    with pytest.raises(core.InputError, match="^the target text is 202 tokens for this model, which reads the first"):
        cache._check_result_size(loaded, "the fox", "", "1 " * 200)


def test_a_long_target_is_no_refusal_for_a_model_that_does_not_read_it(monkeypatch):
    """Only an encoder-decoder reads the target (extraction drops it for any other model, saying so): SmolLM2 with a
    short text and 2,000 digits as its target was refused for a text it would not read (long-input audit)."""
    from app.server import cache
    from tiny import bpe_tokenizer, tiny_gpt2

    monkeypatch.setenv("ATTNSCOPE_RESULT_CACHE_BYTES", "100000")
    cache._check_result_size(cache.LoadedModel(tiny_gpt2(), bpe_tokenizer()), "the fox", "", "1 " * 200)


def test_maps_just_over_the_budget_are_not_said_to_take_what_the_budget_is(monkeypatch):
    """1,361 SmolLM2 tokens take 2,000,470,680 bytes: the refusal said "would take 2 GB, over the 2 GB"."""
    import pytest

    import core
    from app.server import cache
    from tiny import tiny_bert, wordpiece_tokenizer

    monkeypatch.setenv("ATTNSCOPE_RESULT_CACHE_BYTES", "100000")  # 56 tokens of tiny BERT: 100,352 bytes
    with pytest.raises(core.InputError, match="would take just over the 100 kB a result may take on this server; "
                                              "shorten it to about 55 tokens"):
        cache._check_result_size(cache.LoadedModel(tiny_bert(), wordpiece_tokenizer()), "1 " * 54, "", "")



def test_a_server_started_outside_attnscope_s_folder_says_its_settings_were_not_read(monkeypatch):
    """.streamlit/config.toml is read from the folder the server starts in: started elsewhere, the browser page sent
    usage statistics to Streamlit and the BertViz views were blank, without a word."""
    import streamlit

    assert not _app().sidebar.warning  # started here: read
    real = streamlit.get_option
    monkeypatch.setattr(streamlit, "get_option", lambda name: {"server.enableStaticServing": False,
                                                               "browser.gatherUsageStats": True}.get(name, real(name)))
    at = _app()
    assert not at.exception and [w.value for w in at.sidebar.warning][0].startswith(
        "AttnScope's settings (.streamlit/config.toml) were not read: start it from its folder")


def test_the_upload_caption_gives_the_limit_that_applies(monkeypatch):
    """It gave Streamlit's server.maxUploadSize alone, and so did the upload box: at ATTNSCOPE_MAX_UPLOAD_BYTES=100MB
    both said 2,000 MB, and a 150 MB upload was refused only once the browser had sent it. The box counts MB of
    10**6 bytes in most browsers (2**20 on Windows): given whole ones, it never lets through more than the limit,
    and the caption gives the limit in the units of every other size on the page (it had said "1,907 MB of 2**20
    bytes" beside a box saying 2GB)."""
    def limits_caption(at):
        return next(c.value for c in at.caption if c.value.startswith("Limits: "))
    at = _app()
    at.switch_page("app_pages/diagnose.py").run()
    assert limits_caption(at).startswith("Limits: 2 GB per upload, a model of 2 GB, 2.26 GB unpacked.")
    assert at.get("file_uploader")[0].proto.max_upload_size_mb == 2000
    monkeypatch.setenv("ATTNSCOPE_MAX_UPLOAD_BYTES", "100MB")
    at.run()
    assert limits_caption(at).startswith("Limits: 100 MB per upload")
    assert at.get("file_uploader")[0].proto.max_upload_size_mb == 100
    monkeypatch.setenv("ATTNSCOPE_MAX_UPLOAD_BYTES", "500KB")  # under the box's smallest limit: the caption is true
    at.run()
    assert limits_caption(at).startswith("Limits: 500 kB per upload")


@pytest.mark.parametrize("page", ["app_pages/diagnose.py", "app_pages/compare.py"])
@pytest.mark.parametrize("name, value", [("ATTNSCOPE_MAX_UPLOAD_BYTES", "abc"), ("ATTNSCOPE_MAX_ENTRIES", "1e3"),
                                         ("ATTNSCOPE_MAX_UPLOAD_BYTES", "inf")])
def test_a_bad_upload_limit_setting_is_one_line_not_a_traceback(monkeypatch, page, name, value, caplog):
    """Limits() was read outside any try: the page stopped with a traceback under the source choice. The server's
    log is told too, once: only visitors' pages had said it."""
    from app import errors

    monkeypatch.setattr(errors, "_OPERATOR_TOLD", {})
    at = _app()
    monkeypatch.setenv(name, value)
    at.switch_page(page).run()
    assert not at.exception, [e.message for e in at.exception]
    assert any(name.replace("_", "\\_") in e.value for e in at.error), [e.value for e in at.error]  # markdown
    at.run()
    logged = [r.getMessage() for r in caplog.records if r.name == "attnscope.app"]
    told = f"for whoever runs this server: SettingError: {name}={value!r}"
    assert len(logged) == 1 and logged[0].startswith(told), logged


@pytest.mark.parametrize("configured, expected", [(100.5, 100), (100, 100), ("abc", None), (True, None), (0.5, None),
                                                  (float("inf"), None), (float("nan"), None)])
def test_a_decimal_or_garbled_max_upload_size_is_read_or_said(monkeypatch, configured, expected):
    """maxUploadSize = 100.5 in config.toml reached st.file_uploader(max_upload_size=100.5), which refused it, and
    "abc" was a TypeError: a traceback on Diagnose. With "abc" or 0.5 Streamlit's server fails every upload (HTTP
    500, 413): one line says so, instead of a box that promises 2 GB."""
    import streamlit

    real = streamlit.get_option
    monkeypatch.setattr(streamlit, "get_option", lambda name: configured if name == "server.maxUploadSize"
                        else real(name))
    at = _app()
    at.switch_page("app_pages/diagnose.py").run()
    assert not at.exception, [e.message for e in at.exception]
    if expected is None:
        assert not at.get("file_uploader")
        assert any(e.value.startswith("server.maxUploadSize is ") for e in at.error), [e.value for e in at.error]
    else:  # the server takes 100 MB of 2**20 bytes; the box, 100 MB of 10**6 (2**20 on Windows): none is refused
        assert at.get("file_uploader")[0].proto.max_upload_size_mb == expected  # with a bare HTTP 413 (it got 104)
        caption = next(c.value for c in at.caption if c.value.startswith("Limits: "))
        assert caption.startswith("Limits: 100 MB per upload"), caption  # what the box allows (it said 105 MB)


def test_a_bad_upload_setting_leaves_inspect_and_known_models_working(monkeypatch):
    """The model cache's budget read every ATTNSCOPE_MAX_* setting: with ATTNSCOPE_MAX_UPLOAD_BYTES=abc no model
    loaded, on any page, though nothing was uploaded; SmolLM2's GGUF load read them too."""
    from app.server import cache

    monkeypatch.setenv("ATTNSCOPE_MAX_UPLOAD_BYTES", "abc")
    monkeypatch.setenv("ATTNSCOPE_MAX_ENTRIES", "1e3")
    cache.model_cache.clear()
    try:
        at = _app()
        assert not at.exception and not at.error, [e.value for e in at.error]
        assert _charts(at)
    finally:
        cache.model_cache.clear()
    import core

    assert core.load_model("smollm2")[0] is not None


def test_inspect_reads_a_folder_again_once_its_files_change(tmp_path):
    """A model re-saved to the same folder (training on) is loaded afresh, not served from the caches."""
    import torch

    from tiny import tiny_bert
    from tiny_checkpoints import save_tiny_bert

    folder = save_tiny_bert(tmp_path / "my-model")
    at = _inspect(_app(), str(folder))
    before = at.session_state["inputs"], _charts(at)[-1].proto.spec
    model = tiny_bert()
    with torch.no_grad():
        for p in model.parameters():
            p.mul_(3.0)  # the same architecture, sharper attention
    model.save_pretrained(folder)
    at.radio(key="model_kind").set_value("Known model").run()  # full reruns, no Run: the result shown stays
    at.radio(key="model_kind").set_value("Local folder").run()
    assert not _errors(at) and _charts(at)[-1].proto.spec == before[1]  # it was read again, unasked, on any rerun
    at = at.button(key="run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    assert at.session_state["inputs"] == before[0]  # the same inputs...
    assert _charts(at)[-1].proto.spec != before[1]  # ...but the new weights' attention
    from app.server import cache
    kept = [key for key in cache.model_cache().keys() if key[0] == str(folder)]
    assert len(kept) == 1 and kept[0][1] == cache.source_stamp(str(folder))  # the old files' copy is gone



def test_inspect_reads_a_hub_id_again_once_the_cache_holds_a_newer_revision(tmp_path, monkeypatch):
    """A Hub id had no stamp: after the operator downloaded a newer revision (refs/main moved), every session kept
    getting the old weights' attention, from the result cache and, once that was dropped, from the model cache."""
    import torch
    from huggingface_hub import constants

    from tiny import tiny_bert, wordpiece_tokenizer

    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(tmp_path / "hub"))
    entry = tmp_path / "hub" / "models--acme--tiny-bert"

    def publish(commit: str, scale: float) -> None:  # what huggingface-cli download leaves: a snapshot, refs/main
        model = tiny_bert()
        with torch.no_grad():
            for p in model.parameters():
                p.mul_(scale)
        model.save_pretrained(entry / "snapshots" / commit)
        wordpiece_tokenizer().save_pretrained(entry / "snapshots" / commit)
        (entry / "refs").mkdir(exist_ok=True)
        (entry / "refs" / "main").write_text(commit)

    publish("a" * 40, 1.0)
    at = _app()
    at.radio(key="model_kind").set_value("Hugging Face id").run()
    at.text_input(key="model_path").set_value("acme/tiny-bert")
    at = at.button(key="run").click().run()
    before = _charts(at)[-1].proto.spec
    assert not _errors(at), _errors(at)
    publish("b" * 40, 3.0)
    at = at.button(key="run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    assert _charts(at)[-1].proto.spec != before

def test_inspect_says_what_loading_the_checkpoint_said(tmp_path):
    """A folder without a tokenizer is read with a demo model's of the same vocabulary size: Diagnose said so,
    Inspect drew demo-bert's tokens without a word (browser audit, stop 59)."""
    import shutil
    from pathlib import Path

    demo = Path(__file__).resolve().parents[2] / "core" / "demo_models" / "demo-bert"
    for name in ("config.json", "model.safetensors"):
        shutil.copy(demo / name, tmp_path / name)
    at = _inspect(_app(), str(tmp_path))
    assert not at.exception and not _errors(at) and len(_charts(at)) == 2
    assert any("no tokenizer in the checkpoint; using demo-bert's tokenizer" in w.value for w in at.warning), [
        w.value for w in at.warning]
    from tiny import tiny_bert

    tiny_bert().save_pretrained(tmp_path / "alone")  # no tokenizer, and no demo model's of its vocabulary size
    at = _inspect(_app(), str(tmp_path / "alone"))  # the error had said only that there is no tokenizer
    assert not at.exception and len(_errors(at)) == 1 and "add the tokenizer files" in _errors(at)[0], _errors(at)


def test_inspect_names_the_model_by_its_folder_not_its_path(bert_folder):
    at = _inspect(_app(), str(bert_folder))
    title = at.get("plotly_chart")[0].proto.spec
    assert bert_folder.name in title and str(bert_folder.parent) not in title


def test_inspect_markup_tokens_are_text(markup_folder):
    from tiny import MARKUP_TOKENS

    at = _inspect(_app(), str(markup_folder), text="|".join(MARKUP_TOKENS))
    assert not at.exception and not _errors(at), _errors(at)
    spec = at.get("plotly_chart")[0].proto.spec
    assert "<a href" not in spec and "&lt;a href" in spec and "<img" not in spec
    page = at.get("iframe")[0].proto.srcdoc
    assert "<!--" not in page.split("<script")[1]  # the head view's data holds the tokens escaped


def test_inspect_encoder_decoder_parts(bart_folder):
    at = _inspect(_app(), str(bart_folder))
    at.text_input(key="target").set_value("A short target.")
    at.button(key="run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    for part in ("encoder", "decoder", "cross"):
        at.radio(key="part").set_value(part).run()
        assert not at.exception and not _errors(at), (part, _errors(at))
        assert len(_charts(at)) == 2
    options = at.radio(key="inspect_mode").options
    assert len(options) == 2 and not any("rollout" in o.lower() for o in options)  # cross-attention: no rollout
    assert _headings(at)[0] == "Cross-attention, layer 0, head 0"  # the part names the view and its exports
    at.text_input(key="target").set_value("").run()  # no target: the decoder reads the text, a square cross map
    at.button(key="run").click().run()
    at.radio(key="part").set_value("cross").run()
    assert not any("rollout" in o.lower() for o in at.radio(key="inspect_mode").options)


def test_inspect_empty_text_is_an_error(bert_folder):
    at = _inspect(_app(), str(bert_folder), text="   ")
    assert not at.exception
    assert any("empty" in e for e in _errors(at))
    at.text_area(key="text").set_value("Fine again.")
    at.button(key="run").click().run()
    assert not _errors(at) and len(_charts(at)) == 2  # the app keeps working


def test_inspect_text_of_only_dropped_characters_is_an_error(bert_folder):
    """A zero-width space (pasted web text) passes str.strip but the tokenizer drops it: [CLS] [SEP] only."""
    at = _inspect(_app(), str(bert_folder), text="\u200b")
    assert not at.exception
    assert any("no tokens besides the tokenizer" in e for e in _errors(at)), _errors(at)


def test_an_error_in_the_head_explorer_is_one_line_not_a_traceback(bert_folder, monkeypatch):
    """The explorer is a fragment: an error there was a traceback, and the page's own handler never saw it."""
    from app.views import head_detail

    at = _inspect(_app(), str(bert_folder))
    monkeypatch.setattr(head_detail, "build_view", lambda *a, **k: 1 / 0)
    at.selectbox(key="layer").set_value(1).run()
    assert not at.exception
    assert any("ZeroDivisionError" in e for e in _errors(at)), _errors(at)
    monkeypatch.undo()
    at.selectbox(key="head").set_value(2).run()
    assert not at.exception and not _errors(at) and _headings(at)[0] == "Layer 1, head 2"  # the page keeps working


def test_inspect_unknown_model_is_an_error(monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    at = _inspect(_app(), "no-such-org/no-such-model-attnscope")
    assert not at.exception
    assert any("not a model this server knows" in e and "never downloads" in e for e in _errors(at)), _errors(at)
    assert not _charts(at)


def _diagnose(at: AppTest, name: str, data: bytes) -> AppTest:
    at.switch_page("app_pages/diagnose.py").run()
    at.file_uploader[0].upload(name, data).run()
    return at.button(key="diag_run").click().run()


def test_the_diagnose_bar_only_moves_forward(tmp_path, monkeypatch):
    """Loading (a GGUF's dequantisation) filled the bar to 100 %, then the diagnosis started it again at 0 % "loading
    the model"."""
    import streamlit.elements.progress as progress_element
    from tiny_gguf import write_llama_gguf

    values, draw = [], progress_element.ProgressMixin.progress
    monkeypatch.setattr(progress_element.ProgressMixin, "progress",
                        lambda self, value, text=None, **kw: values.append((value, text)) or draw(self, value, text,
                                                                                                   **kw))
    gguf = write_llama_gguf(tmp_path / "tiny.gguf")
    at = _diagnose(_app(), "tiny.gguf", gguf.read_bytes())
    assert not at.exception and at.session_state["report"] is not None, _errors(at)
    assert any(t.startswith("Loading") for _, t in values)
    fractions = [v for v, _ in values]
    assert fractions == sorted(fractions) and all(f <= 0.05 for f, t in values if t.startswith("Loading")), values
    assert not any(t == "loading the model" for _, t in values)


def test_diagnose_upload_zip_gives_a_report(bert_zip):
    at = _diagnose(_app(), "tiny-bert.zip", bert_zip)
    assert not at.exception and not _errors(at), _errors(at)
    assert at.subheader[0].value and any(s.value == "Findings" for s in at.subheader)
    assert len(_charts(at)) == 2  # pattern map + head heatmap
    # the head explorer's map had none of the exports docs/app.md promises on both pages
    assert {b.label for b in at.download_button} == {"Report (JSON)", "Report (Markdown)", "Report (HTML)",
                                                     "PNG", "SVG", "CSV", "NPZ", "JSON"}
    at.selectbox(key="diag_head").set_value(2).run()
    assert not at.exception


def test_diagnose_map_exports_are_named_after_their_probe(bert_zip, monkeypatch):
    """Every probe's map downloaded as "tiny-bert.zip_Layer-0-head-0.png", the name Inspect gives the same head."""
    from streamlit.delta_generator import DeltaGenerator

    names, button = [], DeltaGenerator.download_button

    def recorded(self, label, data, file_name=None, *args, **kwargs):
        names.append(file_name)
        return button(self, label, data, file_name, *args, **kwargs)

    monkeypatch.setattr(DeltaGenerator, "download_button", recorded)
    at = _diagnose(_app(), "tiny-bert.zip", bert_zip)
    assert "tiny-bert.zip_Layer-0-head-0_probe-1.png" in names
    names.clear()
    at.selectbox(key="diag_sample").set_value(1).run()
    assert not at.exception and "tiny-bert.zip_Layer-0-head-0_probe-2.png" in names
    assert '"text":"tiny-bert.zip: Layer 0, head 0 (probe 2)"' in _charts(at)[-1].proto.spec  # the map's title


def test_diagnose_says_when_the_probes_disagree_on_a_head(bert_zip):
    at = _diagnose(_app(), "tiny-bert.zip", bert_zip)
    report = at.session_state["report"]
    for h in report.heads:
        h.metrics.update(votes={h.pattern: 7}, role_votes={})
    head = report.head(0, 0)
    assert not any("borderline" in c.value.lower() for c in at.run().caption)
    assert "borderline: " not in _charts(at)[0].proto.spec
    head.metrics["votes"] = {head.pattern: 4, "vertical" if head.pattern != "vertical" else "sparse": 3}
    captions = [c.value for c in at.run().caption]
    assert not at.exception
    assert any(c.startswith(f"Borderline ({head.pattern} 4/7, ") for c in captions), captions
    assert f"1 of {len(report.heads)} heads are borderline" in " ".join(captions)
    assert "layer 0, head 0: " in _charts(at)[0].proto.spec and "borderline: " in _charts(at)[0].proto.spec
    marks = [t.split("<br>")[0] for t in json.loads(_charts(at)[0].proto.spec)["data"][0]["text"]]
    assert marks[0] == f"{head.pattern}?" and not any(m.endswith("?") for m in marks[1:]), marks  # in the map


def test_diagnose_a_sentence_says_first_that_it_is_too_short_to_judge(bert_zip):
    at = _app()
    at.switch_page("app_pages/diagnose.py").run()
    at.text_area(key="diag_probes").set_value("The cat sat on the mat.")
    at.file_uploader[0].upload("tiny-bert.zip", bert_zip).run()
    at = at.button(key="diag_run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    findings = [m.value for m in at.markdown if m.value.startswith(":") and " — " in m.value]
    assert "**Probes too short to judge** — " in findings[0], findings
    assert all(f.startswith(":blue-badge[") for f in findings), findings  # every finding is info


def test_a_report_keeps_only_the_maps_its_budget_allows(bert_zip, monkeypatch):
    """Each open session holds its report: 14 MiniLM probes of ~500 tokens pinned 1.1 GB per session. Past the
    budget the later probes' maps are dropped, with a note; the labels and findings still cover every probe."""
    from app.server.cache import result_bytes

    def diagnosed():
        at = _app()
        at.switch_page("app_pages/diagnose.py").run()
        at.text_area(key="diag_probes").set_value("\n\n".join(["the cat sat on the red mat"] * 3))
        at.file_uploader[0].upload("tiny-bert.zip", bert_zip).run()
        at = at.button(key="diag_run").click().run()
        assert not at.exception and not _errors(at), _errors(at)
        return at, at.session_state["report"], [i.value for i in at.info]

    _, whole, infos = diagnosed()
    assert len(whole.samples) == 3 and not any("not kept" in i for i in infos)
    one_probe = result_bytes(whole.samples[0])
    for kept in (2, 0):
        monkeypatch.setenv("ATTNSCOPE_REPORT_MAPS_BYTES", str(kept * one_probe + one_probe // 2))
        at, report, infos = diagnosed()
        assert len(report.samples) == kept and len(report.probes) == 3 and report.heads == whole.heads
        assert any(f"maps of {3 - kept} of the 3 probes are not kept" in i for i in infos), infos
        assert kept or any("larger than this server keeps for one report" in i for i in infos), infos
        assert kept or any("the HTML report has no heatmaps" in i for i in infos), infos  # it had said nothing
        at.selectbox(key="diag_head").set_value(1).run()
        assert not at.exception
        # Without maps the explorer had shown only its pickers: the head's pattern and metrics need no map
        assert any(m.value.startswith("**Pattern:") for m in at.markdown) and "Entropy (0–1)" in {
            m.label for m in at.metric}
        assert [h.value for h in at.subheader][-1] == "Layer 0, head 1"


def test_a_bad_maps_budget_is_told_before_the_diagnosis_and_keeps_no_report(bert_zip, monkeypatch):
    """It was read after the report was stored: the page drew the new report under the previous run's name."""
    at = _diagnose(_app(), "first.zip", bert_zip)
    monkeypatch.setenv("ATTNSCOPE_REPORT_MAPS_BYTES", "half a gig")
    at.file_uploader[0].upload("second.zip", bert_zip).run()
    at = at.button(key="diag_run").click().run()
    assert not at.exception and any("'half a gig' is not a size" in e for e in _errors(at)), _errors(at)
    assert "report" not in at.session_state and not any(s.value.startswith("Report: ") for s in at.subheader)


def test_diagnose_long_probe_is_streamed_and_says_so(bert_zip, monkeypatch):
    monkeypatch.setattr(importlib.import_module("diagnostics.diagnose"), "STREAM_ABOVE_TOKENS", 20)
    at = _app()
    at.switch_page("app_pages/diagnose.py").run()
    at.text_area(key="diag_probes").set_value("the cat sat on the mat " * 5)  # 30 tokens: "long" here
    at.file_uploader[0].upload("tiny-bert.zip", bert_zip).run()
    at = at.button(key="diag_run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    assert any(s.value == "Findings" for s in at.subheader)
    assert any("streamed" in i.value for i in at.info), [i.value for i in at.info]


def test_diagnose_loose_files_and_custom_model(bert_folder, tmp_path):
    import core

    at = _app()
    at.switch_page("app_pages/diagnose.py").run()
    files = [(p.name, p.read_bytes(), "application/octet-stream") for p in sorted(bert_folder.iterdir())]
    at.file_uploader[0].set_value(files).run()
    at.button(key="diag_run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    assert len(_charts(at)) == 2

    model = core.AttnScopeTransformer(core.TINY_PRESETS["attnscope-nano-decoder"])
    folder = core.save_custom_model(model, tmp_path / "nano")
    files = [(p.name, p.read_bytes(), "application/octet-stream") for p in sorted(folder.iterdir())]
    at.file_uploader[0].set_value(files).run()
    at.button(key="diag_run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    assert len(_charts(at)) >= 1  # the pattern map; maps of random-id probes when there is no tokenizer


def _diagnose_files(folder) -> AppTest:
    """The Diagnose page after uploading every file of ``folder`` as loose files."""
    at = _app()
    at.switch_page("app_pages/diagnose.py").run()
    at.file_uploader[0].set_value([(p.name, p.read_bytes(), "application/octet-stream")
                                   for p in sorted(folder.iterdir())]).run()
    return at.button(key="diag_run").click().run()


def test_diagnose_an_encoder_decoder_without_tokenizer_shows_its_weight_findings(tmp_path):
    """Nothing was probed, so the report has no heads: the page failed with IndexError (parts[0] of [])."""
    from tiny import tiny_bart

    tiny_bart().save_pretrained(tmp_path)
    at = _diagnose_files(tmp_path)
    assert not at.exception and not _errors(at), _errors(at)
    assert ["Findings", "Head explorer"] == _headings(at)[1:]
    assert any("No tokenizer" in m.value for m in at.markdown)
    assert any("only its weights were checked" in i.value for i in at.info), [i.value for i in at.info]
    assert len(at.download_button) == 3 and not _charts(at)


def test_a_model_without_tokenizer_whose_maps_are_not_kept_is_not_called_weights_only(tmp_path, monkeypatch):
    """Its heads were labelled on random token ids, but with their maps over the page's budget the explorer said
    "the model had no tokenizer, so only its weights were checked"."""
    from tiny import tiny_bert

    tiny_bert().save_pretrained(tmp_path)
    monkeypatch.setenv("ATTNSCOPE_REPORT_MAPS_BYTES", "1")
    at = _diagnose_files(tmp_path)
    assert not at.exception and not _errors(at), _errors(at)
    infos = [i.value for i in at.info]
    assert at.session_state["report"].heads and not at.session_state["report"].samples
    assert any("larger than this server keeps for one report" in i for i in infos), infos
    assert not any("only its weights were checked" in i for i in infos), infos


def test_diagnose_heads_with_nan_attention_have_no_pattern(tmp_path):
    """They were counted as sparse and shown as 'Sparse (focused) — confidence nan% … Nothing to do'."""
    from diagnostics.texts import PATTERN_TEXTS
    from tiny_checkpoints import zip_folder

    at = _diagnose(_app(), "nan.zip", zip_folder(_nan_bert_folder(tmp_path)))
    assert not at.exception and not _errors(at), _errors(at)
    counts = {m.label: m.value for m in at.metric}
    assert sum(int(counts[t.title]) for t in PATTERN_TEXTS.values()) == 3  # of 8: the 5 NaN heads are none
    assert "5 of 8 heads have no pattern" in " ".join(c.value for c in at.caption)
    assert "layer 0, head 0: no label" in _charts(at)[0].proto.spec
    text = " ".join(m.value for m in at.markdown) + " ".join(c.value for c in at.caption)
    assert "No pattern: this head's attention is NaN or infinite" in text  # L0H0 is open
    assert "**Pattern:" not in text and "nan%" not in text
    at.selectbox(key="diag_head").set_value(1).run()
    assert not at.exception and any(m.value.startswith("**Pattern:") for m in at.markdown)


def test_an_encoder_decoder_s_findings_name_the_part_of_their_heads(bart_folder):
    """Its three parts' near-uniform findings each ended "Heads: L0H0, …", alike; only the JSON said which part."""
    from tiny_checkpoints import zip_folder

    at = _diagnose(_app(), "bart.zip", zip_folder(bart_folder))
    assert not at.exception and not _errors(at), _errors(at)
    heads = [e.text[0].value for e in at.expander if e.label.startswith("All ")]  # a finding's heads, folded
    parts = {f.part for f in at.session_state["report"].findings if f.heads}
    assert len(parts) > 1 and {h.split(" ")[0] for h in heads} == parts, heads
    # the summary line gave the encoder's shape alone and "causal: False" (audit, stop 57), as the reports do not
    shape = "layers × heads: encoder: 2 × 4, decoder: 2 × 4, cross: 2 × 4"
    captions = [c.value for c in at.caption]
    assert any(shape in c and "causal: decoder only" in c for c in captions), captions
    markdown = at.session_state["report"].to_markdown()
    assert "| causal | decoder only |" in markdown and f"| {shape.replace(': ', ' | ', 1)} |" in markdown


def test_a_finding_says_its_title_and_names_its_heads_once(bart_folder):
    """A note read "**Probe text truncated** — Probe text truncated: …", and a finding named its heads in its
    message and again in a "Heads:" line under it."""
    from tiny_checkpoints import zip_folder

    at = _diagnose(_app(), "bart.zip", zip_folder(bart_folder))
    report = at.session_state["report"]
    assert any(not f.heads for f in report.findings)  # a note, whose message begins with its title
    shown = [m.value.split(" — ", 1) for m in at.markdown if "-badge[" in m.value]
    assert len(shown) == len(report.findings)
    for badge_title, message in shown:
        assert badge_title.split("**")[1] not in message, message
    assert not any("Heads: " in m.value for m in at.markdown)
    assert [e.label for e in at.expander if e.label.startswith("All ")] == [
        f"All {len(f.heads)} heads" for f in report.findings if f.heads]


def test_heads_without_a_pattern_keep_their_square_when_no_maps_are_kept(tmp_path, monkeypatch):
    """The coloured squares drawn without maps had one trace per pattern: the NaN heads had no square to pick."""
    from tiny_checkpoints import zip_folder

    monkeypatch.setenv("ATTNSCOPE_REPORT_MAPS_BYTES", "1")
    at = _diagnose(_app(), "nan.zip", zip_folder(_nan_bert_folder(tmp_path)))
    assert not at.exception and not _errors(at), _errors(at)
    spec = json.loads(_charts(at)[0].proto.spec)
    squares = {tuple(c) for trace in spec["data"] for c in trace["customdata"]}
    assert len(squares) == 8 and "layer 0, head 0: no label" in _charts(at)[0].proto.spec
    symbols = [trace["marker"]["symbol"] for trace in spec["data"]]  # a shape per pattern: not colour alone
    assert len(set(symbols)) == len(symbols) and spec["data"][-1]["name"] == "no label"


def test_diagnose_bad_upload_is_an_error_then_works(bert_zip):
    at = _diagnose(_app(), "model.zip", b"this is not a zip file")
    assert not at.exception
    assert any("zip" in e.lower() for e in _errors(at)), _errors(at)
    at.file_uploader[0].set_value(("tiny-bert.zip", bert_zip, "application/zip")).run()
    at.button(key="diag_run").click().run()
    assert not _errors(at) and len(_charts(at)) == 2


def test_diagnose_a_known_model_with_the_default_probes():
    from app.server import cache

    cache.model_cache.clear()  # other tests may have loaded demo-gpt2 into this process's cache
    at = _app()
    at.switch_page("app_pages/diagnose.py").run()
    at.radio(key="diag_kind").set_value("Known model").run()
    at.selectbox(key="diag_known").set_value("demo-gpt2").run()
    at = at.button(key="diag_run").click().run()
    assert not at.exception and not _errors(at), _errors(at)
    report = at.session_state["report"]
    assert report.model["name"] == "demo-gpt2" and len(report.heads) == 16
    assert not [f.code for f in report.findings if f.severity != "info"]  # a healthy model: nothing alarming
    assert len(_charts(at)) == 2
    _every_view_is_named(at)
    assert ("demo-gpt2", (), None) in cache.model_cache().keys()  # the server's shared copy, not one for this run
    model = cache.model_cache().get(("demo-gpt2", (), None), None).model
    at.button(key="diag_run").click().run()
    assert not _errors(at) and cache.model_cache().get(("demo-gpt2", (), None), None).model is model
    assert not model._forward_pre_hooks and not any(m._forward_pre_hooks for m in model.modules())  # hooks gone


def test_diagnose_refuses_more_probe_text_than_the_server_runs(bert_zip):
    from app.server.sources import MAX_PROBE_CHARS, MAX_PROBES

    at = _diagnose(_app(), "tiny-bert.zip", bert_zip)
    assert at.session_state["report"] is not None
    for probes in (["the cat sat on the mat"] * (MAX_PROBES + 1), ["word " * (MAX_PROBE_CHARS // 5 + 1)]):
        at.text_area(key="diag_probes").set_value("\n\n".join(probes))
        at = at.button(key="diag_run").click().run()
        assert not at.exception
        assert any(e.startswith("Not run: ") for e in _errors(at)), _errors(at)
        assert "report" not in at.session_state and not _charts(at)  # the earlier report is gone, nothing ran


def test_diagnose_without_input_asks_for_one():
    at = _app()
    at.switch_page("app_pages/diagnose.py").run()
    at.button(key="diag_run").click().run()
    assert any("Upload a checkpoint" in e for e in _errors(at))


def test_guide_renders_every_pattern_and_finding():
    from diagnostics.texts import FINDING_TEXTS, PATTERN_TEXTS

    at = _app()
    at.switch_page("app_pages/guide.py").run()
    assert not at.exception
    text = " ".join(m.value for m in at.markdown) + " ".join(e.label for e in at.expander)
    for t in [*PATTERN_TEXTS.values(), *FINDING_TEXTS.values()]:
        assert t.title in text
    assert "Borderline heads" in text
    # a finding whose report suggestion can differ from the general one says when (it showed the general one alone)
    varied = [t for t in FINDING_TEXTS.values() if t.variants]
    assert len(varied) >= 4 and all(f"**In a report:** {t.variants}" in text for t in varied)


def test_inspect_local_gguf_file(tmp_path, monkeypatch):
    from tiny_gguf import write_gpt2_gguf

    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    at = _inspect(_app(), str(write_gpt2_gguf(tmp_path / "tiny.gguf")))
    assert not at.exception and not _errors(at), _errors(at)
    assert len(_charts(at)) == 2


def test_a_long_input_opens_with_no_extra_view_after_a_short_one():
    """The one control kept the short example's head view: a 1,320-token text opened with a 337 kB head view."""
    at = _app()  # MiniLM on its short example
    assert at.segmented_control(key="inspect_extra_view").value == "Head view" and len(at.get("iframe")) == 1
    at.text_area(key="text").set_value("the cat sat on the mat " * 30)  # over 128 tokens
    at = at.button(key="run").click().run()
    assert not at.exception and at.segmented_control(key="inspect_extra_view_long").value == "None"
    assert len(at.get("iframe")) == 0


def test_long_map_is_pooled_with_a_zoom_slider():
    def page():
        import torch

        from app.views import head_detail

        weights = torch.softmax(torch.randn(300, 300), -1)  # (q, k): more than plots.MAX_CELLS per side
        tokens = [f"t{i}" for i in range(300)]
        view = head_detail.MapView(weights, tokens, tokens, "head", "Layer 0, head 0", "m")
        head_detail.heatmap_ui("t_", view, log_scale=False)

    at = AppTest.from_function(page, default_timeout=TIMEOUT).run()
    assert not at.exception, at.exception
    assert at.slider(key="t_window").value == (0, 300)
    assert any("300 × 300 tokens: each cell shows the largest weight of a 3×3 block" in c.value for c in at.caption)
    at.slider(key="t_window").set_value((150, 200)).run()
    # at full detail the pooling note went, and nothing said the exports were still the whole map
    assert any("Zoomed to 50 × 50 of 300 × 300 tokens; the exports hold the whole map" in c.value
               for c in at.caption)
    labels = at.get("plotly_chart")[0].proto.spec
    assert '"150 t150"' in labels and '"199 t199"' in labels and '"0 t150"' not in labels  # positions, not 0..49
    at.slider(key="t_window").set_value((300, 300)).run()
    assert not at.exception and '"299 t299"' in at.get("plotly_chart")[0].proto.spec  # never an empty map


def test_hidden_special_tokens_keep_their_positions_and_the_zoom_window():
    """Hiding [CLS] renumbered every token (input token 100 was labelled 99) and reset the zoom window."""
    def page():
        import streamlit as st
        import torch

        from app.views import head_detail

        weights = torch.softmax(torch.randn(302, 302), -1)  # (q, k)
        tokens = ["[CLS]", *(f"t{i}" for i in range(1, 301)), "[SEP]"]
        kept = list(range(1, 301)) if st.session_state.get("hide") else list(range(302))
        view = head_detail.MapView(weights[kept][:, kept], [tokens[i] for i in kept], [tokens[i] for i in kept],
                                   "head", "Layer 0, head 0", "m", query_positions=kept, key_positions=kept,
                                   lengths=(302, 302))
        head_detail.heatmap_ui("t_", view, log_scale=False)

    at = AppTest.from_function(page, default_timeout=TIMEOUT).run()
    at.slider(key="t_window").set_value((100, 110)).run()
    at.session_state["hide"] = True
    at.run()
    assert not at.exception and at.slider(key="t_window").value == (100, 110)
    spec = at.get("plotly_chart")[0].proto.spec
    assert '"100 t100"' in spec and '"109 t109"' in spec and '"110 t110"' not in spec
    at.slider(key="t_window").set_value((0, 1)).run()  # only [CLS], which is hidden: the nearest token instead
    assert not at.exception and '"1 t1"' in at.get("plotly_chart")[0].proto.spec


def test_inspect_hiding_special_tokens_keeps_token_numbers(bert_folder):
    at = _inspect(_app(), str(bert_folder))
    at.checkbox(key="inspect_hide_special").check().run()
    heatmap = next(d for c in _charts(at) for d in json.loads(c.proto.spec)["data"] if d["type"] == "heatmap")
    assert heatmap["y"][0] == "1 the" and heatmap["x"][0] == "1 the", heatmap["y"][:3]


def test_a_long_cross_map_zooms_queries_and_keys_apart():
    def page():
        import torch

        from app.views import head_detail

        weights = torch.softmax(torch.randn(300, 300), -1)  # (decoder q, encoder k): square, yet not self-attention
        view = head_detail.MapView(weights, [f"d{i}" for i in range(300)], [f"e{i}" for i in range(300)], "head",
                                   "Cross-attention, layer 0, head 0", "m", part="cross")
        head_detail.heatmap_ui("t_", view, log_scale=False)

    at = AppTest.from_function(page, default_timeout=TIMEOUT).run()
    at.slider(key="t_window").set_value((0, 10)).run()
    assert not at.exception, at.exception
    spec = at.get("plotly_chart")[0].proto.spec
    assert '"9 d9"' in spec and '"10 d10"' not in spec  # the query window
    assert '"297–299 e297…"' in spec  # every encoder key still there (pooled 3 to a cell) ...
    assert any("10 × 300 tokens" in c.value and "1×3 block" in c.value for c in at.caption)
    at.slider(key="t_key_window").set_value((100, 200)).run()
    spec = at.get("plotly_chart")[0].proto.spec
    assert '"100 e100"' in spec and '"199 e199"' in spec  # ... until the key window narrows them
    assert [c.value for c in at.caption] == ["Zoomed to 10 × 100 of 300 × 300 tokens; the exports hold the whole map."]


def test_a_wrapped_paragraph_is_one_probe_as_on_the_command_line():
    """Split at every line, a paragraph wrapped at 70 characters became 7 probes too short to judge (a broken
    model's diffuse_heads error became info); paragraphs are split at blank lines, as one --text each."""
    from app.server.sources import probe_texts

    wrapped = "The cat sat on the mat\nand watched the birds\nfly over the garden."
    assert probe_texts(wrapped) == [wrapped]
    assert probe_texts(f"{wrapped}\n\n  \nA second one.\n") == [wrapped, "A second one."]
    assert probe_texts("\n \n") is None
