"""Tiny checkpoint fixtures for the browser tests."""

import pytest

from tiny_checkpoints import save_tiny_bert, zip_folder


@pytest.fixture(scope="session")
def bert_zip(tmp_path_factory) -> bytes:
    return zip_folder(save_tiny_bert(tmp_path_factory.mktemp("tiny-bert")))
