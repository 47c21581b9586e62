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


def save_splitting_bert(folder: Path, pattern: str) -> Path:
    """A tiny BERT whose tokenizer.json splits text on the regex ``pattern`` first (read as a plain fast tokenizer:
    transformers' BertTokenizer puts its own pre-tokenizer in place of the file's)."""
    import copy
    import json

    from tokenizers import Regex, pre_tokenizers

    tokenizer = copy.deepcopy(wordpiece_tokenizer())  # the cached one is shared by every test
    tokenizer.backend_tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(pattern), behavior="isolated")
    tiny_bert().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    settings["tokenizer_class"] = "PreTrainedTokenizerFast"
    (folder / "tokenizer_config.json").write_text(json.dumps(settings))
    return folder


# Past Oniguruma's retry limit on the default probes: the tokenizers library panics (a BaseException, not an Exception)
PANICKING_PATTERN = r"[\s\S]*[\s\S]*[\s\S]*[\s\S]*\d"


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
