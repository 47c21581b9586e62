"""Which keys each layer's queries may see, beyond the causal mask: sliding-window (local) attention.

Mistral, Phi-3 and Starcoder2 attend within a window in every layer; Gemma 2/3, Cohere 2, GPT-OSS, Qwen 2/3
(``use_sliding_window``) and ModernBERT alternate local and global layers (``config.layer_types``); GPT-Neo
names its local layers in ``attention_layers``. A key outside a row's window gets weight 0 there, like a
later key in a causal model, so a row's valid keys (which normalise its entropy and weight it,
``diagnostics.measure.row_stats.valid_keys``) are the keys in its window.

``attention_windows(model)`` gives one entry per layer: None for a global layer, else ``W``: a causal row at
position p sees keys ``p - W < j <= p`` (the window holds W keys, its own included; transformers'
``sliding_window`` and GPT-Neo's ``window_size``), a bidirectional one (ModernBERT) keys ``|p - j| <= W``
(``local_attention // 2`` on each side). ``tests/core/test_windows.py`` checks both against each model's maps.
"""

from __future__ import annotations

from ..whole import is_size
from .text_config import text_config


def attention_windows(model) -> list[int | None] | None:
    """The window of every self-attention layer of ``model`` (None: a global layer), or None when it has none
    or its config cannot say (a config that sets them per layer raises when asked for one: read as global)."""
    config = text_config(model)
    try:
        if config is None or getattr(config, "is_encoder_decoder", False):
            return None
        windows = _from_layer_types(config) or _from_gpt_neo(config) or _everywhere(config)
    except Exception:  # noqa: BLE001 - transformers' per-layer configs raise on a global read (NeoMME)
        return None
    return windows if windows and any(w is not None for w in windows) else None


def in_window(distance, window: int | None, causal: bool):
    """Whether keys at ``distance = query position - key position`` (a tensor) lie in a row's window."""
    if window is None:
        return distance == distance  # all True, in distance's shape
    return distance < window if causal else distance.abs() <= window


def _from_layer_types(config) -> list[int | None] | None:
    """The attention layers of ``config.layer_types`` (hybrid models list their convolution, recurrent and linear
    layers there too, which return no maps). Gemma 3 read both ways (``use_bidirectional_attention``, EmbeddingGemma)
    stores its window as W // 2 + 1 and masks ``|p - j| < W``."""
    types, window = getattr(config, "layer_types", None), _positive(getattr(config, "sliding_window", None))
    if not isinstance(types, (list, tuple)) or window is None:
        return None
    if getattr(config, "use_bidirectional_attention", False) is True:
        window -= 1
    kinds = [str(kind) for kind in types if _returns_maps(str(kind))]
    return [window if "sliding" in kind else None for kind in kinds]


def _returns_maps(kind: str) -> bool:
    return "attention" in kind and "linear" not in kind


def _from_gpt_neo(config) -> list[int | None] | None:
    kinds, window = getattr(config, "attention_layers", None), _positive(getattr(config, "window_size", None))
    if not isinstance(kinds, (list, tuple)) or window is None:
        return None
    return [window if kind == "local" else None for kind in kinds]


def _everywhere(config) -> list[int | None] | None:
    """Models with a ``sliding_window`` and no per-layer types use it in every layer (Mistral, Phi-3)."""
    window, layers = _positive(getattr(config, "sliding_window", None)), getattr(config, "num_hidden_layers", None)
    if window is None or not isinstance(layers, int) or getattr(config, "layer_types", None) is not None:
        return None
    return [window] * layers


def _positive(value) -> int | None:
    return value if is_size(value) else None
