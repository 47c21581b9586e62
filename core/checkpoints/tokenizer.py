"""Choose the tokenizer for a loaded checkpoint: its own, a demo model's, or none (with the reason).

Only data files of known names are passed to ``AutoTokenizer`` (never a
``tokenization_*.py``). Without tokenizer files, a demo model's tokenizer is
borrowed when its vocabulary size equals the model's embedding rows — the
only compatibility the weights can show; the note says so.
"""

from __future__ import annotations

import copy
import json
import shutil
from functools import lru_cache
from pathlib import Path

from transformers import AutoTokenizer
from transformers.models.auto.tokenization_auto import tokenizer_class_from_name
from transformers.tokenization_utils_base import VERY_LARGE_INTEGER, PreTrainedTokenizerBase

from ..errors import clipped, first_line
from .json_items import MAX_DATA_ITEMS, json_items
from .quiet import quiet_transformers
from .regex_risk import growing, unknown_regex
from .registry import DEMO_MODELS

TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "added_tokens.json",
                   "vocab.txt", "vocab.json", "merges.txt", "spiece.model", "sentencepiece.bpe.model",
                   "tokenizer.model")
# Each file is read whole and parsed, a tokenizer.json at ~25 times its size (216 MB took 5.3 GB); the largest of
# released models are a few tens of MB (Gemma 3's tokenizer.json, 262,144 tokens: 33 MB)
MAX_TOKENIZER_FILE_BYTES = 64 * 10**6

UNREADABLE = "the checkpoint's tokenizer files could not be loaded ({err}); "
TOO_BIG = ("the checkpoint's {name} is {size:,} bytes, more than the {limit:,} a tokenizer file takes, so the "
           "tokenizer was not used; ")
TOO_MANY_ITEMS = ("the checkpoint's {name} holds up to {n:,} JSON keys and values, more than the {limit:,} a "
                  "tokenizer file takes, so the tokenizer was not used; ")
NOT_A_TOKENIZER = ("the checkpoint's {file} names {named!r} as its tokenizer_class, which is no tokenizer, so it was "
                   "not used; ")
BAD_LIMIT = ("the checkpoint's tokenizer gives model_max_length {value}, not a number of tokens; it is ignored (the "
             "model's positions still limit what it reads)")
NO_VOCABULARY = "the checkpoint's tokenizer files hold no vocabulary, only its {n} special tokens; "
BACKTRACKS = ("the checkpoint's tokenizer splits or rewrites text with the regex {pattern}, which is not one of the "
              "released tokenizers' regexes AttnScope runs (an unknown one may backtrack for minutes, holding the "
              "server), so it was not used; ")
GROWS = ("the checkpoint's tokenizer has a step that lengthens the text or makes it slow to read ({step}), so it "
         "was not used; ")
TOO_LARGE = "the checkpoint's tokenizer has {n} tokens but the model only {vocab} embeddings, so it was not used; "
BORROWED = ("no tokenizer in the checkpoint; using {demo}'s tokenizer because the vocabulary sizes match ({vocab}) — "
            "if the model was trained with another tokenizer, the tokens shown are not the ones it learned")
NONE = ("no tokenizer in the checkpoint and no demo tokenizer has {vocab} entries: text-level views are unavailable; "
        "diagnostics run weight-only checks and probes of random token ids — add the tokenizer files "
        "(tokenizer.json, vocab.txt, ...) to the checkpoint to enable them")


def copy_tokenizer_files(source: Path, clean: Path) -> bool:
    """Copy the known tokenizer data files of ``source`` into ``clean``; True if any was found."""
    found = [source / name for name in TOKENIZER_FILES if (source / name).is_file()]
    clean.mkdir(mode=0o700, exist_ok=True)
    for path in found:
        shutil.copyfile(path, clean / path.name)
    return bool(found)


def choose_tokenizer(clean: Path | None, vocab_size: int, causal: bool, notes: list[str]):
    """The tokenizer to use with a model of ``vocab_size`` embeddings; appends the reason to ``notes``."""
    tokenizer, prefix = _own_tokenizer(clean) if clean is not None else (None, "")
    if tokenizer is not None:
        limit_note = checked_limit(tokenizer)
        notes += [limit_note] if limit_note else []
        if not has_vocabulary(tokenizer):  # tokenizer_config.json alone: every word would be [UNK]
            prefix = NO_VOCABULARY.format(n=special_count(tokenizer))
        elif len(tokenizer) <= vocab_size:
            return tokenizer
        else:
            prefix = TOO_LARGE.format(n=len(tokenizer), vocab=vocab_size)
    order = ["demo-gpt2", "demo-bert"] if causal else ["demo-bert", "demo-gpt2"]
    for demo in order:
        tokenizer = _demo_tokenizer(str(DEMO_MODELS.get(demo, "")))
        if tokenizer is not None and len(tokenizer) == vocab_size:
            notes.append(prefix + BORROWED.format(demo=demo, vocab=vocab_size))
            borrowed = _without_limit(tokenizer)
            borrowed.attnscope_borrowed_from = demo  # the reports say whose tokens the probes were (``borrowed_from``)
            return borrowed
    notes.append(prefix + NONE.format(vocab=vocab_size))
    return None


def checked_limit(tokenizer) -> str:
    """A ``model_max_length`` that is no number ("abc", a list, true) set to transformers' "no limit", and
    ``BAD_LIMIT`` saying so; "" for a number. Every call of the tokenizer compares it with the text's length: it was
    a TypeError ("Something went wrong" in the app, "internal error" on the command line)."""
    value = getattr(tokenizer, "model_max_length", None)
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return ""
    tokenizer.model_max_length = VERY_LARGE_INTEGER
    return BAD_LIMIT.format(value=clipped(repr(value), 60))


def borrowed_from(tokenizer) -> str | None:
    """The demo model whose tokenizer ``choose_tokenizer`` lent a model without one, or None."""
    return getattr(tokenizer, "attnscope_borrowed_from", None)


def _own_tokenizer(clean: Path):
    """``(tokenizer, "")`` from the checkpoint's files in ``clean``, or ``(None, why not)``."""
    why = unusable_files(clean)
    if why:
        return None, why
    try:
        risky = _risky(json.loads((clean / "tokenizer.json").read_bytes())) if (clean / "tokenizer.json").is_file() \
            else ""
        if risky:  # before it is built: building normalizes its added tokens
            return None, risky
        with quiet_transformers():  # it reads config.json again: transformers logs what it holds, as it is
            tokenizer = AutoTokenizer.from_pretrained(clean, local_files_only=True, trust_remote_code=False)
        backend = getattr(tokenizer, "backend_tokenizer", None)  # as built, from whichever files
        risky = _risky(json.loads(backend.to_str())) if backend is not None else ""
    except Exception as err:  # noqa: BLE001 - any malformed tokenizer file
        return None, UNREADABLE.format(err=first_line(err, 120))
    if risky:  # a SentencePiece model's user-defined pieces become one regex, which no tokenizer.json shows
        return None, risky
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        return None, UNREADABLE.format(err=f"they give a {type(tokenizer).__name__}, not a tokenizer")
    return tokenizer, ""


def _risky(tree) -> str:
    """The note refusing a parsed tokenizer that could hold the server (``regex_risk``), or ""."""
    pattern = unknown_regex(tree)
    if pattern:
        return BACKTRACKS.format(pattern=pattern[:60])
    step = growing(tree)
    return GROWS.format(step=step) if step else ""


def unusable_files(folder: Path) -> str:
    """Why the tokenizer files in ``folder`` must not reach ``AutoTokenizer`` ("" when they may): one over
    ``MAX_TOKENIZER_FILE_BYTES``, or a ``tokenizer_class`` that names no tokenizer (transformers looks any name up
    on its top-level module: "BertModel" built a second model from an upload's weights as its tokenizer)."""
    for name in TOKENIZER_FILES:
        size = (folder / name).stat().st_size if (folder / name).is_file() else 0
        if size > MAX_TOKENIZER_FILE_BYTES:
            return TOO_BIG.format(name=name, size=size, limit=MAX_TOKENIZER_FILE_BYTES)
        items = json_items((folder / name).read_bytes()) if size and name.endswith(".json") else 0
        if items > MAX_DATA_ITEMS:  # parsed whole by Python: ~70 bytes an empty {} (``json_items``)
            return TOO_MANY_ITEMS.format(name=name, n=items, limit=MAX_DATA_ITEMS)
    for name in ("tokenizer_config.json", "config.json"):  # config.json: read whole before, under its own cap
        named = _named_class(folder / name)
        if isinstance(named, str) and named and not _is_tokenizer_class(named):
            return NOT_A_TOKENIZER.format(file=name, named=named[:60])
    return ""


def _named_class(path: Path):
    try:
        return json.loads(path.read_bytes()).get("tokenizer_class") if path.is_file() else None
    except (ValueError, RecursionError, AttributeError):  # not JSON, or not an object: AutoTokenizer says so
        return None


def _is_tokenizer_class(name: str) -> bool:
    """Whether transformers would build a tokenizer from ``name`` (a name it does not know is its own error)."""
    try:
        found = tokenizer_class_from_name(name)
    except Exception:  # noqa: BLE001 - transformers' lookup of a malformed name
        return False
    if type(found).__name__ == "DummyObject":  # a class whose package is missing: a tokenizer's error names it
        vision = {"torchvision", "vision", "PIL"} & set(getattr(found, "_backends", ()))  # an image processor's
        return name.endswith(("Tokenizer", "TokenizerFast", "Backend")) and not vision
    return found is None or (isinstance(found, type) and issubclass(found, PreTrainedTokenizerBase))


def has_vocabulary(tokenizer) -> bool:
    """Whether ``tokenizer`` spells anything besides its special tokens: transformers builds one from a
    ``tokenizer_config.json`` or a ``model_type`` alone (BERT's 5 special tokens; T5's 103 and a lone "▁", a word
    boundary that spells nothing), which reads every word as [UNK]. A DNA tokenizer's A, C, G, T is a vocabulary."""
    special = set(tokenizer.all_special_ids)
    pieces = tokenizer.convert_ids_to_tokens([i for i in range(len(tokenizer)) if i not in special])
    return any(isinstance(piece, str) and piece.strip("▁Ġ \t\n") for piece in pieces)


def special_count(tokenizer) -> int:
    """How many distinct special tokens ``tokenizer`` has (the NO_VOCABULARY note's count)."""
    return len(set(tokenizer.all_special_ids))


def _without_limit(tokenizer):
    """A copy of a borrowed tokenizer without its own length limit (demo-gpt2's 512): the model's position table
    is the limit, not the demo model's. The cached tokenizer is shared, so it is never changed."""
    borrowed = copy.deepcopy(tokenizer)
    borrowed.model_max_length = VERY_LARGE_INTEGER  # transformers' "no limit"
    return borrowed


@lru_cache(maxsize=4)
def _demo_tokenizer(folder: str):
    if not folder or not Path(folder).is_dir():
        return None  # demo models not trained yet
    try:
        return AutoTokenizer.from_pretrained(folder, local_files_only=True, trust_remote_code=False)
    except Exception:  # noqa: BLE001
        return None

