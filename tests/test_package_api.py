"""The public names of ``core`` and ``diagnostics``: imported on first use, the same objects as before."""

import os
import subprocess
import sys
import types
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def run_python(code: str) -> str:
    run = subprocess.run([sys.executable, "-c", code], cwd=ROOT, env={**os.environ, "PYTHONPATH": str(ROOT)},
                         capture_output=True, text=True, timeout=120)
    assert run.returncode == 0, run.stderr
    return run.stdout.strip()


def test_importing_the_packages_imports_no_torch():
    """``import core, diagnostics`` took seconds (torch, transformers) before anything was used."""
    assert run_python("import sys, core, diagnostics; print(sorted({'torch', 'transformers'} & set(sys.modules)))") \
        == "[]"


def test_diagnose_and_compare_stay_the_functions_after_their_modules_import():
    """The modules ``diagnostics.diagnose`` and ``diagnostics.compare`` share the functions' names; importing a
    module first must not turn ``from diagnostics import diagnose`` into the module."""
    code = ("import types\nfrom diagnostics.diagnose import measure\nfrom diagnostics.compare import HeadChange\n"
            "from diagnostics import compare, diagnose\nimport diagnostics\n"
            "print(all(callable(f) and not isinstance(f, types.ModuleType) for f in (diagnose, compare)),"
            " diagnostics.diagnose is diagnose, diagnose.__module__, compare.__module__)")
    assert run_python(code) == "True True diagnostics.diagnose diagnostics.compare"


@pytest.mark.parametrize("package", ["core", "diagnostics"])
def test_every_public_name_resolves_to_its_modules_object(package):
    module = __import__(package)
    for name in module.__all__:
        value = getattr(module, name)
        assert not isinstance(value, types.ModuleType), name
        assert name in dir(module)
    namespace = {}
    exec(f"from {package} import *", namespace)
    assert set(module.__all__) <= set(namespace)
    with pytest.raises(AttributeError, match="has no attribute 'nonexistent'"):
        module.nonexistent


def test_the_exported_objects_are_their_modules():
    import core
    import diagnostics
    from core.checkpoints.registry import describe
    from core.extraction.extract import extract_attention
    from diagnostics.reports.report import Report

    assert (core.describe_model, core.extract_attention, diagnostics.Report) == (describe, extract_attention, Report)


def test_two_threads_first_using_names_at_once_both_get_them():
    """Two threads that first used ``core.extract_attention`` and ``diagnostics.classify_head`` at once imported
    torch and transformers side by side, and one failed ("cannot import name 'PretrainedConfig' from
    'transformers'"): the app's pages run in threads (stop-51 review)."""
    code = """
import sys, threading
import core, diagnostics
errors, barrier = [], threading.Barrier(2)

def use(package, names):
    barrier.wait()
    try:
        for name in names:
            getattr(package, name)
    except Exception as err:
        errors.append(f"{type(err).__name__}: {err}")

threads = [threading.Thread(target=use, args=(core, ["extract_attention", "load_model"])),
           threading.Thread(target=use, args=(diagnostics, ["classify_head", "head_metrics"]))]
[t.start() for t in threads]
[t.join() for t in threads]
print(errors)
"""
    assert run_python(code) == "[]"
