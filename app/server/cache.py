"""Cached models and attention results, shared by every session of the app.

Models are loaded only through ``core.load_untrusted`` (a known name, a cached
Hub id, a folder under the allowed roots) and kept in one per-process
``BoundedCache``: at most ``MAX_MODELS`` models and ``model_budget_bytes()`` bytes
of parameters; beyond either, the least recently used one is dropped. Each
model carries a lock, because one model object serves every session and
extraction switches it to eval mode. Attention results are kept the same way,
shared and never mutated (``st.cache_data`` would copy them on every rerun): at
most ``MAX_RESULTS`` and ``result_budget_bytes()`` bytes, since one result of
SmolLM2 on a long text holds 1.28 GB.
What is computed from a result (metrics, labels, thumbnails) is cached in
``app.views.derived``. Budgets: docs/app.md, "Budgets".
"""

from __future__ import annotations

import re
import threading
import weakref
from collections import OrderedDict
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import streamlit as st
from streamlit.runtime.scriptrunner_utils.exceptions import ScriptControlException

import core
from app.server import session
from core.errors import size_text
from core.extraction.maps_budget import maps_over_budget, over_text, shorten_advice
from core.extraction.text_config import is_encoder_decoder
from core.cancel import stop_between_layers, waited_for
from core.checkpoints.archive import env_size, max_model_bytes
from core.checkpoints.checkpoint import expand_user
from core.checkpoints.layout import files_under
from core.checkpoints.registry import canonical_name
from core.checkpoints.untrusted import cached_hub_folder, is_known_name, reads_as_hub_id
from diagnostics.probe_texts import Probe
from diagnostics.probes import probe_tokens, read_lengths

MAX_MODELS = 3  # models kept in memory at once (LRU beyond that)
WAIT_ROUND_S = 0.25  # how often a session waiting for a known model another holds looks again, and says so
# Loading-bar updates as it moves, at most; and one for each new phase of the load, where it stands still ("reading
# the GGUF metadata", ~3 s of SmolLM2, and "waiting: another GGUF file is being converted" had never been drawn, told
# at the bar's first step), but not for each of its numbers ("dequantising tensor 5/272").
PROGRESS_STEPS = 20
MAX_RESULTS = 4  # attention results kept at once, within result_budget_bytes()
MAX_ROLLOUTS = 4  # rollouts kept at once, within result_budget_bytes() of their own
ENV_MODEL_CACHE = "ATTNSCOPE_MODEL_CACHE_BYTES"
ENV_RESULT_CACHE = "ATTNSCOPE_RESULT_CACHE_BYTES"
RESULT_BUDGET_BYTES = 2 * 10**9  # SmolLM2 on 5,000 characters (1,089 tokens) is 1.28 GB; MiniLM at 512 tokens 75 MB
ENV_REPORT_MAPS = "ATTNSCOPE_REPORT_MAPS_BYTES"
# The maps a Diagnose report keeps for its head explorer, in one session's state (outside the shared caches): SmolLM2's
# 7 default probes take 375 MB, MiniLM's 32 MB; 14 MiniLM probes of ~500 tokens took 1.1 GB per open session.
REPORT_MAPS_BYTES = 512 * 10**6


def model_budget_bytes() -> int:
    """Bytes of parameters the model cache may hold: ``$ATTNSCOPE_MODEL_CACHE_BYTES``, else twice the model cap."""
    return env_size(ENV_MODEL_CACHE, 2 * max_model_bytes())


def result_budget_bytes() -> int:
    """Bytes of attention weights the result cache may hold: ``$ATTNSCOPE_RESULT_CACHE_BYTES``, else 2 GB."""
    return env_size(ENV_RESULT_CACHE, RESULT_BUDGET_BYTES)


def report_maps_bytes() -> int:
    """Bytes of attention maps one Diagnose report keeps: ``$ATTNSCOPE_REPORT_MAPS_BYTES``, else 512 MB."""
    return env_size(ENV_REPORT_MAPS, REPORT_MAPS_BYTES)


def keep_maps_within(reports: list, budget: int) -> list[str]:
    """Keep in ``reports`` (a Diagnose report, or Compare's two, whose probes are the same) the maps of their first
    probes that fit ``budget`` bytes together, the same probes in each; a note when some are dropped (each open
    session holds its reports, outside the shared caches)."""
    probes, kept, total = min(len(r.samples) for r in reports), 0, 0
    while kept < probes:
        total += sum(result_bytes(r.samples[kept]) for r in reports)
        if total > budget:
            break
        kept += 1
    if kept == probes:
        return []
    for report in reports:
        report.samples = report.samples[:kept]
    # a diagnosis's HTML report draws its findings' heads on the first probe: without it, none
    heatmaps = "" if kept or len(reports) > 1 else "; the HTML report has no heatmaps of the findings' heads"
    return [f"the attention maps of {probes - kept} of the {probes} probes are not kept for the map views "
            f"(at most {size_text(budget)} per page); the labels, findings and distances cover every probe"
            + heatmaps]


@dataclass
class LoadedModel:
    model: object
    tokenizer: object
    lock: threading.Lock = field(default_factory=threading.Lock)
    job: str = ""  # what a Diagnose or Compare run holding ``lock`` does ("diagnosis"), told to those waiting
    notes: tuple[str, ...] = ()  # what loading it said (a borrowed tokenizer, an architecture read off the weights)


BUSY = ("This model is busy with another session's {job}, which holds it until it ends (a known model serves one "
        "run at a time); your result follows then.")


def say_if_busy(loaded: LoadedModel, notice) -> bool:
    """Tell, in ``notice`` (an ``st.empty()``), that ``loaded`` is held by another session's run, and whether it was
    told: a diagnosis of 20 probes kept a 6-token Inspect on the spinner for a minute, without a word."""
    job = loaded.job
    if job and loaded.lock.locked():
        notice.info(BUSY.format(job=job))
        return True
    return False


@contextmanager
def holding(loaded: LoadedModel, notice):
    """``loaded.lock`` for the ``with``; while a Diagnose or Compare of another session holds it, ``notice`` says so.
    Looked at again every 0.25 s: a look before the wait missed a run that took the model after another Inspect, or
    that held it but had not yet said what it does, and that Inspect then waited out the whole run without a word."""
    told = False

    def waiting():
        nonlocal told
        told = told or say_if_busy(loaded, notice)
    with waited_for(loaded.lock, waiting, WAIT_ROUND_S):
        if told:
            notice.empty()
        yield


def held_for_run(loaded: LoadedModel, tell):
    """``loaded.lock`` for a Diagnose or Compare run. Each round it waits, ``tell(text)`` says who holds it: the
    run's progress, which also ends the wait of a visitor who has gone (``core.cancel.stoppable``). A plain acquire
    had kept the bar on "Loading the checkpoint…" for another session's whole run, and a closed tab's run held its
    ``run_models`` places and its loaded upload until that run ended."""
    return waited_for(loaded.lock, lambda: tell(BUSY.format(job=loaded.job or "run")), WAIT_ROUND_S)


def _nbytes(tensors) -> int:
    return sum(t.numel() * t.element_size() for t in tensors)


def model_bytes(loaded: LoadedModel) -> int:
    """Parameters and buffers, as held in memory."""
    model = loaded.model
    return _nbytes(list(model.parameters()) + list(model.buffers()) if hasattr(model, "parameters") else [])


def result_bytes(result: core.AttentionResult) -> int:
    """The attention weights of ``result`` and of its encoder / decoder / cross parts, each tensor once."""
    parts = [result] + [p for p in (result.encoder, result.decoder, result.cross) if p is not None]
    return _nbytes({id(p.attentions): p.attentions for p in parts}.values())


@dataclass
class _Waiting:
    """The callers loading or waiting for one key, and the lock that lets one of them load at a time."""
    lock: threading.Lock = field(default_factory=threading.Lock)
    callers: int = 0


class BoundedCache:
    """Least-recently-used values, bounded in count and in bytes (``size_of(value)``); one load per key at a
    time, so sessions asking for the same key wait for one load. Thread-safe."""

    def __init__(self, max_items: int, max_bytes: int, size_of):
        self.max_items, self.max_bytes, self.size_of = max_items, max_bytes, size_of
        self._values: OrderedDict[object, tuple[object, int]] = OrderedDict()  # key -> (value, bytes)
        self._lock = threading.Lock()
        self._loading: dict[object, _Waiting] = {}
        # dropped values that a caller still holds (a model in use under its lock): found again, not loaded a second
        # time beside the first (two copies, two locks, over the budget)
        self._dropped: weakref.WeakValueDictionary = weakref.WeakValueDictionary()

    def get(self, key, load, while_waiting=None):
        """The cached value of ``key``, or ``load()``'s, kept and counted against the budget. A failed load is not
        kept: the next caller waiting for the key loads it, while later callers still wait behind that one, calling
        ``while_waiting()`` every 0.25 s."""
        with self._lock:
            if key in self._values or self._kept_again(key):
                self._values.move_to_end(key)
                return self._values[key][0]
            waiting = self._loading.setdefault(key, _Waiting())
            waiting.callers += 1
        try:
            while not waiting.lock.acquire(timeout=0.25):
                if while_waiting is not None:
                    while_waiting()
            try:
                with self._lock:
                    if key in self._values or self._kept_again(key):
                        return self._values[key][0]
                value = load()
                with self._lock:  # kept before the key's lock goes, so the next caller finds it
                    self._values[key] = (value, self.size_of(value))
                    self._evict()
                return value
            finally:
                waiting.lock.release()
        finally:
            with self._lock:
                waiting.callers -= 1
                if not waiting.callers:  # the last caller for the key: a later one starts afresh
                    del self._loading[key]

    def peek(self, key):
        """The value kept for ``key`` (or dropped and still held), or None; nothing is loaded or reordered."""
        with self._lock:
            if key in self._values:
                return self._values[key][0]
            return self._dropped.get(key)

    def _evict(self) -> None:
        """Drop the oldest until within bounds; the newest stays even alone above the budget (it is in use)."""
        while len(self._values) > 1 and (len(self._values) > self.max_items or self.total_bytes > self.max_bytes):
            key, (value, _) = self._values.popitem(last=False)
            self._drop(key, value)

    def discard(self, which) -> None:
        """Drop every kept value whose key ``which(key)`` picks (a caller that holds one keeps it alive)."""
        with self._lock:
            for key in [k for k in self._values if which(k)]:
                self._drop(key, self._values.pop(key)[0])

    def _drop(self, key, value) -> None:
        """Let a dropped value be found again while a caller still holds it (under ``_lock``)."""
        try:
            self._dropped[key] = value
        except TypeError:  # a value no weak reference can point at (a string in tests)
            pass

    def _kept_again(self, key) -> bool:
        """Keep again a dropped value of ``key`` that is still alive (under ``_lock``)."""
        value = self._dropped.pop(key, None)
        if value is None:
            return False
        self._values[key] = (value, self.size_of(value))
        self._evict()
        return True

    @property
    def total_bytes(self) -> int:
        return sum(size for _, size in self._values.values())

    def keys(self) -> list:
        with self._lock:
            return list(self._values)


@st.cache_resource(show_spinner=False)
def model_cache() -> BoundedCache:
    """The models of this server process."""
    return BoundedCache(MAX_MODELS, model_budget_bytes(), model_bytes)


@st.cache_resource(show_spinner=False)
def result_cache() -> BoundedCache:
    """The attention results of this server process, shared by every session."""
    return BoundedCache(MAX_RESULTS, result_budget_bytes(), result_bytes)


@st.cache_resource(show_spinner=False)
def rollout_cache() -> BoundedCache:
    """The rollouts of results (``app.views.derived.rollouts``), shared by every session: the last ``MAX_ROLLOUTS``
    shown, within the result budget again. A rollout is 1/heads of its result, which fits that budget, so one
    always fits; by count alone, four of a one-head model took four times the budget."""
    return BoundedCache(MAX_ROLLOUTS, result_budget_bytes(), lambda rollout: _nbytes([rollout]))


MAX_STAMPED_FILES = 1000  # a folder's files looked at for its stamp (the loader refuses bigger model folders)


def source_stamp(source: str) -> tuple:
    """The local files of ``source`` as they are now: ``(path, size, mtime)`` of a file, or of a folder and every
    file the loader may pick in it (``layout.files_under``: the model may sit levels down, and a file rewritten in
    place leaves its folder's mtime as it was), so a checkpoint saved again to the same place is read again rather
    than served from the caches. ``()`` for a known name, whose files do not change. Nothing is read but
    the file system's records. A Hub id's stamp is the cached snapshot it resolves to now (``_hub_stamp``)."""
    if not is_known_name(source) and reads_as_hub_id(source):  # as core.load_untrusted reads it, folder or id
        return _hub_stamp(source)
    path = expand_user(source)
    try:
        files = _files(path) if path.is_dir() else []
        return tuple((str(p.relative_to(path)), (st := p.stat()).st_size, st.st_mtime_ns) for p in [path, *files])
    except (OSError, ValueError):  # not a path here (a known name), or unreadable
        return ()


def _hub_stamp(source: str) -> tuple:
    """``(snapshot folder,)`` of a Hub id the local cache holds: the revision ``refs/main`` names now, which
    ``core.load_untrusted`` reads (an operator's download of a newer one had been served from the caches as the
    old); ``()`` when the cache lacks it. The folder is named by its commit; nothing is read but refs."""
    folder = cached_hub_folder(source)
    return (str(folder),) if folder is not None else ()


def _files(folder: Path) -> list[Path]:
    """The files under ``folder`` the loader looks at, sorted; none past ``MAX_STAMPED_FILES`` (it refuses them)."""
    try:
        return sorted(files_under(folder, str(folder), MAX_STAMPED_FILES))
    except core.CheckpointError:
        return []


def load_model(source: str, stamp: tuple | None = None, n_heads: int | None = None) -> LoadedModel:
    """A known model name, a cached Hugging Face id or a folder under the allowed roots (``core.load_untrusted``),
    as its files are now (``stamp``: ``source_stamp(source)`` unless given); ``n_heads`` for bare weights.

    A click during the load waits until the model is kept (``_handed_back``): raised inside the shared load, it
    threw the finished model away for every session waiting."""
    bar, shown, clicked = st.empty(), [], []

    def progress(fraction: float, message: str) -> None:  # a GGUF file dequantises for seconds to minutes
        step, phase = int(fraction * PROGRESS_STEPS), re.sub(r"\d+", "#", message)  # "tensor #/#": one phase
        if clicked or (shown and step <= shown[-1][0] and phase == shown[-1][1]):
            return  # a click waits: drawing would take it again, inside the load
        shown.append((step, phase))
        with _handed_back(clicked):
            bar.progress(min(1.0, fraction), text=f"Loading {source}: {message}")

    def load():
        if stamp is not None and stamp != source_stamp(source):  # the caller's files are gone: not these under it
            raise core.InputError(f"the files of {source} changed since its attention was read; press Run to "
                                  "read them again")
        loaded = core.load_untrusted(source, n_heads=n_heads, progress=progress)
        if files == source_stamp(source):  # the newest files (a slow load of older ones drops nothing)
            # their earlier copies: no Run can ask for them again, and kept they push other sessions' models out
            model_cache().discard(lambda key: key[0] == source and key[1] != files)
        return LoadedModel(loaded.model, loaded.tokenizer, notes=tuple(loaded.notes))
    source = canonical_name(source)  # 'Demo-BERT' and 'demo-bert' are one model, one lock
    files = source_stamp(source) if stamp is None else stamp
    try:
        with st.spinner("Loading the model…"):  # shown after 0.5 s: not for a model already kept
            return model_cache().get(_model_key(source, files, n_heads), load)
    finally:
        bar.empty()  # raises a click that waits, once the model is kept (or the load failed: the click goes first)


def _model_key(source: str, files: tuple, n_heads: int | None) -> tuple:
    """The model cache's key of ``source`` as its files ``files`` are (``source_stamp``), read with ``n_heads``."""
    return canonical_name(source), files, n_heads


@contextmanager
def _handed_back(clicked: list):
    """Streamlit raises a click's rerun (or a closed tab's stop) from the next element drawn: raised inside work
    other sessions may wait for, it threw that work away. Hand it back to Streamlit, pending, instead (noted in
    ``clicked``); the next element drawn after the work raises it, folded with any later click."""
    try:
        yield
    except ScriptControlException as request:
        session.request_again(request)
        clicked.append(request)


def result_key(source: str, text: str, text_pair: str = "", target: str = "", n_heads: int | None = None) -> tuple:
    """What names one attention result: the inputs (a known model by its one spelling), and the source's files as
    they are now (``source_stamp``). Its first three items name the model (``load_model``'s arguments)."""
    source = canonical_name(source)
    return source, source_stamp(source), n_heads, text, text_pair, target


_askers: dict[tuple, list] = {}  # result key -> the ``stop_when_gone()`` of every session asking for it now
_askers_lock = threading.Lock()


def attention(key: tuple) -> core.AttentionResult:
    """Attention for ``result_key(...)``, from the result cache; errors are raised, not cached.

    Stops between layers (``core.Cancelled``) once every browser session asking for it has ended (another tab
    waiting for the same text would have started again from layer 0).
    """
    source, stamp, n_heads, text, text_pair, target = key
    gone = session.stop_when_gone()
    notice = st.empty()

    def extract():
        loaded = load_model(source, stamp, n_heads)
        if loaded.tokenizer is None and loaded.notes:  # the loader said why there is none and what to do; the
            raise core.ExtractionError("; ".join(loaded.notes))  # extraction would say only that there is none
        with holding(loaded, notice):  # the tokenizer too is shared: a fast one keeps its truncation setting
            _check_result_size(loaded, text, text_pair, target)
            with stop_between_layers(loaded.model, gone and (lambda: _everyone_gone(key))):
                result = core.extract_attention(loaded.model, loaded.tokenizer, text, text_pair or None,
                                                target or None)
        if loaded.notes:  # shown with the reading's own: Inspect had never said the tokenizer was borrowed
            result.warnings[:0] = loaded.notes
        return result
    told = []

    def tell_if_busy():  # another session reads this same text, behind a model another run holds
        loaded = model_cache().peek(_model_key(source, stamp, n_heads))
        if not told and loaded is not None and say_if_busy(loaded, notice):
            told.append(True)
    with _asking(key, gone), st.spinner("Reading the attention weights…"):  # drawn outside the shared work
        result = result_cache().get(key, extract, tell_if_busy)
    if told:
        notice.empty()
    return result


@contextmanager
def _asking(key: tuple, gone):
    """Count this session among those asking for ``key`` (``gone``: its ``stop_when_gone()``, None when no served
    session can end) for the ``with``."""
    with _askers_lock:
        _askers.setdefault(key, []).append(gone)
    try:
        yield
    finally:
        with _askers_lock:
            _askers[key].remove(gone)
            if not _askers[key]:
                del _askers[key]


def _everyone_gone(key: tuple) -> bool:
    with _askers_lock:
        askers = list(_askers.get(key, ()))
    return all(asker is not None and asker() for asker in askers)


def _check_result_size(loaded: LoadedModel, text: str, text_pair: str, target: str) -> None:
    """Refuse, before the forward pass, a text whose attention maps would not fit the result budget: characters
    do not bound tokens (5,000 digits are 5,000 SmolLM2 tokens, 27 GB of maps)."""
    reads_target = target and is_encoder_decoder(loaded.model)
    inputs = [Probe(text, text_pair or None)] + ([Probe(target)] if reads_target else [])  # others drop it
    lengths = read_lengths(loaded.model, loaded.tokenizer, inputs)[0]  # none without a tokenizer
    tokens = max(lengths, default=0)
    over = maps_over_budget(loaded.model, [tokens], result_budget_bytes())
    if over is not None:
        needed, fits = over
        longest = lengths.index(tokens)
        whole = probe_tokens(loaded.tokenizer, inputs[longest])
        read = f"{whole:,} tokens for this model" + (f", which reads the first {tokens:,}" if whole > tokens else "")
        raise core.InputError(f"{'the target text' if longest else 'this text'} is {read}; the attention maps would "
                              f"take {over_text(needed, result_budget_bytes())} a result may take on this server; "
                              f"{shorten_advice(fits)} (the server's operator sets the limit with {ENV_RESULT_CACHE})")
