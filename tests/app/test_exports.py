"""Exports of one map: every format opens and holds the full-resolution weights."""

import csv
import io
import json
import re

import warnings

import numpy as np
import pytest
import torch

from app.views import export_fonts, exports

TOKENS = ["[CLS]", "the", "the", "[SEP]"]


def _weights() -> torch.Tensor:
    return torch.softmax(torch.arange(16, dtype=torch.float32).view(4, 4), -1)  # (4, 4)


def test_png_and_svg():
    png = exports.image_bytes(_weights(), TOKENS, TOKENS, "layer 0, head 1", "png")
    svg = exports.image_bytes(_weights(), TOKENS, TOKENS, "layer 0, head 1", "svg")
    assert png[:8] == b"\x89PNG\r\n\x1a\n"
    assert b"<svg" in svg[:2000]


def test_csv_npz_json_hold_every_weight():
    w = _weights()
    rows = exports.csv_text(w, TOKENS, TOKENS).strip().splitlines()
    header = rows[0].split(",")[1:]
    assert header == ["0 [CLS]", "1 the", "2 the", "3 [SEP]"] and len(set(header)) == 4 and len(rows) == 5
    data = np.load(io.BytesIO(exports.npz_bytes(w, TOKENS, TOKENS)))
    np.testing.assert_allclose(data["weights"], w.numpy())
    assert data["key_tokens"].tolist() == TOKENS
    doc = json.loads(exports.json_text(w, TOKENS, TOKENS, {"layer": 0, "head": 1}))
    assert doc["head"] == 1 and np.allclose(doc["weights"], w.numpy(), atol=1e-6)


def test_exports_number_tokens_by_their_input_positions():
    """With special tokens hidden, "the" is still token 1 of the input, not the first of the kept ones."""
    w, kept = _weights()[1:3, 1:3], TOKENS[1:3]  # (2, 2): [CLS] and [SEP] hidden
    at = ([1, 2], [1, 2])
    assert exports.csv_text(w, kept, kept, at).splitlines()[0] == "query \\ key,1 the,2 the"
    data = np.load(io.BytesIO(exports.npz_bytes(w, kept, kept, at)))
    assert data["query_positions"].tolist() == data["key_positions"].tolist() == [1, 2]
    doc = json.loads(exports.json_text(w, kept, kept, {}, at))
    assert doc["query_positions"] == doc["key_positions"] == [1, 2] and doc["key_tokens"] == ["the", "the"]


def test_markup_and_formula_tokens_stay_text():
    tokens = ["=cmd|' /C calc'!A0", "$x$", "<b>", "the"]
    rows = list(csv.reader(io.StringIO(exports.csv_text(_weights(), tokens, tokens))))
    assert rows[0][1] == "0 =cmd|' /C calc'!A0" and rows[1][0].startswith("0 ")  # no cell starts with "="
    assert exports.image_bytes(_weights(), tokens, tokens, "cost $5 <b>", "svg")


def test_dollar_signs_in_tokens_are_drawn_not_read_as_math():
    """matplotlib draws $x$ as math, in italic glyphs, with no "$"; escaped, the token is drawn as it is."""
    tokens = ["$x$", "the", "$y$", "a"]
    svg = exports.image_bytes(_weights(), tokens, tokens, "plain title", "svg").decode()
    assert "<!-- 0 $x$ -->" in svg and "Oblique" not in svg  # no glyph of math italic


def test_layer_views_export_no_head_of_their_own():
    from app.views.head_detail import MapView, export_info, heading

    for mode in ("average", "rollout"):
        view = MapView(_weights(), TOKENS, TOKENS, mode, heading(mode, 2, 5, 12), "demo-bert")
        info = export_info(view, 2, 5, {"entropy": 0.5}, object())
        assert "head" not in info and "metrics" not in info and "pattern" not in info, info
        assert view.file_stem.startswith("demo-bert_") and "head-5" not in view.file_stem
    view = MapView(_weights(), TOKENS, TOKENS, "head", heading("head", 2, 5, 12), "demo-bert")
    assert export_info(view, 2, 5, {"entropy": 0.5}, None)["head"] == 5
    assert view.file_stem == "demo-bert_Layer-2-head-5"
    cross = MapView(_weights(), TOKENS, TOKENS, "head", heading("head", 2, 5, 12, "cross"), "bart", part="cross")
    assert cross.heading == "Cross-attention, layer 2, head 5"
    assert cross.file_stem == "bart_Cross-attention-layer-2-head-5"
    assert export_info(cross, 2, 5, {}, None)["part"] == "cross"  # the encoder's L2H5 no longer saves over it


def test_html_report_escapes_a_markup_model_name():
    import tiny
    from diagnostics.diagnose import diagnose

    report = diagnose((tiny.tiny_bert(), tiny.wordpiece_tokenizer()), ["the quick brown fox"])
    report.model["name"] = '<img src=x onerror=alert(1)>**x**.zip'
    page = report.to_html()
    assert "<img src=x" not in page and "&lt;img src=x onerror=alert(1)&gt;" in page


def test_json_export_of_a_nan_map_is_strict_json():
    weights = _weights()
    weights[0, 0] = float("nan")
    data = json.loads(exports.json_text(weights, TOKENS, TOKENS, {}), parse_constant=lambda name: 1 / 0)
    assert data["weights"][0][0] is None and data["weights"][0][1] is not None


# 66 characters: too long for MAX_STEM with a heading
LONG_MODEL = "bert-base-uncased-finetuned-sst2-lr2e-5-bs32-warmup0.1-seed42-run3"


def test_a_long_model_name_keeps_every_heads_file_name_apart():
    from app.names import MAX_STEM, file_stem
    from app.views.head_detail import heading

    heads = [file_stem(LONG_MODEL, heading("head", 11, h, 12)) for h in range(12)]
    cross = [file_stem(f"runs/{LONG_MODEL}", heading("head", 5, h, 8, "cross")) for h in range(8)]
    assert len(set(heads)) == 12 and len(set(cross)) == 8
    assert heads[3].endswith("_Layer-11-head-3") and cross[7].endswith("_Cross-attention-layer-5-head-7")
    assert all(len(stem) <= MAX_STEM and "/" not in stem for stem in heads + cross)
    assert len({stem.rsplit("_", 1)[0] for stem in heads}) == 1  # head 0 and head 10 start alike


def test_two_long_model_names_that_differ_only_at_the_end_stay_apart():
    from app.names import MAX_STEM, file_stem

    run3, run4 = file_stem(LONG_MODEL, "Layer 0, head 0"), file_stem(LONG_MODEL[:-1] + "4", "Layer 0, head 0")
    assert run3 != run4 and run3.startswith("bert-base-uncased") and len(run3) <= MAX_STEM


def test_bertviz_names_of_a_long_model_keep_their_layers():
    from app.names import MAX_STEM, file_stem

    pages = {file_stem(LONG_MODEL, "cross", "bertviz-model-view", "layers", layer) for layer in range(12)}
    assert len(pages) == 12 and file_stem(LONG_MODEL, "bertviz-neuron-view", "layer-3", "head-7").endswith("head-7")
    every_layer = file_stem(LONG_MODEL, "bertviz-model-view", "layers", "-".join(map(str, range(48))))
    assert len(every_layer) <= MAX_STEM and every_layer != file_stem(LONG_MODEL, "bertviz-model-view", "layers", "0-1")


def test_a_map_with_special_tokens_hidden_says_so_in_its_exports():
    from app.views.head_detail import MapView, export_info, heading

    kept = TOKENS[1:3]
    full = MapView(_weights(), TOKENS, TOKENS, "head", heading("head", 2, 5, 12), "demo-bert")
    hidden = MapView(_weights()[1:3, 1:3], kept, kept, "head", heading("head", 2, 5, 12), "demo-bert",
                     query_positions=[1, 2], key_positions=[1, 2], lengths=(4, 4), hidden=["[CLS]", "[SEP]"])
    assert hidden.file_stem == "demo-bert_Layer-2-head-5_no-special" and hidden.file_stem != full.file_stem
    assert "special tokens hidden" in hidden.title and "renormalised" in hidden.title
    assert full.title == "demo-bert: Layer 2, head 5"
    info = export_info(hidden, 2, 5, {"entropy": 0.5}, None)
    assert info["special_tokens_hidden"] is True and info["rows_renormalised"] is True
    assert info["hidden_tokens"] == ["[CLS]", "[SEP]"] and info["metrics_include_special_tokens"] is True
    assert not {"special_tokens_hidden", "rows_renormalised", "hidden_tokens"} & set(export_info(full, 2, 5, {}, None))
    doc = json.loads(exports.json_text(hidden.weights, kept, kept, info, (hidden.query_positions,
                                                                          hidden.key_positions)))
    assert doc["special_tokens_hidden"] and doc["query_positions"] == [1, 2]


def test_build_view_marks_a_map_only_when_it_hid_tokens():
    import tiny
    import core
    from app.views import head_detail

    result = core.extract_attention(tiny.tiny_bert(), tiny.wordpiece_tokenizer(), "the quick brown fox")
    options = {"mode": "head", "hide_special": True, "log_scale": False}
    view = head_detail.build_view("test/hidden-export", result, 0, 1, options, "tiny-bert")
    assert view.hidden and "[CLS]" in view.hidden and view.file_stem.endswith("_no-special")
    assert torch.allclose(view.weights.sum(-1), torch.ones(len(view.queries)))
    shown = head_detail.build_view("test/hidden-export", result, 0, 1, {**options, "hide_special": False}, "tiny-bert")
    assert not shown.hidden and not shown.file_stem.endswith("no-special")


def test_json_keeps_six_significant_figures_as_the_csv_does():
    """JSON rounded to 6 decimal places: every weight below 5e-7 was written as 0, where the CSV kept it."""
    w = torch.tensor([[1 - 4e-7, 3e-7, 1e-7], [0.123456789, 0.5, 0.376543211], [1 / 3, 1 / 3, 1 / 3]])  # (q, k)
    tokens = ["a", "b", "c"]
    doc = json.loads(exports.json_text(w, tokens, tokens, {}))
    cells = [row.split(",")[1:] for row in exports.csv_text(w, tokens, tokens).strip().splitlines()[1:]]
    assert doc["weights"][0][1:] == [3e-07, 1e-07] and doc["weights"] == [[float(c) for c in row] for row in cells]


def test_names_in_other_scripts_keep_their_downloads_apart():
    """"ü漢字 😀.zip" and "日本.zip" were both "zip": every such model's report downloaded as attnscope-zip.json."""
    from app.names import file_stem

    stems = {file_stem(name) for name in ("ü漢字 😀.zip", "日本.zip", "zip")}
    assert len(stems) == 3 and all(s.startswith("zip") and s.isascii() for s in stems), stems
    assert file_stem("demo-bert", "Layer 2, head 5") == "demo-bert_Layer-2-head-5"  # plain ASCII as before


def test_an_upload_of_loose_files_is_named_by_its_config_or_weights():
    from app.names import upload_name

    assert upload_name(["vocab.txt", "config.json", "model.safetensors"]) == "config.json + 2 more"
    assert upload_name(["tokenizer_config.json", "generation_config.json", "config.json"]) == "config.json + 2 more"
    assert upload_name(["tokenizer_config.json", "model.safetensors"]) == "model.safetensors + 1 more"
    assert upload_name(["vocab.txt", "model.safetensors"]) == "model.safetensors + 1 more"
    assert upload_name(["vocab.txt", "notes.md"]) == "vocab.txt + 1 more"
    assert upload_name(["model.gguf"]) == "model.gguf"


def _drawn(weights, queries, keys, positions=None, log_scale=False):
    """The exported figure's image (its colour scale) and its axes' tick labels."""
    fig = exports._figure(weights, queries, keys, "title", positions, log_scale)
    ax = fig.axes[0]
    return ax.images[0], [t.get_text() for t in ax.get_xticklabels()], fig


def test_images_use_the_page_s_colour_scale_and_numbered_tokens():
    """The PNG's colours ran from the smallest weight (a near-uniform head of weights 0.0151-0.0163 spanned the
    whole palette, while the page starts at 0), ignored the log scale, and its tokens were not numbered."""
    flat = torch.full((4, 4), 0.25) + torch.tensor([0.0, 0.001, 0.0, -0.001])  # (4, 4)
    image, ticks, _ = _drawn(flat, TOKENS, TOKENS)
    assert image.norm.vmin == 0 and image.norm.vmax == float(flat.max())
    assert ticks == ["0 [CLS]", "1 the", "2 the", "3 [SEP]"]
    image, ticks, _ = _drawn(_weights()[1:3, 1:3], TOKENS[1:3], TOKENS[1:3], ([1, 2], [1, 2]), log_scale=True)
    assert type(image.norm).__name__ == "LogNorm" and (image.norm.vmin, image.norm.vmax) == (1e-4, 1.0)  # the page's
    assert ticks == ["1 the", "2 the"]


def test_a_wide_map_s_image_keeps_room_for_its_labels():
    """A 3 × 400 cross map drew a figure too short for its key labels and title ("Tight layout not applied")."""
    import warnings

    weights = torch.softmax(torch.randn(3, 400), -1)  # (q, k)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        _, _, fig = _drawn(weights, ["a", "b", "c"], [f"k{i}" for i in range(400)])
    assert fig.get_figheight() >= exports.MIN_SIDE_IN
    with warnings.catch_warnings():  # 400 × 3: a long decoder over a short encoder
        warnings.simplefilter("error")
        _, _, fig = _drawn(weights.T.contiguous(), [f"k{i}" for i in range(400)], ["a", "b", "c"])
    assert fig.get_figwidth() >= exports.MIN_SIDE_IN


@pytest.mark.parametrize("tokens", [1, 4, 8, 11, 40, 400])
def test_a_long_title_is_drawn_whole_inside_the_image(tokens):
    """The title was one line: on a short input a rollout's ("…: Attention rollout through layer 3 (special tokens
    hidden, rows renormalised)") lost both ends past the image's edges."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    title = ("sentence-transformers/all-MiniLM-L6-v2: Attention rollout through layer 3 (special tokens hidden, rows "
             "renormalised)")
    names = [f"t{i}" for i in range(tokens)]
    fig = exports._figure(torch.full((tokens, tokens), 1.0 / tokens), names, names, title)
    canvas = FigureCanvasAgg(fig)
    canvas.draw()
    drawn = fig.axes[0].title
    box = drawn.get_window_extent(canvas.get_renderer())
    assert 0 <= box.x0 and box.x1 <= fig.bbox.width and box.y1 <= fig.bbox.height, (box, fig.bbox)
    assert " ".join(drawn.get_text().split()) == title


def test_a_dollar_sign_stays_escaped_where_the_title_breaks():
    """The title was wrapped after "$" had become "\\$": a break between the two drew a stray backslash."""
    title = "x" * 56 + "$" + "y" * 55 + "$zzzzz: Layer 0, head 1"
    names = [f"t{i}" for i in range(4)]
    lines = exports._figure(torch.full((4, 4), 0.25), names, names, title).axes[0].title.get_text().split("\n")
    assert not any(line.endswith("\\") for line in lines) and "".join(lines).replace("\\$", "$") == title


def test_an_image_of_a_long_map_draws_every_line_as_block_maxima():
    """Past ~2,000 tokens an image has fewer pixels than tokens, and nearest-neighbour drawing skipped rows and
    columns: a head that put every query's weight on key 1001 of 4,007 exported as an all-dark image."""
    import matplotlib.image

    n = 2_600
    weights = torch.zeros(n, n)  # (q, k)
    weights[:, 1001] = 1.0
    image, _, fig = _drawn(weights, [f"t{i}" for i in range(n)], [f"t{i}" for i in range(n)])
    assert max(image.get_array().shape) <= exports.EXPORT_CELLS and image.get_extent() == [-0.5, n - 0.5, n - 0.5, -0.5]
    assert fig.axes[0].get_title() == "title (each cell the largest weight of 2×2 tokens)"
    png = matplotlib.image.imread(io.BytesIO(exports.image_bytes(weights, [str(i) for i in range(n)],
                                                                   [str(i) for i in range(n)], "t", "png")))
    yellow = (png[..., 0] > 0.9) & (png[..., 1] > 0.8) & (png[..., 2] < 0.3)  # viridis at its top
    rows_with_the_line = yellow.any(axis=1).sum()
    assert rows_with_the_line > 1_000  # the line runs the whole height of the plot (before: 65, the colour bar's)


def test_a_pooled_image_s_blocks_sit_over_their_own_tokens():
    """A side of 1,501 tokens is 751 blocks of 2: stretched over 1,501 tokens, each block drifted from its labels,
    by up to a block at the far edge; the last block, which holds one token, ends with the map."""
    n = 1_501
    weights = torch.zeros(n, n)  # (q, k)
    image, _, fig = _drawn(weights, [f"t{i}" for i in range(n)], [f"t{i}" for i in range(n)])
    assert image.get_array().shape == (751, 751) and image.get_extent() == [-0.5, 1501.5, 1501.5, -0.5]
    assert fig.axes[0].get_xlim() == (-0.5, n - 0.5) and fig.axes[0].get_ylim() == (n - 0.5, -0.5)


@pytest.fixture
def fallback_fonts(monkeypatch):
    """Which installed families the exports fall back to (``export_fonts.FALLBACK_PREFIX``), caches cleared."""
    def use(prefix: str):
        monkeypatch.setattr(export_fonts, "FALLBACK_PREFIX", prefix)
        export_fonts.families.cache_clear()
        export_fonts._drawn.cache_clear()

    yield use
    export_fonts.families.cache_clear()
    export_fonts._drawn.cache_clear()


def test_a_character_dejavu_lacks_is_drawn_with_a_fallback_font_or_named_as_a_box(fallback_fonts):
    """Japanese tokens came out of the PNG and SVG as boxes, with no word of it: matplotlib draws with DejaVu Sans
    alone, which has no CJK (stop-51 text audit). The fallback here is matplotlib's own STIX font, which has the
    circled letters DejaVu Sans lacks; the server's are its Noto fonts (fonts-noto-cjk in the Docker image)."""
    tokens, w = ["\u24b6", "the"], _weights()[:2, :2]  # Ⓐ
    fallback_fonts("no such font")
    assert export_fonts.families() == ("DejaVu Sans",)
    with pytest.warns(UserWarning, match="Glyph 9398 .* missing from font"):
        exports.image_bytes(w, tokens, tokens, "layer 0, head 1", "png")
    assert exports.undrawn_characters(tokens, tokens, "layer 0, head 1") == ["\u24b6"]
    fallback_fonts("STIXGeneral")
    assert export_fonts.families() == ("DejaVu Sans", "STIXGeneral")
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert exports.image_bytes(w, tokens, tokens, "layer 0, head 1", "png")[:4] == b"\x89PNG"
    assert exports.undrawn_characters(tokens, tokens, "layer 0, head 1") == []


def test_fonts_installed_after_matplotlib_listed_its_fonts_are_used(fallback_fonts, monkeypatch, tmp_path):
    """matplotlib lists the fonts it found when it first ran (~/.cache/matplotlib): fonts-noto-cjk installed later
    went unused while the page said to install it (stop-51 review). Here STIX stands in for the font installed
    late: gone from matplotlib's list, on the server's font path as a copy."""
    import shutil

    from matplotlib import font_manager

    listed = font_manager.fontManager.ttflist
    stix = next(e.fname for e in listed if e.name == "STIXGeneral" and e.style == "normal" and e.weight == 400)
    late = shutil.copy(stix, tmp_path / "STIXGeneral-late.ttf")
    monkeypatch.setattr(font_manager.fontManager, "ttflist", [e for e in listed if not e.name.startswith("STIX")])
    monkeypatch.setattr(font_manager, "findSystemFonts", lambda *args, **kwargs: [str(late)])
    fallback_fonts("STIXGeneral")
    assert export_fonts.families() == ("DejaVu Sans", "STIXGeneral")
    assert exports.undrawn_characters(["\u24b6"], ["\u24b6"], "title") == []



def test_a_font_uninstalled_after_matplotlib_listed_it_is_skipped(fallback_fonts, monkeypatch, tmp_path):
    """matplotlib's font list (~/.cache/matplotlib) kept a Noto font removed since: reading its character map raised
    FileNotFoundError on every run, and the head explorer showed "Something went wrong" instead of any view."""
    import dataclasses
    import shutil

    from matplotlib import font_manager

    listed = font_manager.fontManager.ttflist
    stix = next(e for e in listed if e.name == "STIXGeneral" and e.style == "normal" and e.weight == 400)
    kept = shutil.copy(stix.fname, tmp_path / "kept.ttf")
    gone = dataclasses.replace(stix, name="STIXGeneral Gone", fname=str(tmp_path / "gone.ttf"))
    unreadable = dataclasses.replace(stix, fname=str(tmp_path / "bad.ttf"))
    (tmp_path / "bad.ttf").write_bytes(b"not a font")
    found = [gone, unreadable, dataclasses.replace(stix, fname=str(kept))]
    monkeypatch.setattr(font_manager.fontManager, "ttflist", [*listed, *found])
    fallback_fonts("STIXGeneral")
    assert "STIXGeneral Gone" not in export_fonts.families()
    assert exports.undrawn_characters(["\u24b6"], ["\u24b6"], "title") == []  # drawn from the readable copy

def test_only_the_labels_an_image_draws_can_be_boxes(fallback_fonts):
    """Past 64 tokens an axis labels every n-th token: the caption named characters of tokens no label draws."""
    fallback_fonts("no such font")
    tokens = ["the"] * 200
    tokens[1] = "\u24b6"  # not labelled: every 3rd token is
    assert exports._tick_labels(tokens, list(range(200)))[0] == range(0, 200, 3)
    assert exports.undrawn_characters(tokens, tokens, "title") == []
    tokens[3] = "\u24b7"  # labelled
    assert exports.undrawn_characters(tokens, tokens, "title") == ["\u24b7"]


def test_a_long_token_leaves_the_image_its_map_and_every_label_inside_it():
    """SmolLM2 has 80-character "####…" pieces: a code comment's banner drawn whole pushed its rows' labels and
    numbers past the image's left edge ("Tight layout not applied")."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    names = ["x", "=", "1", "#" * 80, "⏎", "#" * 76, "y"]
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # matplotlib's "Tight layout not applied" warning
        fig = exports._figure(torch.full((7, 7), 1 / 7), names, names, "code")
        canvas = FigureCanvasAgg(fig)
        canvas.draw()
    ax, renderer = fig.axes[0], canvas.get_renderer()
    rows = [label for label in ax.get_yticklabels() if label.get_text()]
    assert [label.get_text() for label in rows][3] == "3 " + "#" * 19 + "…"
    for label in rows + [label for label in ax.get_xticklabels() if label.get_text()]:
        box = label.get_window_extent(renderer)
        assert 0 <= box.x0 and box.x1 <= fig.bbox.width and 0 <= box.y0, (label.get_text(), box)
    assert ax.get_window_extent(renderer).width > 0.4 * fig.bbox.width  # the map keeps most of the width


def _label_glyphs(svg: str, label: str) -> list[str]:
    """The glyphs an SVG export draws for ``label`` (its text is in a comment before them), left to right."""
    start = svg.index(f"<!-- {label} -->")
    end = svg.index("</g>", svg.index("</defs>", start))
    uses = re.findall(r'<use xlink:href="#([^"]+)"(?: transform="translate\(([-\d.]+))?', svg[start:end])
    return [glyph for glyph, x in sorted(uses, key=lambda use: float(use[1] or 0))]


def test_a_right_to_left_token_keeps_its_position_number_on_the_left():
    """matplotlib lays text out by the Unicode bidi rules: "0 بيت" starts with an Arabic letter, so it read as a
    right-to-left line and was drawn with the 0 on the right, unlike every other label of the axis."""
    svg = exports.image_bytes(_weights()[:1, :1], ["بيت"], ["the"], "title", "svg").decode()
    arabic, latin = _label_glyphs(svg, "0 \u2068بيت\u2069"), _label_glyphs(svg, "0 the")
    assert arabic[0] == latin[0] and arabic.count(latin[0]) == 1  # the digit 0, first as in "0 the"
    assert exports.undrawn_characters(["بيت"], ["the"], "title") == []  # the isolates are no missing glyph
