"""Exports of one map: every format opens and holds the full-resolution weights."""

import csv
import io
import json

import numpy as np
import torch

from app import exports

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


def test_markup_and_formula_tokens_stay_text():
    tokens = ["=cmd|' /C calc'!A0", "$x$", "<b>", "the"]
    rows = list(csv.reader(io.StringIO(exports.csv_text(_weights(), tokens, tokens))))
    assert rows[0][1] == "0 =cmd|' /C calc'!A0" and rows[1][0].startswith("0 ")  # no cell starts with "="
    assert exports.image_bytes(_weights(), tokens, tokens, "cost $5 <b>", "svg")  # "$" is not read as math
