"""GGUF checkpoints (llama.cpp's format): check the header, then load through transformers.

GGUF is data, not code, but a file may still be corrupt or hostile. Before any
large allocation ``check_gguf`` reads the header with AttnScope's own bounded
reader (``header``) and refuses, with one line: an architecture that
transformers' GGUF loader does not handle, a quantisation type the ``gguf``
package cannot dequantise, a tensor whose shape is empty, absurd or not a whole
number of quantisation blocks, tensor data declared past the end of the file,
a model whose float32 weights would exceed ``Limits.max_model_bytes``, and a
tensor whose shape differs from the one the metadata implies (``shapes``). The
model the metadata describes is sized too, on the ``meta`` device, before it is
built. Only then does transformers dequantise it (``from_pretrained(gguf_file=...)``,
eager attention, no remote code, local files only); a model tensor the file
lacks, or holds in another shape, is an error, not a random weight. The
tokenizer comes from the file.

transformers offers no hooks here, so three of its module globals are swapped for
the duration of one load (under a lock): its per-tensor ``tqdm`` loop reports to a
``progress(fraction, message)`` callback, ``gguf.GGUFReader`` is shared, so
the metadata is parsed once instead of three times (config, weights, tokenizer),
and its Llama tensor processor treats a missing ``head_count_kv`` as llama.cpp
does. See https://huggingface.co/docs/transformers/gguf.
"""

from __future__ import annotations

import math
import threading
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path

import torch

from ..archive import ENV_MAX_MODEL, Limits
from ..build import MAX_LAYERS, token_vocabulary, uneven_head_groups
from .header import DEFAULT_ALIGNMENT, GGUFHeader, read_gguf_header
from .shapes import NOT_MATCHING, check_tensor_shapes
from ..quiet import quiet_transformers
from ..tokenizer import choose_tokenizer
from ...cancel import waited_for
from ...errors import Cancelled, CheckpointError, counted, first_line, quoted
from ...whole import is_size

GGUF_SUFFIX = ".gguf"
MAX_ELEMENTS = 1 << 40  # per tensor; 4 TB of float32, far above any real tensor, far below an overflow

BAD_ARCH = ("{name} holds a model of architecture {arch}, which transformers' GGUF loader does not support; "
            "GGUF files of llama, mistral, qwen2, qwen3, gemma2, gemma3, phi3, gpt2 and the other architectures "
            "it handles load")
NO_ARCH = "{name} has no general.architecture key, so its model type is unknown; give a GGUF written by llama.cpp"
BAD_QUANT = ("{name}: tensor {tensor} is stored as {qtype}, which the gguf package cannot dequantise; "
             "convert the model with a common type (F32, F16, Q8_0, Q4_K, ...)")
BAD_SHAPE = "{name}: tensor {tensor} has shape {shape}, {why}; the file is corrupt"
MISALIGNED = ("{name}: tensor {tensor} starts at offset {offset:,}, not a multiple of general.alignment {alignment}, "
              "where every tensor of a GGUF file starts; the file is corrupt")
NOT_PACKED = ("{name}: tensor {tensor} starts at offset {offset:,}, but the tensors before it end at {expected:,}, "
              "where llama.cpp reads it (each tensor's data follows the one before); the file is corrupt")
PAST_END = ("{name} is truncated: tensor {tensor} ends at byte {end:,} but the file has {size:,} bytes; "
            "give the complete file")
TOO_BIG = ("{name} would dequantise to {gb:.1f} GB of float32 weights ({n:,} parameters), above the {limit:,}-byte "
           "model limit; raise it with {env} or Limits(max_model_bytes=...)")
MISSING = ("{name} does not hold the model its metadata describes: {n} of the model's {total} tensors are missing "
           "(e.g. {key}); give the complete GGUF written by llama.cpp")
BAD_METADATA = "{name}: its metadata gives {key}={value:,}, outside 1 to {limit:,}; the file is corrupt"
BAD_NUMBER = ("{name}: its metadata gives {key}={value}, where {rule}; the file is corrupt or was written wrongly "
              "(re-convert the model with llama.cpp's convert_hf_to_gguf.py)")
NO_HEADS = ("{name}: its metadata gives {key}=0: the model has no attention heads (a state-space model such as "
            "Mamba), so it has no attention for AttnScope to show")
# <arch>.* sizes transformers builds the model from: a whole number of at least 1 (head_count may be per layer)
_SIZE_KEYS = ("embedding_length", "block_count", "context_length", "attention.head_count")
SHAPES_DIFFER = ("{name}: its metadata describes a model whose {param} has shape {want}, but the file holds {got}; "
                 + NOT_MATCHING)
NO_KV_DEFAULT = ("{name} has no llama.attention.head_count_kv key, which this transformers version cannot be made to "
                 "read as llama.cpp does (one key/value head per query head); re-convert the model with a current "
                 "llama.cpp convert_hf_to_gguf.py, which writes the key")
UNUSED = ("{name} holds {n} that transformers' GGUF loader has no place for in a {model} (e.g. {tensor}), which "
          "it would drop, computing another model; AttnScope cannot load this variant from GGUF: give the "
          "original safetensors model")
ROPE_SCALING = ("{name}'s metadata asks for {kind} rope scaling, which transformers' GGUF loader does not carry over "
                "for {arch} (the positions would be rotated without it); give the original safetensors model")
ROPE_FACTORS = ("{name} holds per-frequency rope factors ({tensor}) that fit no rotary embedding of the {model} "
                "transformers builds; give the original safetensors model")
LOAD_FAILED = "transformers could not build a model from {name} ({err}); the GGUF may be from a newer llama.cpp"
NO_TOKENIZER = "the GGUF file's tokenizer could not be read ({err}); "

# llama.cpp names a few architectures differently from transformers (modeling_gguf_pytorch_utils).
_RENAMED = {"qwen2moe": "qwen2_moe", "qwen3moe": "qwen3_moe", "gpt-oss": "gpt_oss", "minimax-m2": "minimax_m2",
            "t5encoder": "t5"}
_NOT_MODELS = ("general", "tokenizer")
# Model types whose GGUF names transformers maps only under the language model's prefix (``model.layers.N.mlp.c_fc``,
# ``qkv_proj``): built as AutoModelForCausalLM, then its base model is kept (as AutoModel, their fused and MLP
# tensors were "missing" and the file was blamed).
_LM_PREFIXED = ("phi3", "starcoder2")
_UNUSED_OK = ("output.weight",)  # the language-model head: AttnScope loads the model without it
_ROPE_FACTORS = "rope_freqs.weight"  # llama.cpp's Llama 3.1+ rope (``llama3`` in transformers): 1 / frequency factors
_LAYER_KEYS = ("num_hidden_layers", "n_layer", "num_layers", "num_decoder_layers")  # as GGUF configs name them
_LOAD_LOCK = threading.Lock()  # one GGUF load at a time: each holds a whole float32 copy while converting


def is_gguf(path: Path) -> bool:
    return path.name.lower().endswith(GGUF_SUFFIX)


def supported_architectures() -> list[str]:
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES
    return [a for a in GGUF_SUPPORTED_ARCHITECTURES if a not in _NOT_MODELS]


def check_gguf(path: Path, limits: Limits) -> GGUFHeader:
    """The header of ``path`` once every check above passes; CheckpointError otherwise."""
    name = path.name
    header = read_gguf_header(path)
    arch = header.fields.get("general.architecture")
    if not isinstance(arch, str):
        raise CheckpointError(NO_ARCH.format(name=name))
    supported = supported_architectures()
    if arch not in supported and _RENAMED.get(arch) not in supported:
        raise CheckpointError(BAD_ARCH.format(name=name, arch=quoted(arch)))
    _check_numbers(header.fields, arch, name)
    sizes = [_tensor_size(tensor, name) for tensor in header.tensors]  # (elements, bytes in the file)
    total = sum(elements for elements, _ in sizes)
    if total * 4 > limits.max_model_bytes:
        raise CheckpointError(TOO_BIG.format(name=name, gb=total * 4 / 1e9, n=total, limit=limits.max_model_bytes,
                                             env=ENV_MAX_MODEL))
    alignment = header.fields.get("general.alignment", DEFAULT_ALIGNMENT)  # a power of two (read_gguf_header)
    expected = 0
    for tensor, (_, stored) in zip(header.tensors, sizes):
        if tensor.offset % alignment:  # shifted or overlapping data would load as wrong weights
            raise CheckpointError(MISALIGNED.format(name=name, tensor=quoted(tensor.name), offset=tensor.offset,
                                                    alignment=alignment))
        if tensor.offset != expected:  # two tensors on one block of data: wrong weights, or memory the file lacks
            raise CheckpointError(NOT_PACKED.format(name=name, tensor=quoted(tensor.name), offset=tensor.offset,
                                                    expected=expected))
        expected += -(-stored // alignment) * alignment
        end = header.data_start + tensor.offset + stored
        if end > header.file_size:
            raise CheckpointError(PAST_END.format(name=name, tensor=quoted(tensor.name), end=end,
                                                  size=header.file_size))
    check_tensor_shapes(header, name)
    return header


def _check_numbers(fields: dict, arch: str, name: str) -> None:
    """CheckpointError for a model number no model has, read before transformers builds from it: a NaN rope base
    or a negative norm epsilon made every attention map NaN, reported as a diverged training run; a size given as
    text or 0 failed inside transformers with no key named."""
    for key, value in fields.items():
        if not key.startswith(f"{arch}.") or isinstance(value, (str, tuple)):
            continue
        rule = ("it must be a finite number" if not math.isfinite(value) else
                "the rotary base must be above 0" if key.endswith("rope.freq_base") and value <= 0 else
                "a norm's epsilon must not be negative" if "epsilon" in key and value < 0 else "")
        if rule:
            raise CheckpointError(BAD_NUMBER.format(name=name, key=key, value=value, rule=rule))
    for suffix in _SIZE_KEYS:
        key = f"{arch}.{suffix}"
        value = fields.get(key, 1)
        if suffix == "attention.head_count" and value == 0 and not isinstance(value, bool):
            raise CheckpointError(NO_HEADS.format(name=name, key=key))
        if not is_size(value) and not (suffix == "attention.head_count" and isinstance(value, tuple)):
            shown = quoted(value) if isinstance(value, str) else "an array" if isinstance(value, tuple) else value
            raise CheckpointError(BAD_NUMBER.format(name=name, key=key, value=shown, rule="it must be a whole number "
                                                    "of at least 1"))


def _tensor_size(tensor, name: str) -> tuple[int, int]:
    """The tensor's element count and stored bytes, after its type and shape are checked."""
    from gguf import GGML_QUANT_SIZES, GGMLQuantizationType

    try:
        qtype = GGMLQuantizationType(tensor.type_id)
    except ValueError:
        raise CheckpointError(BAD_QUANT.format(name=name, tensor=quoted(tensor.name),
                                               qtype=f"type {tensor.type_id}")) from None
    if not _dequantisable(qtype):
        raise CheckpointError(BAD_QUANT.format(name=name, tensor=quoted(tensor.name), qtype=qtype.name))
    shape = list(tensor.dims)
    elements = 1
    for dim in tensor.dims:
        elements *= dim
    block, type_size = GGML_QUANT_SIZES[qtype]
    why = ("a zero dimension" if 0 in tensor.dims else
           f"{elements:,} elements, above {MAX_ELEMENTS:,}" if elements > MAX_ELEMENTS else
           f"a first dimension that is not a whole number of {qtype.name} blocks of {block}"
           if tensor.dims[0] % block else "")
    if why:
        raise CheckpointError(BAD_SHAPE.format(name=name, tensor=quoted(tensor.name), shape=shape, why=why))
    return elements, elements // block * type_size


def _dequantisable(qtype) -> bool:
    from gguf import GGMLQuantizationType as T, quants

    return qtype in (T.F32, T.F16) or qtype in getattr(quants, "_type_traits", {})


def load_gguf(path: Path, limits: Limits | None = None, progress=None):
    """``(model, tokenizer, notes)`` of the GGUF file at ``path``, checked first; ``progress(fraction, message)``."""
    from transformers import AutoModel, AutoModelForCausalLM

    name, limits = path.name, limits or Limits()
    tell = progress or (lambda fraction, message: None)
    tell(0.0, f"checking {name}")
    header = check_gguf(path, limits)
    tell(0.02, "reading the GGUF metadata")
    notes: list[str] = []
    with (_one_load(tell), quiet_transformers(), _one_reader(), _dequantisation_progress(tell),
          _kv_heads_default(header, name), _weights_map() as mapped):
        config = _checked_config(path, header, name, limits)
        auto = AutoModelForCausalLM if config.model_type in _LM_PREFIXED else AutoModel
        try:  # mismatched sizes are let through to be named below, not in a report quiet_transformers hides
            model, info = auto.from_pretrained(
                path.parent, gguf_file=path.name, config=config, attn_implementation="eager", trust_remote_code=False,
                local_files_only=True, dtype=torch.float32, output_loading_info=True, ignore_mismatched_sizes=True)
        except Cancelled:  # asked to stop (a progress callback, between tensors): no fault of the file
            raise
        except _FromProgress as err:  # the caller's own exception, as every other loading path lets it through
            raise err.__cause__ from None
        except Exception as err:  # noqa: BLE001 - transformers raises many types for what it cannot convert
            raise CheckpointError(LOAD_FAILED.format(name=name, err=_reason(err, path, name, 120))) from None
        _check_loading_info(info, model, name)
        model = model.base_model  # itself for AutoModel's
        if any(t.name == _ROPE_FACTORS for t in header.tensors):  # neither of transformers' GGUF paths reads them
            _apply_rope_factors(model, _tensor_values(path, _ROPE_FACTORS), name)
        # llama.cpp reads optional tensors (Llama's attention biases) that transformers' names miss; its newer GGUF
        # path (LFM2, Qwen3.5) builds no such map (``mapped`` stays empty): its renamed leftovers are the loading
        # report's unexpected keys (above)
        used = mapped | {*_UNUSED_OK, _ROPE_FACTORS}
        unused = [t.name for t in header.tensors if t.name not in used]
        if mapped and unused:
            raise CheckpointError(UNUSED.format(name=name, n=counted(len(unused), "tensor"), model=type(model).__name__,
                                                tensor=quoted(unused[0])))
        model.config.name_or_path = name  # shown as the model's name, not a (temporary) folder
        tell(0.9, "reading the tokenizer")
        tokenizer = _gguf_tokenizer(path, model, notes)
    tell(1.0, "loaded")
    return model.eval(), tokenizer, notes


def _check_loading_info(info: dict, model, name: str) -> None:
    """CheckpointError for a model tensor the file lacks or holds in another shape (both would be random weights),
    and for a tensor of the file transformers renamed but has no place for (its newer GGUF path, LFM2 and Qwen3.5,
    loads by renaming and reports the rest as unexpected, then drops them); the LM head is not loaded."""
    if info.get("missing_keys"):
        missing = sorted(info["missing_keys"])
        raise CheckpointError(MISSING.format(name=name, n=len(missing), total=len(model.state_dict()), key=missing[0]))
    if info.get("mismatched_keys"):
        param, got, want = sorted(info["mismatched_keys"])[0]
        raise CheckpointError(SHAPES_DIFFER.format(name=name, param=param, want=list(want), got=list(got)))
    unexpected = sorted(key for key in info.get("unexpected_keys") or () if key.split(".")[0] != "lm_head")
    if unexpected:
        raise CheckpointError(UNUSED.format(name=name, n=counted(len(unexpected), "tensor"), model=type(model).__name__,
                                            tensor=quoted(unexpected[0])))


def _checked_config(path: Path, header: GGUFHeader, name: str, limits: Limits):
    """The transformers config the file's metadata describes, after the model it builds is sized on ``meta``:
    the metadata (layer count, widths) is checked as strictly as the tensors, before anything is allocated."""
    from transformers import AutoConfig, AutoModel

    try:
        config = AutoConfig.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True)
        _carry_rope(config, header, name)
        _carry_head_dim(config, header)
        for key in _LAYER_KEYS:  # before building: a million layers take minutes even on the meta device
            value = getattr(config, key, None)
            if isinstance(value, int) and not 0 < value <= MAX_LAYERS:
                raise CheckpointError(BAD_METADATA.format(name=name, key=key, value=value, limit=MAX_LAYERS))
        uneven = uneven_head_groups(config.to_dict())
        if uneven:
            raise CheckpointError(f"{name}'s metadata gives {uneven}; the file is damaged or was written wrongly")
        with torch.device("meta"):
            skeleton = AutoModel.from_config(config, attn_implementation="eager", trust_remote_code=False)
    except CheckpointError:
        raise
    except Exception as err:  # noqa: BLE001 - invalid metadata values surface as many exception types
        raise CheckpointError(LOAD_FAILED.format(name=name, err=_reason(err, path, name, 120))) from None
    total = sum(p.numel() for p in skeleton.parameters())
    if total * 4 > limits.max_model_bytes:
        raise CheckpointError(TOO_BIG.format(name=name, gb=total * 4 / 1e9, n=total, limit=limits.max_model_bytes,
                                             env=ENV_MAX_MODEL))
    return config


def _carry_rope(config, header: GGUFHeader, name: str) -> None:
    """Give ``config`` the rope the metadata describes where transformers' GGUF mapping drops it: the frequency
    base (starcoder2, stablelm: 10,000 instead of the file's 999,999 or 10^6); CheckpointError for a scaling type it
    cannot carry over (linear, yarn: the positions would be rotated as if unscaled)."""
    arch = header.fields.get("general.architecture")
    params = getattr(config, "rope_parameters", None)
    flat = isinstance(params, dict) and "rope_theta" in params  # Gemma 3's per-layer-type rope is mapped as it is
    base = header.fields.get(f"{arch}.rope.freq_base")
    if flat and isinstance(base, (int, float)) and base > 0 and params["rope_theta"] != base:
        params["rope_theta"] = float(base)
    kind = header.fields.get(f"{arch}.rope.scaling.type")
    if isinstance(kind, str) and kind != "none" and (not flat or params.get("rope_type", "default") == "default"):
        raise CheckpointError(ROPE_SCALING.format(name=name, kind=repr(kind)[:40], arch=arch))


def _carry_head_dim(config, header: GGUFHeader) -> None:
    """Give ``config`` the head size the metadata gives (``attention.key_length``) where transformers' GGUF mapping
    drops it (Qwen3, Qwen2): the config's default (128) was used instead, and every such file whose heads are of
    another size was refused as not matching its own metadata. llama.cpp reads the key as the size of each query
    and key head; a file whose value heads differ in size keeps transformers' reading."""
    from transformers.integrations.ggml import GGUF_CONFIG_MAPPING

    arch = header.fields.get("general.architecture")
    if "attention.key_length" in GGUF_CONFIG_MAPPING.get(config.model_type, {"attention.key_length": None}):
        return  # mapped by transformers itself (Gemma 4 reads it as its global layers' head size)
    key, value = (header.fields.get(f"{arch}.attention.{kind}_length") for kind in ("key", "value"))
    try:
        head_dim = getattr(config, "head_dim", None)
    except Exception:  # noqa: BLE001 - a per-layer attribute raises when read whole
        return
    if isinstance(head_dim, int) and is_size(key) and value in (None, key):
        config.head_dim = key


def _tensor_values(path: Path, tensor: str) -> torch.Tensor:
    """One tensor of the file, dequantised to float32 (the reader is the load's shared one)."""
    import gguf

    found = next(t for t in gguf.GGUFReader(path).tensors if t.name == tensor)
    return torch.from_numpy(gguf.quants.dequantize(found.data, found.tensor_type).astype("float32")).flatten()


def _apply_rope_factors(model, factors: torch.Tensor, name: str) -> None:
    """Llama 3.1+ rope as llama.cpp computes it: each rotary frequency divided by its factor in ``rope_freqs.weight``
    (transformers' ``llama3`` rope gives the same frequencies), which transformers' GGUF loader drops."""
    rotary = [m for m in model.modules() if isinstance(getattr(m, "inv_freq", None), torch.Tensor)]
    if not rotary or any(m.inv_freq.shape != factors.shape for m in rotary) or not bool((factors > 0).all()):
        raise CheckpointError(ROPE_FACTORS.format(name=name, tensor=_ROPE_FACTORS, model=type(model).__name__))
    for module in rotary:
        module.inv_freq = module.inv_freq / factors  # (d/2,)
        if isinstance(getattr(module, "original_inv_freq", None), torch.Tensor):
            module.original_inv_freq = module.inv_freq.clone()


def _reason(err: Exception, path: Path, name: str, width: int) -> str:
    """``first_line`` of transformers' message, with ``path`` named as the user knows it: an upload's path is the
    server's private temp folder (/tmp/attnscope-upload-.../upload/model.gguf)."""
    text = first_line(err, 10**6).replace(str(path), name).replace(str(path.parent), ".")
    return text[:len(type(err).__name__) + 2 + width]


def _gguf_tokenizer(path: Path, model, notes: list[str]):
    from transformers import AutoTokenizer

    vocab = token_vocabulary(model)
    try:
        with quiet_transformers():
            tokenizer = AutoTokenizer.from_pretrained(path.parent, gguf_file=path.name, local_files_only=True,
                                                      trust_remote_code=False)
    except Exception as err:  # noqa: BLE001 - a GGUF without tokenizer keys, or one transformers cannot convert
        notes_before = len(notes)
        borrowed = choose_tokenizer(None, vocab, True, notes)
        notes[notes_before] = NO_TOKENIZER.format(err=_reason(err, path, path.name, 100)) + notes[notes_before]
        return borrowed
    return tokenizer


def _one_load(tell):
    """``_LOAD_LOCK`` for the ``with``; each second it waits, ``tell`` says why (and where ``tell`` stops a run
    whose visitor has gone, as an upload's does, the wait ends): a second GGUF load had sat on an earlier message
    for the first one's whole length."""
    return waited_for(_LOAD_LOCK, lambda: tell(0.02, "waiting: another GGUF file is being converted, and they are "
                                               "converted one at a time"), 1.0)


@contextmanager
def _one_reader():
    """Parse the file's metadata once per load: transformers opens a ``gguf.GGUFReader`` for the config, the
    weights and the tokenizer, and each parse of a 49,152-token vocabulary takes seconds (SmolLM2: 2-6 s)."""
    import gguf

    original, readers = gguf.GGUFReader, {}

    def shared(path, mode="r"):
        key = (str(Path(path).resolve()), mode)
        if key not in readers:
            readers[key] = original(path, mode)
        return readers[key]

    gguf.GGUFReader = shared
    try:
        yield
    finally:
        gguf.GGUFReader = original


@contextmanager
def _weights_map():
    """Record which of the file's tensors transformers maps to the model (``get_gguf_hf_weights_map``, whose result
    its loop uses to skip the others without a word); yields the set of their GGUF names, filled during the load."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    import gguf

    original, mapped = gguf_utils.get_gguf_hf_weights_map, set()
    name_map = gguf.get_tensor_name_map

    def recording(hf_model, processor, *args, **kwargs):
        found = original(hf_model, processor, *args, **kwargs)
        if not kwargs.get("qual_name") and len(args) < 3:  # the outer call: the children's maps are in it
            mapped.update(found)
        return found

    # It calls itself for every module and builds gguf's name map of the whole model each time (SmolLM2: 395
    # times, 5.5 of its 10 s load with nothing to show); built once per architecture and depth, the maps are the
    # same (read only)
    gguf_utils.get_gguf_hf_weights_map, gguf.get_tensor_name_map = recording, lru_cache(maxsize=4)(name_map)
    try:
        yield mapped
    finally:
        gguf_utils.get_gguf_hf_weights_map, gguf.get_tensor_name_map = original, name_map


@contextmanager
def _kv_heads_default(header: GGUFHeader, name: str):
    """Make transformers un-permute Q and K of a Llama file without ``head_count_kv``. The key is optional in GGUF
    (absent: one key/value head per query head, as llama.cpp reads it), but transformers' LlamaTensorProcessor
    then skips the un-permutation and the attention is silently wrong (max |difference| 0.20 on a tiny model)."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    if header.fields.get("general.architecture") != "llama" or "llama.attention.head_count_kv" in header.fields:
        yield
        return
    processors = getattr(gguf_utils, "TENSOR_PROCESSORS", {})
    original = processors.get("llama")
    if original is None:  # a transformers laid out otherwise: refuse rather than risk the wrong attention
        raise CheckpointError(NO_KV_DEFAULT.format(name=name))

    class DefaultKeyValueHeads(original):
        def __init__(self, config=None):
            config = dict(config or {})
            if config.get("num_key_value_heads") is None:
                config["num_key_value_heads"] = config.get("num_attention_heads")
            super().__init__(config=config)

    processors["llama"] = DefaultKeyValueHeads
    try:
        yield
    finally:
        processors["llama"] = original


class _FromProgress(Exception):
    """An exception of the caller's progress callback, raised inside transformers' loading (its ``__cause__``):
    it had been reported as "transformers could not build a model from" the file."""


@contextmanager
def _dequantisation_progress(tell):
    """Route transformers' per-tensor tqdm loop in GGUF loading to ``tell`` (silent without a callback)."""
    import transformers.modeling_gguf_pytorch_utils as gguf_utils

    original = getattr(gguf_utils, "tqdm", None)
    if original is None:  # a transformers without that loop: no progress, same result
        yield
        return

    def counted(iterable, *args, **kwargs):
        items = list(iterable)
        for done, item in enumerate(items):
            if done % 8 == 0:
                try:
                    tell(0.05 + 0.85 * done / max(len(items), 1), f"dequantising tensor {done + 1}/{len(items)}")
                except Cancelled:
                    raise
                except Exception as err:  # noqa: BLE001 - told apart from transformers' own errors
                    raise _FromProgress from err
            yield item

    gguf_utils.tqdm = counted
    try:
        yield
    finally:
        gguf_utils.tqdm = original
