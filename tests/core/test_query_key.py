"""The neuron view's query and key vectors reproduce the model's own attention."""

import pytest
import torch
from transformers import GPTNeoConfig, GPTNeoModel, LlamaConfig, LlamaModel

import tiny
from core import AttnScopeTransformer, InputError, TransformerConfig, extract_attention
from core.extraction.query_key import query_key_vectors, reproduces, supports_neuron_view


@pytest.mark.parametrize("build, tokenizer, causal", [(tiny.tiny_bert, tiny.wordpiece_tokenizer, False),
                                                      (tiny.tiny_gpt2, tiny.bpe_tokenizer, True)])
def test_softmax_of_scaled_dot_products_is_the_attention(build, tokenizer, causal):
    model = build()
    result = extract_attention(model, tokenizer(), "the quick brown fox jumps")
    assert supports_neuron_view(model) and result.causal is causal
    for layer, head in ((0, 0), (1, 3)):
        q, k, scale = query_key_vectors(model, result.token_ids, layer, head)  # (t, d) each
        assert q.shape == k.shape == (len(result.tokens), 8) and scale == pytest.approx(8 ** -0.5)
        scores = scale * q @ k.T  # (t, t)
        if causal:
            scores = scores.masked_fill(torch.ones_like(scores, dtype=torch.bool).triu(1), float("-inf"))
        torch.testing.assert_close(scores.softmax(-1), result.attentions[layer, head], atol=1e-5, rtol=0)
        assert reproduces(q, k, result.attentions[layer, head], causal, scale)
        assert not reproduces(q, k.flip(0), result.attentions[layer, head], causal, scale)  # keys out of order
        assert not reproduces(q, k, result.attentions[layer, (head + 1) % 4], causal, scale)  # another head's map


def test_a_bfloat16_model_s_vectors_reproduce_its_attention_within_its_rounding():
    """Its maps carry bfloat16's rounding (steps of 0.0078): with float32's tolerance, 71 of a bfloat16 MiniLM's 72
    heads were refused the neuron view, as if a rotation or bias had been added."""
    model = tiny.tiny_bert().to(torch.bfloat16)
    for param in model.parameters():  # sharp maps, whose largest weights round the most
        if param.dim() == 2:
            torch.nn.init.normal_(param, std=0.3)
    result = extract_attention(model, tiny.wordpiece_tokenizer(), "the quick brown fox jumps over the lazy dog")
    assert result.dtype == "bfloat16"
    q, k, scale = query_key_vectors(model, result.token_ids, 1, 3)  # (t, d) each, float32
    weights = result.attentions[1, 3]
    assert not reproduces(q, k, weights, False, scale)  # float32's tolerance
    assert reproduces(q, k, weights, False, scale, dtype="bfloat16")
    assert not reproduces(q, k.flip(0), weights, False, scale, dtype="bfloat16")  # keys out of order
    assert not reproduces(q, k, result.attentions[1, 2], False, scale, dtype="bfloat16")  # another head's map


def test_a_pair_s_vectors_reproduce_its_attention():
    model = tiny.tiny_bert()
    result = extract_attention(model, tiny.wordpiece_tokenizer(), "the quick brown fox", "jumps over the dog")
    q, k, scale = query_key_vectors(model, result.token_ids, 1, 3, result.token_type_ids)  # (t, d) each
    assert reproduces(q, k, result.attentions[1, 3], False, scale)


def test_rotary_models_are_refused():
    """RoPE rotates q and k by position: q·k is not the score, though a sink head's map may look reproduced."""
    torch.manual_seed(0)
    model = LlamaModel(LlamaConfig(vocab_size=300, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                                   num_attention_heads=4, num_key_value_heads=2)).eval()
    assert not supports_neuron_view(model)
    for param in model.parameters():  # sharp maps, so the rotation shows
        if param.dim() == 2:
            torch.nn.init.normal_(param, std=0.3)
    result = extract_attention(model, tiny.bpe_tokenizer(), "the quick brown fox jumps over the lazy dog")
    attn, out = model.layers[1].self_attn, {}
    hooks = [proj.register_forward_hook(lambda m, i, o, name=name: out.__setitem__(name, o[0]))
             for name, proj in (("q", attn.q_proj), ("k", attn.k_proj))]
    with torch.inference_mode():
        model(torch.tensor([result.token_ids]))
    for hook in hooks:
        hook.remove()
    q = out["q"].reshape(len(result.tokens), 4, 8)[:, 3]  # (t, d): the projection's output, before the rotation
    k = out["k"].reshape(len(result.tokens), 2, 8)[:, 1]  # key/value head 1 serves query heads 2 and 3
    assert not reproduces(q, k, result.attentions[1, 3], True, 8 ** -0.5)


def test_models_without_a_readable_layout_are_refused():
    bart = tiny.tiny_bart()  # an encoder-decoder: the app's result has parts, not one map per head
    assert not supports_neuron_view(bart)
    with pytest.raises(InputError, match="neuron view needs them"):
        query_key_vectors(bart, [1, 2, 3], 0, 0)
    model = tiny.tiny_bert()
    with pytest.raises(InputError, match="layer 2 is out of range"):
        query_key_vectors(model, [1, 2, 3], 2, 0)
    with pytest.raises(InputError, match="head 4 is out of range"):
        query_key_vectors(model, [1, 2, 3], 0, 4)


def test_a_local_layer_s_vectors_reproduce_its_attention_within_its_window():
    """GPT-Neo's local layers attend within a window of 8: read as global, their q·k never matched, and the app
    told the user the model added a rotation or a position bias."""
    torch.manual_seed(0)
    model = GPTNeoModel(GPTNeoConfig(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, window_size=8,
                                     attention_types=[[["global", "local"], 1]])).eval()
    result = extract_attention(model, tiny.bpe_tokenizer(), "the quick brown fox jumps over the lazy dog " * 2)
    assert result.windows == [None, 8] and len(result.tokens) > 8 and supports_neuron_view(model)
    q, k, scale = query_key_vectors(model, result.token_ids, 1, 2)  # (t, d) each
    assert reproduces(q, k, result.attentions[1, 2], True, scale, window=8)
    assert not reproduces(q, k, result.attentions[1, 2], True, scale)  # read as global
    assert not reproduces(q, k, result.attentions[1, 2], True, scale, window=4)


def test_a_model_in_training_mode_gives_its_vectors_without_dropout():
    """A freshly built model is in training mode: its dropout made the vectors noisy, so the neuron view refused
    the head as 'a rotation or a position bias'."""
    tokenizer = tiny.wordpiece_tokenizer()
    torch.manual_seed(0)
    model = AttnScopeTransformer(TransformerConfig(vocab_size=tokenizer.vocab_size, d_model=32, n_heads=4, n_layers=2,
                                                   d_ff=64, dropout=0.3))
    result = extract_attention(model, tokenizer, "hello world again")
    q, k, scale = query_key_vectors(model, result.token_ids, 1, 0)  # (t, d) each
    assert reproduces(q, k, result.attentions[1, 0], result.causal, scale) and model.training
