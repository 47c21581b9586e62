"""A model is read through its text config (core/extraction/text_config.py): a vision-language model as its language
model, causality included, and any other model as its own config, whatever keys its config.json adds."""

import copy
import json

import pytest
import torch
import transformers as tf

import tiny
from core import extract_attention, load_model
from core.extraction.extract import model_is_causal
from core.extraction.maps_budget import maps_over_budget, whole_maps_bytes
from core.extraction.text_config import text_config

TEXT = "The quick brown fox jumps over the lazy dog. " * 3
LLAMA = dict(vocab_size=320, hidden_size=32, intermediate_size=37, num_hidden_layers=2, num_attention_heads=4,
             num_key_value_heads=2, max_position_embeddings=512)
VISION = dict(hidden_size=32, intermediate_size=37, num_hidden_layers=1, num_attention_heads=2, image_size=28,
              patch_size=14)


def test_llava_is_read_as_the_causal_llama_it_holds():
    """Llava's type is on no list of causal models: its causal Llama was read both ways (entropy over keys a row
    cannot see, no induction role, no check that the maps stay off later tokens) and Compare refused its twin."""
    torch.manual_seed(0)
    llava = tf.LlavaModel(tf.LlavaConfig(text_config=tf.LlamaConfig(**LLAMA), vision_config=tf.CLIPVisionConfig(
        **VISION, projection_dim=32), image_token_index=310)).eval()
    twin = tf.LlamaModel(tf.LlamaConfig(**LLAMA)).eval()
    twin.load_state_dict(llava.language_model.state_dict())
    assert model_is_causal(llava) and model_is_causal(twin)
    got, want = (extract_attention(m, tiny.bpe_tokenizer(), TEXT) for m in (llava, twin))
    assert got.causal and torch.equal(got.attentions, want.attentions)  # (L, H, T, T)


def test_a_language_model_of_a_type_no_list_names_is_causal_when_its_attention_layers_say_so():
    """Qwen2-VL's language model is of type qwen2_vl_text, on no list of causal models; its attention layers are
    causal (``is_causal``), its vision tower's are not."""
    text = {**LLAMA, "rope_scaling": {"type": "mrope", "mrope_section": [1, 1, 2]}}
    vision = dict(depth=1, embed_dim=32, hidden_size=32, num_heads=2, patch_size=14, spatial_merge_size=2,
                  temporal_patch_size=2)
    torch.manual_seed(0)
    model = tf.Qwen2VLModel(tf.Qwen2VLConfig(text_config=text, vision_config=vision, image_token_id=310,
                                             video_token_id=311, vision_start_token_id=312)).eval()
    assert model_is_causal(model)
    result = extract_attention(model, tiny.bpe_tokenizer(), TEXT)
    assert result.causal and float(result.attentions.triu(1).max()) == 0.0  # (L, H, T, T)


@pytest.mark.parametrize("extra", [{"decoder": 1}, {"text_config": {"model_type": "bert"}}, {"generator": "x"}],
                         ids=["decoder", "text_config", "generator"])
def test_a_key_named_like_a_text_config_in_an_upload_is_not_read_as_one(tmp_path, monkeypatch, extra):
    """transformers keeps a config.json's unknown keys as attributes and returned one named like a text config as
    the text config: a BERT upload with ``"decoder": 1`` had no maps' size (0 bytes: the size budget let 25.6 GB of
    maps through), no position limit and no vocabulary size."""
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    model = tiny.tiny_bert()
    model.save_pretrained(tmp_path / "bert")
    tiny.wordpiece_tokenizer().save_pretrained(tmp_path / "bert")
    config = tmp_path / "bert" / "config.json"
    config.write_text(json.dumps({**json.loads(config.read_text()), **extra}))
    loaded, _ = load_model(tmp_path / "bert")
    assert text_config(loaded) is loaded.config
    assert whole_maps_bytes(loaded, [100]) == whole_maps_bytes(model, [100]) > 0
    assert maps_over_budget(loaded, [5000], 10**6) == maps_over_budget(copy.deepcopy(model), [5000], 10**6) is not None
