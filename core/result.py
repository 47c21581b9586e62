"""``AttentionResult``: what extraction hands to diagnostics and the app.

The one tensor contract of AttnScope: ``attentions`` is float32 on the CPU,
shaped ``[layers, heads, q, k]`` with the batch removed. Which positions are
special tokens or padding, and whether the map is causal, travel with it, so
nothing downstream has to guess them from zeros.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch

from .errors import ExtractionError


@dataclass
class AttentionResult:
    """What ``core.extract_attention`` returns: every layer's and head's attention weights over one input,
    ``attentions [layers, heads, q, k]`` (rows sum to 1; a causal model's upper triangle is 0), with the tokens on
    each axis, which of them are special or padding, and the warnings of the reading (a truncation). An
    encoder-decoder's result holds its ``encoder``, ``decoder`` and ``cross`` parts, each an ``AttentionResult``.
    """

    tokens: list[str]  # display strings of the query axis
    attentions: torch.Tensor  # (L, H, q, k) float32 on CPU
    causal: bool  # True when query i only sees keys <= i
    special: list[bool]  # query-axis flags: special token ([CLS], <s>, ...)
    padding: list[bool]  # query-axis flags: padding position
    token_ids: list[int] = field(default_factory=list)
    key_tokens: list[str] | None = None  # key axis, when it differs (cross-attention)
    key_special: list[bool] | None = None
    key_padding: list[bool] | None = None
    kind: str = "self"  # "self", "encoder", "decoder" or "cross"
    model_name: str = ""
    device: str = "cpu"
    dtype: str = "float32"
    elapsed_s: float = 0.0
    warnings: list[str] = field(default_factory=list)
    encoder: "AttentionResult | None" = None  # encoder-decoder models only
    decoder: "AttentionResult | None" = None
    cross: "AttentionResult | None" = None
    token_type_ids: list[int] | None = None  # segment ids the model was given (a BERT-style pair), else None
    windows: list[int | None] | None = None  # per layer, a local layer's window (core.extraction.windows), else None

    def __post_init__(self):
        if self.attentions.dim() != 4:
            raise ExtractionError(
                f"attentions must be [layers, heads, q, k]; got shape {tuple(self.attentions.shape)}"
            )
        q_len, k_len = self.attentions.shape[-2:]
        if q_len != len(self.tokens) or k_len != len(self.keys):
            raise ExtractionError(
                f"attention is {q_len}×{k_len} but there are {len(self.tokens)} query and "
                f"{len(self.keys)} key tokens"
            )

    @property
    def keys(self) -> list[str]:
        """Display strings of the key axis."""
        return self.tokens if self.key_tokens is None else self.key_tokens

    @property
    def keys_special(self) -> list[bool]:
        return self.special if self.key_special is None else self.key_special

    @property
    def keys_padding(self) -> list[bool]:
        return self.padding if self.key_padding is None else self.key_padding

    @property
    def n_layers(self) -> int:
        return self.attentions.shape[0]

    @property
    def n_heads(self) -> int:
        return self.attentions.shape[1]

    def part(self, name: str) -> "AttentionResult":
        """``"encoder"``, ``"decoder"`` or ``"cross"`` of an encoder-decoder result; else itself."""
        chosen = getattr(self, name, None) if name in ("encoder", "decoder", "cross") else self
        if chosen is None:
            raise ExtractionError(f"this result has no {name} attention (kind={self.kind!r})")
        return chosen
