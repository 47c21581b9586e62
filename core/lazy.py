"""A package's public names, imported on first use (PEP 562), all of them at once.

``import core`` and ``import diagnostics`` then cost nothing: ``python -m diagnostics --help`` and a mistyped option
answer at once instead of after the seconds torch and transformers take to import. The first use of any public name
imports every one, under one lock for both packages: two threads that first used two names at once imported torch
and transformers side by side, and transformers' own lazy modules then failed ("cannot import name
'PretrainedConfig'"). The app imports both whole before any page runs (``import_whole``).
"""

import importlib
import sys
import threading

_FIRST_USE = threading.RLock()  # reentrant: importing one package's names may first-use the other's


def lazy_names(package: str, where: dict[str, str]):
    """A module ``__getattr__`` and ``__dir__`` for ``package``: each name of ``where`` comes from its module, given
    relative to ``package`` as ``".module"`` or ``".module:attribute"`` (a name it exports as another)."""
    def __getattr__(name):
        if name not in where:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        _import_every_name(package, where)
        return vars(sys.modules[package])[name]

    def __dir__():
        return sorted({*vars(sys.modules[package]), *where})

    return __getattr__, __dir__


def _import_every_name(package: str, where: dict[str, str]) -> None:
    namespace = vars(sys.modules[package])
    with _FIRST_USE:
        for name, place in where.items():
            if name not in namespace:
                module, _, attribute = place.partition(":")
                namespace[name] = getattr(importlib.import_module(module, package), attribute or name)


def import_whole(*packages) -> None:
    """Import every public name of ``packages`` now (the app, before its pages run in their threads)."""
    for package in packages:
        getattr(package, package.__all__[0])
