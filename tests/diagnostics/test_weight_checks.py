"""Weight access per architecture (parity with the models' own attention) and the weight-only checks."""

import pytest
import torch
from torch import nn

import core
from diagnostics.weights.head_weights import attention_weights
from diagnostics.weights.weight_checks import (
    QK_SCALE_LARGE, QK_SCALE_SMALL, check_weights, layer_stats, weight_findings,
)
from tiny import tiny_bart, tiny_bert, tiny_gpt2, tiny_t5


def custom():
    torch.manual_seed(0)
    return core.AttnScopeTransformer(core.TINY_PRESETS["attnscope-nano-decoder"]).eval()


def mha_stack():
    torch.manual_seed(0)
    return nn.TransformerEncoder(nn.TransformerEncoderLayer(32, 4, dim_feedforward=37, batch_first=True), 2)


@pytest.mark.parametrize("build, parts", [
    (tiny_bert, {"self": 2}), (tiny_gpt2, {"self": 2}), (custom, {"self": 2}), (mha_stack, {"self": 2}),
    (tiny_bart, {"encoder": 2, "decoder": 2, "cross": 2}), (tiny_t5, {"encoder": 2, "decoder": 2, "cross": 2}),
])
def test_every_known_layout_is_found(build, parts):
    layers = attention_weights(build())
    found = {}
    for lw in layers:
        found[lw.part] = found.get(lw.part, 0) + 1
        assert (lw.n_heads, lw.d_head) == (4, 8)
        assert lw.w_q.shape == lw.w_k.shape == (32, 32) and lw.w_o.shape == (32, 32)
    assert found == parts
    expected = 1.0 if build is tiny_t5 else 8 ** -0.5  # T5 does not scale its scores
    assert [lw.scale for lw in layers] == pytest.approx([expected] * len(layers))


def first_layer_maps(model, x):
    """Attention maps of layer 0 recomputed from ``attention_weights`` (biases zeroed in the model)."""
    lw = attention_weights(model)[0]
    q = torch.einsum("hdi,ti->htd", lw.heads(lw.w_q), x)  # (H, T, d)
    k = torch.einsum("hdi,ti->htd", lw.heads(lw.w_k), x)  # (H, T, d)
    scores = q @ k.transpose(1, 2) * lw.scale  # (H, T, T)
    return scores


@torch.no_grad()
def test_gpt2_fused_weights_parity():
    model = tiny_gpt2()
    model.set_attn_implementation("eager")  # SDPA returns no weights
    for block in model.h:
        block.attn.c_attn.bias.zero_()
    ids = torch.arange(10).unsqueeze(0)
    x = model.h[0].ln_1(model.wte(ids) + model.wpe(torch.arange(10)))[0]  # (T, C)
    scores = first_layer_maps(model, x).masked_fill(~torch.ones(10, 10, dtype=torch.bool).tril(), float("-inf"))
    expected = model(ids, output_attentions=True).attentions[0][0]  # (H, T, T)
    assert torch.allclose(scores.softmax(-1), expected, atol=1e-5)


@torch.no_grad()
def test_bert_weights_parity():
    model = tiny_bert()
    model.set_attn_implementation("eager")
    for layer in model.encoder.layer:
        layer.attention.self.query.bias.zero_()
        layer.attention.self.key.bias.zero_()
    ids = torch.arange(10).unsqueeze(0)
    x = model.embeddings(ids)[0]  # (T, C)
    expected = model(ids, output_attentions=True).attentions[0][0]  # (H, T, T)
    assert torch.allclose(first_layer_maps(model, x).softmax(-1), expected, atol=1e-5)


def test_unknown_architecture_is_an_info_note():
    findings, per_head = check_weights(nn.Sequential(nn.Linear(4, 4), nn.ReLU()))
    assert [(f.code, f.severity) for f in findings] == [("weights_unavailable", "info")] and per_head == {}


def test_random_init_has_no_weight_findings():
    for build in (tiny_bert, tiny_gpt2, custom, tiny_t5):
        assert weight_findings(build()) == [], build.__name__


@torch.no_grad()
def test_qk_scale_and_spectral_norm():
    model = custom()
    base = layer_stats(attention_weights(model)[0])
    for block in model.blocks:
        block.attn.q_proj.weight.mul_(30)
        block.attn.k_proj.weight.mul_(30)
    scaled = layer_stats(attention_weights(model)[0])
    assert torch.allclose(scaled["qk_scale"], 30 * base["qk_scale"], rtol=1e-4)
    assert torch.allclose(scaled["max_score"], 900 * base["max_score"], rtol=1e-3)
    found = {f.code: f for f in weight_findings(model)}
    assert found["qk_scale_large"].severity == "error" and found["qk_spectral_norm"].severity == "warning"
    assert min(found["qk_scale_large"].details["values"].values()) > QK_SCALE_LARGE
    for block in model.blocks:
        block.attn.q_proj.weight.zero_()
    found = {f.code: f for f in weight_findings(model)}
    assert found["qk_scale_small"].severity == "error" and len(found["qk_scale_small"].heads) == 8
    assert max(found["qk_scale_small"].details["values"].values()) < QK_SCALE_SMALL


@torch.no_grad()
def test_spectral_norm_matches_dense_computation():
    lw = attention_weights(tiny_gpt2())[1]
    q, k = lw.heads(lw.w_q)[2], lw.heads(lw.w_k)[2]  # (d, d_in)
    dense = torch.linalg.matrix_norm(q.T.double() @ k.double(), ord=2) * lw.scale * q.shape[1]
    assert float(layer_stats(lw)["max_score"][2]) == pytest.approx(float(dense), rel=1e-4)


@torch.no_grad()
def test_copied_heads_and_dead_heads():
    model = custom()
    attn = model.blocks[1].attn
    for proj in (attn.q_proj, attn.k_proj):
        proj.weight[16:24] = proj.weight[0:8]  # head 2 := head 0
    attn.out_proj.weight[:, 24:32] = 0  # head 3 writes nothing
    found = {f.code: f for f in weight_findings(model)}
    assert found["similar_head_weights"].details["pairs"] == [[[1, 0], [1, 2], pytest.approx(1.0, abs=1e-5)]]
    assert found["dead_heads"].heads == [[1, 3]] and found["dead_heads"].severity == "info"
