"""AttnScope's own small Transformer family, built from ``MultiHeadAttention``.

The encoder variant (bidirectional, ``causal=False``) and the decoder variant
(``causal=True``) share one code path, as in nanoGPT. A model is saved as
``model.safetensors`` plus ``config.json`` whose ``model_type`` is
``"attnscope"``; this is the "custom model" format the app supports natively.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, fields
from pathlib import Path

import torch
from safetensors.torch import load_file, save_file
from torch import nn

from .attention import MultiHeadAttention
from .errors import InputError, ModelLoadError, first_line
from .whole import is_probability, is_size

MODEL_TYPE = "attnscope"
CONFIG_NAME = "config.json"
WEIGHTS_NAME = "model.safetensors"
UNSEEN_IN_WEIGHTS = ("n_heads", "causal")  # what no weight's shape tells: a config.json must say them
NOT_REAL = ("{key} holds {got} numbers where the {model_type} model has real-valued weights: a quantized model's "
            "integer codes are not its weights; give its floating-point weights (dequantize it first)")


@dataclass
class TransformerConfig:
    vocab_size: int = 1000  # size of the token embedding table
    d_model: int = 64  # width of the residual stream
    n_heads: int = 4  # attention heads per layer; d_model % n_heads == 0
    n_layers: int = 2  # number of Transformer blocks
    d_ff: int = 256  # hidden width of each block's MLP
    max_positions: int = 512  # longest input the learned position table covers
    causal: bool = False  # True: decoder (causal mask); False: encoder
    dropout: float = 0.0  # dropout on attention weights and residual branches

    def __post_init__(self):
        """InputError for a size that cannot build a model (n_heads=0 was a ZeroDivisionError, n_layers=0 a model
        whose extraction blamed the attention implementation)."""
        for name in ("vocab_size", "d_model", "n_heads", "n_layers", "d_ff", "max_positions"):
            value = getattr(self, name)
            if not is_size(value):
                raise InputError(f"{name} must be a whole number of at least 1, not {value!r}")
        if self.d_model % self.n_heads:
            raise InputError(f"d_model={self.d_model} must be divisible by n_heads={self.n_heads}")
        if not isinstance(self.causal, bool):  # bool("false") is True: an encoder built causal
            raise InputError(f"causal must be true or false, not {self.causal!r}")
        if not is_probability(self.dropout):
            raise InputError(f"dropout must be a number from 0 to 1, not {self.dropout!r}")

    @classmethod
    def from_dict(cls, data: dict) -> "TransformerConfig":
        """The config a saved ``config.json`` gives. ``n_heads`` and ``causal`` must be in it: the weights' shapes
        imply every other size, and a config without them loaded as a 4-head encoder, whatever was saved."""
        missing = [name for name in UNSEEN_IN_WEIGHTS if name not in data]
        if missing:
            raise InputError(f"it has no {' and no '.join(missing)}, which the weights do not tell")
        known = {f.name for f in fields(cls)}
        return cls(**{k: v for k, v in data.items() if k in known})


TINY_PRESETS = {
    "attnscope-nano-encoder": TransformerConfig(vocab_size=99, d_model=32, n_heads=4, n_layers=2, d_ff=64),
    "attnscope-nano-decoder": TransformerConfig(vocab_size=99, d_model=32, n_heads=4, n_layers=2, d_ff=64, causal=True),
}


class Block(nn.Module):
    """Pre-LayerNorm block: x + attn(ln(x)), then x + mlp(ln(x))."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.ln_1 = nn.LayerNorm(config.d_model)
        self.attn = MultiHeadAttention(config.d_model, config.n_heads, dropout=config.dropout)
        self.ln_2 = nn.LayerNorm(config.d_model)
        self.mlp = nn.Sequential(
            nn.Linear(config.d_model, config.d_ff), nn.GELU(), nn.Linear(config.d_ff, config.d_model)
        )
        self.drop = nn.Dropout(config.dropout)
        self.causal = config.causal

    def forward(self, x, key_padding_mask=None):
        attn_out, weights = self.attn(self.ln_1(x), key_padding_mask=key_padding_mask, causal=self.causal)
        x = x + self.drop(attn_out)  # (B, T, C)
        x = x + self.drop(self.mlp(self.ln_2(x)))  # (B, T, C)
        return x, weights


class AttnScopeTransformer(nn.Module):
    """Token + position embeddings, ``n_layers`` blocks, a tied LM head."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = config
        self.tok_emb = nn.Embedding(config.vocab_size, config.d_model)
        self.pos_emb = nn.Embedding(config.max_positions, config.d_model)
        self.blocks = nn.ModuleList(Block(config) for _ in range(config.n_layers))
        self.ln_f = nn.LayerNorm(config.d_model)
        self.lm_head = nn.Linear(config.d_model, config.vocab_size, bias=False)
        self.lm_head.weight = self.tok_emb.weight

    def forward(self, input_ids, attention_mask=None, output_attentions=False):
        """Return ``{"logits": (B, T, V), "attentions": tuple of (B, nh, T, T) | None}``.

        ``attention_mask`` follows Hugging Face: 1 = real token, 0 = padding.
        """
        length = input_ids.size(1)
        if length > self.config.max_positions:
            raise InputError(f"input has {length} tokens; this model takes at most {self.config.max_positions}")
        positions = torch.arange(length, device=input_ids.device)  # (T,)
        x = self.tok_emb(input_ids) + self.pos_emb(positions)  # (B, T, C)
        padding = None if attention_mask is None else attention_mask == 0  # (B, T)
        attentions = []
        for block in self.blocks:
            x, weights = block(x, key_padding_mask=padding)
            attentions.append(weights)
        logits = self.lm_head(self.ln_f(x))  # (B, T, V)
        return {"logits": logits, "attentions": tuple(attentions) if output_attentions else None}


def save_custom_model(model: AttnScopeTransformer, folder: str | Path) -> Path:
    """Write ``config.json`` and ``model.safetensors`` into ``folder``."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    config = {"model_type": MODEL_TYPE, **asdict(model.config)}
    (folder / CONFIG_NAME).write_text(json.dumps(config, indent=2))
    state = {k: v.contiguous() for k, v in model.state_dict().items() if k != "lm_head.weight"}
    save_file(state, str(folder / WEIGHTS_NAME))
    return folder


def parameter_count(config: TransformerConfig) -> int:
    """The numbers an ``AttnScopeTransformer`` of ``config`` holds (its output layer shares the token embeddings)."""
    d = config.d_model
    per_block = 4 * (d * d + d) + 2 * d * config.d_ff + config.d_ff + d + 4 * d
    return (config.vocab_size + config.max_positions) * d + config.n_layers * per_block + 2 * d  # + final norm


def is_custom_config(config: dict) -> bool:
    return isinstance(config, dict) and config.get("model_type") == MODEL_TYPE


def load_custom_model(folder: str | Path, config: dict | None = None) -> AttnScopeTransformer:
    """Load a model written by ``save_custom_model`` (safetensors only: no pickle)."""
    folder = Path(folder)
    if config is None:
        try:
            config = json.loads((folder / CONFIG_NAME).read_text(encoding="utf-8"))
        except (OSError, ValueError, RecursionError) as err:  # missing, not JSON, not UTF-8, nested past the stack
            raise ModelLoadError(f"cannot read {folder / CONFIG_NAME} ({first_line(err)}); save the model with "
                                 "save_custom_model") from None
    try:
        cfg = TransformerConfig.from_dict(config)
    except Exception as err:  # noqa: BLE001 - a wrong type or value in any field
        raise ModelLoadError(f"{folder / CONFIG_NAME} cannot build an AttnScope model ({first_line(err)})") from None
    try:
        state = load_file(str(folder / WEIGHTS_NAME))  # what is really there, read before anything is built
    except Exception as err:  # noqa: BLE001 - missing file, or safetensors' parser rejecting it
        raise ModelLoadError(
            f"cannot read {folder / WEIGHTS_NAME} ({first_line(err)}); save the model with save_custom_model"
        ) from None
    held = sum(t.numel() for t in state.values())
    if parameter_count(cfg) > held:  # before the model is built: 20 M positions from a 150 kB folder took 2.9 GB
        raise ModelLoadError(f"{folder / CONFIG_NAME} describes a model of {parameter_count(cfg):,} numbers, but "
                             f"{WEIGHTS_NAME} holds {held:,}; save the model with save_custom_model")
    return load_custom_state(AttnScopeTransformer(cfg), state)


def check_real(key: str, tensor: torch.Tensor, want: torch.Tensor, model_type: str, error=ModelLoadError) -> None:
    """``error`` for a tensor of integers or booleans where the model has real numbers (``want``): a quantized
    model's int8 codes had been cast to weights of up to ±127 without a word."""
    if want.is_floating_point() and not tensor.is_floating_point():
        raise error(NOT_REAL.format(key=key, got=str(tensor.dtype).removeprefix("torch."), model_type=model_type))


def load_custom_state(model: AttnScopeTransformer, state: dict) -> AttnScopeTransformer:
    state = {k: v for k, v in state.items() if k != "lm_head.weight"}
    expected = model.state_dict()
    for key in sorted(state.keys() & expected.keys()):  # read by load_model too, not only through build_custom
        check_real(key, state[key], expected[key], MODEL_TYPE)
    try:
        missing, unexpected = model.load_state_dict(state, strict=False)
    except RuntimeError as err:  # shape mismatch
        first = next((line.strip() for line in str(err).splitlines()[1:] if line.strip()), first_line(err))
        raise ModelLoadError(f"custom model weights do not match its config: {first}") from None
    missing = [k for k in missing if k != "lm_head.weight"]
    if missing or unexpected:
        raise ModelLoadError(
            f"custom model weights do not match its config (missing {missing[:3]}, unexpected {unexpected[:3]})"
        )
    return model.eval()
