"""Parity of the written-out attention with PyTorch's fused kernels."""

import pytest
import torch
import torch.nn.functional as F

from core import InputError, MultiHeadAttention, causal_mask, scaled_dot_product_attention

ATOL = 1e-5


def _qkv(q_len=5, k_len=5, batch=2, heads=3, d=8):
    g = torch.Generator().manual_seed(0)
    return (torch.randn(batch, heads, q_len, d, generator=g), torch.randn(batch, heads, k_len, d, generator=g),
            torch.randn(batch, heads, k_len, d, generator=g))


@pytest.mark.parametrize("q_len,k_len", [(5, 5), (3, 7)])
def test_sdpa_matches_torch(q_len, k_len):
    q, k, v = _qkv(q_len, k_len)
    out, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=ATOL, rtol=0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 3, q_len), atol=ATOL, rtol=0)


def test_sdpa_causal_matches_torch_and_upper_triangle_is_zero():
    q, k, v = _qkv(6, 6)
    out, weights = scaled_dot_product_attention(q, k, v, causal_mask(6, 6))
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v, is_causal=True), atol=ATOL, rtol=0)
    assert torch.all(weights.triu(diagonal=1) == 0)


def test_float64_is_computed_in_float64():
    """Scores went through float32 whatever the input: float64 callers got errors of ~1e-5 against PyTorch."""
    q, k, v = (t.double() for t in _qkv(5, 7))
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.dtype == weights.dtype == torch.float64
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), atol=1e-12, rtol=0)


def test_fully_masked_row_is_zero_not_nan():
    q, k, v = _qkv(4, 4)
    mask = torch.ones(4, 4, dtype=torch.bool)
    mask[2] = False
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert not torch.isnan(out).any() and not torch.isnan(weights).any()
    assert torch.all(weights[..., 2, :] == 0) and torch.all(out[..., 2, :] == 0)


def _paired_modules(d_model=16, heads=4):
    torch.manual_seed(0)
    ours = MultiHeadAttention(d_model, heads).eval()
    theirs = torch.nn.MultiheadAttention(d_model, heads, batch_first=True).eval()
    with torch.no_grad():
        theirs.in_proj_weight.copy_(torch.cat([ours.q_proj.weight, ours.k_proj.weight, ours.v_proj.weight]))
        theirs.in_proj_bias.copy_(torch.cat([ours.q_proj.bias, ours.k_proj.bias, ours.v_proj.bias]))
        theirs.out_proj.weight.copy_(ours.out_proj.weight)
        theirs.out_proj.bias.copy_(ours.out_proj.bias)
    return ours, theirs


@pytest.mark.parametrize("causal", [False, True])
def test_mha_matches_torch_multihead_attention(causal):
    ours, theirs = _paired_modules()
    x = torch.randn(2, 7, 16)
    padding = torch.zeros(2, 7, dtype=torch.bool)
    padding[1, 5:] = True
    mask = ~causal_mask(7, 7) if causal else None  # torch: True = blocked
    out, weights = ours(x, key_padding_mask=padding, causal=causal)
    ref_out, ref_weights = theirs(x, x, x, key_padding_mask=padding, attn_mask=mask, average_attn_weights=False)
    torch.testing.assert_close(out, ref_out, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, ref_weights, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights.sum(-1), torch.ones(2, 4, 7), atol=ATOL, rtol=0)
    assert torch.all(weights[1, :, :, 5:] == 0)


def test_mha_cross_attention_shapes_and_parity():
    ours, theirs = _paired_modules()
    query, memory = torch.randn(2, 3, 16), torch.randn(2, 9, 16)
    out, weights = ours(query, memory)
    ref_out, ref_weights = theirs(query, memory, memory, average_attn_weights=False)
    assert weights.shape == (2, 4, 3, 9)
    torch.testing.assert_close(out, ref_out, atol=ATOL, rtol=0)
    torch.testing.assert_close(weights, ref_weights, atol=ATOL, rtol=0)


def test_dropout_only_in_training():
    torch.manual_seed(0)
    module = MultiHeadAttention(16, 4, dropout=0.5)
    x = torch.randn(1, 6, 16)
    module.eval()
    _, weights = module(x)
    torch.testing.assert_close(weights.sum(-1), torch.ones(1, 4, 6), atol=ATOL, rtol=0)
    module.train()
    _, weights = module(x)
    assert not torch.allclose(weights.sum(-1), torch.ones(1, 4, 6))


def test_rejects_indivisible_width():
    with pytest.raises(ValueError, match="divisible"):
        MultiHeadAttention(10, 3)


@pytest.mark.parametrize("size", [40, 300])
def test_fp16_scores_do_not_overflow(size):
    """q·k of 1.1e5 (size 40) overflows fp16 (max 65,504); scaled it is 1.4e4, but at size 300 the scaled scores
    pass 65,504 too (NaN weights before): scores and softmax are float32, as torch's own kernel computes them."""
    torch.manual_seed(0)
    q, k = (torch.randn(1, 2, 4, 64) * size).half(), (torch.randn(1, 2, 4, 64) * size).half()  # (B, H, t, d)
    v = torch.randn(1, 2, 4, 64).half()
    out, weights = scaled_dot_product_attention(q, k, v)
    assert torch.isfinite(weights).all() and torch.allclose(weights.float().sum(-1), torch.ones(1, 2, 4), atol=1e-3)
    torch.testing.assert_close(out.float(), F.scaled_dot_product_attention(q.float(), k.float(), v.float()),
                               atol=2e-2, rtol=0)


@pytest.mark.parametrize("mask", [torch.zeros(4, 4), torch.ones(4, 4, dtype=torch.long)], ids=["additive", "0/1"])
def test_a_mask_that_is_not_bool_is_one_clear_error(mask):
    x = torch.randn(1, 1, 4, 8)
    with pytest.raises(InputError, match="the attention mask must be bool"):
        scaled_dot_product_attention(x, x, x, mask)


@pytest.mark.parametrize("changes", [{"n_heads": 0}, {"n_heads": -1}, {"n_layers": 0}, {"vocab_size": 2.5},
                                     {"d_model": 30}, {"d_ff": True}, {"causal": "false"}, {"dropout": 2.0},
                                     {"dropout": float("nan")}, {"dropout": "0.1"}])
def test_sizes_that_cannot_build_a_model_are_one_input_error(changes):
    """n_heads=0 was a ZeroDivisionError, n_heads=-1 a model whose extraction failed on 'invalid shape dimension -8',
    n_layers=0 one whose extraction blamed the attention implementation; causal="false" built a causal model (only
    a config.json was checked), dropout=2.0 failed in torch when the model was built."""
    from core import TransformerConfig

    with pytest.raises(InputError, match="must be"):
        TransformerConfig(**{"d_model": 32, "n_heads": 4, **changes})
    with pytest.raises(InputError, match="at least 1"):
        MultiHeadAttention(8, 0)


def _bad_calls():
    q, k, v = _qkv()  # (2, 3, 5, 8) each
    return {
        "int tensors": ((q.long(), k.long(), v.long()), "query must be a floating-point tensor"),  # all-zero before
        "mixed dtypes": ((q, k.double(), v.half()), "must share one dtype"),
        "a list": ((q.tolist(), k, v), "query must be a tensor, not list"),
        "d_k": ((q, k[..., :6], v), r"do not fit: they are \[2, 3, 5, 8\], \[2, 3, 5, 6\]"),
        "lengths": ((q, k, v[..., :4, :]), "do not fit"),
        "3 query heads, 2 key heads": ((q, k[:, :2], v[:, :2]), r"repeat them per group first"),
        "mask of one more dimension": ((q, k, v, torch.ones(2, 1, 1, 5, 5, dtype=torch.bool)),  # a 5-D result before
                                       r"the attention mask is \[2, 1, 1, 5, 5\], which does not broadcast"),
        "mask of other lengths": ((q, k, v, torch.ones(6, 5, dtype=torch.bool)), "does not broadcast"),
        "dropout 2": ((q, k, v, None, 2.0), "dropout_p must be a number from 0 to 1"),
    }


@pytest.mark.parametrize("case", list(_bad_calls()))
def test_arguments_that_do_not_fit_are_one_input_error_naming_them(case):
    args, message = _bad_calls()[case]
    with pytest.raises(InputError, match=message):
        scaled_dot_product_attention(*args)


def test_one_key_head_for_all_query_heads_still_broadcasts():
    """Multi-query attention: one K/V head is read by every query head, as torch's kernel reads it."""
    q, k, v = _qkv()
    out, weights = scaled_dot_product_attention(q, k[:, :1], v[:, :1])
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k[:, :1], v[:, :1]), atol=ATOL, rtol=0)
    assert weights.shape == (2, 3, 5, 5)


@pytest.mark.parametrize("q_len,k_len", [(3, 7), (1, 7), (7, 3)])
def test_causal_mask_aligns_the_last_query_with_the_last_key(q_len, k_len):
    """As a decoder reading its cache: the last query sees every key (SDPA's is_causal aligns the first ones)."""
    q, k, v = _qkv(q_len, k_len)
    out, _ = scaled_dot_product_attention(q, k, v, causal_mask(q_len, k_len))
    full = causal_mask(k_len, k_len)[-q_len:] if q_len <= k_len else None
    if full is not None:
        torch.testing.assert_close(out, scaled_dot_product_attention(q, k, v, full)[0])
    reference = F.scaled_dot_product_attention(q, k, v, attn_mask=torch.ones(q_len, k_len).tril(k_len - q_len).bool())
    torch.testing.assert_close(out.nan_to_num(), reference.nan_to_num(), atol=ATOL, rtol=0)


def test_mha_refuses_padding_masks_and_inputs_that_do_not_fit():
    module = MultiHeadAttention(8, 2).eval()
    x = torch.randn(2, 5, 8)
    float_mask = torch.tensor([[0.0, 0, 0, 1, 1]] * 2)  # torch's module adds it to the scores; it was read as bool
    with pytest.raises(InputError, match="key_padding_mask must be bool"):
        module(x, key_padding_mask=float_mask)
    with pytest.raises(InputError, match=r"key_padding_mask must be \[batch, k\] = \[2, 5\], not \[2, 6\]"):
        module(x, key_padding_mask=torch.zeros(2, 6, dtype=torch.bool))
    with pytest.raises(InputError, match=r"query must be a tensor \[batch, length, d_model=8\], not \[5, 8\]"):
        module(x[0])
    with pytest.raises(InputError, match="share the batch"):
        module(x, x[:1])
    with pytest.raises(InputError, match="dropout must be a number from 0 to 1"):
        MultiHeadAttention(8, 2, dropout=2.0)  # failed at the first forward in training only
