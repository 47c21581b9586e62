"""The models AttnScope knows by name: the demo models shipped in the repository.

A name resolves to a local folder, so a known model never touches the network.
"""

from __future__ import annotations

from pathlib import Path

from ..errors import ModelLoadError

DEMO_DIR = Path(__file__).resolve().parents[1] / "demo_models"
DEMO_MODELS = {"demo-bert": DEMO_DIR / "demo-bert", "demo-gpt2": DEMO_DIR / "demo-gpt2"}
DEFAULT_MODEL = "demo-bert"


def resolve_source(source: str | Path) -> str:
    """A demo name becomes its folder; anything else is returned as a string."""
    name = str(source).strip()
    if not name:
        raise ModelLoadError(f"no model given; choose a demo model ({', '.join(DEMO_MODELS)}) or a folder path")
    return str(DEMO_MODELS[name]) if name in DEMO_MODELS else name
