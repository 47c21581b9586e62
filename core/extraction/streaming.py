"""Stream attention weights layer by layer and query chunk by query chunk, never all at once.

``output_attentions=True`` holds layers × heads × n² floats at once and forces
the eager kernel over whole maps. Here each layer computes softmax(QKᵀ·scale +
mask) for a few query rows at a time, multiplies that chunk by V for the
layer's output (so rows come out as the eager path computes them, and the
weights are computed once), hands the chunk ``[heads, rows, seen]`` (``seen``: up to the
last key its rows can see) to the layer's *consumer* (anything with ``update(chunk, q_start, logits)``, e.g.
``diagnostics.measure.metrics.MetricAccumulator``) and drops it. Memory stays a few
chunks above a plain forward pass; full maps are kept only for the ``(layer,
head)`` pairs asked for. Causal layers skip the keys no row of a chunk can see.

Hugging Face models are switched, for the call, to an attention function
registered as ``STREAM_IMPLEMENTATION`` through ``transformers.AttentionInterface``
(and the ``sdpa`` mask builder under the same name); AttnScope's own models get
the same function through ``MultiHeadAttention.attention_fn``. Layers are
numbered in the order they run, which is layer order for encoders and decoders
(of an encoder-decoder, only the encoder is streamed). Nothing here assumes a
device: every chunk lives where its layer's query lives, as under ``device_map``.
"""

from __future__ import annotations

import math
import time
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Callable, Protocol

import torch
from transformers import AttentionInterface, PreTrainedModel
from transformers.integrations.sdpa_attention import sdpa_attention_forward
from transformers.masking_utils import AttentionMaskInterface, sdpa_mask

from ..attention import MultiHeadAttention
from ..custom_model import AttnScopeTransformer
from ..device import model_device
from ..errors import ExtractionError, InputError
from .encode import check_vocab, max_positions, segment_inputs
from .extract import check_weights_loaded, eval_mode
from .hf_extract import implementations, is_causal_model
from .out_of_memory import STREAMED, told_out_of_memory
from .scratch import Scratch, buffer, release_freed_memory
from .text_config import config_size, is_encoder_decoder, vocab_size

STREAM_IMPLEMENTATION = "attnscope_stream"
# Attention weights per chunk (heads × rows × keys): 8 M floats = 32 MB, about
# 170 rows of a 12-head layer at 4096 tokens. Fewer rows make the two matmuls
# slow (at 42 rows Q·Kᵀ and weights·V take 1.6× as long); the stream and its
# metrics keep about five buffers this size (``core.extraction.scratch``), ~200 MB in all.
CHUNK_FLOATS = 1 << 23


class ChunkConsumer(Protocol):
    def update(self, chunk: torch.Tensor, q_start: int, logits: torch.Tensor) -> None:
        """Take rows ``q_start .. q_start + rows - 1`` of one layer's maps, ``chunk [heads, rows, seen]``.

        ``seen`` ≤ k: a causal chunk stops at the last key its last row sees (every weight after it is zero);
        otherwise ``seen`` is every key. ``logits [heads, rows, seen]``: the finite scores whose softmax the
        chunk is, shifted so each row's maximum is 0, for consumers that want logs of the weights.
        Both are buffers reused for the next rows: copy what must outlive the call.
        """


# consumer_factory(layer, n_heads, n_keys) -> a consumer for that layer, or None
ConsumerFactory = Callable[[int, int, int], "ChunkConsumer | None"]


@dataclass
class StreamedAttention:
    """What one streamed forward pass leaves behind."""

    consumers: list  # one per layer, in layer order (None where the factory gave none)
    n_heads: int
    n_keys: int
    kept: dict = field(default_factory=dict)  # (layer, head) -> (q, k) float32 on CPU
    output: object = None  # what the model (or its encoder) returned
    elapsed_s: float = 0.0

    @property
    def n_layers(self) -> int:
        return len(self.consumers)


@dataclass
class _Stream:
    """State of one streamed forward: per-layer consumers and the maps to keep."""

    factory: ConsumerFactory
    keep: set  # (layer, head) pairs
    chunk_floats: int
    chunk_rows: int | None
    scratch: Scratch = field(default_factory=Scratch)
    consumers: list = field(default_factory=list)
    kept: dict = field(default_factory=dict)
    n_heads: int = 0
    n_keys: int = 0
    causal: bool = True  # the model's own, for an attention module that does not say (it had defaulted to causal)

    def attend(self, query, key, value, mask, causal: bool, scale: float, softcap: float | None = None,
               masked_rows_zero: bool = False):
        """One layer's attention output, chunk by chunk, handing each chunk's weights on.

        query (1, H, q, d), key/value (1, Hkv, k, d); returns (1, H, q, d_v) in
        value's dtype. Each row is computed as the eager path computes it
        (``softcap``: Gemma 2's tanh cap on the scaled scores; ``masked_rows_zero``: a row whose bool mask has no
        key gets zero weights, as ``core.attention`` gives it, where transformers' eager path spreads it evenly).
        """
        layer = len(self.consumers)
        q, k, v = query[0].float(), key[0].float(), value[0].float()  # (H, q, d), (Hkv, k, d), (Hkv, k, dv)
        if k.shape[0] != q.shape[0]:  # grouped-query attention: repeat the kv heads
            k = k.repeat_interleave(q.shape[0] // k.shape[0], dim=0)  # (H, k, d)
            v = v.repeat_interleave(q.shape[0] // v.shape[0], dim=0)  # (H, k, dv)
        n_heads, q_len, k_len = q.shape[0], q.shape[1], k.shape[1]
        self.n_heads, self.n_keys = n_heads, k_len
        consumer = self.factory(layer, n_heads, k_len)
        self.consumers.append(consumer)
        heads = sorted(h for (l, h) in self.keep if l == layer and h < n_heads)
        kept = torch.zeros(len(heads), q_len, k_len, device=q.device) if heads else None  # (h, q, k)
        out = torch.empty(n_heads, q_len, v.shape[-1], device=q.device)  # (H, q, dv)
        rows = min(q_len, self.chunk_rows or max(1, self.chunk_floats // (n_heads * k_len)))
        q = q * scale  # scaling Q, not every score
        for start in range(0, q_len, rows):
            stop = min(start + rows, q_len)
            weights, logits = chunk_weights(q, k, mask, causal, start, stop, self.scratch, softcap)  # (H, rows, seen)
            if masked_rows_zero and mask is not None:
                weights.masked_fill_(~_mask_rows(mask, start, stop)[..., :weights.shape[-1]].any(-1, keepdim=True), 0)
            out[:, start:stop] = torch.matmul(weights, v[:, :weights.shape[-1]])  # (H, rows, dv)
            if consumer is not None:
                consumer.update(weights, start, logits)
            if kept is not None:
                kept[:, start:stop, :weights.shape[-1]] = weights[heads]
        if kept is not None:
            kept = kept.cpu()
            self.kept.update({(layer, h): kept[i] for i, h in enumerate(heads)})
        release_freed_memory()
        return out.unsqueeze(0).to(value.dtype)  # (1, H, q, dv)


def chunk_weights(q, k, mask, causal: bool, start: int, stop: int, scratch: Scratch | None = None,
                  softcap: float | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """softmax(Q Kᵀ + mask) of query rows ``start:stop`` (Q already scaled).

    With ``softcap``, the scores are first capped to ``softcap · tanh(scores / softcap)`` (Gemma 2, before the
    mask, as its eager attention does).

    Returns the weights of the first ``seen`` keys ``(H, rows, seen)`` and the
    scores they come from, shifted so that each row's maximum is 0 (same shape;
    both in ``scratch``, contiguous; see ``shifted_softmax``).
    ``mask``: None, bool (True = may attend) or additive float, broadcastable
    to ``(B, H, q, k)``. ``causal`` (with no mask): query i sees keys ≤ i + k −
    q, and ``seen`` stops at the last key the chunk's last row sees (every
    row's weights after it are zero); otherwise ``seen`` is every key.
    Masked scores are set to the dtype's minimum, as transformers' eager path
    does, so no row turns to NaN and every score stays finite.
    """
    q_len, k_len = q.shape[1], k.shape[1]
    seen = min(k_len, stop + k_len - q_len) if causal else k_len  # keys visible to the chunk's last row
    scores = buffer(scratch, "scores", (q.shape[0], stop - start, seen), q)  # (H, rows, seen)
    torch.matmul(q[:, start:stop], k[:, :seen].transpose(-1, -2), out=scores)
    if softcap:
        scores.div_(softcap).tanh_().mul_(softcap)
    lowest = torch.finfo(scores.dtype).min
    if mask is not None:
        chunk_mask = _mask_rows(mask, start, stop)[..., :seen]  # (1|H, rows|1, seen)
        if chunk_mask.dtype == torch.bool:
            scores.masked_fill_(~chunk_mask, lowest)
        else:
            scores.add_(chunk_mask.float()).clamp_(min=lowest)  # a -inf in the mask becomes the minimum
    if causal:  # only the last (rows × rows) block holds future keys: row r sees block keys <= r
        rows, first = stop - start, start + k_len - q_len
        future = torch.ones(rows, rows, dtype=torch.bool, device=q.device).triu(1)  # (rows, rows)
        scores[..., first:seen].masked_fill_(future[:, :seen - first], lowest)
    return shifted_softmax(scores, buffer(scratch, "weights", scores.shape, scores))


def shifted_softmax(scores: torch.Tensor, into: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Softmax of ``scores [..., k]`` over the last dim into ``into``; ``scores`` shifted so each row's max is 0.

    The shifted scores are the log of the weights up to a constant per row
    (log a = scores − log Σ exp(scores)), which is all an entropy needs: taking
    the log of every weight afterwards costs about as much as the softmax.
    """
    scores -= scores.amax(-1, keepdim=True)  # (..., k)
    return torch.softmax(scores, dim=-1, out=into), scores


def _mask_rows(mask: torch.Tensor, start: int, stop: int) -> torch.Tensor:
    """Rows ``start:stop`` of batch item 0 of a mask broadcastable to ``(B, H, q, k)``."""
    while mask.dim() < 4:
        mask = mask.unsqueeze(0)
    mask = mask[0]  # (1|H, q|1, k)
    return mask if mask.shape[-2] == 1 else mask[:, start:stop]


_ACTIVE: ContextVar[_Stream | None] = ContextVar("attnscope_stream", default=None)


def _hf_attention(module, query, key, value, attention_mask, scaling=None, dropout=0.0, **kwargs):
    """The active stream's chunked attention; transformers' ``sdpa`` when no stream is active."""
    stream = _ACTIVE.get()
    if stream is None:
        return sdpa_attention_forward(module, query, key, value, attention_mask, scaling=scaling, dropout=dropout,
                                      **kwargs)
    if kwargs.get("position_bias") is not None or kwargs.get("s_aux") is not None or query.shape[0] != 1:
        raise ExtractionError(
            f"{type(module).__name__} uses a position bias, learned attention sinks or a batch, which streaming does "
            "not handle yet; use core.extract_attention on shorter inputs"
        )
    is_causal = kwargs.get("is_causal")
    is_causal = getattr(module, "is_causal", stream.causal) if is_causal is None else is_causal
    causal = bool(is_causal) and attention_mask is None and query.shape[2] > 1
    scale = query.shape[-1] ** -0.5 if scaling is None else scaling
    out = stream.attend(query, key, value, attention_mask, causal, scale, kwargs.get("softcap"))  # (1, H, q, dv)
    return out.transpose(1, 2).contiguous(), None  # (1, q, H, dv), as transformers expects


def _custom_attention(query, key, value, mask=None, dropout_p=0.0):
    """``MultiHeadAttention.attention_fn`` while streaming: chunked output and weights."""
    stream = _ACTIVE.get()
    if stream is None or query.shape[0] != 1:
        raise ExtractionError("AttnScope streaming runs one sequence inside core.stream_attention only")
    return stream.attend(query, key, value, mask, False, 1.0 / math.sqrt(query.shape[-1]), masked_rows_zero=True), None


AttentionInterface.register(STREAM_IMPLEMENTATION, _hf_attention)
AttentionMaskInterface.register(STREAM_IMPLEMENTATION, sdpa_mask)


def can_stream(model) -> bool:
    """Whether ``stream_attention`` takes ``model``: an AttnScope model, or a Hugging Face model whose attention
    layers call transformers' attention interface (its ``_supports_attention_backend``; Bloom, Falcon, GPT-Neo,
    MPNet and DeBERTa compute attention in their own code, which no registered function reaches). Not a model with
    learned attention sinks (GPT-OSS's per-head ``sinks`` logit, passed as ``s_aux``: a softmax column the streamed
    rows would leave out, so they summed to 1 where the model's own rows sum to less)."""
    if isinstance(model, AttnScopeTransformer):
        return True
    if any(name.rsplit(".", 1)[-1] == "sinks" for name, _ in model.named_parameters()):
        return False
    return isinstance(model, PreTrainedModel) and bool(getattr(model, "_supports_attention_backend", False))


def _said_causal(model) -> bool:
    """Whether a Hugging Face model's config says it is causal (read without a forward, which would run the
    caller's layer hooks): how an attention module that does not say itself is streamed."""
    return isinstance(model, PreTrainedModel) and not is_encoder_decoder(model) and is_causal_model(model)


def _check_ids(model, input_ids) -> None:
    """InputError for token ids ``(1, T)`` the model cannot read, before it runs (it raised torch's own errors): none,
    more than its positions, or past its vocabulary."""
    if input_ids.shape[1] == 0:
        raise InputError("input_ids holds no tokens; give at least one token id")
    limit = max_positions(model)
    if limit is not None and input_ids.shape[1] > limit:
        raise InputError(f"input_ids holds {input_ids.shape[1]} tokens, more than the model's {limit} positions; "
                         "cut it to that many (or stream a text, which is cut with a warning)")
    check_vocab(input_ids, vocab_size(model))


@contextmanager
def streaming_kernels(model):
    """Route every attention layer of ``model`` through the streaming function; undo it after."""
    if isinstance(model, PreTrainedModel):
        previous = implementations(model.config)
        model.set_attn_implementation(STREAM_IMPLEMENTATION)
        try:
            yield
        finally:
            model.set_attn_implementation(previous)
    elif isinstance(model, AttnScopeTransformer):
        modules = [m for m in model.modules() if isinstance(m, MultiHeadAttention)]
        previous = [m.__dict__.get("attention_fn") for m in modules]  # nested: an outer switch's, else none
        for module in modules:
            module.attention_fn = _custom_attention
        try:
            yield
        finally:
            for module, fn in zip(modules, previous):
                if fn is None:
                    del module.attention_fn  # back to the class default, the written-out path
                else:
                    module.attention_fn = fn
    else:
        raise ExtractionError(
            f"streaming supports Hugging Face and AttnScope models; {type(model).__name__} is neither. "
            "Use core.extract_attention instead"
        )


def stream_attention(
    model,
    input_ids: torch.Tensor,
    consumer_factory: ConsumerFactory,
    attention_mask: torch.Tensor | None = None,
    keep=(),
    chunk_rows: int | None = None,
    chunk_floats: int = CHUNK_FLOATS,
    token_type_ids: torch.Tensor | None = None,
) -> StreamedAttention:
    """Run ``model`` on ``input_ids`` (1, T), feeding each layer's weights to its consumer in row chunks.

    ``consumer_factory(layer, n_heads, n_keys)`` is called as each layer runs.
    ``attention_mask`` (1, T): 1 = token, 0 = padding, as in Hugging Face.
    ``token_type_ids`` (1, T): a pair's segment ids (``encode.Encoded``), for models that take them.
    ``keep``: ``(layer, head)`` pairs, or layer numbers for all heads of a layer,
    whose full maps come back in ``kept``. ``chunk_rows`` fixes the rows per
    chunk; by default ``chunk_floats`` bounds heads × rows × keys.
    """
    input_ids = torch.as_tensor(input_ids)
    if input_ids.dim() != 2 or input_ids.shape[0] != 1:
        raise InputError(f"stream_attention takes one sequence, input_ids (1, T); got shape {tuple(input_ids.shape)}")
    if chunk_rows is not None and chunk_rows < 1:
        raise InputError(f"chunk_rows must be at least 1; got {chunk_rows}")
    _check_ids(model, input_ids)
    check_weights_loaded(model)  # built on meta: "Tensor.item() cannot be called on meta tensors" from the forward
    stream = _Stream(consumer_factory, _keep_pairs(model, keep), chunk_floats, chunk_rows, causal=_said_causal(model))
    device = model_device(model)  # an offloaded model's: where its hooks run it (``offload.execution_device``)
    input_ids = input_ids.to(device)
    attention_mask = None if attention_mask is None else torch.as_tensor(attention_mask).to(device)
    start = time.perf_counter()
    token = _ACTIVE.set(stream)
    try:
        with eval_mode(model), streaming_kernels(model), torch.no_grad(), told_out_of_memory(model, STREAMED):
            output = _forward(model, input_ids, attention_mask, token_type_ids)
    finally:
        _ACTIVE.reset(token)
    if not stream.consumers:
        raise ExtractionError(f"{type(model).__name__} ran no attention layer through the streaming function: it "
                              "computes attention in its own code, which AttnScope cannot stream; use "
                              "core.extract_attention on shorter inputs")
    missing = sorted(stream.keep - set(stream.kept))
    if missing:
        raise InputError(f"keep asks for layer {missing[0][0]}, head {missing[0][1]}, but the model has layers "
                         f"0-{len(stream.consumers) - 1} and heads 0-{stream.n_heads - 1}")
    return StreamedAttention(stream.consumers, stream.n_heads, stream.n_keys, stream.kept, output,
                             time.perf_counter() - start)


def _forward(model, input_ids, attention_mask, token_type_ids=None):
    if isinstance(model, AttnScopeTransformer):
        return model(input_ids, attention_mask=attention_mask)
    if is_encoder_decoder(model):
        return model.get_encoder()(input_ids=input_ids, attention_mask=attention_mask, return_dict=True)
    no_cache = {"use_cache": False} if hasattr(model.config, "use_cache") else {}  # a KV cache costs memory
    segments = segment_inputs(model, token_type_ids, input_ids.device)
    return model(input_ids=input_ids, attention_mask=attention_mask, return_dict=True, **segments, **no_cache)


def _keep_pairs(model, keep) -> set:
    """``keep`` as a set of (layer, head); a bare layer number means every head of it."""
    pairs = set()
    for item in keep or ():
        if isinstance(item, int):
            pairs.update((item, h) for h in range(_n_heads(model)))
        elif isinstance(item, (tuple, list)) and len(item) == 2:
            pairs.add((int(item[0]), int(item[1])))
        else:
            raise InputError(f"keep takes (layer, head) pairs or layer numbers; got {item!r}")
    return pairs


def _n_heads(model) -> int:
    heads = config_size(model, "n_heads", "num_attention_heads", "n_head", "encoder_attention_heads")
    if heads is not None:
        return heads
    raise InputError(f"cannot tell how many heads {type(model).__name__} has; pass (layer, head) pairs to keep")
