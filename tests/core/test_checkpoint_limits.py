"""Caps and trust: config size caps, archive budgets by real size, allowed roots, the untrusted entry, cancellation."""

from __future__ import annotations

import gzip
import io
import json
import tarfile
import zipfile
from pathlib import Path, PurePosixPath
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import save
from transformers import CONFIG_MAPPING, AutoModel

import core
from core import CheckpointError, Limits, extract_attention, load_checkpoint, load_model, load_untrusted
from core.cancel import stop_between_layers, stoppable
from core.errors import Cancelled
from core.checkpoints import archive, build, checkpoint, untrusted
from core.checkpoints.checkpoint import OUTSIDE
from diagnostics import cli
from loader_sandbox import loader_sandbox
from tiny import tiny_bert, wordpiece_tokenizer

MB = 10**6


@pytest.fixture(autouse=True)
def private_temp(tmp_path, monkeypatch):
    """Roots: tmp_path/root only; temp folders under tmp_path/tmp (checked empty after); no demo tokenizers."""
    yield from loader_sandbox(tmp_path, monkeypatch, root=tmp_path / "root")


def bert_folder(folder: Path, **config_changes) -> Path:
    model = tiny_bert()
    model.save_pretrained(folder)
    wordpiece_tokenizer().save_pretrained(folder)
    if config_changes:
        config = json.loads((folder / "config.json").read_text())
        (folder / "config.json").write_text(json.dumps({**config, **config_changes}))
    return folder



class _FullDisk(io.FileIO):
    """A file on a disk with no room left: every write fails as the kernel says so."""

    def write(self, data):
        raise OSError(28, "No space left on device")


def test_a_full_temporary_folder_is_said_to_be_one(tmp_path, monkeypatch):
    """A full TMPDIR gave a raw OSError (exit 3, "internal error", the private folder's path), "not a readable zip
    archive", or "config.json cannot build a bert model (SafetensorError ... StorageFull)" for bare weights."""
    import shutil

    folder = bert_folder(tmp_path / "root" / "bert")
    zipped = Path(shutil.make_archive(str(tmp_path / "root" / "bert"), "zip", folder))
    bare = tmp_path / "root" / "bare.safetensors"
    bare.write_bytes((folder / "model.safetensors").read_bytes())
    no_room = r"^the temporary folder has no room for the checkpoint \({}\); free disk space there, or point TMPDIR"
    with monkeypatch.context() as full:
        full.setattr(archive.os, "fdopen", lambda fd, mode: _FullDisk(fd, "wb"))
        for source in (zipped, [("model.safetensors", bare.read_bytes()), ("config.json", "{}".encode())]):
            with pytest.raises(core.DiskFull, match=no_room.format("No space left on device")):
                load_checkpoint(source, n_heads=4)
    def copy_to_full_disk(*args):
        raise OSError(28, "No space left on device")
    with monkeypatch.context() as full:
        full.setattr(checkpoint.shutil, "copyfile", copy_to_full_disk)
        with pytest.raises(CheckpointError, match=no_room.format("No space left on device")):
            load_checkpoint(bare, n_heads=4)
    with monkeypatch.context() as full:
        full.setattr(archive.shutil, "disk_usage", lambda path: SimpleNamespace(free=1000))
        with pytest.raises(CheckpointError, match=no_room.format(r"\d[\d,]+ bytes to write, 1,000 free")):
            load_checkpoint(bare, n_heads=4)  # the rebuilt weights, checked before safetensors writes them

    def filled_since(*args):  # another writer took the room between the check and the write
        raise RuntimeError("Error while serializing: I/O error: No space left on device (os error 28)")
    with monkeypatch.context() as full:
        full.setattr(build, "save_file", filled_since)
        with pytest.raises(CheckpointError, match=no_room.format("No space left on device")):
            load_checkpoint(bare, n_heads=4)

# ---------------------------------------------------------------- config caps

BAD_VALUES = [-4, 0, 10**9, 12.5, "12", True]


@pytest.mark.parametrize("key", sorted(build._CAPPED_KEYS))
@pytest.mark.parametrize("value", BAD_VALUES, ids=[repr(v) for v in BAD_VALUES])
def test_every_capped_key_refuses_out_of_range_values(key, value):
    low, high = build._CAPPED_KEYS[key]
    if value == 0 and low == 0:
        build.check_model_config({"model_type": "bert", key: value})  # type_vocab_size 0 is DeBERTa-v2's
        return
    with pytest.raises(CheckpointError, match=rf"^config.json sets {key} to .*whole number from {low} to"):
        build.check_model_config({"model_type": "bert", key: value})
    nested = {"model_type": "encoder-decoder", "decoder": {"model_type": "bert", key: value}}
    with pytest.raises(CheckpointError, match=f"sets {key} to"):
        build.check_model_config(nested)


def test_decoder_and_cross_stack_keys_are_capped():
    for key in ("num_decoder_layers", "decoder_layers", "decoder_attention_heads", "decoder_ffn_dim",
                "num_key_value_heads", "n_layer", "n_head", "n_embd", "d_kv", "intermediate_size", "vocab_size"):
        assert key in build._CAPPED_KEYS, key


def test_depth_given_as_lists_or_a_multiplier_is_capped_in_all():
    """Each list within the cap, Funnel's block_sizes × block_repeats ([40] × [300]) ran 12,000 layers a forward;
    EfficientNet's depth_coefficient 300 built 103,812 tensors before anything was refused."""
    for config in ({"block_sizes": [40], "block_repeats": [300]}, {"depths": [600]}, {"depth_coefficient": 300},
                   {"attn_layers": ["local"] * 513}):
        with pytest.raises(CheckpointError, match="^config.json sets (block_sizes|depths|depth_coefficient|attn_l)"):
            build.check_model_config({"model_type": "funnel", **config})
    for config in ({"block_sizes": [4, 4, 4], "block_repeats": [1, 1, 1]}, {"depths": [3, 3, 27, 3]},
                   {"depth_coefficient": 3.1}, {"layer_types": ["full_attention"] * 12}):
        build.check_model_config({"model_type": "funnel", **config})


def test_the_tensor_cap_counts_every_shard_of_an_index(tmp_path, monkeypatch):
    """Each shard within the 100,000-tensor cap, an index over two of them wrote 120,037 tensors (the count is
    refused as soon as the shards read pass it)."""
    from core.checkpoints import state_dict

    monkeypatch.setattr(state_dict, "MAX_TORCH_RECORDS", 30)  # the tiny BERT's 37 tensors in shards of fewer
    folder = tmp_path / "root" / "bert"
    tiny_bert().save_pretrained(folder, max_shard_size="20KB")
    assert len(list(folder.glob("model-*.safetensors"))) > 1
    with pytest.raises(CheckpointError, match="index.json's shards holds 3[0-9] tensors; AttnScope reads at most 30"):
        load_checkpoint(folder)



def test_a_header_index_or_peeked_config_of_too_many_json_values_is_not_parsed(tmp_path, monkeypatch):
    """The JSON bound (``json_items``) holds for a safetensors header and a shard index too, and the layout's peek
    at a config.json skips one over it; the caps are lowered here to what a tiny BERT holds."""
    from core.checkpoints import layout, state_dict
    from core.checkpoints.json_items import json_items

    weights = save({"w": torch.zeros(1)}, metadata={str(i): "x" for i in range(100)})
    header = weights[8:8 + int.from_bytes(weights[:8], "little")]
    monkeypatch.setattr(state_dict, "MAX_DATA_ITEMS", json_items(header) - 1)
    with pytest.raises(CheckpointError, match=rf"^many.safetensors's header holds up to {json_items(header):,} JSON"):
        load_untrusted([("many.safetensors", weights)])
    folder = tmp_path / "root" / "bert"
    tiny_bert().save_pretrained(folder, max_shard_size="20KB")
    index = (folder / "model.safetensors.index.json").read_bytes()
    monkeypatch.setattr(state_dict, "MAX_DATA_ITEMS", json_items(index) - 1)
    with pytest.raises(CheckpointError, match=r"^model.safetensors.index.json holds up to [\d,]+ JSON keys"):
        load_checkpoint(folder)
    config = folder / "config.json"
    assert layout._names_model(config)
    monkeypatch.setattr(layout, "MAX_CONFIG_ITEMS", json_items(config.read_bytes()) - 1)
    assert not layout._names_model(config)

def test_a_safetensors_header_or_index_over_the_cap_is_not_parsed(tmp_path, monkeypatch):
    """Both are parsed whole, at up to ~15 times their size: a 97 MB header of 7 M metadata entries took 1.5 GB and
    21 s, a 149 MB index 1.8 GB, before either was refused for what it held."""
    from core.checkpoints import state_dict

    weights = save({"w": torch.zeros(1)}, metadata={str(i): "x" * 50 for i in range(100)})
    header = int.from_bytes(weights[:8], "little")
    monkeypatch.setattr(state_dict, "MAX_HEADER_BYTES", header - 1)
    parsed = []
    monkeypatch.setattr(state_dict, "json", SimpleNamespace(loads=lambda *a, **k: parsed.append(a)))
    with pytest.raises(CheckpointError, match=rf"^big.safetensors's header is {header:,} bytes, more than the "
                                              rf"{header - 1:,} AttnScope reads"):
        load_untrusted([("big.safetensors", weights)])
    folder = tmp_path / "root" / "bert"
    tiny_bert().save_pretrained(folder, max_shard_size="20KB")
    index = (folder / "model.safetensors.index.json").stat().st_size
    monkeypatch.setattr(state_dict, "MAX_HEADER_BYTES", index - 1)
    with pytest.raises(CheckpointError, match=rf"^model.safetensors.index.json's index is {index:,} bytes"):
        load_checkpoint(folder)
    assert not parsed
    monkeypatch.setattr(state_dict, "json", json)
    monkeypatch.setattr(state_dict, "MAX_HEADER_BYTES", 16 * 2**20)
    cut = weights[:8] + weights[8:40]  # a header within the cap that the file does not hold: truncated, as before
    with pytest.raises(CheckpointError, match=r"^cut.safetensors is truncated: its header says"):
        load_untrusted([("cut.safetensors", cut)])


@pytest.mark.parametrize("model_type", ["bert", "gpt2", "t5", "bart", "llama", "distilbert", "albert", "mistral",
                                        "opt", "whisper", "gpt_neox", "xlnet"])
def test_min_parameters_is_a_lower_bound(model_type):
    config = CONFIG_MAPPING[model_type]()
    with torch.device("meta"):
        skeleton = AutoModel.from_config(config)
    actual = sum(p.numel() for p in skeleton.parameters())
    assert 0 < build.min_parameters(config.to_dict()) <= actual


def test_a_big_config_is_refused_before_anything_is_built(tmp_path, monkeypatch):
    built = []
    monkeypatch.setattr(AutoModel, "from_config", lambda *a, **k: built.append(1))
    folder = bert_folder(tmp_path / "root" / "big", hidden_size=2048, num_attention_heads=16,
                         intermediate_size=8192, num_hidden_layers=24, vocab_size=50_000)
    with pytest.raises(CheckpointError, match="at least 1,.* parameters .* above the 2,000,000,000-byte model"):
        load_untrusted(str(folder))
    assert not built
    with pytest.raises(CheckpointError, match="above the 1,000-byte model limit"):
        load_checkpoint(bert_folder(tmp_path / "root" / "small"), limits=Limits(max_model_bytes=1000))


def test_buffers_count_towards_the_model_limit(monkeypatch):
    """GPT-Neo's causal mask is positions x positions bools: 4,000 positions are 16 MB beside 1,664 parameters."""
    config = {"model_type": "gpt_neo", "vocab_size": 16, "hidden_size": 8, "num_layers": 1, "num_heads": 2,
              "attention_types": [[["global"], 1]], "max_position_embeddings": 4000, "intermediate_size": 8}
    with torch.device("meta"):
        skeleton = AutoModel.from_config(CONFIG_MAPPING["gpt_neo"](**config))
    weights = save({k: torch.zeros(v.shape) for k, v in skeleton.state_dict().items()})
    built = []
    monkeypatch.setattr(AutoModel, "from_pretrained", lambda *a, **k: built.append(1))
    upload = [("neo.zip", _zip({"m/config.json": json.dumps(config).encode(), "m/model.safetensors": weights}))]
    with pytest.raises(CheckpointError, match=r"takes 16 MB with its buffers \(the largest, h.0.attn.attention.bias, "
                                              r"is \[1, 1, 4000, 4000\]: 16 MB\), above the 10,000,000-byte"):
        load_untrusted(upload, limits=Limits(max_model_bytes=10 * MB))
    assert not built


def test_weights_too_few_for_the_config_are_refused_before_the_model_is_built(monkeypatch):
    """936 bytes of upload (one 1-number tensor and a 24-layer BERT config) built the whole model, +1.3 GB, before
    its missing tensors were noticed; the AttnScope format likewise. Now nothing is built."""
    config = dict(tiny_bert().config.to_dict(), hidden_size=1024, num_hidden_layers=24, num_attention_heads=16,
                  intermediate_size=4096, vocab_size=30522)
    custom = {"model_type": "attnscope", "vocab_size": 30522, "d_model": 768, "n_heads": 12, "n_layers": 12,
              "d_ff": 3072, "max_positions": 512, "causal": False}
    built = []
    monkeypatch.setattr(AutoModel, "from_pretrained", lambda *a, **k: built.append(1))
    monkeypatch.setattr(build, "AttnScopeTransformer", lambda *a, **k: built.append(1))
    weights = save({"foo": torch.zeros(1)})
    with pytest.raises(CheckpointError, match=r"^the weights do not match config.json: 389 of the model's 391 tensors "
                                              r"are missing from the weights \(e.g. embeddings.LayerNorm.bias\)"):
        load_untrusted([("config.json", json.dumps(config).encode()), ("model.safetensors", weights)])
    with pytest.raises(CheckpointError, match=r"^the weights do not match config.json: the model it describes has "
                                              r"108,890,112 parameters, more than the weights hold \(1\)"):
        load_untrusted([("config.json", json.dumps(custom).encode()), ("model.safetensors", weights)])
    assert not built


def test_weights_renamed_on_loading_are_not_refused_for_their_names():
    """Only a shortfall in numbers refuses weights before loading: names transformers maps itself (a BERT's
    LayerNorm ``gamma``/``beta``) are its business, and the check after loading still names what is missing."""
    model = tiny_bert()
    state = {k.replace("LayerNorm.weight", "LayerNorm.gamma"): v.contiguous() for k, v in model.state_dict().items()}
    build._check_present(_meta_bert(model.config), state)  # as many numbers as parameters: not refused here
    del state["embeddings.word_embeddings.weight"]
    with pytest.raises(CheckpointError, match=r"tensors are missing from the weights \(e.g. embeddings.LayerNorm"):
        build._check_present(_meta_bert(model.config), state)


def _meta_bert(config):
    with torch.device("meta"):
        return AutoModel.from_config(config)


@pytest.mark.parametrize("dtype, loaded", [("float64", torch.float32), ("float16", torch.float32),
                                           ("bfloat16", torch.bfloat16), (None, torch.float32)])
def test_a_model_loads_in_at_most_four_bytes_a_parameter_and_never_in_float16(dtype, loaded, tmp_path, monkeypatch):
    """The model limit counts 4 bytes a parameter: "dtype": "float64" in config.json built twice the limit. float16
    overflows eager attention's scores (below). A folder given to core.load_model took whatever transformers chose:
    float64, float16, or the weights' own dtype."""
    model = tiny_bert()
    config = {k: v for k, v in model.config.to_dict().items() if k not in ("dtype", "torch_dtype")}
    config.update({"dtype": dtype} if dtype else {})
    weights = save({k: v.contiguous().half() for k, v in model.state_dict().items()})
    loaded_model = load_untrusted([("config.json", json.dumps(config).encode()), ("model.safetensors", weights)]).model
    assert {p.dtype for p in loaded_model.parameters()} == {loaded}
    (tmp_path / "config.json").write_text(json.dumps(config))
    (tmp_path / "model.safetensors").write_bytes(weights)
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    folder_model, _ = load_model(str(tmp_path))
    assert {p.dtype for p in folder_model.parameters()} == {loaded}


def test_a_float16_checkpoint_with_large_scores_is_read_finite():
    """Eager attention computes q·kᵀ in the model's dtype: float16 overflows past 65,504 to inf and NaN. A float16
    MiniLM with Q/K x 24 showed 61 of 72 heads non-finite ("non_finite_attention") instead of saturated."""
    model = tiny_bert()
    with torch.no_grad():
        for layer in model.encoder.layer:
            for proj in (layer.attention.self.query, layer.attention.self.key):
                proj.weight.mul_(3000.0)
    config = {**model.config.to_dict(), "dtype": "float16"}
    weights = save({k: v.contiguous().half() for k, v in model.state_dict().items()})
    loaded = load_untrusted([("config.json", json.dumps(config).encode()), ("model.safetensors", weights)])
    attentions = extract_attention(loaded.model, loaded.tokenizer or wordpiece_tokenizer(), "the cat sat").attentions
    assert torch.isfinite(attentions).all()
    assert attentions.amax(-1).mean() > 0.9  # saturated: one key takes each row


def test_labels_and_config_files_are_capped_by_what_they_cost():
    """transformers builds an id2label entry per label: num_labels 1,000,000 took 5-12 s and +0.6 GB from 80 kB."""
    with pytest.raises(CheckpointError, match=r"^config.json sets num_labels to 1000000; .* from 0 to 65,536"):
        build.check_model_config({"model_type": "bert", "num_labels": 10**6})
    labels = {str(i): "x" for i in range(build.MAX_LABELS + 1)}
    with pytest.raises(CheckpointError, match=r"^config.json lists 65,537 labels in id2label; at most 65,536"):
        build.check_model_config({"model_type": "bert", "id2label": labels})
    build.check_model_config({"model_type": "bert", "num_labels": 21_843, "id2label": {"0": "a", "1": "b"}})
    big = json.dumps({"model_type": "bert", "pad": " " * checkpoint.MAX_CONFIG_BYTES}).encode()
    with pytest.raises(CheckpointError, match=r"^config.json is 16,000,0\d\d bytes, more than the 16,000,000"):
        load_untrusted([("m.zip", _zip({"m/config.json": big, "m/model.safetensors": save({"w": torch.zeros(1)})}))])


def test_a_pipe_or_device_path_is_one_line_not_a_hang(tmp_path):
    """A named pipe blocked the read for ever (archives) or escaped as shutil's own error (weights files)."""
    import os

    for name in ("m.zip", "w.safetensors", "m.tar.gz", "x.gguf"):
        os.mkfifo(tmp_path / "root" / name)
        with pytest.raises(CheckpointError, match=r"is not a folder or a plain file \(a pipe, socket or device\)"):
            load_untrusted(str(tmp_path / "root" / name))
    with pytest.raises(CheckpointError, match="is not a folder or a plain file"):
        load_checkpoint("/dev/zero", allowed_roots=["/dev"])  # a device never ends


def test_the_trusted_path_checks_config_sizes_too(tmp_path, capsys):
    """The CLI trusts its user's paths, but a broken config is still one line and exit 2, not a crash (3)."""
    folder = bert_folder(tmp_path / "root" / "neg", num_attention_heads=-4)
    with pytest.raises(CheckpointError, match="sets num_attention_heads to -4"):
        core.load_model(str(folder))
    assert cli.main([str(folder), "--quiet"]) == 2
    assert "num_attention_heads to -4" in capsys.readouterr().err


@pytest.mark.parametrize("value", ["9" * 5000, "[" * 100_000 + "]" * 100_000], ids=["huge-number", "deep"])
def test_a_config_json_refuses_to_parse_in_one_line_on_the_trusted_path(tmp_path, capsys, value):
    folder = bert_folder(tmp_path / "root" / "odd")
    (folder / "config.json").write_text((folder / "config.json").read_text().rstrip()[:-1] + f', "x": {value}}}')
    with pytest.raises(core.ModelLoadError, match=r"config.json is not valid JSON \((ValueError|RecursionError): "):
        core.load_model(str(folder))
    assert cli.main([str(folder), "--quiet"]) == 2  # exit 3, "internal error", before
    assert "is not valid JSON" in capsys.readouterr().err


# ---------------------------------------------------------------- archives: budgets by real size

def _zip(entries: dict[str, bytes], method=zipfile.ZIP_DEFLATED) -> bytes:
    buffer = io.BytesIO()
    with zipfile.ZipFile(buffer, "w", method) as z:
        for name, data in entries.items():
            z.writestr(name, data)
    return buffer.getvalue()


def test_unpacked_budget_derives_from_the_model_cap():
    limits = Limits(max_model_bytes=10 * MB)
    assert limits.max_total_bytes == 10 * MB + archive.EXTRA_FILES_BYTES
    assert Limits(max_model_bytes=10 * MB, max_total_bytes=5 * MB).max_total_bytes == 5 * MB
    assert limits.unpack_budget(1 * MB) == archive.RATIO_FLOOR_BYTES  # the floor for small archives
    assert limits.unpack_budget(50 * MB) == limits.max_total_bytes  # the cap for large ones
    assert limits.unpack_budget(5 * MB) == 100 * MB  # 20 times the archive in between


def test_a_zip_expanding_beyond_a_tiny_budget_is_refused_before_writing(tmp_path, monkeypatch):
    monkeypatch.setattr(archive, "RATIO_FLOOR_BYTES", 1000)
    bomb = tmp_path / "bomb.zip"
    bomb.write_bytes(_zip({"model.safetensors": bytes(200_000)}))  # 200 kB of zeros: ~200 bytes packed
    written, write = [], archive._Writer.write

    def recording_write(self, rel, *args):
        written.append(rel.name)
        return write(self, rel, *args)

    monkeypatch.setattr(archive._Writer, "write", recording_write)
    with pytest.raises(CheckpointError, match=r"over 20 times its own .* bytes; .*zip bomb"):
        load_untrusted([("bomb.zip", bomb.read_bytes())])
    assert written == ["bomb.zip"]  # the upload itself; not one byte of what it holds


def test_real_bytes_are_counted_and_stop_at_the_budget(tmp_path):
    """An entry that streams more than it declared stops the moment the total passes the budget."""
    limits = Limits(max_total_bytes=3 * archive.CHUNK)
    writer = archive._Writer("liar.zip", tmp_path, limits)
    writer.declare(10)

    class Endless:
        """Bytes without end, up to a bound: a writer that stops counting fails the test, not the disk."""
        given = 0

        def read(self, size):
            self.given += size
            assert self.given <= 4 * limits.max_total_bytes, "the writer read on past its budget"
            return b"\0" * size

    with pytest.raises(CheckpointError, match="would unpack to more than 3,145,728 bytes"):
        writer.write(PurePosixPath("model.bin"), Endless(), 10)
    assert (tmp_path / "model.bin").stat().st_size <= limits.max_total_bytes


def test_a_zip_whose_header_lies_about_sizes_is_refused(tmp_path, monkeypatch):
    """The central directory says 10 bytes; the data inflates to 5 MB: zipfile hands over only the 10 declared
    bytes, whose CRC is not the entry's, so the archive is refused unread past them."""
    data = bytearray(_zip({"model.safetensors": bytes(5 * MB)}))
    central = data.rindex(b"PK\x01\x02")
    data[central + 24:central + 28] = (10).to_bytes(4, "little")  # uncompressed size
    local = data.index(b"PK\x03\x04")
    data[local + 22:local + 26] = (10).to_bytes(4, "little")
    (tmp_path / "root" / "liar.zip").write_bytes(bytes(data))
    given, write = [], archive._Writer.write

    class Counted:
        def __init__(self, stream):
            self.stream = stream

        def read(self, size):
            chunk = self.stream.read(size)
            given.append(len(chunk))
            return chunk

    monkeypatch.setattr(archive._Writer, "write", lambda self, rel, stream, n: write(self, rel, Counted(stream), n))
    with pytest.raises(CheckpointError, match=r"^liar.zip is not a readable zip archive \(BadZipFile: Bad CRC"):
        load_untrusted(str(tmp_path / "root" / "liar.zip"))
    assert sum(given) <= 10


def test_a_tar_header_record_declaring_megabytes_is_refused_before_it_is_read(tmp_path):
    """tarfile reads a GNU long-name record whole: 8 MB of it (compressing to ~8 kB) is refused unread."""
    record = tarfile.TarInfo("././@LongLink")
    record.type, record.size = tarfile.GNUTYPE_LONGNAME, 8 * MB
    bomb = tmp_path / "root" / "long.tar.gz"
    with gzip.open(bomb, "wb") as packed:
        packed.write(record.tobuf(format=tarfile.GNU_FORMAT) + b"a" * record.size + bytes(1024))
    reads = []
    original = gzip.GzipFile.read
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(gzip.GzipFile, "read", lambda self, size=-1: reads.append(size) or original(self, size))
        with pytest.raises(CheckpointError, match=r"^long.tar.gz contains .*header record of 8,000,000 bytes"):
            load_untrusted(str(bomb))
    assert max(reads) < MB


def test_a_zip_directory_of_many_entries_is_refused_from_its_end_record(tmp_path, monkeypatch):
    """The count comes from the end record, before ZipFile builds an entry per directory record."""
    many = tmp_path / "root" / "many.zip"
    many.write_bytes(_zip({f"f{i}": b"" for i in range(50)}))
    parsed = []
    monkeypatch.setattr(zipfile, "ZipFile", lambda *a, **k: parsed.append(1))
    with pytest.raises(CheckpointError, match="many.zip holds more than 20 entries"):
        load_untrusted(str(many), limits=Limits(max_entries=20))
    assert not parsed


@pytest.mark.parametrize("name, why", [("model\x00.bin", "a NUL byte"), ("m" * 256 + ".bin", "longer than 255 bytes"),
                                       ("é" * 128 + ".bin", "longer than 255 bytes")])
def test_upload_names_a_file_system_cannot_hold_get_one_line(tmp_path, name, why):
    with pytest.raises(CheckpointError, match=f"^the upload contains .*{why}") as caught:
        load_untrusted([(name, b"data"), ("config.json", b"{}")])
    assert str(tmp_path) not in str(caught.value) and "\n" not in str(caught.value)


def test_a_zip_entry_name_too_long_is_refused_without_the_temp_path(tmp_path):
    long = tmp_path / "root" / "long.zip"
    long.write_bytes(_zip({"folder/" + "x" * 300: b"1"}))
    with pytest.raises(CheckpointError, match="^long.zip contains .*longer than 255 bytes") as caught:
        load_untrusted(str(long))
    assert str(tmp_path / "tmp") not in str(caught.value)


def test_two_archives_in_one_upload_are_named():
    one = _zip({"a.txt": b"a"})
    with pytest.raises(CheckpointError, match=r"^the upload holds 2 archives \(a.zip, b.zip\); upload one"):
        load_untrusted([("a.zip", one), ("b.zip", one)])


def test_uploads_may_be_file_objects(tmp_path):
    folder = bert_folder(tmp_path / "root" / "bert")
    files = [(p.name, io.BytesIO(p.read_bytes())) for p in sorted(folder.iterdir())]
    assert load_untrusted(files).architecture == "bert"


# ---------------------------------------------------------------- allowed roots

def _refusal(source) -> str:
    with pytest.raises(CheckpointError) as caught:
        load_untrusted(source)
    return str(caught.value)


def test_outside_the_roots_one_message_whether_or_not_the_path_exists(tmp_path):
    root = tmp_path / "root"
    (root / "escape").symlink_to("/etc")
    (root / "loop").symlink_to(root / "loop")
    (root / "dangling").symlink_to("/nonexistent-attnscope")
    cases = ["/etc", "/etc/passwd", "/nonexistent-attnscope", "/root/.ssh", str(root / "escape"),
             str(root / "escape" / "passwd"), str(root / "dangling"), str(root / ".." / "tmp")]
    for path in cases:
        assert _refusal(path) == OUTSIDE.format(path=path, env="ATTNSCOPE_ALLOWED_ROOTS"), path
    assert str(root) not in _refusal("/etc")  # the roots are not revealed either
    assert "outside" in _refusal(str(root / "loop")) or "does not exist" in _refusal(str(root / "loop"))


def test_tilde_expands_the_same_way_everywhere(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "root"))
    bert_folder(tmp_path / "root" / "bert")
    assert load_untrusted("~/bert").architecture == "bert"
    assert core.load_model("~/bert")[0].config.model_type == "bert"
    assert load_checkpoint("~/bert").architecture == "bert"
    assert _refusal("~nobody-attnscope/x").startswith("~nobody-attnscope/x is outside")


def test_typed_paths_urls_and_entry_names_are_one_short_line_in_messages(tmp_path):
    """A 5,000-character path, a zip entry path and a 4,000-digit safetensors offset were echoed whole; a newline
    in a typed name split the message; a URL was read as a path ("http:/127.0.0.1:9/x.zip is outside …")."""
    messages = []
    for source in ["/" + "a" * 5000, "org/na\nme", "http://127.0.0.1:9/x.zip", "HF://org/model"]:
        with pytest.raises(CheckpointError) as caught:
            load_untrusted(source)
        messages.append(str(caught.value))
    assert messages[2].startswith("http://127.0.0.1:9/x.zip is a web address; the app never downloads")
    assert messages[3].startswith("HF://org/model is a web address")
    header = b'{"a":{"dtype":"F32","shape":[1],"data_offsets":[0,' + b"9" * 4000 + b"]}}"
    with pytest.raises(CheckpointError) as caught:
        load_untrusted([("big.safetensors", len(header).to_bytes(8, "little") + header + bytes(4))])
    messages.append(str(caught.value))
    assert messages[-1] == ("big.safetensors is not a safetensors file (its data_offsets are not byte positions); "
                            "give the file written by save_file / save_pretrained")
    with pytest.raises(CheckpointError) as caught:
        load_untrusted([("x.zip", _zip({"m/config.json": b"{}", "m/" + "/".join(["a" * 200] * 25) + "/../x": b""}))])
    messages.append(str(caught.value))
    root = tmp_path / "root"
    (root / "a\nb").mkdir(parents=True)
    (root / "a\nb" / "notes.txt").write_text("no model here")
    for source in [str(root / "a\nb"), "/" + "a" * 5000 + "\x00"]:
        with pytest.raises(CheckpointError) as caught:
            load_untrusted(source)
        messages.append(str(caught.value))
    assert messages[-2].startswith("'a\\nb' holds no model") and "NUL byte" in messages[-1]
    (root / "w\n.safetensors").write_bytes(b"junk!")
    for source in [str(root / "w\n.safetensors"), [("w\n.safetensors", b"junk!")], [str(root / "a\nb")]]:
        with pytest.raises(CheckpointError) as caught:
            load_untrusted(source)
        messages.append(str(caught.value))
    assert messages[-3] == "'w\\n.safetensors' has a control character in its name; rename the file"
    assert messages[-2] == ("the upload contains 'w\\n.safetensors', a name with a control character; an archive of "
                            "a model folder holds only plain files and folders")
    assert all(len(m) < 500 and "\n" not in m for m in messages), [len(m) for m in messages]


def test_an_archive_entry_with_a_control_character_is_skipped(tmp_path):
    """macOS writes a folder's custom icon as "Icon\\r"; no model file is named so, and the rest still loads."""
    folder = bert_folder(tmp_path / "m")
    entries = {f"m/{p.name}": p.read_bytes() for p in folder.iterdir()} | {"m/Icon\r": b"", "m/a\nb.json": b"{"}
    assert load_untrusted([("m.zip", _zip(entries))]).model is not None
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for name, data in entries.items():
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    assert load_untrusted([("m.tar.gz", buffer.getvalue())]).model is not None
    in_folder = {name.replace("m/", "run\t1/"): data for name, data in entries.items()}  # a folder so named: refused
    with pytest.raises(CheckpointError, match=r"^m.zip contains 'run\\t1/[a-z_.]+', a name with a control character"):
        load_untrusted([("m.zip", _zip(in_folder))])


def test_a_skipped_tar_member_counts_against_the_budget(tmp_path, monkeypatch):
    """tarfile inflates a skipped member's data to seek past it: 10 GB of zeros named "Icon\\r" in a 15 MB .tar.gz
    held a server thread for 68 s and loaded, uncounted; 100 MB per 100 kB packed, so 2 GB took hours."""
    monkeypatch.setattr(archive, "RATIO_FLOOR_BYTES", 1000)
    folder = bert_folder(tmp_path / "m")
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w:gz") as tar:
        for path in folder.iterdir():
            tar.add(path, f"m/{path.name}")
        skipped = tarfile.TarInfo("m/Icon\r")
        skipped.size = 50 * MB  # zeros: ~50 kB packed
        tar.addfile(skipped, io.BytesIO(bytes(skipped.size)))
    with pytest.raises(CheckpointError, match=r"over 20 times its own .* bytes; .*zip bomb"):
        load_untrusted([("m.tar.gz", buffer.getvalue())])


def _gnu_sparse_header(extensions: int) -> bytes:
    """A GNU sparse member's header ('S') followed by ``extensions`` extension blocks, each saying another follows."""
    header = bytearray(tarfile.TarInfo("m/weights.bin").tobuf(tarfile.GNU_FORMAT)[:512])
    header[156:157], header[482] = b"S", 1  # sparse; an extension block follows
    header[148:156] = b" " * 8
    header[148:156] = b"%06o\0 " % sum(header)
    extension = bytearray(512)
    extension[0:24] = b"%011o\0%011o\0" % (1, 1)
    extension[504] = 1  # and another
    return bytes(header) + bytes(extension) * extensions


def test_sparse_tar_members_are_refused_before_their_map_is_read(tmp_path):
    """tarfile reads a GNU sparse header's extension blocks while each says another follows, into a list, before
    the member is counted: 2.2 MB of gzip took 23 s and 3.9 GB. A PAX 1.0 sparse map is read from the data alike."""
    gnu = gzip.compress(_gnu_sparse_header(2000) + bytes(1024))
    with pytest.raises(CheckpointError, match=r"^m.tar.gz contains 'm/weights.bin', a sparse file; an archive of a "
                                              r"model folder holds none$"):
        load_untrusted([("m.tar.gz", gnu)])
    buffer = io.BytesIO()
    with tarfile.open(fileobj=buffer, mode="w", format=tarfile.PAX_FORMAT) as tar:
        info = tarfile.TarInfo("m/GNUSparseFile.0/weights.bin")
        info.pax_headers = {"GNU.sparse.major": "1", "GNU.sparse.minor": "0", "GNU.sparse.name": "m/weights.bin",
                            "GNU.sparse.realsize": "10"}
        info.size = 512
        tar.addfile(info, io.BytesIO(b"99999999999\n" + bytes(500)))  # the map says 99,999,999,999 pieces
    with pytest.raises(CheckpointError, match=r"a sparse file; an archive of a model folder holds none$"):
        load_untrusted([("m.tar", buffer.getvalue())])


def test_pax_global_headers_are_bounded_in_all_and_git_archive_s_one_loads(tmp_path):
    """tarfile keeps every global header and copies them into each later member: 200 of 4,500 keys each (2.1 MB of
    gzip) took 14 s and 3.3 GB before a member was counted, 400 ran out of 12 GB."""
    folder = bert_folder(tmp_path / "m")

    def archive(global_headers: list[dict]) -> bytes:
        buffer = io.BytesIO()
        with tarfile.open(fileobj=buffer, mode="w:gz", format=tarfile.PAX_FORMAT) as tar:
            for path in folder.iterdir():
                for headers in global_headers:  # one before each member
                    info = tarfile.TarInfo("pax_global_header")
                    info.type, data = tarfile.XGLTYPE, tarfile.TarInfo._create_pax_generic_header(
                        headers, tarfile.XGLTYPE, "utf-8")
                    tar.fileobj.write(data)
                tar.add(path, f"m/{path.name}")
        return buffer.getvalue()

    git = [{"comment": "0123456789abcdef0123456789abcdef01234567"}]  # git archive's (written once there)
    assert load_untrusted([("git.tar.gz", archive(git))]).model is not None
    many = [{f"k{i}": "v" * 10 for i in range(200)}]  # ~3 kB each: the second past 4 kB in all
    with pytest.raises(CheckpointError, match=r"^many.tar.gz contains global header records of [\d,]+ bytes or more "
                                              r"in all; an archive of a model folder has short headers$"):
        load_untrusted([("many.tar.gz", archive(many))])


def test_a_folder_inside_whose_file_links_outside_is_refused(tmp_path):
    folder = bert_folder(tmp_path / "root" / "bert")
    (folder / "tokenizer.json").unlink()
    (folder / "tokenizer.json").symlink_to("/etc/passwd")
    assert "tokenizer.json is outside the folders" in _refusal(str(folder))


@pytest.mark.parametrize("target", ["/etc/passwd", "/nonexistent-attnscope", "/etc"])
def test_a_link_out_of_a_folder_inside_is_refused_alike_wherever_it_leads(tmp_path, target):
    """Links under a folder were followed before the roots were checked: one to a file outside was counted ("notes
    holds no model … among its 1 files"), one to nothing was not ("0 files"), one to a folder was dropped; and a
    refusal named the link's absolute path."""
    folder = tmp_path / "root" / "notes"
    (folder / "deep").mkdir(parents=True)
    (folder / "deep" / "config.json").symlink_to(target)
    assert _refusal(str(folder)) == OUTSIDE.format(path="notes/deep/config.json", env="ATTNSCOPE_ALLOWED_ROOTS")


def test_a_link_named_like_a_resource_fork_is_checked_too(tmp_path):
    """Names starting with "._" (macOS resource forks) were left out of the check, but the loader lists the model
    folder whole: a link "._m.safetensors" to a file outside was opened and parsed."""
    outside = bert_folder(tmp_path / "outside" / "bert")
    folder = bert_folder(tmp_path / "root" / "bert")
    (folder / "model.safetensors").unlink()
    (folder / "._model.safetensors").symlink_to(outside / "model.safetensors")
    assert _refusal(str(folder)) == OUTSIDE.format(path="bert/._model.safetensors", env="ATTNSCOPE_ALLOWED_ROOTS")


def test_links_to_folders_and_resource_forks_are_no_files_to_count(tmp_path):
    """A link to a folder is no file: counted, a folder of exactly the limit's files was "more than" it."""
    folder = bert_folder(tmp_path / "root" / "bert")
    (folder / "more").symlink_to(tmp_path / "root")
    (folder / "._config.json").write_text("{}")
    files = len([p for p in folder.iterdir() if p.is_file() and not p.name.startswith("._")])
    assert load_checkpoint(str(folder), limits=Limits(max_entries=files)).architecture == "bert"


# ---------------------------------------------------------------- the untrusted entry: names and Hub ids

def test_known_names_load_as_part_of_the_installation(monkeypatch):
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", "/nonexistent-attnscope")  # demo models need no root
    loaded = load_untrusted("demo-bert")
    assert loaded.architecture == "bert" and loaded.tokenizer is not None


def _fake_hub_cache(cache: Path, repo: str, folder: Path) -> None:
    """The layout huggingface_hub writes: blobs, a snapshot of links to them, and refs/main."""
    entry = cache / f"models--{repo.replace('/', '--')}"
    snapshot = entry / "snapshots" / ("0" * 40)
    snapshot.mkdir(parents=True)
    (entry / "blobs").mkdir()
    for i, file in enumerate(sorted(folder.iterdir())):
        blob = entry / "blobs" / f"blob{i}"
        blob.write_bytes(file.read_bytes())
        (snapshot / file.name).symlink_to(Path("..") / ".." / "blobs" / blob.name)
    (entry / "refs").mkdir()
    (entry / "refs" / "main").write_text("0" * 40)


def test_hub_ids_load_only_from_the_local_cache(tmp_path, monkeypatch):
    from huggingface_hub import constants

    cache = tmp_path / "hub"
    monkeypatch.setattr(constants, "HF_HUB_CACHE", str(cache))
    folder = bert_folder(tmp_path / "src", auto_map={"AutoModel": "modeling_evil.EvilModel"})
    (folder / "modeling_evil.py").write_text("raise SystemExit('remote code ran')")
    _fake_hub_cache(cache, "someone/tiny-bert", folder)
    called = []
    monkeypatch.setattr(untrusted, "load_model", lambda *a, **k: called.append(a))  # never the online loader
    loaded = load_untrusted("someone/tiny-bert")
    assert loaded.architecture == "bert" and not called
    assert any("auto_map" in note for note in loaded.notes)  # custom code ignored, never run
    message = _refusal("someone/not-cached")
    assert "not a model this server knows" in message and "never downloads" in message


# ---------------------------------------------------------------- cancellation

class StopAfter:
    """``should_stop`` that turns true on its ``n``-th call, counting the calls."""

    def __init__(self, n):
        self.n, self.calls = n, 0

    def __call__(self):
        self.calls += 1
        return self.calls >= self.n


def test_stop_between_layers_raises_before_the_next_layer_and_removes_its_hooks():
    model, tokenizer = tiny_bert(), wordpiece_tokenizer()
    stop = StopAfter(2)
    with pytest.raises(Cancelled, match="stopped"):
        with stop_between_layers(model, stop):
            core.extract_attention(model, tokenizer, "the cat sat")
    assert stop.calls == 2  # the second layer never ran
    result = core.extract_attention(model, tokenizer, "the cat sat")  # hooks gone: runs to the end
    assert result.attentions.shape[0] == model.config.num_hidden_layers


def test_diagnosis_stops_between_probes():
    from core.errors import Cancelled
    from diagnostics.diagnose import diagnose

    model, tokenizer = tiny_bert(), wordpiece_tokenizer()
    seen = []
    stop = StopAfter(3)
    with pytest.raises(Cancelled):
        diagnose((model, tokenizer), ["one probe", "two probe", "three probe"],
                 progress=stoppable(lambda f, m: seen.append(m), stop))
    assert seen == ["probe 1/3", "probe 2/3"]  # a model given loaded was said to be "loading"


def test_a_comparison_reports_each_model_s_probes_and_stops_between_them():
    from diagnostics.compare import compare

    model, tokenizer = tiny_bert(), wordpiece_tokenizer()
    seen = []
    stop = StopAfter(3)  # probe 1/2, probe 2/2, then stop
    with pytest.raises(Cancelled):
        compare((model, tokenizer), (tiny_bert(), tokenizer), ["one probe", "two probe"],
                progress=stoppable(lambda f, m: seen.append((round(f, 3), m)), stop))
    assert [m for _, m in seen] == ["model A: probe 1/2", "model A: probe 2/2"]  # no "loading" of loaded models
    assert [f for f, _ in seen] == sorted(f for f, _ in seen)  # the bar only moves forward


def test_safetensors_weights_from_a_file_object_round_trip(tmp_path):
    state = {k: v.contiguous() for k, v in tiny_bert().state_dict().items()}
    files = [("bert.safetensors", io.BytesIO(save(state)))]
    loaded = load_untrusted(files, n_heads=4)
    assert loaded.architecture == "bert"


def test_a_refused_tilde_path_is_echoed_as_typed(tmp_path, monkeypatch):
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert _refusal("~/secret").startswith("~/secret is outside")  # the home folder's path is not shown


def test_the_cli_reads_archives_outside_the_roots(tmp_path):
    """The local user is trusted (load_model); the same archive is refused to a server user (load_untrusted)."""
    import shutil

    folder = bert_folder(tmp_path / "outside" / "bert")
    archive = shutil.make_archive(str(tmp_path / "outside" / "bert"), "zip", folder)
    assert core.load_model(archive)[0].config.model_type == "bert"
    assert "is outside the folders" in _refusal(archive)


def test_a_folder_read_in_place_is_capped_before_its_weights_are_read(tmp_path, monkeypatch):
    from core.checkpoints import checkpoint

    read = []
    monkeypatch.setattr(checkpoint, "read_state_dict", lambda path: read.append(path))
    folder = bert_folder(tmp_path / "root" / "bert")
    with pytest.raises(CheckpointError, match=r"holds [\d,]+ bytes of weights, more than the 1,000-byte limit"):
        load_checkpoint(folder, limits=Limits(max_total_bytes=1000))
    big = bert_folder(tmp_path / "root" / "big", hidden_size=2048, num_attention_heads=16, intermediate_size=8192,
                      num_hidden_layers=24, vocab_size=50_000)
    with pytest.raises(CheckpointError, match="at least"):
        load_untrusted(str(big))
    assert not read
