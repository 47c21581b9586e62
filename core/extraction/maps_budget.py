"""How much memory whole attention maps take, and a check before a forward pass that would not fit.

Whole maps are ``layers × heads × T²`` float32 numbers: SmolLM2 (30 × 9) at its 8,192-token limit is 72 GB, and
its forward pass was killed by the system for lack of memory (a notebook's kernel with it) or failed deep inside
PyTorch. ``check_maps_fit`` refuses such a text first, with the length that fits; ``diagnostics.stream_statistics``
never holds the maps. The budget is ``$ATTNSCOPE_MAX_MAPS_BYTES``, else half the memory this process may use (the
maps are held about once more while they are stacked): the machine's, or a container's limit where it is lower.
"""

from __future__ import annotations

import math
import os

import torch
from torch import nn

from ..checkpoints.archive import env_size
from ..device import model_device
from ..errors import InputError, counted, size_text
from .machine_memory import machine_memory
from .out_of_memory import WHOLE_MAPS, whole_maps_advice
from .text_config import config_size, is_encoder_decoder

ENV_MAX_MAPS = "ATTNSCOPE_MAX_MAPS_BYTES"


def maps_budget(device=None) -> int | None:
    """Bytes the whole maps of one input may take: ``$ATTNSCOPE_MAX_MAPS_BYTES``, else half the memory this
    process may use (a container's limit where it has one; None where the system does not say), and no more than
    the free memory of the CUDA GPU ``device`` names: the maps are all on it until the forward ends."""
    if os.environ.get(ENV_MAX_MAPS, "").strip():  # blank is unset, as for every size setting
        return env_size(ENV_MAX_MAPS, None)
    memory = machine_memory()
    budgets = [memory // 2 if memory else None, _free_gpu_memory(device)]
    return min((b for b in budgets if b is not None), default=None)


def _free_gpu_memory(device) -> int | None:
    """Free bytes on ``device`` when it is a CUDA GPU (``torch.cuda.mem_get_info``), else None."""
    if device is None or torch.device(device).type != "cuda":
        return None
    try:
        return int(torch.cuda.mem_get_info(torch.device(device))[0])
    except (RuntimeError, AssertionError, ValueError):  # no usable CUDA after all: the host's budget stands
        return None


def check_maps_fit(model, tokens: int, target_tokens: int | None = None) -> None:
    """InputError, before the forward pass, when the whole maps of ``tokens`` tokens (and, for an encoder-decoder,
    ``target_tokens`` on the decoder side) would pass ``maps_budget()``."""
    budget = maps_budget(model_device(model))
    if not budget:
        return
    if target_tokens is None:
        over = maps_over_budget(model, [tokens], budget)
    else:  # an encoder-decoder: encoder S², decoder T², cross T·S (whole_maps_bytes counts 3·S²)
        per_pair = whole_maps_bytes(model, [1]) // 3  # 4 bytes × layers × heads
        needed = per_pair * (tokens ** 2 + target_tokens ** 2 + tokens * target_tokens)
        over = None if needed <= budget else (needed, math.isqrt(budget // (3 * per_pair)))
    if over is not None:
        needed, fits = over
        raise InputError(f"this text is {tokens:,} tokens for {type(model).__name__}, whose whole attention maps "
                         f"would take {over_text(needed, budget)} they may take here "
                         f"({ENV_MAX_MAPS}, by default half the memory this process may use, at most the GPU's "
                         f"free memory); {shorten_advice(fits)}{_streaming_advice(model)}")


def _streaming_advice(model) -> str:
    """", or stream it" for a model ``stream_statistics`` reads whole; nothing for one it refuses (Bloom, GPT-Neo,
    DeBERTa, T5) or reads only the encoder of: the advice had sent their users to an error."""
    return ", or use diagnostics.stream_statistics, which never holds the maps" if whole_maps_advice(
        model) == WHOLE_MAPS else ""


NO_TOKEN_FITS = "not even one token fits: raise the limit"  # a budget too small for one token's maps


def over_text(needed: int, budget: int, binary: bool = False) -> str:
    """``"4.32 GB, over the 2 GB"``: what maps need against a budget, for a refusal; ``"just over the 2 GB"``
    within 1 % of it, where the two read alike or nearly ("2 GB, over the 2 GB"; "1 MB, over the 1,000 kB")."""
    need, room = size_text(needed, binary), size_text(budget, binary)
    return f"just over the {room}" if need == room or needed < 1.01 * budget else f"{need}, over the {room}"


def shorten_advice(fits: int) -> str:
    """What a refusal asks for: a length that fits, or (a budget too small for one token) a larger budget."""
    return f"shorten it to about {counted(fits, 'token')}" if fits else NO_TOKEN_FITS


def maps_over_budget(model, lengths, budget: int) -> tuple[int, int] | None:
    """``(bytes, tokens)`` when the whole maps of inputs of ``lengths`` tokens would take over ``budget`` bytes:
    what they would take, and the longest length the inputs may be cut to and fit (the shorter ones kept whole:
    scaling every input alike had named a length at which they still did not fit); None when they fit."""
    needed = whole_maps_bytes(model, lengths)
    if needed <= budget:
        return None
    low, high = 0, max(lengths)  # fits(low), not fits(high)
    while high - low > 1:
        middle = (low + high) // 2
        low, high = (middle, high) if whole_maps_bytes(model, [min(n, middle) for n in lengths]) <= budget else (
            low, middle)
    return needed, low


def whole_maps_bytes(model, lengths) -> int:
    """float32 bytes of the whole maps of inputs of ``lengths`` tokens: layers × heads × T² × 4 each, three parts
    (encoder, decoder, cross) for an encoder-decoder. A module without a config (``nn.MultiheadAttention`` layers)
    counts its layers' heads (it had counted 0, and 57 MiB of maps passed a 1 MiB budget); 0 when neither says."""
    layers = config_size(model, "num_hidden_layers", "n_layers")
    heads = config_size(model, "num_attention_heads", "n_heads")
    if layers is None or heads is None:
        layers, heads = 1, sum(m.num_heads for m in model.modules() if isinstance(m, nn.MultiheadAttention))
    parts = 3 if is_encoder_decoder(model) else 1  # encoder, decoder, cross (about)
    return 4 * parts * layers * heads * sum(n * n for n in lengths)
