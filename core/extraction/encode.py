"""Turn user text into model input, truncating to the model's limit with a warning."""

from __future__ import annotations

import inspect
from dataclasses import dataclass, field

import torch
from torch import nn

from ..checkpoints.paths import is_utf8
from ..errors import InputError, counted
from .spelling import can_drop, characters_spelt
from .tokens import is_byte_level
from .text_config import text_config

# A tokenizer without a real limit reports a huge sentinel as model_max_length.
_NO_LIMIT = 1_000_000


@dataclass
class Encoded:
    input_ids: torch.Tensor  # (1, T) int64
    special: list[bool]  # per token: added by the tokenizer ([CLS], [SEP], <s>, ...)
    warnings: list[str] = field(default_factory=list)
    token_type_ids: torch.Tensor | None = None  # (1, T) segment ids of a pair (BERT's sentence B = 1), else None


def check_text(text, name: str = "text") -> str:
    """``text`` when it is a non-blank str of Unicode characters; InputError saying which it is not (a list or ids
    were "empty"; a lone surrogate was the tokenizer's TypeError)."""
    if not isinstance(text, str):
        raise InputError(f"{name} must be one text (a str), not {repr(text)[:40]} ({type(text).__name__}); pass one "
                         "text per call (token ids go to diagnostics.stream_token_statistics)")
    if not text.strip():
        raise InputError(f"{name} is empty; type a sentence to inspect")
    if not is_utf8(text):
        raise InputError(f"{name} is not UTF-8: it holds a lone surrogate (a file read in another encoding, or a "
                         "broken \\ud800 escape); convert it, e.g. iconv -f latin1 -t utf-8")
    return text


# The words every truncation warning carries (``AttentionResult.warnings``), for callers that count them.
TRUNCATED = "truncated to the model's limit"


def max_positions(model, tokenizer=None) -> int | None:
    """Longest input ``model`` accepts (None: the tokenizer's limit only), or None when it has no fixed limit
    (e.g. T5)."""
    config = text_config(model)
    limits = []
    for name in ("max_position_embeddings", "n_positions", "max_positions"):
        value = getattr(config, name, None)
        if isinstance(value, int) and value > 0:
            limits.append(value - position_offset(model))
            break
    tokenizer_limit = getattr(tokenizer, "model_max_length", None)
    if isinstance(tokenizer_limit, int) and 0 < tokenizer_limit < _NO_LIMIT:
        limits.append(tokenizer_limit)
    return min(limits) if limits else None


def position_offset(model: nn.Module) -> int:
    """Rows of ``model``'s learned position table that no position uses: RoBERTa-style embeddings number positions
    from ``padding_idx + 1`` (RoBERTa, XLM-R, CamemBERT, Longformer, Data2Vec-text, MPNet, I-BERT, ...: a table
    whose ``padding_idx`` is set)."""
    for name, module in model.named_modules():  # I-BERT's table is a QuantEmbedding: any module with the attribute
        padding = getattr(module, "padding_idx", None) if name.endswith("position_embeddings") else None
        if isinstance(padding, int):
            return padding + 1
    return 0


def encode(
    tokenizer, text: str, text_pair: str | None = None, limit: int | None = None, vocab_size: int | None = None,
    name: str = "text",
) -> Encoded:
    """Tokenize ``text`` (and ``text_pair``) into one batch, truncated to ``limit`` tokens.

    ``vocab_size`` is the model's: ids beyond it mean the tokenizer does not belong to the model. ``name`` is what
    the messages call ``text`` ("target text": an encoder-decoder's decoder input).
    """
    check_text(text, name)
    if text_pair is not None and isinstance(text_pair, str) and not text_pair.strip():
        text_pair = None
    if text_pair is not None:
        check_text(text_pair, "text_pair")
    # verbose=False: transformers would warn that a long text "will result in indexing errors"; it is cut below
    # a pair's segment ids even where the tokenizer does not list them among its inputs (ALBERT's, in transformers 5)
    ask_segments = {"return_token_type_ids": True} if text_pair is not None else {}
    if can_drop(tokenizer):  # the offsets say what each token spells (``_dropped_warnings``)
        ask_segments["return_offsets_mapping"] = True
    batch = tokenizer(text, text_pair, return_special_tokens_mask=True, return_tensors="pt", verbose=False,
                      **ask_segments)
    full_length = batch["input_ids"].shape[-1]
    truncate = limit is not None and full_length > limit
    if truncate:  # tokenize again: the tokenizer keeps the closing special tokens ([SEP], </s>) when cutting
        batch = tokenizer(text, text_pair, return_special_tokens_mask=True, truncation=True, max_length=limit,
                          return_tensors="pt", **ask_segments)
        if batch["input_ids"].shape[-1] > limit:  # the tokenizer's own tokens alone pass the limit: it cut nothing
            raise InputError(f"the model reads at most {limit} tokens, fewer than this tokenizer adds around "
                             f"{'a pair' if text_pair is not None else 'a text'} itself; it cannot read any text")
    warnings = [] if text_pair is None else _pair_warnings(tokenizer, text, batch)
    warnings += _dropped_warnings(tokenizer, batch, (text, text_pair), truncate)
    if truncate:
        warnings.append(f"input has {full_length} tokens; {TRUNCATED} of {limit}")
    if batch["input_ids"].numel() == 0:
        raise InputError(f"the {name} produced no tokens; type a sentence with words in it")
    check_vocab(batch["input_ids"], vocab_size)
    special = special_marks(tokenizer, batch["input_ids"][0].tolist(), batch["special_tokens_mask"][0].tolist())
    if all(special):  # e.g. only a zero-width space, which the tokenizer drops: [CLS] [SEP]
        own = counted(len(special), "special token")
        raise InputError(f"the {name} gives no tokens besides the tokenizer's own ({own}); type a sentence with "
                         "words in it")
    segments = batch.get("token_type_ids")  # (1, T); all 0 is what the model assumes when given none
    return Encoded(batch["input_ids"], special, warnings, segments if segments is not None and segments.any() else None)


def segment_inputs(model, token_type_ids, device=None) -> dict:
    """``{"token_type_ids": ...}`` for a forward call of ``model``, when there are segment ids, its forward takes them
    and its segment table has a row for each (BERT, MiniLM, ELECTRA, ALBERT); ``{}`` otherwise (RoBERTa, XLM-R: one
    row, whatever a BERT tokenizer gives them). Without them sentence B would be embedded as sentence A."""
    rows = getattr(getattr(model, "config", None), "type_vocab_size", None)
    if (token_type_ids is None or not isinstance(rows, int)
            or "token_type_ids" not in inspect.signature(model.forward).parameters):
        return {}
    ids = torch.as_tensor(token_type_ids).reshape(1, -1)  # (1, T)
    return {"token_type_ids": ids.to(device)} if int(ids.max()) < rows else {}


# The words of the warning for characters the tokenizer left out (``AttentionResult.warnings``).
DROPPED = "the tokenizer dropped characters it cannot spell"

# The words of the warning for a pair joined without a separator (``AttentionResult.warnings``).
PAIR_JOINED = "this tokenizer has no sentence-pair format"


def _pair_warnings(tokenizer, text: str, batch) -> list[str]:
    """A warning when the tokenizer marks no boundary between the two texts (GPT-2, Llama: decoder-only)."""
    alone = tokenizer(text, return_special_tokens_mask=True, verbose=False)["special_tokens_mask"]
    if int(batch["special_tokens_mask"].sum()) > sum(alone):
        return []
    return [f"{PAIR_JOINED}: the second sentence was appended right after the first, with no separator token "
            "between them; add one to the text yourself if the model expects it"]


def _dropped_warnings(tokenizer, batch, texts: tuple[str, str | None], cut_short: bool) -> list[str]:
    """A warning when the tokens leave out characters of the text: a tokenizer with no unknown token (a BPE model
    without ``unk_token``) drops what it cannot spell, and the map shows the text without it."""
    if "offset_mapping" not in batch:  # asked for where characters can be dropped only: elsewhere a text cut
        return []  # inside a character its tokens spell in pieces ("…" as "." "." ".") looked dropped
    spelt, could = characters_spelt(tokenizer, batch, texts, cut_short)
    if spelt == could:
        return []
    return [f"{DROPPED}: {could - spelt} of the {counted(could, 'character')} read (spaces aside) have no token and "
            "no unknown token stands in for them, so the model reads the text without them"]


def check_vocab(input_ids: torch.Tensor, vocab_size: int | None) -> None:
    if int(input_ids.min()) < 0:  # a -100 label mask given as input: torch's IndexError
        raise InputError(f"token id {int(input_ids.min())} is negative; token ids index the model's vocabulary")
    largest = int(input_ids.max())
    if isinstance(vocab_size, int) and largest >= vocab_size:
        raise InputError(
            f"the tokenizer produced token id {largest} but the model's vocabulary has {vocab_size} entries; "
            "use the tokenizer that belongs to this model"
        )


def special_marks(tokenizer, token_ids: list[int], added: list[int]) -> list[bool]:
    """Which tokens are special: those the tokenizer added (``added``, its special_tokens_mask) and those typed in
    the text ("A [SEP] B", "<|endoftext|>"), which the tokenizer reads as its control tokens, as transformers does:
    the model gets the real [SEP], so it is a sink key and hidden with the others."""
    typed = typed_specials(tokenizer)
    return [bool(mark) or token in typed for token, mark in zip(token_ids, added)]


def typed_specials(tokenizer) -> set[int]:
    """The control tokens a text can spell: the special tokens and the added tokens marked special (SmolLM2's
    <file_sep>, <jupyter_code>, which its decode drops), but the unknown token, which stands for words ([UNK]); a
    byte-level tokenizer spells every text without it, so there its unknown token is a control token (GPT-2's and
    SmolLM2's <|endoftext|>). Elsewhere it stands for words even where it is also the end token (unk = eos =
    <|endoftext|> on a word-level vocabulary): every word the vocabulary misses becomes it."""
    added = getattr(tokenizer, "added_tokens_decoder", {})
    special = set(tokenizer.all_special_ids) | {i for i, token in added.items() if token.special}
    return special if is_byte_level(tokenizer) else special - {tokenizer.unk_token_id}
