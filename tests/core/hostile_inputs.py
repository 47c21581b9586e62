"""Builders of bad and hostile checkpoint files, one per row of docs/checkpoints.md's table.

Each builder writes one file into a folder and returns its path. ``BAD_INPUTS``
maps the table's row id to its builder; ``table_rows()`` reads the expected
messages from the docs, so the docs table is the single source of truth.
"""

from __future__ import annotations

import io
import json
import os
import random
import tarfile
import zipfile
from pathlib import Path

import torch
from safetensors.torch import save, save_file

from hostile_gguf import GGUF_BAD_INPUTS
from tiny import tiny_bert, tiny_gpt2

DOCS = Path(__file__).resolve().parents[2] / "docs" / "checkpoints.md"
MARKER = "attnscope-pwned"  # the file a hostile pickle would create next to itself


class _RunsCode:
    """Pickles as a call of ``func(*args)``: what a malicious .pt file does on load."""

    def __init__(self, func, *args):
        self.func, self.args = func, args

    def __reduce__(self):
        return self.func, self.args


def _state(model) -> dict:
    return {k: v.contiguous() for k, v in model.state_dict().items()}


def _zip(path: Path, entries: dict) -> Path:
    with zipfile.ZipFile(path, "w") as archive:
        for name, data in entries.items():
            archive.writestr(name, data)
    return path


def _tar(path: Path, members: list[tuple[tarfile.TarInfo, bytes | None]]) -> Path:
    with tarfile.open(path, "w:gz") as archive:
        for info, data in members:
            archive.addfile(info, io.BytesIO(data) if data is not None else None)
    return path


def _info(name: str, kind=tarfile.REGTYPE, size: int = 0, link: str = "") -> tarfile.TarInfo:
    info = tarfile.TarInfo(name)
    info.type, info.size, info.linkname = kind, size, link
    return info


def _folder_zip(path: Path, config: dict, weights: bytes) -> Path:
    return _zip(path, {"model/config.json": json.dumps(config), "model/model.safetensors": weights})


def _bert_config(**changes) -> dict:
    config = tiny_bert().config.to_dict()
    config.update(changes)
    return config


def empty_file(d: Path) -> Path:
    (d / "empty.safetensors").write_bytes(b"")
    return d / "empty.safetensors"


def random_safetensors(d: Path) -> Path:
    (d / "random.safetensors").write_bytes(random.Random(0).randbytes(4096))
    return d / "random.safetensors"


def random_bin(d: Path) -> Path:
    (d / "random.bin").write_bytes(random.Random(1).randbytes(4096))
    return d / "random.bin"


def truncated_safetensors(d: Path) -> Path:
    data = save(_state(tiny_bert()))
    (d / "truncated.safetensors").write_bytes(data[: len(data) // 2])
    return d / "truncated.safetensors"


def pickle_os_system(d: Path) -> Path:
    torch.save({"w": _RunsCode(os.system, f"touch {d / MARKER}")}, d / "evil.pt")
    return d / "evil.pt"


def pickle_open(d: Path) -> Path:
    torch.save({"w": _RunsCode(open, str(d / MARKER), "w")}, d / "evil_open.pth")
    return d / "evil_open.pth"


def legacy_pickle(d: Path) -> Path:
    """A BERT state dict in torch.save's pre-1.6 format, whose storages torch.load allocates at the size the pickle
    declares before reading any data (and leaves unfilled when the file does not list them)."""
    torch.save(_state(tiny_bert()), d / "old.bin", _use_new_zipfile_serialization=False)
    return d / "old.bin"


def pickle_not_state_dict(d: Path) -> Path:
    torch.save([torch.zeros(2)], d / "list.pt")
    return d / "list.pt"


def pickle_deflated(d: Path) -> Path:
    """A torch.save file whose records are re-packed with deflate: 1 MB of zeros that torch.load would inflate."""
    buffer = io.BytesIO()
    torch.save({"w": torch.zeros(2**18)}, buffer)
    with zipfile.ZipFile(buffer) as plain, zipfile.ZipFile(d / "deflated.pt", "w", zipfile.ZIP_DEFLATED) as packed:
        for name in plain.namelist():
            packed.writestr(name, plain.read(name))
    return d / "deflated.pt"


def config_not_model(d: Path) -> Path:
    return _folder_zip(d / "not_a_model.zip", {"name": "my tokenizer", "lowercase": True}, save(_state(tiny_bert())))


def config_not_json(d: Path) -> Path:
    weights = save(_state(tiny_bert()))
    return _zip(d / "bad_json.zip", {"config.json": "{model_type: bert", "model.safetensors": weights})


def config_huge_number(d: Path) -> Path:
    """A 5,000-digit number: json.loads refuses it with a plain ValueError (Python's int-conversion limit)."""
    config = json.dumps(_bert_config())[:-1] + ', "x": ' + "9" * 5000 + "}"
    return _zip(d / "huge_number.zip", {"config.json": config, "model.safetensors": save(_state(tiny_bert()))})


def config_deep_nesting(d: Path) -> Path:
    """100,000 nested lists: json.loads runs out of recursion depth."""
    config = json.dumps(_bert_config())[:-1] + ', "x": ' + "[" * 100_000 + "]" * 100_000 + "}"
    return _zip(d / "deep.zip", {"config.json": config, "model.safetensors": save(_state(tiny_bert()))})


def config_many_values(d: Path) -> Path:
    """A BERT config.json with 600,000 empty objects besides (1.8 MB): parsed and carried onto the model's config,
    16 MB of them (96 kB zipped) had taken 1.9 GB."""
    config = json.dumps(_bert_config())[:-1] + ', "junk": [' + ",".join(["{}"] * 600_000) + "]}"
    return _zip(d / "many_values.zip", {"config.json": config, "model.safetensors": save(_state(tiny_bert()))})


def shape_mismatch(d: Path) -> Path:
    return _folder_zip(d / "mismatch.zip", _bert_config(intermediate_size=40), save(_state(tiny_bert())))


def wrong_family(d: Path) -> Path:
    return _folder_zip(d / "wrong_family.zip", _bert_config(), save(_state(tiny_gpt2())))


def unsupported_architecture(d: Path) -> Path:
    config = _bert_config(model_type="evilformer", auto_map={"AutoModel": "modeling_evil.EvilModel"})
    weights = save(_state(tiny_bert()))
    return _zip(d / "unsupported.zip", {"config.json": json.dumps(config), "model.safetensors": weights,
                                        "modeling_evil.py": f"open({MARKER!r}, 'w')"})


def unknown_state_dict(d: Path) -> Path:
    save_file({"conv1.weight": torch.zeros(4, 3, 3, 3), "fc.weight": torch.zeros(10, 4)}, d / "resnet.safetensors")
    return d / "resnet.safetensors"


def state_dict_without_heads(d: Path) -> Path:
    save_file(_state(tiny_bert()), d / "bert.safetensors")
    return d / "bert.safetensors"


def zip_without_model(d: Path) -> Path:
    return _zip(d / "no_model.zip", {"README.md": "# my model", "notes/train.log": "loss 1.0"})


def zip_config_without_weights(d: Path) -> Path:
    return _zip(d / "config_only.zip", {"config.json": json.dumps(_bert_config())})


def zip_traversal(d: Path) -> Path:
    return _zip(d / "traversal.zip", {"../evil": "x", "config.json": "{}"})


def zip_file_and_folder(d: Path) -> Path:
    """``m`` is a file and ``m/config.json`` wants it to be a folder: the message named the server's temp folder."""
    return _zip(d / "file_and_folder.zip", {"m": "x", "m/config.json": "{}"})


def zip_absolute(d: Path) -> Path:
    return _zip(d / "absolute.zip", {"/tmp/attnscope-evil": "x"})


def zip_many_entries(d: Path) -> Path:
    return _zip(d / "many.zip", {f"f{i}.txt": "" for i in range(1001)})


def zip_huge_declared(d: Path) -> Path:
    """A 10-byte entry whose central directory claims 4,294,967,280 bytes (zip bomb by declaration)."""
    data = bytearray(_zip(d / "bomb.zip", {"weights.bin": "0123456789"}).read_bytes())
    central = data.rindex(b"PK\x01\x02")
    data[central + 24:central + 28] = (0xFFFFFFF0).to_bytes(4, "little")
    (d / "bomb.zip").write_bytes(bytes(data))
    return d / "bomb.zip"


def tar_symlink(d: Path) -> Path:
    return _tar(d / "symlink.tar.gz", [(_info("model.safetensors", tarfile.SYMTYPE, link="/etc/passwd"), None)])


def tar_hardlink(d: Path) -> Path:
    return _tar(d / "hardlink.tar.gz", [(_info("config.json", tarfile.LNKTYPE, link="/etc/passwd"), None)])


def tar_device(d: Path) -> Path:
    return _tar(d / "device.tar.gz", [(_info("model.bin", tarfile.CHRTYPE), None)])


def tar_traversal(d: Path) -> Path:
    return _tar(d / "traversal.tar.gz", [(_info("model/../../evil.txt", size=1), b"x")])


def tar_garbage(d: Path) -> Path:
    (d / "garbage.tar.gz").write_bytes(random.Random(2).randbytes(2048))
    return d / "garbage.tar.gz"


def several_weight_files(d: Path) -> Path:
    state = save(_state(tiny_bert()))
    return _zip(d / "two_models.zip", {"a.safetensors": state, "b.safetensors": state})


def _weights() -> bytes:
    return save(_state(tiny_bert()))


def config_negative_heads(d: Path) -> Path:
    return _folder_zip(d / "negative_heads.zip", _bert_config(num_attention_heads=-4), _weights())


def config_zero_layers(d: Path) -> Path:
    return _folder_zip(d / "zero_layers.zip", _bert_config(num_hidden_layers=0), _weights())


def config_fractional_width(d: Path) -> Path:
    return _folder_zip(d / "fractional.zip", _bert_config(hidden_size=31.5), _weights())


def t5_decoder_layers(d: Path) -> Path:
    """A T5 config whose decoder stack alone asks for 100,000 layers (the encoder is small)."""
    config = {"model_type": "t5", "d_model": 32, "d_kv": 8, "d_ff": 37, "num_layers": 2,
              "num_decoder_layers": 100_000, "num_heads": 4, "vocab_size": 99}
    return _folder_zip(d / "t5_decoder.zip", config, _weights())


def nested_zero_heads(d: Path) -> Path:
    """An encoder-decoder config whose nested decoder config has 0 heads."""
    config = {"model_type": "encoder-decoder", "encoder": _bert_config(),
              "decoder": _bert_config(num_attention_heads=0, is_decoder=True)}
    return _folder_zip(d / "nested.zip", config, _weights())


def tar_long_header(d: Path) -> Path:
    """A GNU long-name record declaring 1 GB (tarfile would read it whole); the archive holds its header only."""
    return _tar(d / "long_header.tar.gz", [(_info("././@LongLink", tarfile.GNUTYPE_LONGNAME, size=10**9), None)])


def config_too_big(d: Path) -> Path:
    """A BERT config of 1.3 billion parameters and tiny weights: refused before anything is built."""
    config = _bert_config(hidden_size=2048, num_attention_heads=16, intermediate_size=8192, num_hidden_layers=24,
                          vocab_size=50_000)
    return _folder_zip(d / "huge_config.zip", config, _weights())


def pickle_expanded_view(d: Path) -> Path:
    """A stride-0 expand of one stored number: 300,000,000 weights from a 2 kB file (written out: 1.2 GB)."""
    torch.save({**_state(tiny_bert()), "junk": torch.zeros(1).expand(300_000_000)}, d / "expanded.pt")
    return d / "expanded.pt"


def pickle_sparse_tensor(d: Path) -> Path:
    state = _state(tiny_bert())
    state["embeddings.word_embeddings.weight"] = state["embeddings.word_embeddings.weight"].to_sparse()
    torch.save(state, d / "sparse.pt")
    return d / "sparse.pt"


def pickle_meta_tensor(d: Path) -> Path:
    """A tensor on the meta device: a shape without numbers (10^12 of them, were they allocated)."""
    torch.save({**_state(tiny_bert()), "junk": torch.empty(10**12, device="meta")}, d / "meta.pt")
    return d / "meta.pt"


def pickle_many_views(d: Path) -> Path:
    """1,100 whole views of one 4 MB tensor beside a BERT's weights: each is written out again, 4.6 GB in all."""
    stored = torch.zeros(2**20)
    state = {**_state(tiny_bert()), **{f"junk.{i}": stored[:] for i in range(1100)}}
    return _zip(d / "views.zip", {"config.json": json.dumps(_bert_config()), "pytorch_model.bin": _saved(state)})


def _saved(state: dict) -> bytes:
    buffer = io.BytesIO()
    torch.save(state, buffer)
    return buffer.getvalue()


def safetensors_many_tensors(d: Path) -> Path:
    """100,001 empty tensors, one more than read: the parser builds each (200,000 took +450 MB) though the file
    holds no numbers."""
    save_file({f"t{i}": torch.zeros(0) for i in range(100_001)}, d / "many.safetensors")
    return d / "many.safetensors"


def config_depth_list(d: Path) -> Path:
    """ConvNeXt-style depths: one stage of 20,000 layers from a 163-byte config (46 s to build on the meta device)."""
    config = {"model_type": "convnext", "depths": [20_000], "hidden_sizes": [8], "num_stages": 1}
    return _folder_zip(d / "depths.zip", config, _weights())


def config_uneven_kv_heads(d: Path) -> Path:
    """4 query heads over 3 key/value heads: the model loads, then fails on its first forward."""
    config = {"model_type": "llama", "vocab_size": 99, "hidden_size": 32, "intermediate_size": 37,
              "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 3}
    return _folder_zip(d / "uneven_kv.zip", config, _weights())


def config_quantized(d: Path) -> Path:
    """A BERT whose config.json asks for mxfp4 quantization: where Triton is installed, transformers fetched kernels
    from the Hub to load it, whatever the model type."""
    return _folder_zip(d / "mxfp4.zip", _bert_config(quantization_config={"quant_method": "mxfp4"}), _weights())


def config_not_text(d: Path) -> Path:
    """A ViT (patch embeddings, no token ids): an AttributeError; a Wav2Vec2, a NotImplementedError."""
    config = {"model_type": "vit", "hidden_size": 32, "num_hidden_layers": 1, "num_attention_heads": 2,
              "intermediate_size": 37, "image_size": 28, "patch_size": 14}
    return _folder_zip(d / "vit.zip", config, _weights())


def bare_vector_embeddings(d: Path) -> Path:
    """A bare BERT state dict whose word embeddings are a vector: the architecture is read from their shape."""
    state = _state(tiny_bert())
    state["embeddings.word_embeddings.weight"] = torch.zeros(10)
    save_file(state, d / "vector.safetensors")
    return d / "vector.safetensors"


def int8_codes_state() -> dict:
    """A BERT state dict quantized as bitsandbytes saves it: int8 codes in its Q and K ``weight``s, their scales
    beside them (``SCB``)."""
    state = _state(tiny_bert())
    for key in [k for k in state if k.endswith(("query.weight", "key.weight"))]:
        scale = state[key].abs().amax(1)  # (rows,)
        state[key] = (state[key] / scale[:, None] * 127).round().to(torch.int8)
        state[key.removesuffix("weight") + "SCB"] = scale
    return state


def pickle_int8_codes(d: Path) -> Path:
    """A BERT folder whose weights are int8 codes (``int8_codes_state``): the codes were cast to weights of up to
    ±127 and the scales dropped, without a word."""
    return _zip(d / "int8.zip", {"model/config.json": json.dumps(_bert_config()),
                                 "model/pytorch_model.bin": _saved(int8_codes_state())})


BAD_INPUTS = {f.__name__.replace("_", "-"): f for f in [
    empty_file, random_safetensors, random_bin, truncated_safetensors, pickle_os_system, pickle_open, legacy_pickle,
    pickle_not_state_dict, pickle_deflated, tar_long_header, config_not_model, config_not_json, config_huge_number,
    config_deep_nesting, config_many_values, shape_mismatch, wrong_family, unsupported_architecture, unknown_state_dict,
    state_dict_without_heads, zip_without_model, zip_config_without_weights, zip_traversal, zip_file_and_folder,
    zip_absolute, zip_many_entries, zip_huge_declared, tar_symlink, tar_hardlink, tar_device, tar_traversal,
    tar_garbage, several_weight_files, config_negative_heads, config_zero_layers, config_fractional_width,
    t5_decoder_layers, nested_zero_heads, config_too_big, pickle_expanded_view, pickle_sparse_tensor,
    pickle_meta_tensor, pickle_many_views, safetensors_many_tensors, config_depth_list, config_uneven_kv_heads,
    bare_vector_embeddings, config_quantized, config_not_text, pickle_int8_codes,
]}
BAD_INPUTS.update(GGUF_BAD_INPUTS)  # the gguf-* rows


def table_rows() -> list[tuple[str, str]]:
    """(row id, exact message) for every row of the bad-input table in docs/checkpoints.md."""
    rows = []
    for line in DOCS.read_text(encoding="utf-8").splitlines():
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) == 3 and cells[0].startswith("`") and cells[2].startswith("`"):
            rows.append((cells[0].strip("`"), cells[2][1:-1]))
    return rows
