"""AttnScope core: multi-head attention and per-layer, per-head attention extraction.

The contract every other package relies on: ``AttentionResult.attentions`` is a
float32 CPU tensor shaped ``[layers, heads, q, k]``.
"""

from .attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from .custom_model import (
    TINY_PRESETS,
    AttnScopeTransformer,
    TransformerConfig,
    load_custom_model,
    save_custom_model,
)
from .device import pick_device
from .errors import AttnScopeError, Cancelled, CheckpointError, ExtractionError, InputError, ModelLoadError
from .extraction.extract import extract_attention, extract_module_attention
from .checkpoints.loading import load_model
from .checkpoints.registry import DEFAULT_MODEL, DEMO_MODELS, MODEL_CHOICES, REAL_MODELS
from .checkpoints.registry import describe as describe_model
from .result import AttentionResult
from .extraction.streaming import STREAM_IMPLEMENTATION, StreamedAttention, stream_attention
from .checkpoints.archive import Limits
from .checkpoints.checkpoint import LoadedCheckpoint, load_checkpoint
from .checkpoints.untrusted import load_untrusted

__all__ = [
    "AttentionResult", "AttnScopeError", "AttnScopeTransformer", "Cancelled", "CheckpointError", "DEFAULT_MODEL",
    "DEMO_MODELS", "ExtractionError", "InputError", "ModelLoadError", "MultiHeadAttention", "TINY_PRESETS",
    "TransformerConfig", "causal_mask", "extract_attention", "extract_module_attention", "load_custom_model",
    "load_model", "pick_device", "save_custom_model", "scaled_dot_product_attention",
    "Limits", "LoadedCheckpoint", "load_checkpoint", "load_untrusted", "MODEL_CHOICES", "REAL_MODELS",
    "describe_model", "STREAM_IMPLEMENTATION", "StreamedAttention", "stream_attention",
]
