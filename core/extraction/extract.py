"""``extract_attention``: one function, three adapters.

Hugging Face models go through ``hf_extract``, AttnScope's own models through
their ``output_attentions`` flag, and any other module built from
``nn.MultiheadAttention`` through hooks (``module_extract``). Every adapter
returns an ``AttentionResult`` with ``attentions`` shaped ``[layers, heads, q, k]``.
"""

from __future__ import annotations

import time
from contextlib import contextmanager

import torch
from torch import nn
from transformers import PreTrainedModel, PreTrainedTokenizerBase

from ..custom_model import AttnScopeTransformer
from ..device import model_device
from .encode import check_text, encode, max_positions
from ..errors import AttnScopeError, ExtractionError, InputError, first_line
from .hf_extract import extract_hf, flag_ignored, is_causal_model, stack_layers, taken
from .maps_budget import check_maps_fit
from .offload import offloaded
from .out_of_memory import told_out_of_memory
from .module_extract import READABLE_LAYERS, attention_modules, run_with_hooks
from ..result import AttentionResult
from .tokens import display_tokens


@contextmanager
def eval_mode(model: nn.Module):
    """Dropout off for the call (it would make rows not sum to 1), every module's training state restored after
    (a frozen block kept in eval mode inside a training model stays so)."""
    modes = [(module, module.training) for module in model.modules()]
    model.eval()
    try:
        yield
    finally:
        for module, training in modes:
            module.training = training


TARGET_UNUSED = "the target text was not used"


def extract_attention(model, tokenizer, text: str, text_pair: str | None = None,
                      target: str | None = None) -> AttentionResult:
    """Per-layer, per-head attention of ``model`` on ``text``.

    ``text_pair`` is the second segment of pair models (BERT's sentence B);
    ``target`` is the decoder text of an encoder-decoder model (defaults to
    ``text``). Inputs longer than the model's limit are truncated and the
    result's ``warnings`` say so. Empty text raises ``InputError`` (a ValueError).
    """
    check_text(text)
    for name, value in (("text_pair", text_pair), ("target", target)):
        if value is not None and not isinstance(value, str):
            raise InputError(f"{name} must be text (a str) or None, not {repr(value)[:40]} ({type(value).__name__})")
    check_model_and_tokenizer(model, tokenizer)
    check_weights_loaded(model)
    start = time.perf_counter()
    with eval_mode(model):
        if isinstance(model, PreTrainedModel):
            result = extract_hf(model, tokenizer, text, text_pair, target)
        elif isinstance(model, AttnScopeTransformer):
            result = _extract_custom(model, tokenizer, text, text_pair)
        elif attention_modules(model):
            result = _extract_module(model, tokenizer, text, text_pair)
        else:
            raise ExtractionError(
                f"{type(model).__name__} is not a Hugging Face model, an AttnScope model, or a module "
                f"containing torch.nn.MultiheadAttention; AttnScope cannot read its attention: {READABLE_LAYERS}"
            )
    if target is not None and target.strip() and result.encoder is None:  # read by encoder-decoders only
        result.warnings.append(f"{TARGET_UNUSED}: {type(model).__name__} is not an encoder-decoder, so only the text "
                               "was read")
    result.model_name = _model_name(model)
    result.device = str(model_device(model))
    result.dtype = str(next(model.parameters()).dtype).replace("torch.", "")
    result.elapsed_s = time.perf_counter() - start
    return result


def check_model_and_tokenizer(model, tokenizer) -> None:
    """InputError for a ``model`` that is no torch module (a name, or the tokenizer: arguments swapped) or a
    ``tokenizer`` that is a module; ExtractionError for a missing tokenizer. They were raw AttributeErrors."""
    if not isinstance(model, nn.Module):
        raise InputError(f"model must be a loaded torch model, not {repr(model)[:40]} ({type(model).__name__}); "
                         "load one with core.load_model(name), which gives (model, tokenizer)")
    if tokenizer is None:
        raise ExtractionError("this model has no tokenizer, so text cannot be fed to it; load one with the model")
    check_tokenizer(tokenizer)


def check_tokenizer(tokenizer) -> None:
    """InputError for a tokenizer that is no Hugging Face tokenizer: AttnScope reads a text with its special-token
    masks and offsets. A nanoGPT-style encode/decode object was told to swap the arguments, and a function returning
    ids failed with a raw TypeError or IndexError."""
    if isinstance(tokenizer, nn.Module):
        raise InputError(f"tokenizer must be the model's tokenizer, not a {type(tokenizer).__name__}; pass the model "
                         "first, then its tokenizer")
    if not isinstance(tokenizer, PreTrainedTokenizerBase):
        raise InputError(f"tokenizer must be a Hugging Face tokenizer, not a {type(tokenizer).__name__}: load the "
                         "model's with AutoTokenizer.from_pretrained(...), or put your vocabulary in "
                         "transformers.PreTrainedTokenizerFast(tokenizer_object=...); or give token ids to "
                         "core.extract_module_attention")


def check_weights_loaded(model) -> None:
    """ExtractionError for a model built without its weights (on the ``meta`` device), before it is run. Weights
    accelerate offloads are on ``meta`` too, and loaded for each forward (``offload``)."""
    meta = next((f"{name}.{p_name}".lstrip(".") for name, module in model.named_modules()
                 for p_name, p in module.named_parameters(recurse=False) if p.is_meta and not offloaded(module)), None)
    if meta is not None:
        raise ExtractionError(f"the model's weights are not loaded ({meta} is on the meta device: built under "
                              "torch.device('meta') or init_empty_weights); load them, e.g. with from_pretrained")


def model_is_causal(model) -> bool:
    """Whether a model's self-attention is causal, as ``extract_attention`` reports it for a Hugging Face or
    AttnScope model, before running it; for an encoder-decoder, its encoder's (the part streamed and probed).
    A module without a config is read as not causal (its hooks tell, once it has run)."""
    config = getattr(model, "config", None)
    if isinstance(model, AttnScopeTransformer):
        return bool(config.causal)
    if config is None or getattr(config, "is_encoder_decoder", False):
        return False
    return is_causal_model(model) or isinstance(model, PreTrainedModel) and flag_ignored(model)


def _model_name(model) -> str:
    name = getattr(getattr(model, "config", None), "name_or_path", "") or ""
    return name or type(model).__name__


def _result(tokenizer, enc, attentions, causal) -> AttentionResult:
    ids = enc.input_ids[0].tolist()
    return AttentionResult(
        tokens=display_tokens(tokenizer, ids), attentions=attentions, causal=causal, special=enc.special,
        padding=[False] * len(ids), token_ids=ids, warnings=enc.warnings,
    )


def _extract_custom(model: AttnScopeTransformer, tokenizer, text, text_pair) -> AttentionResult:
    enc = encode(tokenizer, text, text_pair, max_positions(model, tokenizer), model.config.vocab_size)
    check_maps_fit(model, enc.input_ids.shape[-1])
    with torch.no_grad(), told_out_of_memory(model):
        out = model(enc.input_ids.to(model_device(model)), output_attentions=True)
    attentions = stack_layers(taken(out, "attentions"), "self", model)  # (L, H, T, T)
    return _result(tokenizer, enc, attentions, model_is_causal(model))


def _extract_module(model: nn.Module, tokenizer, text, text_pair) -> AttentionResult:
    enc = encode(tokenizer, text, text_pair, max_positions(None, tokenizer))  # the tokenizer's limit only
    check_maps_fit(model, enc.input_ids.shape[-1])  # every layer's per-head maps are held: asked for, not fused
    attentions, causal = module_ids_attention(model, enc.input_ids.to(model_device(model)))  # (L, H, q, k)
    return _result(tokenizer, enc, attentions, causal)


TAKES_EMBEDDINGS = "for a module that takes embeddings, call core.extract_module_attention(module, inputs, tokens=...)"
# An embedding looked up past its table: a text longer than the module's positions, or ids past its vocabulary
OUT_OF_RANGE = ("the input is probably longer than the module's position table, or holds ids past its embeddings: "
                "give a shorter text, or the tokenizer it was trained with")


def module_ids_attention(model: nn.Module, input_ids: torch.Tensor, hint: str | None = None
                         ) -> tuple[torch.Tensor, bool]:
    """``(attentions (L, H, T, T), causal)`` of an ``nn.MultiheadAttention``-based module run on token ids
    ``(1, T)``: its own exceptions (followed by ``hint``, the caller's words for every failure; by default "takes
    embeddings", and ``OUT_OF_RANGE`` for an embedding looked up past its table), and layers that read another
    layout, as one ExtractionError line."""
    out_of_range = OUT_OF_RANGE if hint is None else None  # a caller's hint (the repeated probe's) says it all
    maps = _run_module(model, "(input_ids)", hint or TAKES_EMBEDDINGS + " instead", input_ids,
                       out_of_range=out_of_range)
    attentions = maps.attentions  # (L, H, q, k)
    if maps.batch != 1 or attentions.shape[-1] != input_ids.shape[-1]:
        raise ExtractionError(
            f"{type(model).__name__} attended over {attentions.shape[-1]} positions for {input_ids.shape[-1]} "
            "tokens: its attention layers read (sequence, batch, feature) (nn.MultiheadAttention's default, "
            "batch_first=False) or reshape the ids; build them with batch_first=True, or call "
            "core.extract_module_attention with inputs in the layout the module takes")
    return attentions, maps.causal


def _run_module(module, call: str, hint: str, *inputs, out_of_range: str | None = None, **kwargs):
    """``run_with_hooks``, the module's own exceptions as one ExtractionError line; an embedding looked up past
    its table is told ``out_of_range`` where given, in place of ``hint``."""
    try:
        with told_out_of_memory(module):
            return run_with_hooks(module, *inputs, **kwargs)
    except AttnScopeError:
        raise
    except Exception as err:  # the module's own forward rejected the inputs
        if out_of_range and isinstance(err, IndexError) and "index out of range in self" in str(err):
            hint = out_of_range  # F.embedding's own words: it took the ids, so not "takes embeddings"
        raise ExtractionError(f"{type(module).__name__}{call} failed ({first_line(err)}); {hint}") from None


def _sequence_length(inputs) -> int:
    """The length the maps of ``inputs`` are read at, before the forward: the longest dimension of the first tensor
    but its features ((1, T, E), (T, 1, E) or (T, E) embeddings); 0 without one (nothing is refused)."""
    first = next((x for x in inputs if isinstance(x, torch.Tensor) and x.dim() >= 2), None)
    return max(first.shape[:-1]) if first is not None else 0


def extract_module_attention(module: nn.Module, *inputs, tokens: list[str] | None = None, **kwargs) -> AttentionResult:
    """Attention of any ``nn.MultiheadAttention``-based module run on arbitrary ``inputs`` of one sequence.

    For modules such as ``nn.TransformerEncoder`` that take embeddings rather
    than token ids. ``tokens`` labels the positions (defaults to their indices); the keys a
    ``key_padding_mask`` (``src_key_padding_mask``) blocks are marked as padding. A batch of more than one
    sequence is refused (InputError): pass one item per call.
    """
    start = time.perf_counter()
    check_maps_fit(module, _sequence_length(inputs))
    with eval_mode(module):
        maps = _run_module(module, "(inputs)", "give it the inputs its forward takes", *inputs, **kwargs)
    if maps.batch > 1:  # the maps are one sequence's: the other items would have been dropped without a word
        raise InputError(f"AttnScope reads one sequence at a time; {type(module).__name__}'s attention was called "
                         f"on a batch of {maps.batch} — pass one item (e.g. inputs[:1]) per call; if that is one "
                         "sequence, its layers read (sequence, batch, feature) (nn.MultiheadAttention's default, "
                         "batch_first=False): give them inputs of shape (T, 1, E)")
    attentions, causal, padding = maps.attentions, maps.causal, maps.padding  # (L, H, q, k)
    length = attentions.shape[-1]
    tokens = list(tokens) if tokens is not None else [str(i) for i in range(length)]
    result = AttentionResult(tokens, attentions, causal, [False] * length, padding or [False] * length)
    result.model_name, result.elapsed_s = type(module).__name__, time.perf_counter() - start
    result.device = str(model_device(module))
    result.dtype = str(next(module.parameters()).dtype).replace("torch.", "")
    return result
