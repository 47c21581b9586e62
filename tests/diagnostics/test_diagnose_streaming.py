"""``diagnose`` on long probes streams them (no maps held) and reports what whole maps give."""

import copy
import importlib

import pytest
import torch
from transformers import BloomConfig, BloomModel

import core
from core.extraction.streaming import can_stream
from broken_checkpoints import structured_bert
from diagnostics import diagnose
from diagnostics.probe_texts import DEFAULT_PROBES
from diagnostics.probes import as_probes, read_lengths
from tiny import bpe_tokenizer, tiny_bart, tiny_gpt2, wordpiece_tokenizer

diagnose_module = importlib.import_module("diagnostics.diagnose")  # the package re-exports the function
TEXTS = ["The cat sat on the mat and looked out of the window at the rain.",
         ("My sister bought a new bicycle.", "Her old one was stolen last week.")]


@pytest.fixture(scope="module")
def sources(tmp_path_factory):
    return {"bert": str(structured_bert(tmp_path_factory.mktemp("bert") / "bert")),
            "gpt2": (tiny_gpt2(256), bpe_tokenizer())}


@pytest.mark.parametrize("name", ["bert", "gpt2"])
def test_streamed_report_equals_the_whole_maps_report(sources, name):
    texts = TEXTS if name == "bert" else TEXTS[:1]
    whole = diagnose(sources[name], texts, stream=False)
    streamed = diagnose(sources[name], texts, stream=True)
    assert streamed.model["streamed"] is True and whole.model["streamed"] is False
    assert streamed.samples == [] and len(whole.samples) == len(texts)
    drop = {"elapsed_s", "streamed"}
    assert {k: v for k, v in streamed.model.items() if k not in drop} == \
           {k: v for k, v in whole.model.items() if k not in drop}
    for got, want in zip(streamed.heads, whole.heads, strict=True):
        assert (got.part, got.layer, got.head, got.pattern, got.offset) == \
               (want.part, want.layer, want.head, want.pattern, want.offset)
        for metric, value in want.metrics.items():
            if isinstance(value, float):
                assert got.metrics[metric] == pytest.approx(value, abs=2e-4), metric  # both rounded to 4 places
            elif not isinstance(value, dict):
                assert got.metrics[metric] == value, metric
    assert [(f.code, f.severity, f.part, f.heads) for f in streamed.findings] == \
           [(f.code, f.severity, f.part, f.heads) for f in whole.findings]
    assert "Pattern map" in streamed.to_markdown() and streamed.to_html().startswith("<!DOCTYPE html>")


@torch.no_grad()
def test_a_sliding_window_model_with_no_query_key_is_all_diffuse_whole_or_streamed():
    """Its rows are uniform within their window of 8: it got 'block' on every head and redundant_heads (error)
    instead of diffuse_heads, whole maps and streamed alike."""
    from transformers import MistralConfig, MistralModel

    torch.manual_seed(0)
    model = MistralModel(MistralConfig(vocab_size=300, hidden_size=32, intermediate_size=37, num_hidden_layers=2,
                                       num_attention_heads=4, num_key_value_heads=2, sliding_window=8,
                                       max_position_embeddings=256)).eval()
    for layer in model.layers:
        layer.self_attn.q_proj.weight.zero_()
        layer.self_attn.k_proj.weight.zero_()
    tokenizer = copy.deepcopy(bpe_tokenizer())  # the cached one is shared by every test
    tokenizer.model_max_length = 256
    for stream in (False, True):
        report = diagnose((model, tokenizer), [DEFAULT_PROBES[0].text], stream=stream)  # 256 tokens: 32 windows
        assert {h.pattern for h in report.heads} == {"diffuse"}, stream
        assert all("broad" in {r.role for r in h.roles} for h in report.heads)
        assert report.finding("diffuse_heads").severity == "error" and report.finding("redundant_heads") is None


def test_a_probe_longer_than_the_limit_is_streamed(sources, monkeypatch):
    monkeypatch.setattr(diagnose_module, "STREAM_ABOVE_TOKENS", 12)
    assert diagnose(sources["gpt2"], ["short text"]).model["streamed"] is False
    assert diagnose(sources["gpt2"], [TEXTS[0]]).model["streamed"] is True


def test_encoder_decoders_are_not_streamed(monkeypatch):
    source = (tiny_bart(), wordpiece_tokenizer())
    with pytest.raises(core.InputError, match="stream=False"):
        diagnose(source, ["A dog barked."], stream=True)
    monkeypatch.setattr(diagnose_module, "STREAM_ABOVE_TOKENS", 2)  # long, but only whole maps cover all parts
    report = diagnose(source, ["A dog barked at the cat."])
    assert report.model["streamed"] is False and report.parts == ["encoder", "decoder", "cross"]
    monkeypatch.setattr(diagnose_module, "WHOLE_MAPS_MAX_BYTES", 3 * 4 * 2 * 4 * 4 ** 2)  # 3 parts at 4 tokens
    with pytest.raises(core.InputError, match="BartModel is an encoder-decoder, .* cut to 4 tokens at most"):
        diagnose(source, ["A dog barked at the cat."])


def test_a_probe_cut_to_the_model_limit_is_noted_and_counted_as_cut(monkeypatch):
    monkeypatch.setattr(diagnose_module, "STREAM_ABOVE_TOKENS", 100)
    long_text = "the cat sat on the mat " * 50  # ~300 tokens; the model takes 64
    report = diagnose((tiny_gpt2(64), bpe_tokenizer()), [long_text, "short"])
    assert report.model["streamed"] is False  # what the model sees is 64 tokens: no need to stream
    note = report.finding("probe_truncated")
    assert note.severity == "info" and "1 of 2 probes" in note.message and "limit of 64" in note.message
    assert diagnose((tiny_gpt2(64), bpe_tokenizer()), ["short"]).finding("probe_truncated") is None


def tiny_bloom():
    """Bloom computes attention in its own code: no function registered with transformers reaches it."""
    torch.manual_seed(0)
    return BloomModel(BloomConfig(hidden_size=32, n_head=4, n_layer=2, vocab_size=300)).eval()


def test_a_model_that_cannot_stream_is_diagnosed_on_whole_maps_within_a_budget(monkeypatch):
    source = (tiny_bloom(), bpe_tokenizer())
    assert not can_stream(source[0]) and can_stream(tiny_gpt2())
    monkeypatch.setattr(diagnose_module, "STREAM_ABOVE_TOKENS", 4)
    report = diagnose(source, [TEXTS[0]])  # "long": before, "BloomModel ran no attention layer through ..."
    assert report.model["streamed"] is False and len(report.samples) == 1
    monkeypatch.setattr(diagnose_module, "WHOLE_MAPS_MAX_BYTES", 4 * 2 * 4 * 20 ** 2)  # 20 tokens' worth
    with pytest.raises(core.InputError, match=r"BloomModel computes attention in its own code.*cut to 20 tokens"):
        diagnose(source, [TEXTS[0]])
    with pytest.raises(core.InputError, match="stream=False"):
        diagnose(source, [TEXTS[0]], stream=True)


def test_probes_whose_whole_maps_would_not_fit_are_streamed(monkeypatch):
    source = (tiny_gpt2(256), bpe_tokenizer())
    monkeypatch.setattr(diagnose_module, "WHOLE_MAPS_MAX_BYTES", 4 * 2 * 4 * 20 ** 2)
    assert diagnose(source, ["short"]).model["streamed"] is False
    assert diagnose(source, [TEXTS[0]] * 3).model["streamed"] is True  # each short, together too big
    with pytest.raises(core.InputError,
                       match=r"whole maps were asked for \(stream=False\), and the whole attention maps"):
        diagnose(source, [TEXTS[0]] * 3, stream=False)


@pytest.mark.parametrize("stream", [False, True])
def test_a_diverged_model_on_a_long_probe_gets_its_non_finite_error(stream):
    """Past 128 keys its NaN rows broke the block search: IndexError (CLI exit 3), not the finding."""
    model = tiny_gpt2(256)
    with torch.no_grad():
        model.h[0].attn.c_attn.weight[0, 0] = float("inf")
    tokenizer = copy.deepcopy(bpe_tokenizer())  # the cached one stays as it is
    tokenizer.model_max_length = 256
    text = "the quick brown fox jumps over the lazy dog " * 8  # 249 tokens
    report = diagnose((model, tokenizer), [text], stream=stream)
    assert report.finding("non_finite_attention").severity == "error"
    assert report.model.get("streamed", False) == stream


def test_the_whole_maps_refusal_counts_in_the_unit_it_names():
    """The limit is 2 GiB (2 * 1024**3 bytes) and the message divided by 1024**3 but said "GB"."""
    lengths = [9000]  # Bloom, 2 layers of 4 heads: 2.4 GiB (2.6 GB) of float32 maps
    with pytest.raises(core.InputError, match=r"would take 2\.4\d GiB, over the 2 GiB limit;"):
        diagnose_module._check_whole_maps(tiny_bloom(), lengths)


def test_a_small_maps_budget_is_named_and_not_rounded_to_zero(monkeypatch):
    """ATTNSCOPE_MAX_MAPS_BYTES=300KB gave "would take 0.00 GiB, over the 0 GiB limit", not naming the setting."""
    monkeypatch.setenv("ATTNSCOPE_MAX_MAPS_BYTES", "300KB")
    with pytest.raises(core.InputError, match=r"would take 2\.4\d GiB, over the 293 KiB limit "
                                              r"\(ATTNSCOPE_MAX_MAPS_BYTES, .*cut to 96 tokens at most"):
        diagnose_module._check_whole_maps(tiny_bloom(), [9000])


def test_a_budget_too_small_for_one_token_asks_for_a_larger_one(monkeypatch):
    """It said "these would fit cut to 0 tokens at most" (an encoder-decoder reaches it from the CLI)."""
    monkeypatch.setenv("ATTNSCOPE_MAX_MAPS_BYTES", "1")
    with pytest.raises(core.InputError, match="BartModel is an encoder-decoder, .*not even one token fits: raise"):
        diagnose((tiny_bart(), wordpiece_tokenizer()), ["A dog barked."])


def test_on_a_gpu_each_probe_is_held_to_its_free_memory_not_the_probes_together(sources, monkeypatch):
    """Each probe's maps leave the GPU when its forward ends: the probes' maps together were compared with the GPU's
    free memory, and an encoder-decoder whose every probe fitted was refused. A probe that does not fit the GPU is
    streamed, where the model can be; a blank ATTNSCOPE_MAX_MAPS_BYTES had lifted every budget."""
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (80_000, 10**9))
    monkeypatch.setattr(diagnose_module, "model_device", lambda model: torch.device("cuda"))
    monkeypatch.setenv("ATTNSCOPE_MAX_MAPS_BYTES", " ")
    bart = (tiny_bart(), wordpiece_tokenizer())
    texts = ["A dog barked at the cat by the old red door."] * 3
    tokens = read_lengths(*bart, as_probes(texts))[0][0]
    one = diagnose_module.whole_maps_bytes(bart[0], [tokens])  # counts an encoder-decoder's three parts
    assert one * 3 > 80_000 > one, (tokens, one)  # each fits, not together
    assert diagnose(bart, texts).model["streamed"] is False
    monkeypatch.setattr(torch.cuda, "mem_get_info", lambda device=None: (1_000, 10**9))
    assert diagnose(sources["gpt2"], TEXTS[:1]).model["streamed"] is True  # one probe over the GPU's memory


def test_a_streamed_probe_moves_the_progress_bar_layer_by_layer(sources, monkeypatch):
    """A streamed probe told the bar only as it began: at 8,192 tokens the CLI's bar stood still for 100 s."""
    monkeypatch.setattr(diagnose_module, "STREAM_ABOVE_TOKENS", 4)
    calls = []
    report = diagnose(sources["gpt2"], [TEXTS[0], "a dog barked at the cat"],
                      progress=lambda fraction, message: calls.append((fraction, message)))
    assert report.model["streamed"] is True
    layers = [(f, m) for f, m in calls if ": layer" in m]
    assert [m for _, m in layers] == [f"probe {p}/2 (streamed): layer {n}/2" for p in (1, 2) for n in (1, 2)]
    assert [round(f, 3) for f, _ in layers] == [0.05, 0.25, 0.45, 0.65]  # each probe's 0.4, split by its layers
    fractions = [f for f, _ in calls]
    assert fractions == sorted(fractions)


def test_a_streamed_probe_counts_the_layers_the_forward_runs():
    """Attention calls over the config's layers: a hybrid told "layer 2/4" at its last attention layer (its
    convolution layers uncounted), an ALBERT of 2 inner layers "layer 4/2"; then the longest layer list, which in
    a VLM is its vision tower, silent on text."""
    from transformers import AlbertConfig, AlbertModel, Lfm2Config, Lfm2Model, PaliGemmaConfig, PaliGemmaModel

    from diagnostics.streaming import stream_statistics

    torch.manual_seed(0)
    hybrid = Lfm2Model(Lfm2Config(
        vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=4, num_attention_heads=4,
        num_key_value_heads=2, max_position_embeddings=64, layer_types=["conv", "full_attention"] * 2,
        block_auto_adjust_ff_dim=False, conv_L_cache=3, bos_token_id=0, eos_token_id=0, pad_token_id=0)).eval()
    albert = AlbertModel(AlbertConfig(vocab_size=200, embedding_size=16, hidden_size=32, num_hidden_layers=3,
                                      num_attention_heads=4, intermediate_size=37, inner_group_num=2,
                                      max_position_embeddings=64)).eval()
    vlm = PaliGemmaModel(PaliGemmaConfig(
        text_config=dict(model_type="gemma", vocab_size=320, hidden_size=64, intermediate_size=96, num_hidden_layers=2,
                         num_attention_heads=4, num_key_value_heads=1, head_dim=16),
        vision_config=dict(hidden_size=32, intermediate_size=37, num_hidden_layers=3, num_attention_heads=2,
                           image_size=28, patch_size=14, projection_dim=64),
        image_token_index=310, vocab_size=320, projection_dim=64)).eval()
    for model, tokenizer, n in ((hybrid, bpe_tokenizer(), 4), (albert, wordpiece_tokenizer(), 3),
                                (vlm, bpe_tokenizer(), 2)):
        calls = []
        stream_statistics(model, tokenizer, "the cat sat on the mat", progress=lambda f, m: calls.append((f, m)))
        assert calls == [(i / n, f"layer {i + 1}/{n}") for i in range(n)], type(model).__name__
