"""Cached models and attention results, shared by every session of the app.

Models are loaded only through ``core.load_untrusted`` (a known name, a cached
Hub id, a folder under the allowed roots) and kept in one per-process
``ModelCache``: at most ``MAX_MODELS`` models and ``model_budget_bytes()`` bytes
of parameters; beyond either, the least recently used one is dropped. Each
model carries a lock, because one model object serves every session and
extraction switches it to eval mode. Attention results are kept with
``st.cache_resource`` too: at 512 tokens on a 12 × 12 model they hold 150 MB,
which ``st.cache_data`` would copy on every rerun; they are never mutated.
What is computed from a result (metrics, labels, thumbnails) is cached in
``app.views.derived``. Budgets: docs/app.md, "Budgets".
"""

from __future__ import annotations

import threading
from collections import OrderedDict
from dataclasses import dataclass, field

import streamlit as st

import core
from app.server import session
from core.cancel import stop_between_layers
from core.checkpoints.archive import env_size

MAX_MODELS = 3  # models kept in memory at once (LRU beyond that)
PROGRESS_STEPS = 20  # loading-bar updates at most (each is replayed on every cache hit)
MAX_RESULTS = 4  # attention results kept at once (a 12 × 12 model at 512 tokens: 151 MB each)
ENV_MODEL_CACHE = "ATTNSCOPE_MODEL_CACHE_BYTES"


def model_budget_bytes() -> int:
    """Bytes of parameters the model cache may hold: ``$ATTNSCOPE_MODEL_CACHE_BYTES``, else twice the model cap."""
    return env_size(ENV_MODEL_CACHE, 2 * core.Limits().max_model_bytes)


@dataclass
class LoadedModel:
    model: object
    tokenizer: object
    lock: threading.Lock = field(default_factory=threading.Lock)
    nbytes: int = 0  # parameters and buffers, as held in memory


def model_bytes(model) -> int:
    tensors = list(model.parameters()) + list(model.buffers()) if hasattr(model, "parameters") else []
    return sum(t.numel() * t.element_size() for t in tensors)


class ModelCache:
    """Least-recently-used models, bounded in count and bytes; one load per source at a time. Thread-safe."""

    def __init__(self, max_models: int, max_bytes: int):
        self.max_models, self.max_bytes = max_models, max_bytes
        self._models: OrderedDict[str, LoadedModel] = OrderedDict()
        self._lock = threading.Lock()
        self._loading: dict[str, threading.Lock] = {}

    def get(self, source: str, load) -> LoadedModel:
        """The cached model of ``source``, or ``load()``'s, kept and counted against the budget."""
        with self._lock:
            if source in self._models:
                self._models.move_to_end(source)
                return self._models[source]
            source_lock = self._loading.setdefault(source, threading.Lock())
        with source_lock:  # a second session asking for the same model waits for the first load
            with self._lock:
                if source in self._models:
                    return self._models[source]
            loaded = load()
            loaded.nbytes = model_bytes(loaded.model)
            with self._lock:
                self._models[source] = loaded
                self._evict()
                self._loading.pop(source, None)
        return loaded

    def _evict(self) -> None:
        """Drop the oldest until within bounds; the newest stays even alone above the budget (it is in use)."""
        while len(self._models) > 1 and (len(self._models) > self.max_models or self.total_bytes > self.max_bytes):
            self._models.popitem(last=False)

    @property
    def total_bytes(self) -> int:
        return sum(m.nbytes for m in self._models.values())

    def sources(self) -> list[str]:
        with self._lock:
            return list(self._models)


@st.cache_resource(show_spinner=False)
def model_cache() -> ModelCache:
    """The one ``ModelCache`` of this server process."""
    return ModelCache(MAX_MODELS, model_budget_bytes())


def load_model(source: str) -> LoadedModel:
    """A known model name, a cached Hugging Face id or a folder under the allowed roots (``core.load_untrusted``)."""
    def load():
        bar, shown = st.empty(), []  # made here: a cached caller (``attention``) may only replay its own elements

        def progress(fraction: float, message: str) -> None:  # a GGUF file dequantises for seconds to minutes
            step = int(fraction * PROGRESS_STEPS)
            if not shown or step > shown[-1]:
                shown.append(step)
                bar.progress(min(1.0, fraction), text=f"Loading {source}: {message}")

        with st.spinner("Loading the model…"):
            loaded = core.load_untrusted(source, progress=progress)
        bar.empty()
        return LoadedModel(loaded.model, loaded.tokenizer)
    return model_cache().get(source, load)


@st.cache_resource(max_entries=MAX_RESULTS, show_spinner="Reading the attention weights…")
def attention(source: str, text: str, text_pair: str = "", target: str = "") -> core.AttentionResult:
    """Attention of ``source`` on the text(s); errors are raised, not cached.

    Stops between layers (``core.Cancelled``) once the asking browser session has ended.
    """
    loaded = load_model(source)
    with loaded.lock, stop_between_layers(loaded.model, session.stop_when_gone()):
        return core.extract_attention(loaded.model, loaded.tokenizer, text, text_pair or None, target or None)
