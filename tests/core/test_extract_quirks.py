"""Models whose transformers code needs care: the maps are the attention the model computes, and models
AttnScope cannot read get one ExtractionError line."""

import pytest
import torch
import transformers as tf

import tiny
from core import ExtractionError, extract_attention
from core.extraction import hf_extract
from core.extraction.extract import model_is_causal
from core.extraction.hf_extract import eager_attention
from core.extraction.streaming import STREAM_IMPLEMENTATION, streaming_kernels

TEXT = "The quick brown fox jumps over the lazy dog."


def _falcon(**layout):
    torch.manual_seed(0)
    config = tf.FalconConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4, **layout)
    return tf.FalconModel(config).eval()  # transformers' default: SDPA


@pytest.mark.parametrize("layout", [{}, {"new_decoder_architecture": True, "num_kv_heads": 2}, {"alibi": True}],
                         ids=["rotary", "new-architecture", "alibi"])
def test_falcon_weights_are_those_of_its_own_forward(layout):
    """Falcon ignores set_attn_implementation: under SDPA it added its boolean mask to the weights as 0/1 (the
    maps reached later tokens, the forward changed by up to 1.04); eager Falcon-RW adds ALiBi twice (0.096)."""
    model = _falcon(**layout)
    ids = torch.randint(5, 300, (1, 12))
    with torch.no_grad():
        plain = model(input_ids=ids).last_hidden_state  # the SDPA forward, ALiBi added once
        with eager_attention(model):
            weighed = model(input_ids=ids, output_attentions=True)
    maps = torch.stack([a[0] for a in weighed.attentions])  # (L, H, q, k)
    assert (weighed.last_hidden_state - plain).abs().max() < 1e-5
    assert maps.triu(1).max() == 0 and torch.allclose(maps.sum(-1), torch.ones(maps.shape[:-1]), atol=1e-5)
    assert model.config._attn_implementation == "sdpa"  # restored
    result = extract_attention(model, tiny.bpe_tokenizer(), TEXT)
    assert result.causal and result.attentions.triu(1).max() == 0


def test_each_part_of_a_model_gets_its_own_attention_implementation_back():
    """A vision-language model may run its vision tower on another kernel than its text model; extracting set
    every part to the top-level setting, so the vision tower ran SDPA ever after (stop-51 determinism audit)."""
    model, _ = tiny.tiny_gemma3_pair()
    model.set_attn_implementation({"": "sdpa", "text_config": "sdpa", "vision_config": "eager"})
    config = model.config

    def parts():
        return [c._attn_implementation for c in (config, config.text_config, config.vision_config)]

    with eager_attention(model):
        assert parts() == ["eager", "eager", "eager"]
    assert parts() == ["sdpa", "sdpa", "eager"]
    extract_attention(model, tiny.bpe_tokenizer(), TEXT)
    assert parts() == ["sdpa", "sdpa", "eager"]
    with streaming_kernels(model):
        assert parts()[0] == STREAM_IMPLEMENTATION
    assert parts() == ["sdpa", "sdpa", "eager"]
    model._can_set_attn_implementation = lambda: False  # a model that refuses the switch: its config is set
    with eager_attention(model):
        assert parts() == ["eager", "eager", "eager"]
    assert parts() == ["sdpa", "sdpa", "eager"]


def test_a_part_of_a_part_gets_its_attention_implementation_back():
    """T5Gemma 2's encoder holds a text model and a vision tower: only the first level of parts was put back."""
    text = dict(vocab_size=320, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=2,
                num_key_value_heads=1, head_dim=16, max_position_embeddings=128, sliding_window=16,
                layer_types=["sliding_attention", "full_attention"])
    vision = dict(model_type="siglip_vision_model", hidden_size=32, intermediate_size=37, num_hidden_layers=1,
                  num_attention_heads=2, image_size=28, patch_size=14)
    torch.manual_seed(0)
    model = tf.T5Gemma2Model(tf.T5Gemma2Config(encoder=dict(text_config=text, vision_config=vision,
                                                            mm_tokens_per_image=4), decoder=text))
    chosen = {"": "sdpa", "encoder": {"": "sdpa", "text_config": "sdpa", "vision_config": "eager"}, "decoder": "sdpa"}
    model.set_attn_implementation(chosen)
    assert hf_extract.implementations(model.config) == chosen
    extract_attention(model, tiny.bpe_tokenizer(), TEXT, target="A fox.")
    with streaming_kernels(model):
        pass
    assert model.config.encoder.vision_config._attn_implementation == "eager"
    assert model.config.encoder.text_config._attn_implementation == "sdpa"


def test_a_causal_model_whose_weights_reach_later_tokens_is_refused(monkeypatch):
    """The guard behind the Falcon fix: weights that do not match the model's mask are not shown as its maps.
    (Falcon under SDPA gave such weights until transformers 5.25, which returns none there; uniform rows over
    every key stand in for them.)"""
    stack = hf_extract.stack_layers

    def every_key(attentions, what, model):
        maps = stack(attentions, what, model)  # (L, H, q, k)
        return torch.full_like(maps, 1 / maps.shape[-1])

    monkeypatch.setattr(hf_extract, "stack_layers", every_key)
    with pytest.raises(ExtractionError, match="^FalconModel is a causal model but its attention weights reach later"):
        extract_attention(_falcon(), tiny.bpe_tokenizer(), TEXT)


@pytest.mark.parametrize("build, causal", [
    (lambda: tf.XLNetModel(tf.XLNetConfig(vocab_size=300, d_model=32, n_layer=2, n_head=4, d_inner=37)), False),
    (lambda: tf.CLIPTextModel(tf.CLIPTextConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2,
                                                num_attention_heads=4, intermediate_size=37,
                                                max_position_embeddings=64, bos_token_id=0, eos_token_id=2)), True),
], ids=["xlnet", "clip-text"])
def test_causal_is_what_the_maps_show(build, causal):
    """XLNet was called causal (its maps reach later tokens, up to 0.087), CLIP's text encoder not (it masks)."""
    model = build().eval()
    result = extract_attention(model, tiny.wordpiece_tokenizer(300), TEXT)
    assert result.causal is causal and model_is_causal(model) is causal
    assert bool(result.attentions.triu(1).max() == 0) is causal


def test_a_model_with_pruned_heads_is_told_so_not_that_it_pools_its_tokens():
    """Layers of 4 and 2 heads were "maps of different shapes (2×16×16, 4×16×16): a model that pools or downsamples
    its tokens between layers", though every layer kept every token."""
    with pytest.raises(ExtractionError, match=r"^BertModel's layers have different numbers of heads \(2, 4\): heads "
                                              r"pruned from some layers.* use the model from before pruning$"):
        extract_attention(tiny.pruned_bert(), tiny.wordpiece_tokenizer(), TEXT)


@pytest.mark.parametrize("build, message", [
    (lambda: tf.FunnelModel(tf.FunnelConfig(vocab_size=300, d_model=32, n_head=4, d_head=8, d_inner=37,
                                            block_sizes=[1, 1])),
     "^FunnelModel's layers return attention maps of different shapes .*pools or downsamples"),
    (lambda: tf.RwkvModel(tf.RwkvConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, attention_hidden_size=32,
                                        intermediate_size=37, context_length=64)),
     "^RwkvModel's attentions are not attention weights"),
    (lambda: tf.ViTModel(tf.ViTConfig(hidden_size=32, num_hidden_layers=2, num_attention_heads=4, intermediate_size=37,
                                      image_size=8, patch_size=4)),
     "^ViTModel failed on the tokenized text \\(AttributeError: .*\\); AttnScope reads text transformers"),
], ids=["funnel", "rwkv", "vit"])
def test_models_that_are_not_text_attention_are_one_line(build, message):
    """Each was a raw RuntimeError or AttributeError (the app's 'Something went wrong', the CLI's bug status)."""
    torch.manual_seed(0)
    with pytest.raises(ExtractionError, match=message) as caught:
        extract_attention(build().eval(), tiny.wordpiece_tokenizer(300), TEXT)
    assert "\n" not in str(caught.value)


def test_an_fsmt_decoder_is_read_with_its_causal_mask():
    """FSMT builds its decoder's causal mask only with use_cache=False: run with the default cache, its decoder
    maps reached later target tokens (0.126) and were shown and labelled as causal maps."""
    config = tf.FSMTConfig(src_vocab_size=300, tgt_vocab_size=300, d_model=32, encoder_layers=2, decoder_layers=2,
                           encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=37,
                           decoder_ffn_dim=37, max_position_embeddings=64, langs=["en", "de"], pad_token_id=1,
                           eos_token_id=2, decoder_start_token_id=2)
    torch.manual_seed(0)
    result = extract_attention(tf.FSMTModel(config).eval(), tiny.bpe_tokenizer(), TEXT, target=TEXT)
    assert result.decoder.causal and result.decoder.attentions.triu(1).max() == 0
    torch.testing.assert_close(result.decoder.attentions.sum(-1), torch.ones(result.decoder.attentions.shape[:-1]))


def test_a_decoder_part_whose_weights_reach_later_tokens_is_refused(monkeypatch):
    """The guard behind the FSMT fix, for an encoder-decoder's decoder (uniform rows over every target token
    stand in for FSMT's decoder run with its cache on)."""
    stack = hf_extract.stack_layers

    def every_key_in_the_decoder(attentions, what, model):
        maps = stack(attentions, what, model)  # (L, H, q, k)
        return torch.full_like(maps, 1 / maps.shape[-1]) if what == "decoder" else maps

    monkeypatch.setattr(hf_extract, "stack_layers", every_key_in_the_decoder)
    with pytest.raises(ExtractionError, match="^BartModel is a causal model but its attention weights reach later"):
        extract_attention(tiny.tiny_bart(), tiny.wordpiece_tokenizer(), TEXT, target=TEXT)


def test_a_model_returning_its_attention_as_a_dict_per_layer_is_one_line():
    """PegasusX returns local and global weights apart, as a dict per encoder layer: a raw AttributeError."""
    config = tf.PegasusXConfig(vocab_size=300, d_model=32, encoder_layers=2, decoder_layers=2,
                               encoder_attention_heads=4, decoder_attention_heads=4, encoder_ffn_dim=37,
                               decoder_ffn_dim=37, max_position_embeddings=64, pad_token_id=0, eos_token_id=3,
                               decoder_start_token_id=0, block_size=4, num_global_tokens=2)
    with pytest.raises(ExtractionError, match="^PegasusXModel returns its encoder attention as dict"):
        extract_attention(tf.PegasusXModel(config).eval(), tiny.bpe_tokenizer(), TEXT)
