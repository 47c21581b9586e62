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
import os
import re
from collections import Counter
from pathlib import Path

import torch
from safetensors.torch import save_file
import transformers
from transformers import CONFIG_MAPPING, AutoConfig, AutoModel, PreTrainedModel

from .archive import ENV_MAX_MODEL, NO_ROOM, Limits, check_room, no_room
from ..custom_model import (
    CONFIG_NAME, AttnScopeTransformer, TransformerConfig, check_real, load_custom_state, parameter_count,
)
from ..errors import CheckpointError, DiskFull, ModelLoadError, clipped
from ..errors import first_line as _short
from .quiet import quiet_transformers
from ..whole import is_count

# Structural caps, far above any released model (Llama 3.1 405B: 126 layers, 128 heads, width 16,384, FFN 53,248;
# Gemma: vocabulary 256,000; Mistral: 131,072 positions). They bound what a config may ask the library to build
# (module count, tensor sizes) before anything is built, even on the meta device.
# The safetensors header's share of each tensor (name, dtype, shape, offsets: ~100 bytes) and the file system's
# blocks: demo-bert's 8,312-byte header passed a check of the tensor bytes alone, and the write then failed
HEADER_BYTES_PER_TENSOR = 4096
MAX_LAYERS = 512  # per stack; meta-building T5 with 2 x 1000 tiny layers took 6.8 s (2-core, load 2.3)
MAX_HEADS = 1024
MAX_WIDTH = 1 << 17  # hidden, head and feed-forward sizes
MAX_VOCAB = 1 << 22  # vocabulary, position and bucket counts
# transformers builds an id2label entry per label, even for a model without a classifier: 1,000,000 labels took 5-12 s
# and +0.6 GB from an 80 kB upload (ImageNet-21k has 21,843 classes)
MAX_LABELS = 1 << 16
MAX_DEPTH_FACTOR = 16  # EfficientNet-B7 multiplies its stages' layers by 3.1
# The dtypes a model is loaded in: its config's when bfloat16 or float32, else float32, the 4 bytes a parameter that
# the model limit counts ("dtype": "float64" built twice the limit). Not float16: AttnScope reads the maps of eager
# attention, whose float16 scores overflow past 65,504 to inf and NaN (MiniLM with Q/K x 24: 61 of 72 heads NaN,
# "non_finite_attention", where float32 shows saturated heads); bfloat16 has float32's range.
LOAD_DTYPES = (torch.bfloat16, torch.float32)


def load_dtype(config) -> torch.dtype:
    """The dtype a model of transformers ``config`` is loaded in (``LOAD_DTYPES``)."""
    return config.dtype if getattr(config, "dtype", None) in LOAD_DTYPES else torch.float32


_CAPPED_KEYS = {  # key -> (smallest allowed, largest allowed), in config.json or any nested sub-config
    **dict.fromkeys(("num_hidden_layers", "n_layer", "n_layers", "num_layers", "encoder_layers", "decoder_layers",
                     "num_decoder_layers", "num_encoder_layers", "num_hidden_groups", "inner_group_num"),
                    (1, MAX_LAYERS)),
    **dict.fromkeys(("num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads",
                     "decoder_attention_heads", "num_key_value_heads", "num_kv_heads", "n_head_kv",
                     "multi_query_group_num"), (1, MAX_HEADS)),
    **dict.fromkeys(("hidden_size", "n_embd", "n_embed", "d_model", "dim", "embedding_size", "d_kv", "d_head",
                     "head_dim", "kv_channels", "intermediate_size", "d_ff", "d_inner", "dff", "ffn_dim",
                     "encoder_ffn_dim", "decoder_ffn_dim", "hidden_dim", "n_inner", "ffn_hidden_size",
                     "word_embed_proj_dim", "pooler_hidden_size", "rotary_dim"), (1, MAX_WIDTH)),
    **dict.fromkeys(("vocab_size", "decoder_vocab_size", "max_position_embeddings", "n_positions", "n_ctx",
                     "max_source_positions", "max_target_positions", "max_encoder_position_embeddings",
                     "max_decoder_position_embeddings", "relative_attention_num_buckets", "max_positions"),
                    (1, MAX_VOCAB)),
    "type_vocab_size": (0, MAX_VOCAB),  # DeBERTa-v2 has none: 0
    "num_labels": (0, MAX_LABELS),
}
# Depth given as a list, one entry per stage or layer (ConvNeXt and Swin's depths, Funnel's block sizes, Reformer's
# attention layers): the layers they build together are capped as one count is (depths [20000] from a 163-byte
# config built 180,006 tensors on the meta device, 46 s)
_LAYER_LISTS = ("depths", "block_sizes", "block_repeats", "attn_layers", "layer_types", "attention_layers")
_MAX_DEPTH = 4  # nested sub-configs (encoder/decoder, text_config) looked into
_OPTIONAL = ("pooler.",)  # AutoModel adds BERT's pooler; masked-LM checkpoints do not carry it
# Numbers of the tensors a model computes when it is built instead of reading them (Marian's sinusoidal position
# tables, ``_never_saved``): transformers computes them in Python, 16 M numbers in 20 s and +0.5 GB, so an upload may
# leave out at most as many as it holds, and at most this many (opus-mt-big's: 2 × 1,024 × 1,024)
MAX_COMPUTED = 2**22

COMPUTED = ("config.json asks for {n:,} numbers of position tables the weights leave out, computed when the model is "
            "built; at most {limit:,} are: give the weights saved with this config.json, or fewer positions")
QUANTIZED = ("config.json asks for quantized weights (quantization_config, quant_method {method}); AttnScope builds a "
             "checkpoint from plain float weights only, as a quantizer runs code of its own (and may fetch kernels) — "
             "give the model saved after dequantizing it (model.dequantize(), then save_pretrained)")
NOT_TEXT = ("config.json describes {model}, which has no table of token embeddings (a speech, vision or multimodal "
            "model, or one that reads characters); AttnScope reads text transformers that embed token ids — give "
            "such a model's checkpoint")
NOT_MODEL_CONFIG = ("config.json is not a model config ({why}); a model folder's config.json names its architecture, "
                    "e.g. \"model_type\": \"bert\" — give the one written by save_pretrained")
UNSUPPORTED = ("config.json names model_type {model_type!r}, which transformers does not know; AttnScope loads "
               "architectures built into transformers (e.g. bert, roberta, gpt2) and never runs a checkpoint's "
               "own code")
BAD_CONFIG = "config.json cannot build a {model_type} model ({err}); give the config.json saved with these weights"
TOO_BIG = ("config.json describes a model of {at_least}{n:,} parameters ({gb:.1f} GB as float32), above the "
           "{limit:,}-byte model limit; raise it with {env} or Limits(max_model_bytes=...)")
BIG_BUFFERS = ("config.json describes a model that takes {mb:,.0f} MB with its buffers (the largest, {name}, is "
               "{shape}: {buffer_mb:,.0f} MB), above the {limit:,}-byte model limit; lower max_position_embeddings, "
               "or raise the limit with {env} or Limits(max_model_bytes=...)")
BAD_SIZE = ("config.json sets {key} to {value}; it must be a whole number from {low} to {high:,} — give the "
            "config.json saved with these weights")
BAD_LAYERS = ("config.json sets {key} to {value}; its layers must be at most {high:,} in all — give the config.json "
              "saved with these weights")
MANY_LABELS = ("config.json lists {n:,} labels in {key}; at most {high:,} are accepted — give the config.json saved "
               "with these weights")
HEAVY = ("the weights' tensors take {mb:,.1f} MB (views of the same stored numbers under names the model does not "
         "have count each time), above twice the {stored:,.1f} MB the file stores or the {limit:,}-byte model limit; "
         "give the model's own state dict, or raise the limit with {env}")
DROPPED = ("the {model_type} model built from config.json does not use {n} of the weights' tensors (e.g. {key}); "
           "they were dropped, so the model read is not all of the one saved — check config.json's settings")
SHAPE = ("the weights do not match config.json: {key} is {got} in the weights but {want} in a {model_type} model with "
         "this config; give the config.json saved with these weights")
PRUNED = ("the weights do not match config.json: {key} is {got} in the weights but {want} in a {model_type} model with "
          "this config, which lists heads pruned from layer(s) {layers} (pruned_heads): transformers no longer "
          "builds pruned models, and AttnScope reads models with as many heads in every layer; give the checkpoint "
          "from before pruning")
MISSING = ("the weights do not match config.json: {n} of the model's {total} tensors are missing from the weights "
           "(e.g. {key}); give the weights saved with this config.json")
UNWRAPPED = ("the weights' names start with {prefix!r} (a training wrapper's, as DDP or Lightning save them); read "
             "without it")
SHORT = ("the weights do not match config.json: the model it describes has {need:,} parameters, more than the weights "
         "hold ({given:,}); give the weights saved with this config.json")


def check_model_config(config, limits: Limits | None = None) -> str:
    """The ``model_type`` of a parsed config.json, or CheckpointError before anything is built.

    Every layer, head, width and vocabulary key (``_CAPPED_KEYS``, nested sub-configs too) must be a whole
    number in its range. With ``limits``, a lower bound of the parameter count (``min_parameters``) must also
    fit ``limits.max_model_bytes``; the exact count is checked later on the meta-device skeleton.
    """
    if not isinstance(config, dict):
        raise CheckpointError(NOT_MODEL_CONFIG.format(why=f"it holds a JSON {type(config).__name__}, not an object"))
    model_type = config.get("model_type")
    if not isinstance(model_type, str) or not model_type:
        raise CheckpointError(NOT_MODEL_CONFIG.format(why='it has no "model_type"'))
    if config.get("quantization_config") is not None:  # a quantizer's code, kernels fetched from the Hub (mxfp4)
        method = config["quantization_config"]
        method = method.get("quant_method") if isinstance(method, dict) else method
        raise CheckpointError(QUANTIZED.format(method=json.dumps(method)[:40]))
    check_config_sizes(config)
    if limits is not None:
        _check_numel(min_parameters(config), limits, at_least=True)
    return model_type


def check_config_sizes(config: dict, depth: int = 0) -> None:
    """CheckpointError unless every ``_CAPPED_KEYS`` value in ``config`` (and its sub-configs) is in range."""
    uneven = uneven_head_groups(config)
    if uneven:
        raise CheckpointError(f"config.json sets {uneven}; give the config.json saved with these weights")
    _check_repeated_blocks(config)
    factor = config.get("depth_coefficient")  # EfficientNet's layers per stage x this: 300 built 103,812 tensors
    if isinstance(factor, (int, float)) and not isinstance(factor, bool) and not 0 < factor <= MAX_DEPTH_FACTOR:
        raise CheckpointError(f"config.json sets depth_coefficient to {json.dumps(factor)[:40]}; it must be above 0 "
                              f"and at most {MAX_DEPTH_FACTOR} — give the config.json saved with these weights")
    for key, value in config.items():
        if key in ("id2label", "label2id") and isinstance(value, dict):
            if len(value) > MAX_LABELS:
                raise CheckpointError(MANY_LABELS.format(n=len(value), key=key, high=MAX_LABELS))
        elif isinstance(value, dict) and depth < _MAX_DEPTH:
            check_config_sizes(value, depth + 1)
        elif key in _LAYER_LISTS and isinstance(value, list):
            _check_layer_list(key, value)
        elif key in _CAPPED_KEYS and value is not None:
            low, high = _CAPPED_KEYS[key]
            if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
                shown = json.dumps(value)[:40]
                raise CheckpointError(BAD_SIZE.format(key=key, value=shown, low=low, high=high))


def uneven_head_groups(config: dict) -> str | None:
    """What is wrong when the query heads cannot be split evenly among the key/value heads (grouped-query attention),
    else None: such a model loads, then fails on its first forward with a shape error."""
    heads = _first(config, ("num_attention_heads", "n_head", "num_heads"))
    groups = _first(config, ("num_key_value_heads", "num_kv_heads", "n_head_kv"))
    if heads > 0 and groups > 0 and heads % groups:
        return f"{heads} attention heads over {groups} key/value heads, which must divide them evenly"
    return None


def _check_repeated_blocks(config: dict) -> None:
    """Funnel runs block_sizes[i] x block_repeats[i] layers: each list within the cap, [500] x [500] ran 250,000."""
    sizes, repeats = config.get("block_sizes"), config.get("block_repeats")
    if isinstance(sizes, list) and isinstance(repeats, list):
        pairs = [(s, r) for s, r in zip(sizes, repeats) if is_count(s) and is_count(r)]
        if sum(s * r for s, r in pairs) > MAX_LAYERS:
            shown = json.dumps(sizes)[:20] + " × " + json.dumps(repeats)[:20]
            raise CheckpointError(BAD_LAYERS.format(key="block_sizes × block_repeats", value=shown, high=MAX_LAYERS))


def _check_layer_list(key: str, value: list) -> None:
    """A list of stages' layer counts (whole numbers) or of layers (names): MAX_LAYERS layers in all at most."""
    counts = [v for v in value if isinstance(v, int) and not isinstance(v, bool)]
    if len(value) > MAX_LAYERS or any(v < 0 for v in counts) or sum(counts) > MAX_LAYERS:
        raise CheckpointError(BAD_LAYERS.format(key=key, value=json.dumps(value)[:40], high=MAX_LAYERS))


def _first(config: dict, keys, default: int = 0) -> int:
    return next((config[k] for k in keys if isinstance(config.get(k), int)), default)


def min_parameters(config: dict) -> int:
    """A lower bound of the parameters ``config`` builds: embeddings + per layer Q, O and the feed-forward.

    Lower, never higher: K and V are left out (grouped-query attention shrinks them), the deepest stack stands
    for all of them (BART repeats ``encoder_layers`` as ``num_hidden_layers``), and ALBERT counts its shared
    layer groups, not its repeats. ``check_model_config`` ran first, so every value is in range.
    """
    width = _first(config, ("hidden_size", "n_embd", "n_embed", "d_model", "dim"))
    embed = _first(config, ("embedding_size",), width)
    ff = _first(config, ("intermediate_size", "d_ff", "d_inner", "dff", "ffn_dim", "encoder_ffn_dim", "hidden_dim",
                         "n_inner", "ffn_hidden_size"))
    heads = _first(config, ("num_attention_heads", "n_head", "n_heads", "num_heads", "encoder_attention_heads"))
    head_dim = _first(config, ("head_dim", "d_kv", "d_head"))
    inner = heads * head_dim if heads and head_dim else width
    if config.get("model_type") == "albert":
        layers = _first(config, ("num_hidden_groups",), 1) * _first(config, ("inner_group_num",), 1)
    else:
        stacks = (_first(config, ("num_layers",)) + _first(config, ("num_decoder_layers",)),
                  _first(config, ("encoder_layers",)) + _first(config, ("decoder_layers",)))
        layers = max(*stacks, _first(config, ("num_hidden_layers", "n_layer", "n_layers", "num_layers")))
    return _first(config, ("vocab_size",)) * embed + layers * (2 * width * inner + 2 * width * ff)


def build_custom(config: dict, state: dict[str, torch.Tensor], limits: Limits) -> AttnScopeTransformer:
    try:
        cfg = TransformerConfig.from_dict(config)  # sizes whole numbers >= 1, d_model divisible by n_heads
        if cfg.n_layers > MAX_LAYERS:
            raise ValueError(f"n_layers {cfg.n_layers} is above {MAX_LAYERS}")
        need = parameter_count(cfg)
        _check_numel(need, limits)
        _check_covered(need, _numel(state, skip=("lm_head.weight",)))
        model = AttnScopeTransformer(cfg)
        expected = model.state_dict()
        for key in sorted(state.keys() & expected.keys()):
            check_real(key, state[key], expected[key], "attnscope", CheckpointError)
    except CheckpointError:
        raise
    except Exception as err:  # noqa: BLE001 - a wrong type in any field
        raise CheckpointError(BAD_CONFIG.format(model_type="attnscope", err=_short(err))) from None
    try:
        return load_custom_state(model, state)
    except ModelLoadError as err:
        raise CheckpointError(f"{err}; give the config.json saved with these weights") from None


def _check_numel(numel: int, limits: Limits, at_least: bool = False) -> None:
    limit = limits.max_model_bytes
    if numel * 4 > limit:
        raise CheckpointError(TOO_BIG.format(n=numel, gb=numel * 4 / 1e9, limit=limit, env=ENV_MAX_MODEL,
                                             at_least="at least " if at_least else ""))


def _check_buffers(skeleton, limits: Limits) -> None:
    """Buffers are built for real too: GPT-Neo's causal mask is positions x positions (24,000 positions: 1.1 GB
    from a 1.4 kB upload). Parameters at 4 bytes plus buffers at their own size must fit the model limit."""
    buffers = sorted(((b.numel() * b.element_size(), name, list(b.shape)) for name, b in skeleton.named_buffers()),
                     reverse=True)
    total = 4 * sum(p.numel() for p in skeleton.parameters()) + sum(size for size, _, _ in buffers)
    if total > limits.max_model_bytes:
        size, name, shape = buffers[0]
        raise CheckpointError(BIG_BUFFERS.format(mb=total / 1e6, name=name, shape=shape, buffer_mb=size / 1e6,
                                                 limit=limits.max_model_bytes, env=ENV_MAX_MODEL))


def build_hf(config: dict, state: dict[str, torch.Tensor], clean: Path, limits: Limits, notes: list[str]):
    """Load a transformers model from ``config`` and ``state`` through the clean folder ``clean``; a note in
    ``notes`` names the weights of the model itself that it does not use (``dropped_note``)."""
    model_type = check_model_config(config, limits)
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
        _check_buffers(skeleton, limits)
        token_vocabulary(skeleton)  # a speech or vision model is refused before its weights are read
        state = _unwrapped(state, skeleton, notes)
        _check_shapes(skeleton, state, model_type)
        unsaved = _never_saved(hf_config, skeleton)
        _check_present(skeleton, state, unsaved)
        _check_written(state, limits, skeleton)
        unshared = _unshared(state)
        check_room(clean, sum(t.numel() * t.element_size() + HEADER_BYTES_PER_TENSOR for t in unshared.values()))
        try:
            save_file(unshared, str(clean / "model.safetensors"))
        except Exception as err:  # noqa: BLE001 - a tensor safetensors cannot store (checked for in state_dict)
            full = re.search(r"os error (\d+)", str(err))  # the disk filled up since the check (another writer)
            if full and no_room(OSError(int(full.group(1)), "")):
                raise DiskFull(NO_ROOM.format(why=os.strerror(int(full.group(1))))) from None
            raise CheckpointError(BAD_CONFIG.format(model_type=model_type, err=_short(err))) from None
        try:
            model, info = AutoModel.from_pretrained(
                clean, config=hf_config, dtype=load_dtype(hf_config), attn_implementation="eager",
                trust_remote_code=False, local_files_only=True, use_safetensors=True, output_loading_info=True)
        except Exception as err:  # noqa: BLE001
            raise CheckpointError(BAD_CONFIG.format(model_type=model_type, err=_short(err))) from None
    check_missing(model, hf_config, info, _hidden_missing(model, state, unsaved))
    notes.extend(dropped_note(model, info.get("unexpected_keys", ())))
    return model.eval()


def wrapper_prefix(names, model) -> str:
    """The prefix a training wrapper put before every tensor name of ``model`` in ``names`` (``module.`` of DDP,
    ``model.`` of a Lightning module), or "" when the names are the model's own (with or without its base model's
    prefix, a task model's ``bert.``) or none of them is."""
    base = f"{model.base_model_prefix}." if model.base_model_prefix else ""
    own = set(model.state_dict()) | {base + name for name in model.state_dict()}
    prefixes = Counter()
    for name in names:
        if name in own:
            return ""
        cut = next((i for i, c in enumerate(name) if c == "." and name[i + 1:] in own), None)
        if cut is not None:
            prefixes[name[:cut + 1]] += 1
    return prefixes.most_common(1)[0][0] if prefixes else ""


def _unwrapped(state: dict, skeleton, notes: list[str]) -> dict:
    """``state`` without the prefix a training wrapper put before its names (``wrapper_prefix``), said in a note."""
    prefix = wrapper_prefix(state, skeleton)
    if not prefix:
        return state
    notes.append(UNWRAPPED.format(prefix=prefix))
    return {name.removeprefix(prefix): tensor for name, tensor in state.items()}


def check_missing(model, hf_config, info: dict, hidden=()) -> None:
    """CheckpointError (``MISSING``) when the weights ``from_pretrained`` read (its ``output_loading_info``) left
    tensors of ``model`` as built, random, besides the ones no checkpoint holds (BERT's pooler, ``_never_saved``);
    ``hidden``: the missing ones its class tells transformers not to report (``_hidden_missing``)."""
    unsaved = _never_saved(hf_config, model)
    missing = [k for k in info.get("missing_keys", ()) if not k.startswith(_OPTIONAL) and not unsaved(k)]
    missing = sorted({*missing, *hidden})
    if missing:
        total = len(model.state_dict())
        raise CheckpointError(MISSING.format(n=len(missing), total=total, key=missing[0]))


def dropped_note(model, unexpected) -> list[str]:
    """A note naming the tensors of the model itself that ``model``, built from config.json, does not use
    (transformers' ``unexpected_keys``): a BERT saved with relative position embeddings (``distance_embedding``,
    which transformers 5's BERT no longer has) was read without them and no word, another model than the one
    trained. A task head beside the model (a masked-LM checkpoint's ``cls.``, a causal LM's ``lm_head``) is none
    of its parts: only keys under one of the model's own modules (``encoder.``, ``h.``) are named, and of those not
    a tensor held directly by a module with submodules, where transformers 4 saved constant mask buffers (GPT-2's
    ``attn.masked_bias``, GPT-Neo's ``attn.attention.bias``): a weight sits in a module of its own."""
    parts, modules = {name for name, _ in model.named_children()}, dict(model.named_modules())
    prefix = f"{model.base_model_prefix}." if model.base_model_prefix else "\x00"

    def dropped(key: str) -> bool:
        parent = modules.get(key.rpartition(".")[0])
        return key.split(".")[0] in parts and (parent is None or next(parent.children(), None) is None)
    own = sorted(key for key in unexpected if dropped(key.removeprefix(prefix)))
    model_type = getattr(model.config, "model_type", type(model).__name__)
    return [DROPPED.format(n=len(own), model_type=model_type, key=own[0])] if own else []


def _hidden_missing(model, state, unsaved) -> list[str]:
    """The model's tensors that its class tells transformers not to report missing (``_keys_to_ignore_on_load_missing``)
    and that the weights do not hold by name: SeamlessM4T ignores whole text encoders and decoders, and an upload
    without them, padded with a junk tensor to pass the count, was built with random ones and no word."""
    patterns = [re.compile(p) for p in getattr(model, "_keys_to_ignore_on_load_missing", None) or ()]  # children's too
    if not patterns:
        return []
    names = _held_names(model, state)
    saved = model.state_dict()
    once = [k for k, _ in [*model.named_parameters(), *model.named_buffers()] if k in saved]  # tied ones once
    return [k for k in once if any(p.search(k) for p in patterns)
            and k not in names and not k.startswith(_OPTIONAL) and not unsaved(k)]


def token_vocabulary(model) -> int:
    """How many token ids ``model`` embeds; CheckpointError for a model that reads no tokens (speech, vision)."""
    try:
        embeddings = model.get_input_embeddings()
    except (NotImplementedError, AttributeError):  # Wav2Vec2 has none to give
        embeddings = None
    if not isinstance(embeddings, torch.nn.Embedding):
        raise CheckpointError(NOT_TEXT.format(model=type(model).__name__))
    return embeddings.num_embeddings


def _check_shapes(skeleton, state, model_type: str) -> None:
    """CheckpointError for a tensor the model holds in another shape, or as real numbers where the weights hold
    integers (``check_real``)."""
    expected = skeleton.state_dict()
    for key, tensor in sorted(state.items()):
        want = expected.get(_model_name(key, expected, skeleton))
        if want is None:
            continue
        if tuple(tensor.shape) != tuple(want.shape):
            raise CheckpointError(shape_message(key, tensor.shape, want.shape, skeleton.config, model_type))
        check_real(key, tensor, want, model_type, CheckpointError)


def shape_message(key: str, got, want, config, model_type: str) -> str:
    """``SHAPE`` for tensor ``key``, ``got`` in the weights and ``want`` in the model ``config`` builds; ``PRUNED`` when
    the config lists pruned heads, which transformers 5 ignores (it builds every head): "give the config.json saved
    with these weights" had sent the user to the very config.json they gave."""
    pruned = getattr(config, "pruned_heads", None)
    text = PRUNED if pruned and isinstance(pruned, dict) else SHAPE
    layers = ", ".join(clipped(str(layer), 10) for layer in list(pruned or {})[:8])
    return text.format(key=key, got=list(got), want=list(want), model_type=model_type, layers=layers)


def _numel(state: dict[str, torch.Tensor], skip=()) -> int:
    return sum(t.numel() for k, t in state.items() if k not in skip)


def _check_covered(need: int, given: int) -> None:
    """Nothing is built that the upload does not hold: weights with fewer numbers than the model's parameters
    cannot be its weights (a 936-byte upload with a 24-layer config built the whole model, +1.3 GB, before its
    missing tensors were noticed)."""
    if given < need:
        raise CheckpointError(SHORT.format(given=given, need=need))


def _never_saved(hf_config, skeleton):
    """Whether one of ``skeleton``'s tensor names is one a class of the config's model type leaves out on purpose
    (``_keys_to_ignore_on_save``: Marian's sinusoidal position tables, computed when the model is built; a
    fine-tuned opus-mt folder was refused as missing them). The classes are those transformers' Auto mappings give
    the model type, not the ones the upload's ``architectures`` names: BART's learned position tables share
    Marian's names, and a BART upload without them that named MarianMTModel was built with random ones; a Marian
    upload that named none had its tables counted as weights to hold, and a junk tensor of as many numbers got
    16 M of them computed in Python (38 s) before the check after loading refused it."""
    ignored = [getattr(cls, "_keys_to_ignore_on_save", None) or () for cls in _model_classes(hf_config)]
    patterns = [re.compile(p) for keys in ignored for p in keys]
    prefix = f"{skeleton.base_model_prefix}."
    return lambda key: any(p.search(key) or p.search(prefix + key) for p in patterns)


def _model_classes(hf_config) -> list[type]:
    """transformers' model classes for ``hf_config``'s type, from the Auto mappings (model, causal LM, seq2seq, ...)."""
    from transformers.models.auto import modeling_auto

    names = []
    for mapping, types in vars(modeling_auto).items():
        if mapping.endswith("_MAPPING_NAMES") and isinstance(types, dict):
            found = types.get(getattr(hf_config, "model_type", None), ())
            names += found if isinstance(found, (list, tuple)) else [found]
    return [cls for cls in map(_transformers_class, dict.fromkeys(names))
            if cls is not None and cls.config_class is type(hf_config)]


def _transformers_class(name) -> type | None:
    try:  # a class whose optional dependencies are missing raises on import
        cls = getattr(transformers, name, None) if isinstance(name, str) and name.isidentifier() else None
    except Exception:  # noqa: BLE001
        return None
    return cls if isinstance(cls, type) and issubclass(cls, PreTrainedModel) else None


def _check_present(skeleton, state, unsaved=lambda key: False) -> None:
    """CheckpointError, before the model is built for real, when the weights cannot fill its parameters.

    Refused only when they hold fewer numbers than it has parameters (``_OPTIONAL`` and ``unsaved`` ones aside), so
    weights that transformers renames on loading (LayerNorm ``gamma``/``beta``) are never refused here; the message
    names the tensors missing by name when there are some, as the check after loading does."""
    names = _held_names(skeleton, state)
    need = sum(p.numel() for name, p in skeleton.named_parameters()
               if not name.startswith(_OPTIONAL) and not unsaved(name))
    computed = sum(p.numel() for name, p in skeleton.named_parameters() if unsaved(name) and name not in names)
    given = _numel(state)
    if computed > min(given, MAX_COMPUTED):  # tables computed in Python at build time: 16 M numbers took 20 s
        raise CheckpointError(COMPUTED.format(n=computed, limit=min(given, MAX_COMPUTED)))
    if given >= need:
        return
    expected = [k for k in skeleton.state_dict() if not k.startswith(_OPTIONAL) and not unsaved(k)]
    missing = sorted(k for k in expected if k not in names)
    if missing:
        raise CheckpointError(MISSING.format(n=len(missing), total=len(skeleton.state_dict()), key=missing[0]))
    _check_covered(need, given)


def _held_names(model, state) -> set[str]:
    """The tensor names the weights hold, each also without the base model's prefix (a task model's ``bert.``)."""
    prefix = f"{model.base_model_prefix}."
    return set(state) | {k.removeprefix(prefix) for k in state}


def _model_name(key: str, names, skeleton) -> str:
    """The model's name for a checkpoint's ``key`` among its tensor ``names``: a task model's checkpoint prefixes the
    base model's (``bert.``)."""
    prefix = f"{skeleton.base_model_prefix}." if skeleton.base_model_prefix else "\x00"
    return key if key in names else key.removeprefix(prefix)


def _check_written(state: dict[str, torch.Tensor], limits: Limits, skeleton) -> None:
    """The weights are written out again for transformers, views copied: they may take at most twice what the file
    stores and twice the model limit (float64 weights). Views of one stored tensor are each written whole (600,000
    one-number views of one storage took 77 s and +1.55 GB), so each counts, except a model's own tied weights:
    the same view under several of its tensor names (Marian's embedding under four) counts once."""
    names, seen, total = set(skeleton.state_dict()), set(), 0
    for key, tensor in state.items():
        view = (tensor.untyped_storage().data_ptr(), tensor.storage_offset(), tuple(tensor.shape), tensor.stride())
        if view in seen and _model_name(key, names, skeleton) in names:
            continue  # a tie: bounded by the model's own tensors, which the model limit bounds
        seen.add(view)
        total += tensor.numel() * tensor.element_size()
    stored = sum({t.untyped_storage().data_ptr(): t.untyped_storage().nbytes() for t in state.values()}.values())
    if total > 2 * min(stored, limits.max_model_bytes):  # a 4 MB pickle of views wrote 200 MB at a 100 MB limit
        raise CheckpointError(HEAVY.format(mb=total / 1e6, stored=stored / 1e6, limit=limits.max_model_bytes,
                                           env=ENV_MAX_MODEL))


def _unshared(state: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
    """safetensors refuses tensors that share memory (tied embeddings in a .bin); copy the repeats."""
    seen, out = set(), {}
    for key, tensor in state.items():
        tensor = tensor.contiguous()
        ptr = tensor.untyped_storage().data_ptr() if tensor.numel() else None
        out[key] = tensor.clone() if ptr in seen else tensor
        seen.add(ptr)
    return out

