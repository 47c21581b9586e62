"""Stream two models over the same tokens in lockstep: per-head JS distance between them, no maps held.

``diagnostics.compare`` needs the distance between head h of model A and head h
of model B on a long probe, but neither model's maps fit in memory at once.
Model A streams (``core.stream_attention``) in a worker thread whose layer
consumers hand each query-row chunk over a one-slot queue; model B streams in
the calling thread and its consumers take A's chunk for the same layer and rows
and feed both to ``redundancy.PairedJS``. At any moment one chunk of each model
is alive (two ``CHUNK_FLOATS`` buffers), whatever the probe's length; the two
forward passes overlap (torch releases the GIL in its kernels).

Both models must run the same layers, heads and chunk rows: the chunk rows are
fixed for both (``chunk_rows``), and a mismatch of layer or row raises
``InputError`` instead of comparing the wrong rows.
"""

from __future__ import annotations

import queue
import threading

import torch

from core.cancel import layer_progress
from core.errors import InputError
from core.extraction.streaming import CHUNK_FLOATS, stream_attention, streaming_kernels
from diagnostics.measure.redundancy import PairedJS
from core.extraction.extract import eval_mode, model_is_causal
from core.extraction.text_config import config_size

HANDOFF_TIMEOUT_S = 600  # a side that waits this long for the other is stuck, not slow
_DONE = object()


class _Stopped(Exception):
    """Raised in model A's stream once model B's side has ended: A stops at its next chunk."""


class _Handoff:
    """A one-slot queue between the two streams, with a way out for whichever side fails first."""

    def __init__(self):
        self.slot = queue.Queue(maxsize=1)
        self.stopped = threading.Event()

    def put(self, item):
        """Hand ``item`` to model B's side; ``_Stopped`` once that side has ended (stopped, failed or finished):
        model A had computed every layer left, for nothing, before a stop returned (6-9 s for two SmolLM2 on
        2,201 tokens)."""
        while not self.stopped.is_set():
            try:
                self.slot.put(item, timeout=0.1)
                return
            except queue.Full:
                continue
        raise _Stopped

    def get(self):
        item = self.slot.get(timeout=HANDOFF_TIMEOUT_S)
        if isinstance(item, BaseException):
            raise item
        if item is _DONE:
            raise InputError("model A ran fewer attention layers than model B; compare needs the same architecture")
        return item

    def finish(self):
        """After model B's last layer: model A must be done too."""
        item = self.slot.get(timeout=HANDOFF_TIMEOUT_S)
        if isinstance(item, BaseException):
            raise item
        if item is not _DONE:
            raise InputError("model A ran more attention layers than model B; compare needs the same architecture")


class _Sender:
    """Model A's consumer of one layer: copies each chunk into the hand-off."""

    def __init__(self, handoff, layer):
        self.handoff, self.layer = handoff, layer

    def update(self, chunk, q_start, logits=None):
        self.handoff.put((self.layer, q_start, chunk.clone()))  # the chunk buffer is reused for the next rows


class _Receiver:
    """Model B's consumer of one layer: pairs its chunk with A's and accumulates the distance."""

    def __init__(self, handoff, layer, n_keys, causal):
        self.handoff, self.layer = handoff, layer
        self.js = PairedJS(n_keys, causal)

    def update(self, chunk, q_start, logits=None):
        layer, start, chunk_a = self.handoff.get()  # (H, qc, k)
        if (layer, start) != (self.layer, q_start) or chunk_a.shape != chunk.shape:
            raise InputError(f"models A and B stream differently (A: layer {layer} rows from {start}, "
                             f"B: layer {self.layer} rows from {q_start}); compare needs the same architecture")
        self.js.update(chunk_a, chunk, q_start)


def stream_paired_js(model_a, model_b, input_ids, chunk_rows=None, token_type_ids=None,
                     progress=None) -> torch.Tensor:
    """``[L, H]`` JS distance between each head of ``model_a`` and the same head of ``model_b``
    on ``input_ids`` (1, T) (and a pair's segment ids ``token_type_ids``); ``progress(fraction, "layer 3/30")`` as
    each layer starts (a probe of 4,000 tokens streams two SmolLM2 for minutes)."""
    input_ids = torch.as_tensor(input_ids)
    causal = model_is_causal(model_a)
    if model_is_causal(model_b) != causal:
        raise InputError("one model is causal and the other is not; compare needs the same kind of attention")
    rows = chunk_rows or _chunk_rows(model_a, input_ids.shape[-1])
    handoff = _Handoff()

    def run_a():
        try:
            stream_attention(model_a, input_ids, lambda layer, h, k: _Sender(handoff, layer), chunk_rows=rows,
                             token_type_ids=token_type_ids)
            handoff.put(_DONE)
        except _Stopped:  # the other side has ended: nobody to tell
            return
        except BaseException as err:  # noqa: BLE001  handed to the other side, raised there
            try:
                handoff.put(err)
            except _Stopped:
                return

    # Both switched here, around both threads: two models sharing one config (AutoModel.from_config(a.config)), or
    # one model compared with itself, were switched back by the thread that finished first while the other still
    # streamed (a false "ran more attention layers"), or left switched (in eval mode: a training model lost dropout).
    with eval_mode(model_a), eval_mode(model_b), streaming_kernels(model_a), streaming_kernels(model_b):
        worker = threading.Thread(target=run_a, name="attnscope-compare-a", daemon=True)
        worker.start()
        try:
            receiver = lambda layer, h, k: _Receiver(handoff, layer, k, causal)  # noqa: E731
            with layer_progress(model_b, progress, config_size(model_b, "num_hidden_layers", "n_layers")):
                streamed = stream_attention(model_b, input_ids, receiver, chunk_rows=rows,
                                            token_type_ids=token_type_ids)
            handoff.finish()
        finally:
            handoff.stopped.set()
            worker.join()
    return torch.stack([consumer.js.finalize() for consumer in streamed.consumers])  # (L, H)


def _chunk_rows(model, n_tokens):
    """The rows per chunk both models use: what ``stream_attention`` would pick for ``model``."""
    heads = config_size(model, "n_heads", "num_attention_heads", "n_head") or 1
    return max(1, CHUNK_FLOATS // (heads * n_tokens))
