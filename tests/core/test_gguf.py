"""GGUF checkpoints: tiny Llama (grouped-query) and GPT-2 files written with the gguf package's writer
load with the same attention as the same weights saved as safetensors, from a path, an upload, a zip and the CLI.
The hostile GGUF rows are in docs/checkpoints.md's table (tests/core/test_checkpoint.py)."""

from __future__ import annotations

import io
import zipfile
from pathlib import Path

import numpy as np
import pytest
import torch

import core
from core import CheckpointError, Limits, load_checkpoint
from core.checkpoints import gguf as gguf_loading, registry
from core.checkpoints.gguf import check_gguf, header as gguf_header, read_gguf_header, shapes
from diagnostics import cli
from hostile_gguf import STRING_TYPE, U8_TYPE, metadata_arrays
from loader_sandbox import loader_sandbox
from tiny import bpe_tokenizer, tiny_gpt2
from tiny_gguf import (
    finish_gguf, llama3_rope_factors, tiny_llama, write_gpt2_gguf, write_lfm2_gguf, write_llama_gguf, write_plain_gguf,
)

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


def _same_attention(tmp_path, original, gguf_path):
    """The attention of ``gguf_path`` equals that of ``original`` saved as safetensors (Q and K sharpened x4 first by
    the caller where position effects must show)."""
    folder = tmp_path / "safetensors"
    original.save_pretrained(folder)
    bpe_tokenizer().save_pretrained(folder)
    from_gguf, gguf_tokenizer = core.load_model(gguf_path)
    from_safetensors, tokenizer = core.load_model(folder)
    got = core.extract_attention(from_gguf, gguf_tokenizer, TEXT).attentions  # (L, H, q, k)
    torch.testing.assert_close(got, core.extract_attention(from_safetensors, tokenizer, TEXT).attentions,
                               atol=1e-5, rtol=0)
    return from_gguf


@torch.no_grad()
def _sharpened(model):
    for name, param in model.named_parameters():
        if name.endswith(("q_proj.weight", "k_proj.weight", "qkv_proj.weight")):
            param.mul_(4)  # scores large enough that a wrong rotation shows
    return model.eval()


def test_llama3_rope_factors_in_the_file_are_applied(tmp_path):
    """Llama 3.1+ files keep their rope as rope_freqs.weight, which transformers' GGUF loader drops: the attention
    was that of plain rope (max |difference| 0.09 here); divided into the rotary frequencies it equals llama3 rope."""
    rope = {"rope_type": "llama3", "rope_theta": 10000.0, "factor": 8.0, "low_freq_factor": 1.0,
            "high_freq_factor": 4.0, "original_max_position_embeddings": 8}
    original = _sharpened(tiny_llama(rope_parameters=rope))
    factors = llama3_rope_factors(rope, head_dim=8)
    assert 1.0 < factors.min() < factors.max() == 8.0  # every frequency is scaled, one of them smoothly
    _same_attention(tmp_path, original, write_llama_gguf(tmp_path / "llama3.gguf", original,
                                                         extra={"rope_freqs.weight": factors}))


@pytest.mark.parametrize("arch", ["phi3", "starcoder2"])
def test_phi3_and_starcoder2_gguf_load_with_their_rope(tmp_path, arch):
    """transformers maps their fused tensors only under the causal LM's prefix: as bare models they were refused
    as incomplete; StarCoder2's rope.freq_base was not carried over (10,000 for the file's 999,999)."""
    import transformers

    base = dict(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                max_position_embeddings=64, bos_token_id=0, eos_token_id=0)
    fields = {"context_length": 64, "embedding_length": 32, "block_count": 2, "feed_forward_length": 48,
              "attention.head_count": 4}
    torch.manual_seed(0)
    if arch == "phi3":
        original = transformers.Phi3Model(transformers.Phi3Config(**base, rope_theta=100000.0, pad_token_id=0))
        fields.update({"attention.head_count_kv": 4, "rope.freq_base": 100000.0, "rope.dimension_count": 8,
                       "attention.layer_norm_rms_epsilon": 1e-5})
    else:
        original = transformers.Starcoder2Model(transformers.Starcoder2Config(
            **base, num_key_value_heads=2, rope_theta=999999.0, norm_epsilon=1e-5))
        fields.update({"attention.head_count_kv": 2, "rope.freq_base": 999999.0,
                       "attention.layer_norm_epsilon": 1e-5})
    original = _sharpened(original)
    loaded = _same_attention(tmp_path, original, write_plain_gguf(tmp_path / f"{arch}.gguf", original, fields))
    assert type(loaded) is type(original) and loaded.config.rope_parameters["rope_theta"] == fields["rope.freq_base"]


def test_qwen3_gguf_keeps_the_head_size_its_metadata_gives(tmp_path):
    """transformers' GGUF mapping drops Qwen3's attention.key_length, so its config kept the default head size
    (128) and a file with heads of 16 was refused as not matching its own metadata."""
    import transformers

    config = transformers.Qwen3Config(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                      num_attention_heads=4, num_key_value_heads=2, head_dim=16,
                                      max_position_embeddings=64, rms_norm_eps=1e-6, rope_theta=1000000.0,
                                      bos_token_id=0, eos_token_id=0)
    torch.manual_seed(0)
    original = _sharpened(transformers.Qwen3Model(config))
    fields = {"context_length": 64, "embedding_length": 32, "block_count": 2, "feed_forward_length": 48,
              "attention.head_count": 4, "attention.head_count_kv": 2, "attention.key_length": 16,
              "attention.value_length": 16, "rope.freq_base": 1000000.0, "attention.layer_norm_rms_epsilon": 1e-6}
    loaded = _same_attention(tmp_path, original, write_plain_gguf(tmp_path / "qwen3.gguf", original, fields))
    assert loaded.config.head_dim == 16


def test_a_head_size_transformers_maps_itself_is_left_to_it(tmp_path):
    """Gemma 4's attention.key_length is its global layers' head size, which transformers maps itself; reading the
    config's head_dim to replace it raised (a per-layer attribute), and every Gemma 4 file failed to load."""
    import gguf

    from core.checkpoints.gguf.load import _checked_config

    path = tmp_path / "gemma4.gguf"
    writer = gguf.GGUFWriter(str(path), "gemma4")
    for key, value in {"block_count": 2, "context_length": 128, "embedding_length": 64, "feed_forward_length": 96,
                       "attention.head_count": 4, "attention.head_count_kv": 1, "attention.sliding_window": 16,
                       "attention.key_length": 32, "attention.value_length": 32,  # the global layers' head size
                       "attention.key_length_swa": 16, "attention.value_length_swa": 16}.items():
        writer.add_uint32(f"gemma4.{key}", value)
    writer.add_float32("gemma4.attention.layer_norm_rms_epsilon", 1e-6)
    finish_gguf(writer, path)  # the header alone: the config is all this reads
    config = _checked_config(path, read_gguf_header(path), path.name, Limits())
    assert config.model_type == "gemma4_text"


def test_an_architecture_transformers_reads_through_its_newer_gguf_path_loads(tmp_path):
    """LFM2 is converted by transformers' integrations.gguf, which builds no tensor map to check against: the check
    for tensors without a place in the model had refused every one of its tensors."""
    import transformers

    config = transformers.Lfm2Config(vocab_size=300, hidden_size=32, intermediate_size=48, num_hidden_layers=2,
                                     num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                                     layer_types=["conv", "full_attention"], block_auto_adjust_ff_dim=False,
                                     conv_L_cache=3, rope_theta=1000000.0, bos_token_id=0, eos_token_id=0,
                                     pad_token_id=0)
    torch.manual_seed(0)
    original = _sharpened(transformers.Lfm2Model(config))
    _same_attention(tmp_path, original, write_lfm2_gguf(tmp_path / "lfm2.gguf", original))
    # a tensor that path renames but has no place for (an attention bias llama.cpp would read) was dropped
    biased = write_lfm2_gguf(tmp_path / "lfm2_bias.gguf", original, extra={"blk.1.attn_q.bias": np.ones(32, "f4")})
    with pytest.raises(CheckpointError, match=r"holds 1 tensor that .* no place for in a Lfm2Model "
                                              r"\(e\.g\. 'model\.layers\.1\.self_attn\.q_proj\.bias'\)"):
        core.load_model(biased)


def test_llama_gguf_keeps_grouped_query_heads(tmp_path):
    model, _ = core.load_model(write_llama_gguf(tmp_path / "llama.gguf"))
    assert (model.config.num_attention_heads, model.config.num_key_value_heads) == (4, 2)


@pytest.mark.parametrize("with_key", [True, False], ids=["head_count_kv", "no_head_count_kv"])
def test_llama_gguf_without_head_count_kv_has_the_same_attention(tmp_path, with_key):
    """head_count_kv is optional in GGUF (absent: one key/value head per query head); transformers then skipped
    un-permuting Q and K (max |difference| 0.20 with these sharpened weights)."""
    original = tiny_llama(kv_heads=4)
    with torch.no_grad():
        for layer in original.layers:  # sharper maps, so a wrong Q/K layout shows clearly
            layer.self_attn.q_proj.weight.mul_(6)
            layer.self_attn.k_proj.weight.mul_(6)
    path = write_llama_gguf(tmp_path / "mha.gguf", original, head_count_kv=with_key)
    assert ("llama.attention.head_count_kv" in read_gguf_header(path).fields) == with_key
    model, tokenizer = core.load_model(path)
    got = core.extract_attention(model, tokenizer, TEXT).attentions
    want = core.extract_attention(original, bpe_tokenizer(), TEXT).attentions
    torch.testing.assert_close(got, want, atol=1e-5, rtol=0)


def test_missing_head_count_kv_is_refused_when_transformers_cannot_be_told(tmp_path, monkeypatch):
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    monkeypatch.delitem(gguf_utils.TENSOR_PROCESSORS, "llama")
    path = write_llama_gguf(tmp_path / "mha.gguf", tiny_llama(kv_heads=4), head_count_kv=False)
    with pytest.raises(CheckpointError, match=r"^mha.gguf has no llama.attention.head_count_kv key, which this "):
        core.load_model(path)
    core.load_model(write_llama_gguf(tmp_path / "gqa.gguf"))  # a file with the key needs no help


def test_metadata_that_does_not_match_the_tensors_is_named_from_the_header(tmp_path, monkeypatch):
    path = write_llama_gguf(tmp_path / "heads8.gguf", head_count=8)  # the tensors have 4 heads of 8
    monkeypatch.setattr("transformers.AutoConfig.from_pretrained", lambda *a, **k: pytest.fail("reached transformers"))
    with pytest.raises(CheckpointError) as caught:
        core.load_model(path)
    assert str(caught.value).startswith(
        "heads8.gguf: tensor 'blk.0.attn_k.weight' has shape [32, 16] in the file, but the metadata implies [32, 8] "
        "(llama.embedding_length=32, llama.attention.head_count=8, llama.attention.head_count_kv=2); ")


def test_what_transformers_says_about_an_upload_never_shows_the_server_s_temp_folder(tmp_path, monkeypatch):
    """transformers names the file it failed on by its full path: an upload's is the server's private temp folder."""
    def fails(folder, gguf_file=None, **kwargs):
        raise OSError(f"It looks like the config file at '{folder}/{gguf_file}' is not a valid JSON file.")

    monkeypatch.setattr("transformers.AutoConfig.from_pretrained", fails)
    data = write_llama_gguf(tmp_path / "llama.gguf").read_bytes()
    with pytest.raises(CheckpointError) as caught:
        load_checkpoint([("my model.gguf", data)])
    message = str(caught.value)
    assert "config file at 'my model.gguf'" in message and "attnscope-upload" not in message, message


def test_tensors_past_the_block_count_or_off_the_alignment_are_refused(tmp_path):
    """block_count 1 over a file of two blocks loaded a 1-layer model, dropping blk.1 without a word; a tensor
    offset 4 bytes off the 32-byte alignment loaded with shifted Q weights."""
    import struct

    path = write_llama_gguf(tmp_path / "llama.gguf")
    header = check_gguf(path, Limits())
    header.fields["llama.block_count"] = 1
    with pytest.raises(CheckpointError, match=r"^llama.gguf: tensor 'blk.1.\w+.weight' belongs to block 1, but the "
                                              r"metadata's llama.block_count is 1"):
        shapes.check_tensor_shapes(header, path.name)
    data = bytearray(path.read_bytes())
    name = b"blk.0.attn_q.weight"
    dims_at = data.index(name) + len(name)  # then: n_dims u32, dims u64 each, type u32, offset u64
    offset_at = dims_at + 4 + 8 * struct.unpack_from("<I", data, dims_at)[0] + 4
    struct.pack_into("<Q", data, offset_at, struct.unpack_from("<Q", data, offset_at)[0] + 4)
    shifted = tmp_path / "shifted.gguf"
    shifted.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"^shifted.gguf: tensor 'blk.0.attn_q.weight' starts at offset [\d,]+, "
                                              r"not a multiple of general.alignment 32"):
        core.load_model(shifted)


def test_shape_mismatches_the_header_rules_miss_are_named_after_loading(tmp_path, monkeypatch):
    """Architectures outside LLAMA_LAYOUT (fused or per-layer projections) rely on transformers' own comparison,
    whose report quiet_transformers hides: the message names the parameter and both shapes instead."""
    monkeypatch.setattr(shapes, "LLAMA_LAYOUT", ())
    with pytest.raises(CheckpointError) as caught:
        core.load_model(write_llama_gguf(tmp_path / "heads8.gguf", head_count=8))
    assert str(caught.value).startswith(
        "heads8.gguf: its metadata describes a model whose layers.0.self_attn.o_proj.weight has shape [32, 64], "
        "but the file holds [32, 32]; ")  # transformers takes the head size from rope.dimension_count (8)


def test_shape_rules_accept_a_real_file_and_refuse_it_with_other_metadata():
    path = Path(registry.resolve_source("HuggingFaceTB/SmolLM2-135M-Instruct"))  # 9 heads of 64, 3 key/value heads
    header = check_gguf(path, Limits())
    header.fields["llama.attention.head_count_kv"] = 1
    with pytest.raises(CheckpointError, match=r"tensor 'blk.0.attn_k.weight' has shape \[576, 192\] in the file, "
                                              r"but the metadata implies \[576, 64\]"):
        shapes.check_tensor_shapes(header, path.name)


@pytest.mark.parametrize("prefix, limit", [("tokenizer.ggml.", gguf_header.MAX_TOKENIZER_ITEMS),
                                           ("general.", gguf_header.MAX_OTHER_ITEMS)])
def test_metadata_arrays_are_capped_by_total_items_per_group(tmp_path, prefix, limit):
    half = limit // 2  # two arrays: the cap is on their total
    fits = metadata_arrays(tmp_path / "fits.gguf", {f"{prefix}a": (U8_TYPE, half), f"{prefix}b": (U8_TYPE, half)})
    assert read_gguf_header(fits).fields[f"{prefix}b"] == ("array", half)
    over = metadata_arrays(tmp_path / "over.gguf", {f"{prefix}a": (U8_TYPE, half), f"{prefix}b": (U8_TYPE, half + 1)})
    with pytest.raises(CheckpointError, match=rf"^over.gguf: the metadata array '{prefix}b' brings the .* to "
                                              rf"{limit + 1:,} items, more than the {limit:,} a real model file"):
        read_gguf_header(over)


def test_long_tokenizer_arrays_do_not_count_against_the_other_arrays(tmp_path):
    path = metadata_arrays(tmp_path / "both.gguf", {"tokenizer.ggml.scores": (U8_TYPE, gguf_header.MAX_OTHER_ITEMS * 4),
                                                    "general.tags": (U8_TYPE, gguf_header.MAX_OTHER_ITEMS)})
    assert read_gguf_header(path).fields["general.tags"] == ("array", gguf_header.MAX_OTHER_ITEMS)


def test_an_amplifying_array_is_refused_before_transformers_reads_the_file(tmp_path, monkeypatch):
    import gguf

    n = gguf_header.MAX_TOKENIZER_ITEMS + 1  # empty strings, 8 bytes each in the file, ~1 KB each once parsed
    path = metadata_arrays(tmp_path / "amplify.gguf", {"tokenizer.ggml.junk": (STRING_TYPE, n)})
    monkeypatch.setattr(gguf, "GGUFReader", lambda *a, **k: pytest.fail("reached gguf.GGUFReader"))
    with pytest.raises(CheckpointError, match=rf"^amplify.gguf: .* arrays to {n:,} items"):
        core.load_model(path)


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



def test_the_progress_callback_s_own_exception_comes_through(tmp_path):
    """Raised while dequantising, it became "transformers could not build a model from gpt2.gguf", blaming a good
    file, and a caller's own except clause never ran (every other loading path lets it through)."""
    class StopRequested(Exception):
        pass

    def stop(fraction, message):
        if message.startswith("dequantising tensor 9/"):
            raise StopRequested("user pressed stop")
    with pytest.raises(StopRequested, match="^user pressed stop$"):
        core.load_model(write_gpt2_gguf(tmp_path / "gpt2.gguf"), progress=stop)

def test_gguf_s_name_map_is_built_once_a_load(tmp_path, monkeypatch):
    """transformers built gguf's name map of the whole model once per module (SmolLM2: 395 times, 5.5 s of a 10 s
    load); it is built once now, and gguf's own function is given back after the load."""
    import gguf

    path = write_llama_gguf(tmp_path / "tiny.gguf")
    built, name_map = [], gguf.get_tensor_name_map
    monkeypatch.setattr(gguf, "get_tensor_name_map", lambda *args: built.append(args) or name_map(*args))
    counting = gguf.get_tensor_name_map
    core.load_model(path)
    assert len(built) == 1 and gguf.get_tensor_name_map is counting


def test_a_stop_asked_while_dequantising_is_a_stop_not_a_broken_file(tmp_path):
    """Cancelled, raised by the progress callback between tensors, became "transformers could not build a model
    from gpt2.gguf (Cancelled: …); the GGUF may be from a newer llama.cpp"."""
    def stop(fraction, message):
        if message.startswith("dequantising tensor ") and not message.startswith("dequantising tensor 1/"):
            raise core.Cancelled("stopped: the session that asked for this work has ended")
    with pytest.raises(core.Cancelled, match="^stopped"):
        core.load_model(write_gpt2_gguf(tmp_path / "gpt2.gguf"), progress=stop)


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


def test_a_gguf_load_waiting_for_another_says_so_and_stops_when_told(tmp_path):
    """One GGUF load at a time (each holds a float32 copy); a second sat on "reading the GGUF metadata" for the
    first one's whole length, and a visitor who had gone could not stop it waiting."""
    from core.checkpoints.gguf import load as gguf_load

    path = write_gpt2_gguf(tmp_path / "tiny.gguf", tiny_gpt2(max_positions=1024))
    told = []

    def progress(fraction, message):
        told.append(message)
        if message.startswith("waiting"):
            raise core.Cancelled("the visitor left")

    with gguf_load._LOAD_LOCK:  # another load converts
        with pytest.raises(core.Cancelled):
            gguf_load.load_gguf(path, progress=progress)
    assert told[-1] == "waiting: another GGUF file is being converted, and they are converted one at a time"
    assert gguf_load.load_gguf(path)[0] is not None  # the lock is free again
