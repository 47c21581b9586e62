"""GGUF checkpoints: tiny Llama (grouped-query) and GPT-2 files written with the gguf package's writer
load with the same attention as the same weights saved as safetensors, from a path, an upload, a zip and the CLI.
The hostile GGUF rows are in docs/checkpoints.md's table (tests/core/test_checkpoint.py)."""

from __future__ import annotations

import io
import zipfile

import pytest
import torch

import core
from core import CheckpointError, load_checkpoint
from core.checkpoints import gguf as gguf_loading
from core.checkpoints.gguf import read_gguf_header
from diagnostics import cli
from loader_sandbox import loader_sandbox
from tiny import bpe_tokenizer, tiny_gpt2
from tiny_gguf import tiny_llama, write_gpt2_gguf, write_llama_gguf

TEXT = "The quick brown fox jumps over the lazy dog."
WRITERS = {"llama": (write_llama_gguf, tiny_llama), "gpt2": (write_gpt2_gguf, lambda: tiny_gpt2(max_positions=1024))}


@pytest.fixture(autouse=True)
def allowed(tmp_path, monkeypatch):
    yield from loader_sandbox(tmp_path, monkeypatch, demo_tokenizers=True)


@pytest.mark.parametrize("arch", list(WRITERS))
def test_gguf_attention_equals_the_safetensors_weights(tmp_path, arch):
    write, build = WRITERS[arch]
    original = build()
    folder = tmp_path / "safetensors"
    original.save_pretrained(folder)  # model.safetensors + config.json
    bpe_tokenizer().save_pretrained(folder)
    gguf_path = write(tmp_path / f"tiny-{arch}.gguf", original)

    from_gguf, gguf_tokenizer = core.load_model(gguf_path)
    from_safetensors, tokenizer = core.load_model(folder)
    got = core.extract_attention(from_gguf, gguf_tokenizer, TEXT)
    want = core.extract_attention(from_safetensors, tokenizer, TEXT)
    assert got.tokens == want.tokens  # the tokenizer came from the file
    assert got.attentions.shape == want.attentions.shape  # (L, H, q, k)
    torch.testing.assert_close(got.attentions, want.attentions, atol=1e-5, rtol=0)
    assert got.model_name == gguf_path.name


def test_llama_gguf_keeps_grouped_query_heads(tmp_path):
    model, _ = core.load_model(write_llama_gguf(tmp_path / "llama.gguf"))
    assert (model.config.num_attention_heads, model.config.num_key_value_heads) == (4, 2)


def test_gguf_as_uploaded_bytes_and_in_a_zip(tmp_path):
    data = write_llama_gguf(tmp_path / "llama.gguf").read_bytes()
    want = core.extract_attention(tiny_llama(), bpe_tokenizer(), TEXT).attentions
    uploaded = load_checkpoint([("my model.gguf", data)])
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w") as archive:
        archive.writestr("export/README.md", "# tiny")
        archive.writestr("export/tiny.gguf", data)
    zipped = load_checkpoint([("export.zip", buffer.getvalue())])
    for loaded in (uploaded, zipped):
        assert loaded.architecture == "llama"
        got = core.extract_attention(loaded.model, loaded.tokenizer, TEXT).attentions
        torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_progress_reports_dequantisation_in_order(tmp_path):
    calls = []
    core.load_model(write_gpt2_gguf(tmp_path / "gpt2.gguf"), progress=lambda f, m: calls.append((f, m)))
    fractions = [f for f, _ in calls]
    assert fractions == sorted(fractions) and fractions[0] == 0.0 and fractions[-1] == 1.0
    assert any(m.startswith("dequantising tensor 1/") for _, m in calls)


def test_the_header_is_checked_before_transformers_reads_the_file(tmp_path, monkeypatch):
    path = write_llama_gguf(tmp_path / "cut.gguf")
    path.write_bytes(path.read_bytes()[:-100])
    monkeypatch.setattr("transformers.AutoModel.from_pretrained", lambda *a, **k: pytest.fail("reached transformers"))
    with pytest.raises(CheckpointError, match="cut.gguf is truncated: tensor"):
        load_checkpoint(path)


def test_header_reader_matches_the_gguf_package(tmp_path):
    from gguf import GGUFReader

    path = write_llama_gguf(tmp_path / "llama.gguf")
    ours, theirs = read_gguf_header(path), GGUFReader(path)
    assert [(t.name, t.dims, t.offset) for t in ours.tensors] == [
        (t.name, tuple(int(d) for d in t.shape), int(t.data_offset) - theirs.data_offset) for t in theirs.tensors]
    assert ours.data_start == theirs.data_offset
    assert ours.fields["general.architecture"] == "llama" and ours.fields["llama.block_count"] == 2


def test_cli_reports_on_a_gguf_file(tmp_path, capsys):
    status = cli.main([str(write_gpt2_gguf(tmp_path / "gpt2.gguf")), "--format", "json", "--quiet"])
    assert status in (0, 1), capsys.readouterr().err
    assert '"schema": "attnscope.report/2"' in capsys.readouterr().out


def test_supported_architectures_come_from_transformers():
    names = gguf_loading.supported_architectures()
    assert {"llama", "gpt2", "qwen2", "mistral"} <= set(names) and "tokenizer" not in names
