"""Per-head metrics and pattern labels of long inputs, without holding every attention map.

``core.stream_attention`` recomputes each layer's weights in query-row chunks
beside the fused attention kernel; here each layer's chunks feed one
``metrics.MetricAccumulator``, so the result equals ``head_metrics`` on the
full ``[layers, heads, q, k]`` maps of ``core.extract_attention`` (within float
rounding) while memory stays near that of a plain forward pass. See
docs/streaming.md for the design and the benchmark.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

import torch

from core.extraction.encode import encode, max_positions
from core.cancel import layer_progress
from core.extraction.extract import check_model_and_tokenizer, model_is_causal
from core.extraction.scratch import Scratch
from core.extraction.streaming import stream_attention
from core.extraction.text_config import config_size, vocab_size
from core.extraction.tokens import display_tokens
from core.extraction.windows import attention_windows
from diagnostics.measure.metrics import HeadMetrics, MetricAccumulator, stack_metrics
from diagnostics.classify.patterns import classify_metrics
from diagnostics.measure.redundancy import PairwiseJS


@dataclass
class StreamResult:
    """Per-head metrics ``[layers, heads]``, their pattern labels and the maps asked to be kept."""

    metrics: HeadMetrics  # every tensor [L, H] (column_mass [L, H, k]), on CPU
    patterns: list  # [L][H] diagnostics.classify.patterns.HeadPattern
    causal: bool
    tokens: list[str] = field(default_factory=list)
    token_ids: list[int] = field(default_factory=list)
    special: list[bool] = field(default_factory=list)
    padding: list[bool] = field(default_factory=list)
    kept: dict = field(default_factory=dict)  # (layer, head) -> (q, k) float32 on CPU
    distances: torch.Tensor | None = None  # [L, H, H] JS distances (redundancy=True)
    warnings: list[str] = field(default_factory=list)
    elapsed_s: float = 0.0
    metrics_s: float = 0.0  # of elapsed_s, the part spent on metrics, distances and labels (the rest: the model)

    @property
    def labels(self) -> list[list[str]]:
        return [[p.label for p in layer] for layer in self.patterns]

    @property
    def sink_tokens(self) -> list[list[str]]:
        """``[L][H]`` display string of each head's strongest sink key (its id, as text, where the result came
        from token ids: ``stream_token_statistics`` has no tokenizer to name tokens)."""
        names = self.tokens or [str(i) for i in self.token_ids]
        return [[names[k] for k in layer] for layer in self.metrics.sink_key.tolist()]


def stream_statistics(model, tokenizer, text: str, text_pair: str | None = None, keep=(),
                      chunk_rows: int | None = None, redundancy: bool = False, progress=None) -> StreamResult:
    """Metrics and labels of every head of ``model`` on ``text``, layer by layer in query chunks.

    Takes what ``core.extract_attention`` takes (no ``target``: an encoder-decoder's encoder is streamed) and
    gives what ``head_metrics`` + ``classify_metrics`` give on its result; ``keep`` lists the ``(layer,
    head)`` pairs (or whole layers) whose full maps are also returned.
    ``redundancy=True`` also gives ``redundancy.js_distance``'s pairwise
    distances (heads²/2 passes over at most ``redundancy.JS_ROWS`` rows of each
    map). ``progress(fraction, message)``, when given, is called as each layer
    starts ("layer 3/30"). Encoder-decoder models: the encoder is streamed.
    """
    check_model_and_tokenizer(model, tokenizer)
    enc = encode(tokenizer, text, text_pair, max_positions(model, tokenizer), vocab_size=vocab_size(model))
    result = stream_token_statistics(model, enc.input_ids, special=enc.special, keep=keep, chunk_rows=chunk_rows,
                                     redundancy=redundancy, token_type_ids=enc.token_type_ids, progress=progress)
    result.tokens = display_tokens(tokenizer, result.token_ids)
    result.warnings = list(enc.warnings)
    return result


def stream_token_statistics(model, input_ids, attention_mask=None, special=None, keep=(),
                            chunk_rows: int | None = None, redundancy: bool = False,
                            token_type_ids=None, progress=None) -> StreamResult:
    """``stream_statistics`` on token ids ``(1, T)``; ``attention_mask`` (1, T) marks padding with 0;
    ``token_type_ids`` (1, T) are a pair's segment ids."""
    start = time.perf_counter()
    causal = model_is_causal(model)
    padding = None if attention_mask is None else (torch.as_tensor(attention_mask)[0] == 0).tolist()
    scratch = Scratch()  # one set of chunk-sized temporaries for every layer

    windows = attention_windows(model) or []

    def consumer(layer, n_heads, n_keys):
        window = windows[layer] if layer < len(windows) else None  # a local layer's (Mistral, Gemma 2)
        metrics = MetricAccumulator(n_keys, causal, special=special, padding=padding, scratch=scratch, window=window)
        return _Layer(metrics, PairwiseJS(n_keys, causal, padding, scratch=scratch) if redundancy else None)

    with layer_progress(model, progress, config_size(model, "num_hidden_layers", "n_layers")):
        streamed = stream_attention(model, input_ids, consumer, attention_mask=attention_mask, keep=keep,
                                    chunk_rows=chunk_rows, token_type_ids=token_type_ids)
    finishing = time.perf_counter()
    metrics = stack_metrics([layer.metrics.finalize() for layer in streamed.consumers])
    distances = torch.stack([layer.js.finalize() for layer in streamed.consumers]) if redundancy else None
    patterns = classify_metrics(metrics)
    ids = torch.as_tensor(input_ids)[0].tolist()
    end = time.perf_counter()
    return StreamResult(
        metrics=metrics, patterns=patterns, causal=causal, token_ids=ids,
        special=list(special) if special is not None else [False] * len(ids),
        padding=padding or [False] * len(ids), kept=streamed.kept, distances=distances,
        elapsed_s=end - start, metrics_s=end - finishing + sum(layer.seconds for layer in streamed.consumers),
    )


@dataclass
class _Layer:
    """One layer's consumers: the metrics and, optionally, the pairwise distances."""

    metrics: MetricAccumulator
    js: PairwiseJS | None = None
    seconds: float = 0.0  # spent in update (wall time: on CUDA, only what the host waited for)

    def update(self, chunk, q_start, logits=None):
        start = time.perf_counter()
        self.metrics.update(chunk, q_start, logits)
        if self.js is not None:
            self.js.update(chunk, q_start)
        self.seconds += time.perf_counter() - start


