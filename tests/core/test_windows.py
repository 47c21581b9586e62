"""Sliding-window (local) layers: the window read from a config is the one the model's own maps keep to."""

from unittest import mock

import pytest
import torch
import transformers as tf

import tiny
from core import extract_attention
from core.extraction import hf_extract
from core.extraction.windows import attention_windows, in_window

SIZE = dict(vocab_size=300, hidden_size=32, intermediate_size=37, num_attention_heads=4, max_position_embeddings=128)
TEXT = "the quick brown fox jumps over the lazy dog " * 3  # 64 tiny BPE tokens, 29 WordPiece


def _mistral():
    return tf.MistralModel(tf.MistralConfig(**SIZE, num_hidden_layers=2, num_key_value_heads=2, sliding_window=8))


def _gemma2():
    return tf.Gemma2Model(tf.Gemma2Config(**SIZE, num_hidden_layers=2, head_dim=8, sliding_window=8))


def _gpt_neo():
    return tf.GPTNeoModel(tf.GPTNeoConfig(vocab_size=300, hidden_size=32, num_layers=2, num_heads=4, window_size=8,
                                          attention_types=[[["global", "local"], 1]], max_position_embeddings=128))


def _modernbert():
    return tf.ModernBertModel(tf.ModernBertConfig(**SIZE, num_hidden_layers=3, local_attention=16, pad_token_id=0,
                                                  bos_token_id=1, eos_token_id=2, cls_token_id=2, sep_token_id=3,
                                                  global_attn_every_n_layers=3))


def _embedding_gemma():
    """Gemma 3 read both ways (EmbeddingGemma): its config stores the window 8 as 8 // 2 + 1 and masks |p - j| < 5."""
    return tf.Gemma3TextModel(tf.Gemma3TextConfig(**SIZE, num_hidden_layers=2, head_dim=8, sliding_window=8,
                                                  use_bidirectional_attention=True,
                                                  layer_types=["sliding_attention", "full_attention"]))


MODELS = {"mistral": (_mistral, [8, 8]), "gemma2": (_gemma2, [8, None]), "gpt-neo": (_gpt_neo, [None, 8]),
          "modernbert": (_modernbert, [None, 8, 8]), "embedding-gemma": (_embedding_gemma, [4, None])}


@pytest.mark.parametrize("name", MODELS)
def test_the_windows_read_from_the_config_are_those_the_maps_keep_to(name):
    build, expected = MODELS[name]
    torch.manual_seed(0)
    model = build().eval()
    tokenizer = tiny.wordpiece_tokenizer(300) if name == "modernbert" else tiny.bpe_tokenizer()
    result = extract_attention(model, tokenizer, TEXT)
    assert attention_windows(model) == expected and result.windows == expected
    n = result.attentions.shape[-1]
    distance = torch.arange(n).unsqueeze(1) - torch.arange(n).unsqueeze(0)  # (q, k)
    seen_by_mask = distance >= 0 if result.causal else torch.ones(n, n, dtype=torch.bool)  # (q, k)
    for layer, window in enumerate(expected):
        seen = seen_by_mask & in_window(distance, window, result.causal)  # (q, k)
        assert bool((seen_by_mask & ~seen).any()) == (window is not None)  # the text is longer than the window
        assert result.attentions[layer][:, ~seen].abs().sum() == 0  # nothing outside the window
        assert result.attentions[layer][:, seen].min() > 0  # every key inside it is seen


def test_embedding_gemma_is_read_both_ways():
    """It was called causal (a Gemma 3), then refused: its maps reach later tokens."""
    result = extract_attention(_embedding_gemma().eval(), tiny.bpe_tokenizer(), TEXT)
    assert not result.causal and result.attentions.triu(1).amax() > 0


def test_gemma4_set_to_attend_both_ways_is_read_both_ways():
    """Gemma 4 says so with use_bidirectional_attention="all", not True: it was called causal, then refused because
    its maps reach later tokens. Its local layers mask |p - j| <= the window it stores (Gemma 3's, < it)."""
    torch.manual_seed(0)
    config = tf.Gemma4TextConfig(vocab_size=400, hidden_size=64, intermediate_size=64, num_hidden_layers=2,
                                 num_attention_heads=4, num_key_value_heads=1, head_dim=16, sliding_window=8,
                                 use_bidirectional_attention="all", layer_types=["sliding_attention", "full_attention"])
    result = extract_attention(tf.AutoModel.from_config(config).eval(), tiny.bpe_tokenizer(), TEXT * 2)
    assert not result.causal and result.attentions.triu(1).amax() > 0  # (L, H, T, T)
    assert result.windows == [5, None]


@pytest.mark.parametrize("flag, both_ways", [({"is_causal": False}, True),
                                             ({"use_bidirectional_attention": True}, False)])
def test_a_decoder_is_read_both_ways_only_where_its_code_reads_the_flag(flag, both_ways):
    """transformers builds a bidirectional mask for any decoder whose config says is_causal: false (LLM2Vec-style
    embedders): it was refused as "its attention implementation does not mask later tokens". Llama never reads
    use_bidirectional_attention: it stayed causal, and was measured as an encoder."""
    from tiny_gguf import tiny_llama

    result = extract_attention(tiny_llama(**flag), tiny.bpe_tokenizer(), TEXT)
    assert result.causal == (not both_ways) and bool(result.attentions.triu(1).amax() > 0) == both_ways  # (L, H, T, T)


@pytest.mark.parametrize("config", [
    tf.Gemma2Config(vocab_size=400, hidden_size=64, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4,
                    num_key_value_heads=1, head_dim=16, use_bidirectional_attention=True),
    tf.OpenAIGPTConfig(vocab_size=400, n_embd=64, n_layer=2, n_head=4, is_causal=False),
], ids=["gemma2-bidirectional-flag", "openai-gpt-is-causal-false"])
def test_a_flag_whose_eager_mask_stays_causal_is_read_by_the_maps(config):
    """Gemma 2 names use_bidirectional_attention only for SDPA, and OpenAI GPT builds its own mask: their eager maps
    stay causal, and they were measured as encoders."""
    from core.extraction.extract import model_is_causal

    torch.manual_seed(0)
    model = tf.AutoModel.from_config(config).eval()
    result = extract_attention(model, tiny.bpe_tokenizer(), TEXT)
    assert result.causal and float(result.attentions.triu(1).amax()) == 0  # (L, H, T, T)
    assert model_is_causal(model)  # as the streamed path asks, before it runs: it had measured them as encoders
    assert extract_attention(model, tiny.bpe_tokenizer(), "t").causal  # one token's map cannot tell; a run can


class _Config:
    """A config of a hybrid model (convolution layers listed among its layer types) or one that raises when asked for
    a per-layer value, as transformers' heterogeneous configs do (NeoMME)."""

    def __init__(self, **values):
        self.__dict__.update(values)

    def __getattr__(self, name):
        if name == "sliding_window":
            raise RuntimeError("'sliding_window' is a per-layer attribute")
        raise AttributeError(name)


def test_windows_of_hybrid_and_per_layer_configs():
    hybrid = mock.Mock(config=mock.Mock(is_encoder_decoder=False, sliding_window=8,
                                        layer_types=["conv", "sliding_attention", "full_attention", "conv"]))
    assert attention_windows(hybrid) == [8, None]  # the two attention layers, in the order their maps come
    assert attention_windows(mock.Mock(config=_Config(is_encoder_decoder=False, layer_types=["sliding_attention"]))) \
        is None  # read as global, as before: it was a raw RuntimeError on every extraction


def test_a_model_without_windows_has_none():
    assert extract_attention(tiny.tiny_gpt2(), tiny.bpe_tokenizer(), TEXT).windows is None


def test_a_window_the_maps_overstep_is_dropped():
    """A config read wrongly must not hide weight the model gave: the layer is then read as global."""
    with mock.patch.object(hf_extract, "attention_windows", lambda model: [4, None]):
        assert extract_attention(tiny.tiny_gpt2(), tiny.bpe_tokenizer(), TEXT).windows is None


def test_a_vision_language_model_is_read_as_its_language_model():
    """Gemma 3 as published for 4B-27B keeps its text settings under text_config: its local layers were measured
    as global, its maps escaped the size budget (0 bytes), and its vision tower's layers took the language layers'
    numbers in the weight checks (L0 showed the vision tower's qk_scale, L2 the language model's first layer)."""
    from core.extraction.maps_budget import whole_maps_bytes
    from core.extraction.head_weights import attention_weights

    both, alone = tiny.tiny_gemma3_pair()
    assert attention_windows(both) == attention_windows(alone) == [16, 16, None]
    assert whole_maps_bytes(both, [100]) == whole_maps_bytes(alone, [100]) == 4 * 3 * 4 * 100 * 100
    weights = attention_weights(both)
    assert [(w.name, w.layer, w.n_heads) for w in weights] == [
        (f"language_model.layers.{i}.self_attn", i, 4) for i in range(3)]
    assert all(torch.equal(w.w_q, v.w_q) for w, v in zip(weights, attention_weights(alone)))
    probe = "The quick brown fox jumps over the lazy dog. " * 6
    result = extract_attention(both, tiny.bpe_tokenizer(), probe)
    assert result.windows == [16, 16, None]
    assert torch.equal(result.attentions, extract_attention(alone, tiny.bpe_tokenizer(), probe).attentions)
