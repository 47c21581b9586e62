"""Tiny checkpoint fixtures for the app tests; the app may read the repository and pytest's temporary folders."""

import os
from pathlib import Path

import pytest

from tiny_checkpoints import save_markup_bert, save_tiny_bart, save_tiny_bert, zip_folder


@pytest.fixture(scope="session", autouse=True)
def allowed_roots(tmp_path_factory):
    """The fixtures below live under pytest's base temporary folder, outside the default roots (cwd, home)."""
    roots = os.pathsep.join([str(Path(__file__).resolve().parents[2]), str(tmp_path_factory.getbasetemp())])
    old = os.environ.get("ATTNSCOPE_ALLOWED_ROOTS")
    os.environ["ATTNSCOPE_ALLOWED_ROOTS"] = roots
    yield roots
    if old is None:
        os.environ.pop("ATTNSCOPE_ALLOWED_ROOTS")
    else:
        os.environ["ATTNSCOPE_ALLOWED_ROOTS"] = old


@pytest.fixture(scope="session")
def bert_folder(tmp_path_factory) -> Path:
    return save_tiny_bert(tmp_path_factory.mktemp("tiny-bert"))


@pytest.fixture(scope="session")
def bert_zip(bert_folder) -> bytes:
    return zip_folder(bert_folder)


@pytest.fixture(scope="session")
def bart_folder(tmp_path_factory) -> Path:
    return save_tiny_bart(tmp_path_factory.mktemp("tiny-bart"))


@pytest.fixture(scope="session")
def markup_folder(tmp_path_factory) -> Path:
    return save_markup_bert(tmp_path_factory.mktemp("markup-bert"))
