"""Streamed per-head statistics equal the naive path: full ``output_attentions`` maps -> ``head_metrics``."""

from dataclasses import fields

import pytest
import torch
import transformers as tf
from transformers import LlamaConfig, LlamaModel

import tiny
from core import TINY_PRESETS, AttnScopeTransformer, ExtractionError, InputError, extract_attention
from core.extraction.hf_extract import eager_attention
from core.extraction.streaming import STREAM_IMPLEMENTATION, stream_attention
from diagnostics.findings import attention_findings
from diagnostics.measure.metrics import HeadMetrics, head_metrics
from diagnostics.classify.patterns import classify_metrics
from diagnostics.measure.redundancy import js_distance
from diagnostics.streaming import stream_statistics, stream_token_statistics

TOL = 1e-5  # absolute, and relative for metrics counted in tokens (mean_distance ~ 100 at 200 tokens)
TEXT = "Attention is all you need, said the paper in 2017. The quick brown fox jumps over the lazy dog."


def tiny_llama_gqa():
    config = LlamaConfig(vocab_size=200, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=256)
    torch.manual_seed(0)
    return LlamaModel(config).eval()


def custom(preset):
    torch.manual_seed(0)
    return AttnScopeTransformer(TINY_PRESETS[preset]).eval()


MODELS = {
    "bert": lambda: tiny.tiny_bert(256),
    "gpt2": lambda: tiny.tiny_gpt2(256),
    "llama-gqa": tiny_llama_gqa,
    "bart-encoder": tiny.tiny_bart,
    "custom-encoder": lambda: custom("attnscope-nano-encoder"),
    "custom-decoder": lambda: custom("attnscope-nano-decoder"),
}


def naive_maps(model, ids, attention_mask=None):
    """``[L, H, q, k]`` from ``output_attentions=True`` with the eager kernel."""
    with torch.inference_mode():
        if isinstance(model, AttnScopeTransformer):
            attentions = model(ids, attention_mask=attention_mask, output_attentions=True)["attentions"]
        else:
            with eager_attention(model):
                run = model.get_encoder() if model.config.is_encoder_decoder else model
                attentions = run(input_ids=ids, attention_mask=attention_mask, output_attentions=True).attentions
    return torch.stack([a[0].float() for a in attentions])


def assert_metrics_close(got: HeadMetrics, want: HeadMetrics):
    for f in fields(HeadMetrics):
        a, b = getattr(got, f.name), getattr(want, f.name)
        assert a.shape == b.shape, f.name
        torch.testing.assert_close(a.float(), b.float(), atol=TOL, rtol=TOL, msg=lambda m: f"{f.name}: {m}")


def random_ids(length, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return torch.randint(5, 99, (1, length), generator=generator)


@pytest.mark.parametrize("build", [tiny.tiny_bert, tiny.tiny_gpt2])
def test_long_rows_searched_in_blocks_equal_naive(build):
    """Long rows: the block score searches blocks of keys (``row_stats._Blocks``): still the naive result."""
    model, ids = build(1024), random_ids(700, seed=2)
    streamed = stream_token_statistics(model, ids, chunk_rows=97)
    expected = head_metrics(naive_maps(model, ids), causal=streamed.causal)
    assert_metrics_close(streamed.metrics, expected)
    assert streamed.labels == [[p.label for p in layer] for layer in classify_metrics(expected)]
    assert 0 < streamed.metrics_s < streamed.elapsed_s


@pytest.mark.parametrize("name", MODELS)
@pytest.mark.parametrize("length,chunk_rows", [(7, 3), (64, 5), (200, 33)])
def test_metrics_and_labels_equal_naive(name, length, chunk_rows):
    if name == "bart-encoder" and length > 64:
        pytest.skip("tiny BART has 64 positions")
    model, ids = MODELS[name](), random_ids(length)
    streamed = stream_token_statistics(model, ids, chunk_rows=chunk_rows)
    expected = head_metrics(naive_maps(model, ids), causal=streamed.causal)
    assert_metrics_close(streamed.metrics, expected)
    assert streamed.labels == [[p.label for p in layer] for layer in classify_metrics(expected)]


@pytest.mark.parametrize("name", ["bert", "gpt2", "custom-encoder", "custom-decoder"])
def test_padding_mask(name):
    model, ids = MODELS[name](), random_ids(40, seed=1)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0  # left padding: padded keys are masked, padded queries weigh nothing
    streamed = stream_token_statistics(model, ids, attention_mask=mask, chunk_rows=6)
    expected = head_metrics(naive_maps(model, ids, mask), causal=streamed.causal, padding=mask[0] == 0)
    assert_metrics_close(streamed.metrics, expected)
    assert streamed.padding == [True] * 3 + [False] * 37


def test_left_padded_attnscope_decoder_keeps_its_maps_and_output():
    """A padded causal row sees no key: the model's own attention gives it zero weights, and so must the stream
    (it spread them over all keys, real tokens after it included, and moved the padded logits by ~2)."""
    model, ids = MODELS["custom-decoder"](), random_ids(12, seed=3)
    mask = torch.ones_like(ids)
    mask[0, :3] = 0
    streamed = stream_attention(model, ids, lambda *a: None, attention_mask=mask, keep=[0, 1], chunk_rows=4)
    naive = naive_maps(model, ids, mask)  # (L, H, q, k)
    for (layer, head), kept in streamed.kept.items():
        torch.testing.assert_close(kept, naive[layer, head], atol=1e-6, rtol=0)
    assert not naive[:, :, :3].any()  # the padded rows really are zero in the model's own maps
    with torch.inference_mode():
        logits = model(ids, attention_mask=mask)["logits"]
    torch.testing.assert_close(streamed.output["logits"], logits, atol=1e-5, rtol=0)


@pytest.mark.parametrize("build,tokenizer", [
    (tiny.tiny_bert, tiny.wordpiece_tokenizer), (tiny.tiny_gpt2, tiny.bpe_tokenizer),
])
def test_text_entry_matches_extract_attention(build, tokenizer):
    model, tok = build(), tokenizer()
    naive = extract_attention(model, tok, TEXT, "A second sentence." if build is tiny.tiny_bert else None)
    streamed = stream_statistics(model, tok, TEXT, "A second sentence." if build is tiny.tiny_bert else None,
                                 chunk_rows=4, keep=[(1, 2), 0])
    expected = head_metrics(naive.attentions, naive.causal, naive.special, naive.padding)
    assert_metrics_close(streamed.metrics, expected)
    assert (streamed.tokens, streamed.special, streamed.causal) == (naive.tokens, naive.special, naive.causal)
    assert sorted(streamed.kept) == [(0, 0), (0, 1), (0, 2), (0, 3), (1, 2)]
    for (layer, head), kept in streamed.kept.items():
        torch.testing.assert_close(kept, naive.attentions[layer, head], atol=1e-6, rtol=0)
    sinks = [[naive.keys[k] for k in layer] for layer in expected.sink_key.tolist()]
    got = attention_findings(_as_dict(streamed.metrics), sink_tokens=streamed.sink_tokens)
    want = attention_findings(_as_dict(expected), sink_tokens=sinks)
    assert [f.to_dict() for f in got] == [f.to_dict() for f in want]


def _as_dict(metrics):
    return {f.name: getattr(metrics, f.name) for f in fields(metrics)}


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_redundancy_distances_equal_js_distance(name):
    model, ids = MODELS[name](), random_ids(50, seed=2)
    streamed = stream_token_statistics(model, ids, chunk_rows=7, redundancy=True)
    expected = js_distance(naive_maps(model, ids), streamed.causal)
    torch.testing.assert_close(streamed.distances, expected, atol=TOL, rtol=0)


def test_sink_tokens_of_token_ids_are_the_ids():
    """Without a tokenizer there are no token names: sink_tokens raised IndexError on the empty list."""
    ids = random_ids(12, seed=3)
    streamed = stream_token_statistics(tiny.tiny_gpt2(), ids)
    sinks = streamed.sink_tokens
    keys = streamed.metrics.sink_key.tolist()  # [L][H]
    assert sinks == [[str(ids[0, k].item()) for k in layer] for layer in keys]


def test_model_is_restored_after_streaming():
    model, block = tiny.tiny_gpt2(), custom("attnscope-nano-decoder")
    before = model.config._attn_implementation
    stream_token_statistics(model, random_ids(9))
    stream_token_statistics(block, random_ids(9))
    assert model.config._attn_implementation == before != STREAM_IMPLEMENTATION
    assert all(m.attention_fn is None for m in block.modules() if hasattr(m, "attention_fn"))
    assert block(random_ids(9), output_attentions=True)["attentions"][0] is not None


def test_consumers_see_each_row_once_in_chunks():
    seen = []

    class Rows:
        def update(self, chunk, q_start, logits):
            seen.append((q_start, *chunk.shape[-2:]))  # a causal chunk stops at its last row's key
            assert chunk.is_contiguous() and logits.shape == chunk.shape
            torch.testing.assert_close(chunk.sum(-1), torch.ones(chunk.shape[:-1]))
            torch.testing.assert_close(logits.softmax(-1), chunk[..., :logits.shape[-1]])
            assert torch.isfinite(logits).all() and (logits.amax(-1) == 0).all()

    streamed = stream_attention(tiny.tiny_gpt2(), random_ids(10), lambda layer, heads, keys: Rows(), chunk_rows=4)
    assert streamed.n_layers == 2 and streamed.n_heads == 4 and streamed.n_keys == 10
    assert seen == [(0, 4, 4), (4, 4, 8), (8, 2, 10)] * 2


SIZE = dict(vocab_size=99, hidden_size=32, intermediate_size=64, num_hidden_layers=2, num_attention_heads=4)
ARCHITECTURES = {  # sliding windows, soft-capping, fused Q/K/V, local/global layers
    "gemma2-softcap-window": (tf.Gemma2Model, tf.Gemma2Config(**SIZE, num_key_value_heads=2, head_dim=8,
                                                              sliding_window=8, attn_logit_softcapping=2.0,
                                                              query_pre_attn_scalar=3)),
    "mistral-window": (tf.MistralModel, tf.MistralConfig(**SIZE, num_key_value_heads=2, sliding_window=8)),
    "gpt-neox": (tf.GPTNeoXModel, tf.GPTNeoXConfig(**SIZE)),
    "phi3": (tf.Phi3Model, tf.Phi3Config(**SIZE, num_key_value_heads=2, pad_token_id=0)),
    "modernbert-local": (tf.ModernBertModel, tf.ModernBertConfig(**SIZE, pad_token_id=0, bos_token_id=1, eos_token_id=2,
                                                                 cls_token_id=1, sep_token_id=2, local_attention=8)),
}


@pytest.mark.parametrize("name", ARCHITECTURES)
def test_kept_maps_equal_naive_across_architectures(name):
    """Weights std 1 so that Gemma 2's cap (2.0 on scores) binds: ignoring it moves weights by up to 0.94."""
    model_class, config = ARCHITECTURES[name]
    torch.manual_seed(0)
    model = model_class(config).eval()
    for param in model.parameters():
        if param.dim() == 2:
            torch.nn.init.normal_(param, std=1.0)
    ids = random_ids(24)
    streamed = stream_attention(model, ids, lambda *a: None, keep=[0, 1])
    kept = torch.stack([torch.stack([streamed.kept[(layer, h)] for h in range(4)]) for layer in range(2)])
    # scores of ~10-100 at std 1: scaling Q before or the scores after moves weights by up to ~3e-5
    torch.testing.assert_close(kept, naive_maps(model, ids), atol=1e-4, rtol=0)


def test_bad_inputs_are_rejected():
    with pytest.raises(InputError, match="one sequence"):
        stream_attention(tiny.tiny_gpt2(), torch.zeros(2, 5, dtype=torch.long), lambda *a: None)
    with pytest.raises(InputError, match="keep"):
        stream_attention(tiny.tiny_gpt2(), random_ids(5), lambda *a: None, keep=["x"])
    for keep in ([(99, 0)], [(0, 4)], [(-1, 0)]):  # dropped without a word before: kept[(l, h)] was a KeyError
        with pytest.raises(InputError, match="the model has layers 0-1 and heads 0-3"):
            stream_attention(tiny.tiny_gpt2(), random_ids(5), lambda *a: None, keep=keep)
    with pytest.raises(ExtractionError, match="neither"):
        stream_attention(torch.nn.Linear(2, 2), random_ids(5), lambda *a: None)


def test_a_model_built_without_its_weights_is_named_not_run():
    """A model built under torch.device("meta") streamed into "RuntimeError: Tensor.item() cannot be called on meta
    tensors"; extract_attention and diagnose said its weights were not loaded."""
    model = tiny.tiny_gpt2()
    with torch.device("meta"):
        empty = type(model)(model.config)
    with pytest.raises(ExtractionError, match="the model's weights are not loaded"):
        stream_attention(empty, random_ids(5), lambda *a: None)


def test_device_map_auto_split_over_memory_budget(tmp_path):
    """A model spread by accelerate (here CPU + disk offload under a tight ``max_memory``) streams the same."""
    from core import load_model

    model, tok = tiny.tiny_gpt2(128), tiny.bpe_tokenizer()
    model.save_pretrained(tmp_path)
    tok.save_pretrained(tmp_path)
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    split, _ = load_model(str(tmp_path), device_map="auto", max_memory={"cpu": int(size * 0.6)})
    assert len(set(split.hf_device_map.values())) > 1, split.hf_device_map  # really spread out
    ids = random_ids(50, seed=3)
    got = stream_token_statistics(split, ids, chunk_rows=8, keep=[(1, 0)])
    want = stream_token_statistics(model, ids, chunk_rows=8, keep=[(1, 0)])
    assert_metrics_close(got.metrics, want.metrics)
    torch.testing.assert_close(got.kept[(1, 0)], want.kept[(1, 0)])


@pytest.mark.parametrize("name", ["bert", "gpt2", "llama-gqa", "custom-decoder"])
def test_forward_output_is_unchanged(name):
    model, ids = MODELS[name](), random_ids(30, seed=4)
    streamed = stream_attention(model, ids, lambda *a: None, chunk_rows=7)
    with torch.inference_mode():
        plain = model(ids) if isinstance(model, AttnScopeTransformer) else model(input_ids=ids)
    got = streamed.output["logits"] if isinstance(model, AttnScopeTransformer) else streamed.output.last_hidden_state
    want = plain["logits"] if isinstance(model, AttnScopeTransformer) else plain.last_hidden_state
    torch.testing.assert_close(got, want, atol=1e-5, rtol=1e-5)


def test_learned_attention_sinks_are_not_streamed_but_read_whole(monkeypatch):
    """GPT-OSS adds a learned sink logit per head to each row's softmax (``s_aux``): streamed rows left it out and
    summed to 1 where the model's sum to less (max difference 0.5; with sinks of 3.0 every label changed and a
    diffuse_heads error appeared). Such a model is read on whole maps."""
    import importlib

    from core.extraction.streaming import can_stream
    from diagnostics import diagnose

    config = tf.GptOssConfig(vocab_size=300, hidden_size=32, num_hidden_layers=2, num_attention_heads=4,
                             num_key_value_heads=2, head_dim=8, intermediate_size=32, num_local_experts=2,
                             num_experts_per_tok=1, layer_types=["full_attention"] * 2)
    torch.manual_seed(0)
    model = tf.GptOssModel(config).eval()
    with torch.no_grad():
        for layer in model.layers:
            layer.self_attn.sinks.fill_(3.0)
    assert not can_stream(model)
    with pytest.raises(ExtractionError, match="learned attention sinks"):
        stream_attention(model, torch.arange(5, 45).unsqueeze(0), lambda *a: None)
    monkeypatch.setattr(importlib.import_module("diagnostics.diagnose"), "STREAM_ABOVE_TOKENS", 4)
    report = diagnose((model, tiny.bpe_tokenizer()), ["the cat sat on the mat and the dog ran off"])
    assert not report.model["streamed"]
    assert (report.samples[0].attentions.sum(-1) < 0.99).all()  # the sink's share is left out of every row


@pytest.mark.parametrize("ids, message", [
    (torch.zeros(1, 0, dtype=torch.long), "holds no tokens"),
    (torch.ones(1, 65, dtype=torch.long), "holds 65 tokens, more than the model's 64 positions"),
    (torch.tensor([[1, 2, 100_000]]), "token id 100000 but the model's vocabulary has 300 entries"),
    (torch.tensor([[1, -100, 2]]), "token id -100 is negative"),
])
def test_token_ids_the_model_cannot_read_are_one_line(ids, message):
    """The token-id entry point raised torch's own IndexError and RuntimeError."""
    with pytest.raises(InputError, match=message):
        stream_attention(tiny.tiny_gpt2(), ids, lambda layer, heads, keys: None)


def test_each_streamed_layer_hands_freed_memory_back(monkeypatch):
    """glibc kept the freed chunk-sized temporaries: SmolLM2's streamed statistics peaked +0.81 GiB above the model
    at 4,096 tokens, +0.34 with the memory freed after each layer handed back (``malloc_trim``)."""
    from core.extraction import scratch, streaming

    calls = []
    monkeypatch.setattr(streaming, "release_freed_memory", lambda: calls.append(1))
    model = tiny.tiny_gpt2()
    stream_statistics(model, tiny.bpe_tokenizer(), "The quick brown fox jumps over the lazy dog.")
    assert len(calls) == model.config.n_layer
    scratch.release_freed_memory()  # callable here, whatever the C library



def test_an_attention_module_that_does_not_say_whether_it_is_causal_streams_as_its_model_is():
    """Splinter's self-attention has no ``is_causal``: streaming read it as causal, zeroed the upper triangle and
    renormalised (up to 0.96 off), with no word. A module that does not say now streams as its model is."""
    torch.manual_seed(0)
    model = tf.SplinterModel(tf.SplinterConfig(vocab_size=200, hidden_size=32, num_hidden_layers=2,
                                               num_attention_heads=4, intermediate_size=48)).eval()
    ids = random_ids(12)
    streamed = stream_attention(model, ids, lambda *a: None, keep=[0, 1])
    kept = torch.stack([torch.stack([streamed.kept[(layer, h)] for h in range(4)]) for layer in range(2)])
    assert kept.triu(1).amax() > 0.01  # an encoder attends forward too
    torch.testing.assert_close(kept, naive_maps(model, ids), atol=1e-5, rtol=0)


def test_a_model_that_computes_attention_in_its_own_code_is_told_why_it_cannot_stream():
    """GPT-Neo got "ran no attention layer through the streaming function", and no way on."""
    neo = tf.GPTNeoModel(tf.GPTNeoConfig(vocab_size=200, hidden_size=32, num_layers=2, num_heads=4,
                                         attention_types=[[["global"], 2]], max_position_embeddings=64)).eval()
    with pytest.raises(ExtractionError, match="GPTNeoModel ran no attention layer .*: it computes attention in its "
                                              "own code, which AttnScope cannot stream; use core.extract_attention"):
        stream_attention(neo, random_ids(12), lambda *a: None)
