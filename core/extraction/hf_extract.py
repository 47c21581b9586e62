"""Extraction adapter for Hugging Face transformers models.

SDPA and flash attention never materialise the weights, so the model is
switched to the eager implementation for the call (and switched back after).
Encoders (BERT), decoders (GPT-2) and encoder-decoders (BART, T5) are covered;
an encoder-decoder result carries ``encoder``, ``decoder`` and ``cross``.
"""

from __future__ import annotations

from contextlib import contextmanager

import torch
from transformers.models.auto.modeling_auto import (
    MODEL_FOR_CAUSAL_LM_MAPPING_NAMES,
    MODEL_FOR_MASKED_LM_MAPPING_NAMES,
)

from ..device import model_device
from .encode import encode, max_positions, segment_inputs, special_flags
from ..errors import ExtractionError
from ..result import AttentionResult
from .tokens import display_tokens


def is_causal_config(config) -> bool:
    """True for decoder-only language models (GPT-2, Llama) and BERT used as decoder."""
    if getattr(config, "is_decoder", False):
        return True
    model_type = getattr(config, "model_type", "")
    return model_type in MODEL_FOR_CAUSAL_LM_MAPPING_NAMES and model_type not in MODEL_FOR_MASKED_LM_MAPPING_NAMES


@contextmanager
def eager_attention(model):
    """Run the model with eager attention, the implementation that returns weights."""
    previous = getattr(model.config, "_attn_implementation", None)
    switch = previous not in (None, "eager")
    if switch:
        model.set_attn_implementation("eager")
    try:
        yield
    finally:
        if switch:
            model.set_attn_implementation(previous)


def stack_layers(attentions, what: str, model) -> torch.Tensor:
    """Tuple of per-layer ``(1, H, q, k)`` tensors -> ``(L, H, q, k)`` float32 on CPU."""
    if not attentions or any(a is None for a in attentions):
        impl = getattr(getattr(model, "config", None), "_attn_implementation", "unknown")
        raise ExtractionError(
            f"{type(model).__name__} returned no {what} attention weights (attention implementation "
            f"{impl!r}); only the eager implementation exposes them"
        )
    return torch.stack([a[0].float().cpu() for a in attentions])  # (L, H, q, k)


def extract_hf(model, tokenizer, text, text_pair=None, target=None) -> AttentionResult:
    limit = max_positions(model, tokenizer)
    enc = encode(tokenizer, text, text_pair, limit, getattr(model.config, "vocab_size", None))
    device = model_device(model)
    with eager_attention(model), torch.inference_mode():
        if getattr(model.config, "is_encoder_decoder", False):
            return _encoder_decoder(model, tokenizer, enc, target if target and target.strip() else text, limit, device)
        segments = segment_inputs(model, enc.token_type_ids, device)
        out = model(input_ids=enc.input_ids.to(device), **segments, output_attentions=True, return_dict=True)
    attentions = stack_layers(out.attentions, "self", model)  # (L, H, T, T)
    ids = enc.input_ids[0].tolist()
    return AttentionResult(
        tokens=display_tokens(tokenizer, ids), attentions=attentions, causal=is_causal_config(model.config),
        special=enc.special, padding=[False] * len(ids), token_ids=ids, warnings=enc.warnings,
        token_type_ids=segments["token_type_ids"][0].tolist() if segments else None,
    )


def _decoder_ids(model, tokenizer, target: str, limit: int | None) -> tuple[list[int], list[str]]:
    """Teacher-forced decoder input: the start token followed by the target shifted right; and the target's
    warnings (its truncation)."""
    encoded = encode(tokenizer, target, limit=limit, vocab_size=getattr(model.config, "vocab_size", None))
    labels = encoded.input_ids[0].tolist()
    config = model.config
    start = getattr(config, "decoder_start_token_id", None)
    if start is None:
        start = config.pad_token_id if config.pad_token_id is not None else config.bos_token_id
    if start is None:
        raise ExtractionError(f"{type(model).__name__} has no decoder_start_token_id; cannot build decoder input")
    return [start] + labels[:-1], [f"target: {w}" for w in encoded.warnings]


def _encoder_decoder(model, tokenizer, enc, target, limit, device) -> AttentionResult:
    dec_ids, target_warnings = _decoder_ids(model, tokenizer, target, limit)
    out = model(
        input_ids=enc.input_ids.to(device), decoder_input_ids=torch.tensor([dec_ids], device=device),
        output_attentions=True, return_dict=True,
    )
    enc_ids = enc.input_ids[0].tolist()
    enc_tokens, dec_tokens = display_tokens(tokenizer, enc_ids), display_tokens(tokenizer, dec_ids)
    dec_special = special_flags(tokenizer, dec_ids)
    enc_pad, dec_pad = [False] * len(enc_ids), [False] * len(dec_ids)
    encoder = AttentionResult(
        enc_tokens, stack_layers(out.encoder_attentions, "encoder", model), False, enc.special, enc_pad,
        token_ids=enc_ids, kind="encoder",
    )
    decoder = AttentionResult(
        dec_tokens, stack_layers(out.decoder_attentions, "decoder", model), True, dec_special, dec_pad,
        token_ids=dec_ids, kind="decoder",
    )
    cross = AttentionResult(
        dec_tokens, stack_layers(out.cross_attentions, "cross", model), False, dec_special, dec_pad,
        token_ids=dec_ids, key_tokens=enc_tokens, key_special=enc.special, key_padding=enc_pad, kind="cross",
    )
    return AttentionResult(
        enc_tokens, encoder.attentions, False, enc.special, enc_pad, token_ids=enc_ids, kind="encoder",
        warnings=enc.warnings + target_warnings, encoder=encoder, decoder=decoder, cross=cross,
    )
