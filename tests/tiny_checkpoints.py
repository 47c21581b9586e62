"""A tiny BERT checkpoint on disk and as a zip, for the app and browser tests (nothing downloaded)."""

import io
import zipfile
from pathlib import Path

from tiny import markup_tokenizer, tiny_bert, wordpiece_tokenizer


def save_tiny_bert(folder: Path) -> Path:
    tiny_bert().save_pretrained(folder)
    wordpiece_tokenizer().save_pretrained(folder)
    return folder


def save_markup_bert(folder: Path) -> Path:
    """A tiny BERT whose tokenizer's pieces are markup (``tiny.MARKUP_TOKENS``; join them with ``|``)."""
    tiny_bert().save_pretrained(folder)
    markup_tokenizer().save_pretrained(folder)
    return folder


def zip_folder(folder: Path, prefix: str = "tiny-bert") -> bytes:
    buf = io.BytesIO()
    with zipfile.ZipFile(buf, "w") as zf:
        for path in sorted(folder.iterdir()):
            zf.write(path, f"{prefix}/{path.name}")
    return buf.getvalue()


def save_tiny_bart(folder: Path) -> Path:
    """An encoder-decoder (BART) with the word-piece tokenizer: both have 200 ids."""
    from tiny import tiny_bart

    tiny_bart().save_pretrained(folder)
    wordpiece_tokenizer().save_pretrained(folder)
    return folder
