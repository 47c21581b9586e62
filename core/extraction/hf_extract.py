"""Extraction adapter for Hugging Face transformers models.

SDPA and flash attention never materialise the weights, so the model is
switched to the eager implementation for the call (and switched back after).
Encoders (BERT), decoders (GPT-2) and encoder-decoders (BART, T5) are covered;
an encoder-decoder result carries ``encoder``, ``decoder`` and ``cross``. What a
model returns is checked before it is shown: one shape for every layer, rows of
weights (none negative, none summing above 1), and no weight on later tokens in
a causal model.
"""

from __future__ import annotations

import importlib.util
import inspect
from collections.abc import Mapping
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import torch
from transformers.models.auto.configuration_auto import model_type_to_module_name
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_MASKED_LM_MAPPING_NAMES,
)

from .maps_budget import check_maps_fit
from .out_of_memory import told_out_of_memory
from ..device import model_device
from .encode import encode, max_positions, segment_inputs
from ..errors import AttnScopeError, ExtractionError, first_line
from ..result import AttentionResult
from .tokens import display_tokens
from .text_config import is_encoder_decoder, text_config, text_model, vocab_size
from .windows import attention_windows, in_window


# Exceptions to the causal-LM list: XLNet's LM permutes the order in training, but its attention over an
# unpermuted input reaches every token; CLIP's text encoder masks later tokens though it is no language model.
_BIDIRECTIONAL = {"xlnet"}
_CAUSAL = {"clip_text_model"}


def reads_both_ways(config) -> bool:
    """A decoder's architecture set to attend both ways, where its code reads the setting: ``is_causal`` False
    (transformers' ``create_causal_mask`` then builds a bidirectional mask: LLM2Vec-style embedders) or
    ``use_bidirectional_attention`` True (Gemma 3, EmbeddingGemma) or "all" (Gemma 4, DiffusionGemma; "vision" reads
    only image tokens both ways). A flag its code never reads is ignored (Llama with ``use_bidirectional_attention``
    stays causal, and was measured as an encoder)."""
    model_type, value = getattr(config, "model_type", ""), getattr(config, "use_bidirectional_attention", None)
    if (value is True or value == "all") and _code_reads(model_type, "use_bidirectional_attention"):
        return True
    return getattr(config, "is_causal", None) is False and _code_reads(model_type, "create_causal_mask")


@lru_cache(maxsize=None)
def _code_reads(model_type: str, name: str) -> bool:
    """Whether transformers' modeling code of ``model_type`` names ``name`` (True when the code cannot be found:
    the maps then tell, ``causal_maps``)."""
    try:
        module = model_type_to_module_name(model_type)  # "openai-gpt": openai; "gemma3_text": gemma3
        spec = importlib.util.find_spec(f"transformers.models.{module}.modeling_{module}")
        return spec is None or spec.origin is None or name in Path(spec.origin).read_text(encoding="utf-8")
    except (ImportError, ValueError, OSError, TypeError, AttributeError):
        return True


def causal_maps(model, attentions) -> bool:
    """``is_causal_model``, or a decoder set to attend both ways whose maps ``[L, H, q, k]`` give no later token any
    weight in any layer: its eager mask ignored the setting (Gemma 2 names ``use_bidirectional_attention`` only for
    SDPA; Gemma 3 multimodal builds its own masks), and an unmasked softmax gives no exact 0. Maps of one token
    cannot tell: ``flag_ignored`` runs the model on a few."""
    if is_causal_model(model):
        return True
    if not _set_both_ways(model):
        return False
    return _no_later_weight(attentions) if attentions.shape[-1] > 1 else flag_ignored(model)


def flag_ignored(model) -> bool:
    """Whether a decoder set to attend both ways (``reads_both_ways``) masks later tokens all the same, from its maps
    of 8 token ids: the streamed path, which holds no whole map, asks so before it runs."""
    if not _set_both_ways(model):
        return False
    ids = torch.arange(8).remainder(max(1, vocab_size(model) or 1)).unsqueeze(0).to(model_device(model))  # (1, 8)
    with eager_attention(model), torch.no_grad():
        out = _run(model, input_ids=ids)
    return _no_later_weight(stack_layers(taken(out, "attentions"), "self", model))  # (L, H, 8, 8)


def _set_both_ways(model) -> bool:
    text = text_config(model)
    return text is not None and reads_both_ways(text)


def _no_later_weight(attentions) -> bool:
    return attentions.shape[-1] > 1 and all(float(layer.triu(1).amax()) == 0 for layer in attentions)  # (H, q, k)


def is_causal_config(config) -> bool:
    """True for decoder-only language models (GPT-2, Llama), BERT used as decoder and CLIP's text encoder; not for
    a decoder's architecture read both ways (``reads_both_ways``: EmbeddingGemma, Gemma 4 with "all")."""
    model_type = getattr(config, "model_type", "")
    if reads_both_ways(config):
        return False
    if getattr(config, "is_decoder", False) or model_type in _CAUSAL:
        return True
    causal_lm = model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in _BIDIRECTIONAL
    return causal_lm and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


def is_causal_model(model) -> bool:
    """``is_causal_config`` of the model's text config: a vision-language model's language model (Llava's Llama) is
    read as its own config says; one of a type no list names (Qwen2-VL's ``qwen2_vl_text``) is causal when every
    attention layer of its language model says it is (``is_causal``, which transformers' eager attention reads)."""
    text = text_config(model)
    if is_causal_config(text):
        return True
    if text is model.config:
        return False
    flags = [module.is_causal for _, module in text_model(model)[1].named_modules()
             if isinstance(getattr(module, "is_causal", None), bool)]
    return bool(flags) and all(flags) and not reads_both_ways(text)


@contextmanager
def eager_attention(model):
    """Run the model with eager attention, the implementation that returns weights. A model that refuses the
    switch (Falcon only logs that it cannot) gets its config's implementation set for the call: Falcon's SDPA
    setting adds its boolean mask to the scores as 0 and 1 when weights are asked for, masking nothing."""
    config = model.config
    previous = getattr(config, "_attn_implementation", None)
    saved = implementations(config)
    switch = previous not in (None, "eager")
    if switch:
        model.set_attn_implementation("eager")
    forced = switch and config._attn_implementation != "eager"
    if forced:
        config._attn_implementation = "eager"
    try:
        with _alibi_once(model):
            yield
    finally:
        if forced:
            config._attn_implementation = saved  # the config's setter takes the same nested dict
        elif switch:
            model.set_attn_implementation(saved)


def implementations(config) -> str | dict:
    """What ``set_attn_implementation`` takes to put back the attention implementation of every part of a model: one
    name, or where parts differ (a vision tower may run another kernel than the text model) a dict of them by
    sub-config, the model's own under "", a sub-config whose own parts differ as such a dict in turn (T5Gemma 2's
    encoder and its vision tower)."""
    parts = {"": getattr(config, "_attn_implementation", None)}
    for key in getattr(config, "sub_configs", {}):
        sub = getattr(config, key, None)
        if getattr(sub, "_attn_implementation", None) is not None:
            parts[key] = implementations(sub)
    return parts[""] if all(value == parts[""] for value in parts.values()) else parts


@contextmanager
def _alibi_once(model):
    """Falcon-RW (ALiBi) in transformers' eager code adds the ALiBi bias twice: in each layer's scores and in the
    mask the model builds (the SDPA path adds it once, in the mask). Each attention layer gets a zero bias for
    the call, so the weights are those of the model's SDPA forward."""
    layers = [] if not getattr(model.config, "alibi", False) else [
        m for m in model.modules() if type(m).__name__ == "FalconAttention"]  # no module walk for other models
    if not layers:
        yield
        return

    def zero_bias(module, args, kwargs):
        if kwargs.get("alibi") is not None:
            kwargs["alibi"] = torch.zeros_like(kwargs["alibi"])
        return args, kwargs

    hooks = [layer.register_forward_pre_hook(zero_bias, with_kwargs=True) for layer in layers]
    try:
        yield
    finally:
        for hook in hooks:
            hook.remove()


def taken(out, name: str) -> list | None:
    """``out``'s per-layer maps ``name`` (``"attentions"``, ``"cross_attentions"``, ...) as a list that ``out`` no
    longer holds, for ``stack_layers`` to let go of each layer as it copies it: stacking the tuple the output held
    kept every map twice (SmolLM2 at 1,100 tokens: 1.22 GiB of maps peaked +2.64 GiB)."""
    if not isinstance(out, Mapping):
        return getattr(out, name, None)
    maps = out.get(name)
    if maps is None:
        return None
    out[name] = None  # a ModelOutput drops it from its dict and its attribute alike
    return list(maps)


def _uneven_layers(model, shapes) -> str:
    """Why maps of ``shapes`` (``(heads, q, k)``, more than one) cannot be one ``[layers, heads, q, k]`` tensor."""
    name = type(model).__name__
    if len({shape[1:] for shape in shapes}) == 1:  # every token kept: the head counts differ (pruned heads)
        counts = ", ".join(str(shape[0]) for shape in shapes[:3])
        return (f"{name}'s layers have different numbers of heads ({counts}): heads pruned from some layers, or a "
                "model that counts them per layer; AttnScope reads models with as many heads in every layer (one "
                "[layers, heads, q, k] map) — use the model from before pruning")
    listed = ", ".join("×".join(map(str, shape)) for shape in shapes[:3])
    return (f"{name}'s layers return attention maps of different shapes ({listed}): a model that pools or downsamples "
            "its tokens between layers; AttnScope reads models that keep every token")


def stack_layers(attentions, what: str, model) -> torch.Tensor:
    """Per-layer ``(1, H, q, k)`` tensors -> ``(L, H, q, k)`` float32 on CPU. A list is emptied as it is copied
    (each entry set to None), so a list only the caller held (``taken``) costs one layer beyond the result when
    its layers are large (glibc hands a freed block of 32 MB or more back at once; smaller ones stay in its heap
    for the next temporaries)."""
    if attentions and not all(a is None or isinstance(a, torch.Tensor) for a in attentions):
        raise ExtractionError(f"{type(model).__name__} returns its {what} attention as "
                              f"{type(next(a for a in attentions if not isinstance(a, torch.Tensor))).__name__} "
                              "(local and global weights apart), not one map per layer; AttnScope reads models "
                              "that return one [heads, q, k] map per layer")
    if not attentions or any(a is None for a in attentions):
        impl = getattr(getattr(model, "config", None), "_attn_implementation", "unknown")
        why = ("though it ran eager attention: a model without attention layers (a state-space or recurrent model) "
               "or one whose parts do not pass output_attentions on" if impl == "eager" else
               f"(attention implementation {impl!r}); only the eager implementation exposes them")
        raise ExtractionError(f"{type(model).__name__} returned no {what} attention weights {why}")
    shapes = sorted({tuple(a.shape[1:]) for a in attentions})
    if len(shapes) > 1:
        raise ExtractionError(_uneven_layers(model, shapes))
    shape = (len(attentions), *attentions[0].shape[1:])  # (L, H, q, k)
    with told_out_of_memory(model):  # the copy the maps go into: where a CPU out of memory struck first (exit 3)
        stacked = torch.empty(shape, dtype=torch.float32, device="cpu")  # whatever torch's default dtype and device
        for layer in range(len(attentions)):
            stacked[layer] = attentions[layer][0]  # (H, q, k), from its device and dtype
            if isinstance(attentions, list):
                attentions[layer] = None
    return stacked


def extract_hf(model, tokenizer, text, text_pair=None, target=None) -> AttentionResult:
    limit = max_positions(model, tokenizer)
    enc = encode(tokenizer, text, text_pair, limit, vocab_size(model))
    device = model_device(model)
    if is_encoder_decoder(model):
        with eager_attention(model), torch.no_grad():
            return _encoder_decoder(model, tokenizer, enc, target if target and target.strip() else text, limit, device)
    check_maps_fit(model, enc.input_ids.shape[-1])  # before the forward pass: 72 GB of maps had killed the process
    with eager_attention(model), torch.no_grad():
        segments = segment_inputs(model, enc.token_type_ids, device)
        out = _run(model, input_ids=enc.input_ids.to(device), **segments)
        implementation = getattr(model.config, "_attn_implementation", None)  # as run, before it is switched back
    attentions = stack_layers(taken(out, "attentions"), "self", model)  # (L, H, T, T)
    _check_weights(attentions, model)
    causal = causal_maps(model, attentions)
    if causal:
        _refuse_later_tokens(attentions, model, implementation)
    ids = enc.input_ids[0].tolist()
    return AttentionResult(
        tokens=display_tokens(tokenizer, ids), attentions=attentions, causal=causal,
        special=enc.special, padding=[False] * len(ids), token_ids=ids, warnings=enc.warnings,
        token_type_ids=segments["token_type_ids"][0].tolist() if segments else None,
        windows=map_windows(model, attentions, causal),
    )


def map_windows(model, attentions, causal) -> list[int | None] | None:
    """The layers' windows (``core.extraction.windows``), if the maps keep to them: a config read wrongly must
    not hide weight the model gave, so windows the maps overstep are dropped (the layer is read as global)."""
    windows = attention_windows(model)
    if windows is None or len(windows) != attentions.shape[0]:
        return None
    n = attentions.shape[-1]
    distance = torch.arange(n).unsqueeze(1) - torch.arange(n).unsqueeze(0)  # (q, k) query - key
    kept = [w if w is None or not _gives_weight(attentions[layer], ~in_window(distance, w, causal)) else None
            for layer, w in enumerate(windows)]
    return kept if any(w is not None for w in kept) else None


def _gives_weight(layer_maps, outside) -> bool:
    """Whether any head of ``layer_maps [H, q, k]`` gives weight to a key ``outside (q, k)`` its window; one head at a
    time, so the check copies one map's keys outside the window, not the layer's (~150 MB at 2,048 tokens)."""
    return any(bool(head[outside].any()) for head in layer_maps)  # (outside,) per head


def _check_weights(attentions, model) -> None:
    """ExtractionError when what the model returns as ``attentions`` is no attention weights: a negative weight
    or a row summing above 1 (RWKV returns its recurrent state there). Rows may sum below 1 (a learned sink)."""
    largest_row = float(attentions.sum(-1).amax())  # (L, H, T) summed: no copy of the maps
    if float(attentions.amin()) < 0 or largest_row > 1.01:
        raise ExtractionError(f"{type(model).__name__}'s attentions are not attention weights (a row of them sums to "
                              f"{largest_row:.3g}, or a weight is negative); AttnScope reads softmax attention, not "
                              "recurrent or state-space layers")


def _refuse_later_tokens(attentions, model, implementation) -> None:
    """ExtractionError when a causal model's (or decoder's) weights reach later tokens: they are not the maps it
    computes (Falcon under SDPA until transformers 5.25; FSMT's decoder with its cache on builds no causal mask)."""
    # the largest weight on a later token, copying one layer at a time (it copied the whole stack, twice); NaN stays
    later = float(torch.stack([layer.triu(1).amax() for layer in attentions]).amax())
    if later > 1e-6:
        raise ExtractionError(
            f"{type(model).__name__} is a causal model but its attention weights reach later tokens (up to "
            f"{later:.3f}): its attention implementation {implementation!r} does not mask them when it returns weights")


def _run(model, **inputs):
    """The model's forward with weights asked for; its own exceptions (a model that takes no token ids, such as
    a vision or speech encoder) as one ExtractionError line."""
    try:
        with told_out_of_memory(model):  # no model AttnScope cannot read: this text is too long for this memory
            return model(**inputs, output_attentions=True, return_dict=True)
    except AttnScopeError:
        raise
    except Exception as err:  # noqa: BLE001 - the model's forward rejected a text input
        raise ExtractionError(f"{type(model).__name__} failed on the tokenized text ({first_line(err)}); AttnScope "
                              "reads text transformers: encoders, decoders and encoder-decoders") from None


def _decoder_ids(model, tokenizer, target: str, limit: int | None) -> tuple[list[int], list[bool], list[str]]:
    """Teacher-forced decoder input: the start token followed by the target shifted right; its special marks (as
    the encoder's: a typed [UNK] stands for words); and the target's warnings (its truncation)."""
    encoded = encode(tokenizer, target, limit=limit, vocab_size=vocab_size(model), name="target text")
    labels = encoded.input_ids[0].tolist()
    config = model.config
    start = getattr(config, "decoder_start_token_id", None)
    if start is None:
        start = getattr(config, "pad_token_id", None)
        start = getattr(config, "bos_token_id", None) if start is None else start
    if start is None:
        raise ExtractionError(f"{type(model).__name__} has no decoder_start_token_id; cannot build decoder input")
    special = [start in set(tokenizer.all_special_ids)] + encoded.special[:-1]
    return [start] + labels[:-1], special, [f"target: {w}" for w in encoded.warnings]


def _encoder_decoder(model, tokenizer, enc, target, limit, device) -> AttentionResult:
    dec_ids, dec_special, target_warnings = _decoder_ids(model, tokenizer, target, limit)
    check_maps_fit(model, enc.input_ids.shape[-1], len(dec_ids))  # the target's length too
    no_cache = {"use_cache": False} if "use_cache" in inspect.signature(model.forward).parameters else {}
    out = _run(model, input_ids=enc.input_ids.to(device), decoder_input_ids=torch.tensor([dec_ids], device=device),
               **no_cache)  # teacher-forced, as in training: FSMT masks later target tokens only without its cache
    enc_ids = enc.input_ids[0].tolist()
    enc_tokens, dec_tokens = display_tokens(tokenizer, enc_ids), display_tokens(tokenizer, dec_ids)
    enc_pad, dec_pad = [False] * len(enc_ids), [False] * len(dec_ids)
    encoder = AttentionResult(
        enc_tokens, stack_layers(taken(out, "encoder_attentions"), "encoder", model), False, enc.special, enc_pad,
        token_ids=enc_ids, kind="encoder",
    )
    decoder = AttentionResult(
        dec_tokens, stack_layers(taken(out, "decoder_attentions"), "decoder", model), True, dec_special, dec_pad,
        token_ids=dec_ids, kind="decoder",
    )
    _refuse_later_tokens(decoder.attentions, model, getattr(model.config, "_attn_implementation", None))
    cross = AttentionResult(
        dec_tokens, stack_layers(taken(out, "cross_attentions"), "cross", model), False, dec_special, dec_pad,
        token_ids=dec_ids, key_tokens=enc_tokens, key_special=enc.special, key_padding=enc_pad, kind="cross",
    )
    return AttentionResult(
        enc_tokens, encoder.attentions, False, enc.special, enc_pad, token_ids=enc_ids, kind="encoder",
        warnings=enc.warnings + target_warnings, encoder=encoder, decoder=decoder, cross=cross,
    )
