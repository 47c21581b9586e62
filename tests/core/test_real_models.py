"""The two real pretrained models, installed from PyPI wheels by the README's command, load offline by Hub id.

Their heads are far from uniform, and MiniLM's layer 0 head 2 is a previous-token head: every token puts
at least 0.99 of its attention on the token before it (measured: mean 0.9997, lowest row 0.9966 on this text).
"""

from __future__ import annotations

import socket

import huggingface_hub
import pytest
import torch

import core
import diagnostics

MINILM, SMOLLM2 = "sentence-transformers/all-MiniLM-L6-v2", "HuggingFaceTB/SmolLM2-135M-Instruct"
TEXT = "The cat sat on the mat because it was tired."
pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def offline():
    """No network: the Hub is marked offline and any connection attempt fails the test."""
    patch = pytest.MonkeyPatch()
    patch.setenv("HF_HUB_OFFLINE", "1")
    patch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)

    def refuse(*args, **kwargs):
        raise AssertionError(f"network access attempted: {args[:2]}")

    patch.setattr(socket, "create_connection", refuse)
    patch.setattr(socket.socket, "connect", refuse)
    yield
    patch.undo()


@pytest.fixture(scope="module")
def minilm(offline):
    return core.load_model(MINILM)


@pytest.fixture(scope="module")
def smollm2(offline):
    return core.load_model(SMOLLM2)


def normalised_entropy(result: core.AttentionResult) -> torch.Tensor:
    """[layers, heads]: each row's entropy over log(keys it may see), averaged over rows that see 2+ keys."""
    attn = result.attentions  # (L, H, q, k)
    rows = []
    for i in range(attn.shape[2]):
        seen = i + 1 if result.causal else attn.shape[3]
        if seen > 1:
            p = attn[:, :, i, :seen].clamp_min(1e-12)  # (L, H, seen)
            rows.append(-(p * p.log()).sum(-1) / torch.log(torch.tensor(float(seen))))
    return torch.stack(rows).mean(0)


def assert_not_uniform(result: core.AttentionResult) -> None:
    entropy = normalised_entropy(result)  # (L, H); 1.0 = uniform
    assert (entropy < 0.7).float().mean() > 0.5, entropy  # measured: 72 % (MiniLM), 82 % (SmolLM2)
    assert entropy.std() > 0.1, entropy  # heads differ from each other (measured std 0.21, 0.22)


def test_minilm_loads_offline_by_hub_id_with_a_previous_token_head(minilm):
    result = core.extract_attention(*minilm, TEXT)
    assert result.model_name == MINILM and not result.causal
    assert result.attentions.shape == (6, 12, 13, 13)
    assert result.tokens[:4] == ["[CLS]", "the", "cat", "sat"]
    assert_not_uniform(result)
    head = result.attentions[0, 2]  # (q, k)
    previous = torch.stack([head[i, i - 1] for i in range(1, head.shape[0])])
    assert previous.min() > 0.99, previous


def test_smollm2_loads_offline_by_hub_id_from_its_gguf(smollm2):
    model, tokenizer = smollm2
    assert (model.config.num_attention_heads, model.config.num_key_value_heads) == (9, 3)
    result = core.extract_attention(model, tokenizer, TEXT)
    assert result.model_name == SMOLLM2 and result.causal
    assert result.attentions.shape == (30, 9, 11, 11)
    assert result.tokens[:3] == ["The", "▁cat", "▁sat"]  # the tokenizer from the GGUF file; ▁ marks a word start
    assert_not_uniform(result)


def test_aliases_give_the_same_installed_model(offline, minilm):
    model, _ = core.load_model("minilm")
    assert model.config.name_or_path == MINILM
    torch.testing.assert_close(model.embeddings.word_embeddings.weight, minilm[0].embeddings.word_embeddings.weight)


def test_diagnose_takes_the_hub_id(offline):
    report = diagnostics.diagnose("minilm", texts=[TEXT])
    assert report.model["name"] == MINILM
    assert len(report.heads) == 6 * 12
