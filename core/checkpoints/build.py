"""Config + state dict -> model, checked before any large allocation.

A Hugging Face model is first built on the ``meta`` device (no memory) so its
size and every tensor shape can be compared with the weights; only then are
``config.json`` and one ``model.safetensors`` written into a clean private
folder and loaded with ``from_pretrained(attn_implementation="eager",
trust_remote_code=False, local_files_only=True)``. transformers never sees the
upload itself, so no pickle or Python file of it can reach the library.
"""

from __future__ import annotations

import json
from pathlib import Path

import torch
from safetensors.torch import save_file
from transformers import CONFIG_MAPPING, AutoConfig, AutoModel

from .archive import ENV_MAX_TOTAL, Limits
from ..custom_model import CONFIG_NAME, AttnScopeTransformer, TransformerConfig, load_custom_state
from ..errors import CheckpointError, ModelLoadError
from ..errors import first_line as _short
from .quiet import quiet_transformers

MAX_LAYERS = 1000  # far above any real model; stops a config from building a million modules
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "n_layers", "encoder_layers", "decoder_layers")
_OPTIONAL = ("pooler.",)  # AutoModel adds BERT's pooler; masked-LM checkpoints do not carry it

NOT_MODEL_CONFIG = ("config.json is not a model config ({why}); a model folder's config.json names its architecture, "
                    "e.g. \"model_type\": \"bert\" — upload the one written by save_pretrained")
UNSUPPORTED = ("config.json names model_type {model_type!r}, which transformers does not know; AttnScope loads "
               "architectures built into transformers (e.g. bert, roberta, gpt2) and never runs a checkpoint's own code")
BAD_CONFIG = "config.json cannot build a {model_type} model ({err}); upload the config.json saved with these weights"
TOO_BIG = ("config.json describes a model of {n:,} parameters ({gb:.1f} GB), above the {limit:,}-byte limit; "
           "raise it with {env} or Limits(max_total_bytes=...)")
SHAPE = ("the weights do not match config.json: {key} is {got} in the weights but {want} in a {model_type} model with "
         "this config; upload the config.json saved with these weights")
MISSING = ("the weights do not match config.json: {n} of the model's {total} tensors are missing from the weights "
           "(e.g. {key}); upload the weights saved with this config.json")


def check_model_config(config) -> str:
    """The ``model_type`` of a parsed config.json, or CheckpointError if it is not a model config."""
    if not isinstance(config, dict):
        raise CheckpointError(NOT_MODEL_CONFIG.format(why=f"it holds a JSON {type(config).__name__}, not an object"))
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise CheckpointError(NOT_MODEL_CONFIG.format(why='it has no "model_type"'))
    for key in _LAYER_KEYS:
        value = config.get(key)
        if isinstance(value, int) and not 0 < value <= MAX_LAYERS:
            raise CheckpointError(BAD_CONFIG.format(model_type=model_type, err=f"{key}={value}"))
    return model_type


def build_custom(config: dict, state: dict[str, torch.Tensor], limits: Limits) -> AttnScopeTransformer:
    try:
        cfg = TransformerConfig.from_dict(config)
        sizes = (cfg.vocab_size, cfg.d_model, cfg.n_heads, cfg.n_layers, cfg.d_ff, cfg.max_positions)
        if not all(isinstance(v, int) and not isinstance(v, bool) and v > 0 for v in sizes):
            raise ValueError("sizes must be positive integers")
        if cfg.d_model % cfg.n_heads or cfg.n_layers > MAX_LAYERS:
            raise ValueError(f"d_model {cfg.d_model} / n_heads {cfg.n_heads} / n_layers {cfg.n_layers}")
        _check_numel(_custom_numel(cfg), limits)
        model = AttnScopeTransformer(cfg)
    except CheckpointError:
        raise
    except Exception as err:  # noqa: BLE001 - a wrong type in any field
        raise CheckpointError(BAD_CONFIG.format(model_type="attnscope", err=_short(err))) from None
    try:
        return load_custom_state(model, state)
    except ModelLoadError as err:
        raise CheckpointError(f"{err}; upload the config.json saved with these weights") from None


def _custom_numel(cfg: TransformerConfig) -> int:
    d = cfg.d_model
    per_block = 4 * (d * d + d) + 2 * d * cfg.d_ff + cfg.d_ff + d + 4 * d
    return (cfg.vocab_size + cfg.max_positions) * d + cfg.n_layers * per_block


def _check_numel(numel: int, limits: Limits) -> None:
    limit = limits.max_total_bytes
    if numel * 4 > limit:
        raise CheckpointError(TOO_BIG.format(n=numel, gb=numel * 4 / 1e9, limit=limit, env=ENV_MAX_TOTAL))


def build_hf(config: dict, state: dict[str, torch.Tensor], clean: Path, limits: Limits):
    """Load a transformers model from ``config`` and ``state`` through the clean folder ``clean``."""
    model_type = check_model_config(config)
    if model_type not in CONFIG_MAPPING:
        raise CheckpointError(UNSUPPORTED.format(model_type=model_type))
    clean.mkdir(mode=0o700, exist_ok=True)
    (clean / CONFIG_NAME).write_text(json.dumps(config))
    with quiet_transformers():  # the caller reports what matters, not transformers' load report
        try:
            hf_config = AutoConfig.from_pretrained(clean, trust_remote_code=False, local_files_only=True)
            with torch.device("meta"):
                skeleton = AutoModel.from_config(hf_config, attn_implementation="eager", trust_remote_code=False)
        except Exception as err:  # noqa: BLE001 - invalid values surface as many exception types
            raise CheckpointError(BAD_CONFIG.format(model_type=model_type, err=_short(err))) from None
        _check_numel(sum(p.numel() for p in skeleton.parameters()), limits)
        _check_shapes(skeleton, state, model_type)
        save_file(_unshared(state), str(clean / "model.safetensors"))
        try:
            model, info = AutoModel.from_pretrained(
                clean, config=hf_config, attn_implementation="eager", trust_remote_code=False,
                local_files_only=True, use_safetensors=True, output_loading_info=True)
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(BAD_CONFIG.format(model_type=model_type, err=_short(err))) from None
    missing = sorted(k for k in info.get("missing_keys", ()) if not k.startswith(_OPTIONAL))
    if missing:
        total = len(model.state_dict())
        raise CheckpointError(MISSING.format(n=len(missing), total=total, key=missing[0]))
    return model.eval()


def _check_shapes(skeleton, state, model_type: str) -> None:
    expected = {k: tuple(v.shape) for k, v in skeleton.state_dict().items()}
    prefix = f"{skeleton.base_model_prefix}." if skeleton.base_model_prefix else "\x00"
    for key, tensor in sorted(state.items()):
        name = key if key in expected else key.removeprefix(prefix)
        if name in expected and tuple(tensor.shape) != expected[name]:
            got, want = list(tensor.shape), list(expected[name])
            raise CheckpointError(SHAPE.format(key=key, got=got, want=want, model_type=model_type))


def _unshared(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses tensors that share memory (tied embeddings in a .bin); copy the repeats."""
    seen, out = set(), {}
    for key, tensor in state.items():
        tensor = tensor.contiguous()
        ptr = tensor.untyped_storage().data_ptr() if tensor.numel() else None
        out[key] = tensor.clone() if ptr in seen else tensor
        seen.add(ptr)
    return out

