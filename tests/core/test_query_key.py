"""The neuron view's query and key vectors reproduce the model's own attention."""

import pytest
import torch

import tiny
from core import InputError, extract_attention
from core.extraction.query_key import query_key_vectors, reproduces, supports_neuron_view


def test_softmax_of_scaled_dot_products_is_the_attention():
    model, tok = tiny.tiny_bert(), tiny.wordpiece_tokenizer()
    result = extract_attention(model, tok, "the quick brown fox jumps")
    for layer, head in ((0, 0), (1, 3)):
        q, k = query_key_vectors(model, result.token_ids, layer, head)  # (t, d) each
        weights = torch.softmax(q @ k.T / q.shape[-1] ** 0.5, dim=-1)  # (t, t)
        torch.testing.assert_close(weights, result.attentions[layer, head], atol=1e-5, rtol=0)
        assert reproduces(q, k, result.attentions[layer, head], causal=False)
        assert not reproduces(q, k.flip(0), result.attentions[layer, head], causal=False)  # keys out of order


def test_models_without_bert_style_projections_are_refused():
    gpt2 = tiny.tiny_gpt2()
    assert not supports_neuron_view(gpt2)
    with pytest.raises(InputError, match="query/key"):
        query_key_vectors(gpt2, [1, 2, 3], 0, 0)
