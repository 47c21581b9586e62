"""Recognise a bare state dict's architecture from its key names and tensor shapes.

Supported layouts (optionally under a prefix such as ``bert.``, ``roberta.``,
``transformer.`` or ``model.``): Hugging Face BERT and RoBERTa
(``embeddings.word_embeddings``, ``encoder.layer.N.attention.self.query``),
GPT-2 (``wte``, ``h.N.attn.c_attn``), and AttnScope's own models
(``tok_emb``, ``blocks.N.attn.q_proj``). Widths, depth, vocabulary and position
counts are read from shapes; the head count is not in the weights (a 768-wide
layer may hold 12 heads or 8), so the caller must supply it.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

import torch

from ..custom_model import MODEL_TYPE, TransformerConfig
from ..errors import CheckpointError

NEED_HEADS = ("recognised {arch} weights (d_model {d_model}, {layers} layers), but the number of attention heads "
              "cannot be read from the weights; pass n_heads (--heads N / the Heads per layer field)")
BAD_HEADS = "n_heads={n_heads} does not divide d_model {d_model}; pass a divisor of {d_model}, e.g. {examples}"
UNKNOWN = ("cannot tell the architecture from the weight names (e.g. {keys}); bare state dicts are supported for "
           "BERT, RoBERTa, GPT-2 and AttnScope models — for another model give its folder with config.json")
ADAPTER = ("{name} is a LoRA/PEFT adapter{base}: it holds changes to a base model's weights, not a model; merge it "
           "into its base model (PeftModel.from_pretrained(base, adapter).merge_and_unload(), then save_pretrained) "
           "and give that folder")
INCOMPLETE = "the {arch} weights are incomplete: {key} is missing; give the full state dict"
NOT_MATRIX = ("the {arch} weights are malformed: {key} has shape {shape}, not [rows, columns]; give the state dict "
              "saved from the model")

# (family, anchor key regex, per-layer key regex); the anchor's prefix is stripped from every key.
_NAMES = {"bert": "BERT", "gpt2": "GPT-2", MODEL_TYPE: "AttnScope"}
_MASKS = ("attn.bias", "attn.masked_bias")  # GPT-2's causal-mask buffers (transformers 4), rebuilt by the model
_LAYOUTS = [
    ("bert", r"^(.*?)embeddings\.word_embeddings\.weight$", r"encoder\.layer\.(\d+)\."),
    ("gpt2", r"^(.*?)wte\.weight$", r"h\.(\d+)\."),
    (MODEL_TYPE, r"^(.*?)tok_emb\.weight$", r"blocks\.(\d+)\."),
]


@dataclass
class Inferred:
    config: dict  # a config.json for transformers, or TransformerConfig fields
    state: dict[str, torch.Tensor]  # keys with the prefix removed
    notes: list[str] = field(default_factory=list)


def infer_architecture(state: dict[str, torch.Tensor], n_heads: int | None) -> Inferred:
    """Config for ``state``'s architecture, or CheckpointError saying what is missing."""
    if any(".lora_" in key for key in state):  # PEFT names its adapters' tensors lora_A, lora_B, lora_embedding_A
        raise CheckpointError(ADAPTER.format(name="the checkpoint", base=""))
    for family, anchor, layer in _LAYOUTS:
        match = next((m for k in state if (m := re.match(anchor, k))), None)
        if match is None:
            continue
        prefix = match.group(1)
        stripped = {k[len(prefix):]: v for k, v in state.items() if k.startswith(prefix)}
        layers = _layer_count(stripped, layer, _NAMES[family])
        return _BUILDERS[family](stripped, layers, n_heads, prefix)
    keys = ", ".join(sorted(state)[:3])
    raise CheckpointError(UNKNOWN.format(keys=keys))


def _layer_count(state, layer: str, arch: str) -> int:
    """Layers up to the last one a tensor names, each holding every tensor another holds (``INCOMPLETE`` names the
    first one lacking): counting the layers that held a query weight read a model without its last one's as a
    model of one layer fewer."""
    held = {}  # layer -> (its names' prefix, the rest of each name)
    for key in state:
        if key.endswith(_MASKS):  # constant masks some files of a model carry in some layers only: not read
            continue
        if match := re.match(layer, key):
            held.setdefault(int(match.group(1)), (match.group(0), set()))[1].add(key[match.end():])
    if not held:
        return 0
    every = set().union(*(rests for _, rests in held.values()))
    some_prefix = next(iter(held.values()))[0]
    for index in range(max(held) + 1):
        prefix, rests = held.get(index, (re.sub(r"\d+", str(index), some_prefix, count=1), set()))
        if every - rests:
            raise CheckpointError(INCOMPLETE.format(arch=arch, key=prefix + min(every - rests)))
    return max(held) + 1


def check_heads(arch: str, d_model: int, layers: int, n_heads) -> int:
    if n_heads is None:
        raise CheckpointError(NEED_HEADS.format(arch=arch, d_model=d_model, layers=layers))
    if isinstance(n_heads, bool) or not isinstance(n_heads, int) or n_heads <= 0 or d_model % n_heads:
        examples = ", ".join(str(h) for h in range(1, d_model + 1) if d_model % h == 0 and h <= 64)
        raise CheckpointError(BAD_HEADS.format(n_heads=n_heads, d_model=d_model, examples=examples))
    return n_heads


def _shape(state, key: str, arch: str) -> tuple[int, int]:
    """The ``(rows, columns)`` of the matrix ``key`` the architecture is read from."""
    if key not in state:
        raise CheckpointError(INCOMPLETE.format(arch=arch, key=key))
    if state[key].dim() != 2:
        raise CheckpointError(NOT_MATRIX.format(arch=arch, key=key, shape=list(state[key].shape)))
    return tuple(state[key].shape)


def _bert(state, layers, n_heads, prefix) -> Inferred:
    vocab, d_model = _shape(state, "embeddings.word_embeddings.weight", "BERT")
    positions = _shape(state, "embeddings.position_embeddings.weight", "BERT")[0]
    types = _shape(state, "embeddings.token_type_embeddings.weight", "BERT")[0]
    ffn = _shape(state, "encoder.layer.0.intermediate.dense.weight", "BERT")[0]
    # RoBERTa stores one token type and offsets positions by padding_idx + 1 = 2.
    family = "roberta" if prefix.startswith("roberta") or types == 1 else "bert"
    name = "RoBERTa" if family == "roberta" else "BERT"
    heads = check_heads(name, d_model, layers, n_heads)
    config = {"model_type": family, "vocab_size": vocab, "hidden_size": d_model, "num_hidden_layers": layers,
              "num_attention_heads": heads, "intermediate_size": ffn, "max_position_embeddings": positions,
              "type_vocab_size": types}
    if family == "roberta":
        config.update(pad_token_id=1, bos_token_id=0, eos_token_id=2)
    state = {k: v for k, v in state.items() if k.startswith(("embeddings.", "encoder.", "pooler."))}
    return Inferred(config, state, [_inferred_note(name, config, "hidden_size", heads) + _DEFAULTS_NOTE])


def _gpt2(state, layers, n_heads, prefix) -> Inferred:
    vocab, d_model = _shape(state, "wte.weight", "GPT-2")
    positions = _shape(state, "wpe.weight", "GPT-2")[0]
    inner = _shape(state, "h.0.mlp.c_fc.weight", "GPT-2")[1]  # Conv1D stores (in, out)
    heads = check_heads("GPT-2", d_model, layers, n_heads)
    config = {"model_type": "gpt2", "vocab_size": vocab, "n_embd": d_model, "n_layer": layers, "n_head": heads,
              "n_inner": inner, "n_positions": positions}
    # Old GPT-2 files carry the causal-mask buffers attn.bias / attn.masked_bias; the model rebuilds them.
    state = {k: v for k, v in state.items() if k.startswith(("wte.", "wpe.", "h.", "ln_f.")) and v.dim() < 4
             and not k.endswith("attn.masked_bias")}
    return Inferred(config, state, [_inferred_note("GPT-2", config, "n_embd", heads) + _DEFAULTS_NOTE])


def _custom(state, layers, n_heads, prefix) -> Inferred:
    vocab, d_model = _shape(state, "tok_emb.weight", "AttnScope")
    positions = _shape(state, "pos_emb.weight", "AttnScope")[0]
    d_ff = _shape(state, "blocks.0.mlp.0.weight", "AttnScope")[0]
    heads = check_heads("AttnScope", d_model, layers, n_heads)
    config = TransformerConfig(vocab_size=vocab, d_model=d_model, n_heads=heads, n_layers=layers, d_ff=d_ff,
                               max_positions=positions)
    notes = [_inferred_note("AttnScope", vars(config), "d_model", heads),
             "the weights do not say whether the model is causal; loaded as an encoder (bidirectional attention) — "
             "give it with its config.json (\"causal\": true) if it is a decoder"]
    return Inferred(vars(config), state, notes)


_DEFAULTS_NOTE = "; activation and layer-norm epsilon are the family's defaults"
_BUILDERS = {"bert": _bert, "gpt2": _gpt2, MODEL_TYPE: _custom}


def _inferred_note(name: str, config: dict, width_key: str, heads: int) -> str:
    layers = next(config[k] for k in ("num_hidden_layers", "n_layer", "n_layers") if k in config)
    return (f"no config.json: read the architecture from the weights — {name}, {layers} layers, width "
            f"{config[width_key]}, vocabulary {config['vocab_size']}, {heads} heads (as given)")
