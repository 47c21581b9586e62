"""Exports of one map: every format opens and holds the full-resolution weights."""

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
    assert rows[0].split(",")[1:] == TOKENS and len(rows) == 5
    data = np.load(io.BytesIO(exports.npz_bytes(w, TOKENS, TOKENS)))
    np.testing.assert_allclose(data["weights"], w.numpy())
    assert data["key_tokens"].tolist() == TOKENS
    doc = json.loads(exports.json_text(w, TOKENS, TOKENS, {"layer": 0, "head": 1}))
    assert doc["head"] == 1 and np.allclose(doc["weights"], w.numpy(), atol=1e-6)
