"""A package's public names, each imported from its module on first use (PEP 562).

``import core`` and ``import diagnostics`` then cost nothing: ``python -m diagnostics --help`` and a mistyped option
answer at once instead of after the seconds torch and transformers take to import.
"""

import importlib
import sys


def lazy_names(package: str, where: dict[str, str]):
    """A module ``__getattr__`` and ``__dir__`` for ``package``: each name of ``where`` is imported on first use from
    its module, given relative to ``package`` as ``".module"`` or ``".module:attribute"`` (a name it exports as
    another)."""
    def __getattr__(name):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        module, _, attribute = where[name].partition(":")
        value = getattr(importlib.import_module(module, package), attribute or name)
        vars(sys.modules[package])[name] = value  # found directly from now on
        return value

    def __dir__():
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__
