"""AttnScope core: multi-head attention and per-layer, per-head attention extraction.

The contract every other package relies on: ``AttentionResult.attentions`` is a
float32 CPU tensor shaped ``[layers, heads, q, k]``.

Each public name below imports its module (and torch) on first use (``core.lazy``).
"""

from .lazy import lazy_names

_WHERE = {
    "MultiHeadAttention": ".attention", "causal_mask": ".attention", "scaled_dot_product_attention": ".attention",
    "TINY_PRESETS": ".custom_model", "AttnScopeTransformer": ".custom_model", "TransformerConfig": ".custom_model",
    "load_custom_model": ".custom_model", "save_custom_model": ".custom_model",
    "pick_device": ".device",
    "AttnScopeError": ".errors", "Cancelled": ".errors", "CheckpointError": ".errors", "ExtractionError": ".errors",
    "InputError": ".errors", "ModelLoadError": ".errors", "OutOfMemory": ".errors", "SettingError": ".errors",
    "ServerError": ".errors", "InstallError": ".errors", "DiskFull": ".errors",
    "extract_attention": ".extraction.extract", "extract_module_attention": ".extraction.extract",
    "load_model": ".checkpoints.loading",
    "DEFAULT_MODEL": ".checkpoints.registry", "DEMO_MODELS": ".checkpoints.registry",
    "MODEL_CHOICES": ".checkpoints.registry", "REAL_MODELS": ".checkpoints.registry",
    "describe_model": ".checkpoints.registry:describe",
    "AttentionResult": ".result",
    "STREAM_IMPLEMENTATION": ".extraction.streaming", "StreamedAttention": ".extraction.streaming",
    "stream_attention": ".extraction.streaming",
    "Limits": ".checkpoints.archive",
    "LoadedCheckpoint": ".checkpoints.checkpoint", "load_checkpoint": ".checkpoints.checkpoint",
    "load_untrusted": ".checkpoints.untrusted",
}
__all__ = list(_WHERE)
__getattr__, __dir__ = lazy_names(__name__, _WHERE)
