"""Tiny checkpoint fixtures for the app tests."""

from pathlib import Path

import pytest

from tiny_checkpoints import save_markup_bert, save_tiny_bart, save_tiny_bert, zip_folder


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
