"""Exports of one map: every format opens and holds the full-resolution weights."""

import csv
import io
import json

import numpy as np
import torch

from app.views import exports

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
    assert exports.image_bytes(_weights(), tokens, tokens, "cost $5 <b>", "svg")  # "$" is not read as math


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
    assert cross.heading == "Cross-attention, layer 2, head 5" and cross.file_stem == "bart_Cross-attention-layer-2-head-5"
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
