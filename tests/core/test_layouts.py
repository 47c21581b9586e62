"""Standard model folder layouts load as folders, zips and tarballs; only real ambiguity is refused.

sentence-transformers folders (modules.json, 1_Pooling/, 2_Normalize/, 2_Dense/ with its own config and weights),
Hub cache snapshots (models--org--name/snapshots/<hash>/, refs/main) and repositories with README,
.gitattributes and onnx/ exports.
"""

from __future__ import annotations

import json
import os
import shutil
import tarfile
import tempfile
import zipfile
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import core
from core import CheckpointError, load_checkpoint
from tiny import tiny_bert, wordpiece_tokenizer

TEXT = "The quick brown fox jumps over the lazy dog."
SNAPSHOT = "0123456789abcdef0123456789abcdef01234567"


@pytest.fixture(autouse=True)
def allowed(tmp_path, monkeypatch):
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(tmp_path))
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path))


def model_files(folder: Path) -> Path:
    tiny_bert().save_pretrained(folder)
    wordpiece_tokenizer().save_pretrained(folder)
    return folder


def sentence_transformers_folder(folder: Path) -> Path:
    """The layout of sentence-transformers/all-MiniLM-L6-v2 (plus a Dense layer and an ONNX export)."""
    model_files(folder)
    (folder / "modules.json").write_text(json.dumps([
        {"idx": 0, "name": "0", "path": "", "type": "sentence_transformers.models.Transformer"},
        {"idx": 1, "name": "1", "path": "1_Pooling", "type": "sentence_transformers.models.Pooling"},
        {"idx": 2, "name": "2", "path": "2_Dense", "type": "sentence_transformers.models.Dense"},
        {"idx": 3, "name": "3", "path": "2_Normalize", "type": "sentence_transformers.models.Normalize"}]))
    (folder / "1_Pooling").mkdir()
    (folder / "1_Pooling" / "config.json").write_text(json.dumps({"word_embedding_dimension": 32,
                                                                   "pooling_mode_mean_tokens": True}))
    (folder / "2_Normalize").mkdir()
    (folder / "2_Dense").mkdir()
    (folder / "2_Dense" / "config.json").write_text(json.dumps({"in_features": 32, "out_features": 16}))
    save_file({"linear.weight": torch.zeros(16, 32)}, str(folder / "2_Dense" / "model.safetensors"))
    (folder / "onnx").mkdir()
    (folder / "onnx" / "model.onnx").write_bytes(b"\x08\x07" * 64)
    (folder / "README.md").write_text("# a sentence-transformers model")
    (folder / ".gitattributes").write_text("*.safetensors filter=lfs diff=lfs merge=lfs -text\n")
    (folder / "config_sentence_transformers.json").write_text("{}")
    return folder


def hub_cache(root: Path, snapshots=(SNAPSHOT,), ref: str | None = SNAPSHOT, links: bool = False) -> Path:
    """models--org--name/{blobs,refs,snapshots/<hash>/} as huggingface_hub writes it (files or links into blobs)."""
    repo = root / "models--org--tiny-bert"
    staged = model_files(root / "staged")
    for name in snapshots:
        (repo / "snapshots" / name).mkdir(parents=True)
        for file in staged.iterdir():
            blob = repo / "blobs" / f"{abs(hash(file.name)):x}"
            blob.parent.mkdir(exist_ok=True)
            shutil.copyfile(file, blob)
            target = repo / "snapshots" / name / file.name
            if links:
                target.symlink_to(os.path.relpath(blob, target.parent))
            else:
                shutil.copyfile(file, target)
    if ref:
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(ref)
    shutil.rmtree(staged)
    return repo


def archive(folder: Path, path: Path) -> Path:
    files = sorted(p for p in folder.rglob("*") if p.is_file())
    if path.suffix == ".zip":
        with zipfile.ZipFile(path, "w") as out:
            for file in files:
                out.write(file, str(file.relative_to(folder.parent)))
    else:
        with tarfile.open(path, "w:gz") as out:
            for file in files:
                out.add(file, str(file.relative_to(folder.parent)))
    return path


def assert_tiny_bert(loaded) -> None:
    want = core.extract_attention(tiny_bert(), wordpiece_tokenizer(), TEXT).attentions
    got = core.extract_attention(loaded.model, loaded.tokenizer, TEXT).attentions
    torch.testing.assert_close(got, want)


@pytest.mark.parametrize("container", ["folder", ".zip", ".tar.gz"])
def test_sentence_transformers_folder(tmp_path, container):
    folder = sentence_transformers_folder(tmp_path / "all-tiny-v2")
    source = folder if container == "folder" else archive(folder, tmp_path / f"upload{container}")
    assert_tiny_bert(load_checkpoint(source))


@pytest.mark.parametrize("container", ["folder", ".zip", ".tar.gz"])
def test_hub_snapshot_layout(tmp_path, container):
    repo = hub_cache(tmp_path / "hub", links=container == "folder")
    source = repo if container == "folder" else archive(repo, tmp_path / f"cache{container}")
    assert_tiny_bert(load_checkpoint(source))


def test_load_model_finds_the_snapshot_in_a_cache_folder(tmp_path):
    model, tokenizer = core.load_model(hub_cache(tmp_path / "hub", links=True))
    assert type(model).__name__ == "BertModel" and tokenizer is not None


def test_refs_main_picks_one_of_several_snapshots(tmp_path):
    other = "f" * 40
    repo = hub_cache(tmp_path / "hub", snapshots=(other, SNAPSHOT), ref=SNAPSHOT)
    assert_tiny_bert(load_checkpoint(archive(repo, tmp_path / "cache.zip")))


def test_several_snapshots_without_a_ref_are_ambiguous(tmp_path):
    repo = hub_cache(tmp_path / "hub", snapshots=("a" * 40, "b" * 40), ref=None)
    with pytest.raises(CheckpointError, match=r"cache.zip holds several model folders \(models--org--tiny-bert/"
                                              r"snapshots/a{40}/, models--org--tiny-bert/snapshots/b{40}/\)"):
        load_checkpoint(archive(repo, tmp_path / "cache.zip"))


def test_two_models_side_by_side_are_ambiguous(tmp_path):
    both = tmp_path / "both"
    model_files(both / "first")
    model_files(both / "second")
    with pytest.raises(CheckpointError, match=r"holds several model folders \(both/first/, both/second/\)"):
        load_checkpoint(archive(both, tmp_path / "two.zip"))


def test_local_folder_with_too_many_files_says_so(tmp_path):
    crowded = tmp_path / "crowded"
    crowded.mkdir()
    for i in range(30):
        (crowded / f"note{i}.txt").write_text("x")
    with pytest.raises(CheckpointError, match="holds more than 20 files"):
        load_checkpoint(crowded, limits=core.Limits(max_entries=20))
