"""A model spread by accelerate with offload (``load_model(..., device_map="auto", max_memory=...)``; on a GPU machine
every module mapped to the CPU or disk is offloaded) is read as the same model loaded whole.

Its offloaded parameters sit on the ``meta`` device between forwards. ``extract_attention`` and ``diagnose`` refused
it as "weights not loaded ... load them with from_pretrained", though from_pretrained had loaded it.
"""

import pytest
import torch
from transformers import GPT2LMHeadModel

import tiny
from core import extract_attention, load_model
from diagnostics import diagnose

TEXT = "the cat sat on the mat and the dog sat on the log"


@pytest.fixture(scope="module")
def pair(tmp_path_factory):
    """``(whole, offloaded, tokenizer)``: one tiny GPT-2, loaded whole and under a memory budget it does not fit."""
    folder = tmp_path_factory.mktemp("gpt2")
    model, tokenizer = tiny.tiny_gpt2(128), tiny.bpe_tokenizer()
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    size = sum(p.numel() * p.element_size() for p in model.parameters())
    split, _ = load_model(str(folder), device_map="auto", max_memory={"cpu": int(size * 0.6)})
    assert any(p.is_meta for p in split.parameters()), split.hf_device_map  # really offloaded
    whole, _ = load_model(str(folder))
    return whole, split, tokenizer


def test_extract_attention_reads_an_offloaded_model(pair):
    whole, split, tokenizer = pair
    torch.testing.assert_close(extract_attention(split, tokenizer, TEXT).attentions,
                               extract_attention(whole, tokenizer, TEXT).attentions)


@pytest.mark.parametrize("stream", [False, True])
def test_diagnose_reads_an_offloaded_model_and_its_weights(pair, stream):
    whole, split, tokenizer = pair
    got, want = (diagnose((m, tokenizer), texts=[TEXT], stream=stream) for m in (split, whole))
    assert [(h.pattern, h.role_names) for h in got.heads] == [(h.pattern, h.role_names) for h in want.heads]
    assert [(f.code, f.severity, f.heads) for f in got.findings] == [(f.code, f.severity, f.heads)
                                                                      for f in want.findings]
    assert got.finding("weights_unavailable") is None
    for a, b in zip(got.heads, want.heads):
        assert a.metrics["qk_scale"] == pytest.approx(b.metrics["qk_scale"], rel=1e-5)
    assert any(p.is_meta for p in split.parameters())  # put back where accelerate keeps them


def test_weights_are_brought_in_for_one_attention_module_at_a_time(pair, monkeypatch):
    """Every module's weights were brought in around its readers, the root's first: a model offloaded because it does
    not fit was held whole while its weights were read."""
    from core.extraction import head_weights

    _, split, _ = pair
    brought, real = [], head_weights.weights_in_memory
    monkeypatch.setattr(head_weights, "weights_in_memory", lambda module: brought.append(module) or real(module))
    layers = head_weights.attention_weights(split)
    assert len(layers) == split.config.n_layer and brought
    assert all(type(module).__name__ == "GPT2Attention" for module in brought), [type(m).__name__ for m in brought]


def test_an_offloaded_encoder_decoder_counts_its_tied_embedding_once(tmp_path):
    """accelerate's forward unties an offloaded BART's shared embedding: the report's parameter count grew by two
    vocabularies' worth after the first forward."""
    model, tokenizer = tiny.tiny_bart(), tiny.wordpiece_tokenizer()
    model.save_pretrained(tmp_path)
    tokenizer.save_pretrained(tmp_path)
    split, _ = load_model(str(tmp_path), device_map="auto", max_memory={"cpu": 10_000})
    counts = [diagnose((split, tokenizer), texts=[TEXT]).model["parameters"] for _ in range(2)]
    assert counts == [sum(p.numel() for p in model.parameters())] * 2
    from core.extraction.offload import parameter_count

    gpt2 = GPT2LMHeadModel(tiny.tiny_gpt2().config)  # a head untied on purpose holds its own weights: counted
    gpt2.lm_head.weight = torch.nn.Parameter(gpt2.lm_head.weight.detach().clone())
    assert parameter_count(gpt2) == sum(p.numel() for p in gpt2.parameters())


def test_a_model_offloaded_whole_runs_where_its_hooks_say():
    """With every weight on meta, its device was taken for the CPU whatever accelerate ran it on (its GPU's memory
    then went unchecked)."""
    from types import SimpleNamespace

    from core.device import model_device

    with torch.device("meta"):
        model = tiny.tiny_gpt2()
    model.h[0]._hf_hook = SimpleNamespace(execution_device=0)  # what accelerate sets: a CUDA index
    assert model_device(model) == torch.device("cuda:0")
    del model.h[0]._hf_hook
    assert model_device(model) == torch.device("cpu")
