"""One sandbox for the tests that load checkpoints from disk: allowed roots, a private temp folder, no demo
tokenizers."""

import tempfile

from core.checkpoints import tokenizer as checkpoint_tokenizer


def loader_sandbox(tmp_path, monkeypatch, root=None, demo_tokenizers=False):
    """Generator for an autouse fixture (``yield from loader_sandbox(...)``).

    Local paths are allowed under ``root`` (default ``tmp_path``); temporary folders go under
    ``tmp_path/tmp``, which must be empty again after the test (the loader cleans up after itself);
    without ``demo_tokenizers`` a tokenizer-less checkpoint cannot fall back to a shipped demo tokenizer.
    """
    root = tmp_path if root is None else root
    root.mkdir(exist_ok=True)
    monkeypatch.setenv("ATTNSCOPE_ALLOWED_ROOTS", str(root))
    temp = tmp_path / "tmp"
    temp.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(temp))
    if not demo_tokenizers:
        monkeypatch.setattr(checkpoint_tokenizer, "DEMO_MODELS", {})
        checkpoint_tokenizer._demo_tokenizer.cache_clear()
    yield
    assert list(temp.iterdir()) == [], "the loader left files in its temporary folder"
