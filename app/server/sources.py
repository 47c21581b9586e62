"""Where a page gets a model and its probes: the upload / folder (/ known model) picker and the probe-text box
of the Diagnose and Compare pages.

``source_ui(prefix)`` draws the picker; its widget keys all start with
``prefix`` (``{prefix}_kind``, ``{prefix}_path``, ``{prefix}_upload_<round>``,
``{prefix}_known``), so two pickers can share a page. An upload goes to disk at
once (``uploads``) and the widget starts empty again. ``load_source`` loads what
the picker returned through ``core.load_untrusted`` (allowed roots, size caps,
known names, no code run); ``opened_models`` gives a page its models, known ones
from the server's shared model cache. ``probes_ui(key)`` is the probe-text box, and
``probes_problem`` says when its texts are more than the server runs.
"""

from __future__ import annotations

import math
import re
import threading
from collections import deque
from contextlib import ExitStack, contextmanager, nullcontext

import streamlit as st

import core
from app import errors
from app.server import cache, uploads
from app.names import display_name, upload_name
from app.kept import KEEP
from core.checkpoints.archive import env_count
from core.errors import size_text
from core.extraction.tokens import visible
from diagnostics.probe_texts import MIN_JUDGED_TOKENS

# What one Diagnose or Compare run may ask of a shared server: SmolLM2 diagnoses 10,000 characters (2,132
# tokens) in 9.9 s here, so the cap is about a minute of its work; the default probes are 7 and 3,956
# (two are pairs; a decoder's 7,144, each read as one text).
MAX_PROBES = 40
MAX_PROBE_CHARS = 50_000
# Models loaded for one run alone (an upload, a folder: never in the shared model cache) held at once by every
# session together, each up to the 2 GB model cap; a run that would pass it waits for another to end.
ENV_RUN_MODELS = "ATTNSCOPE_MAX_RUN_MODELS"
RUN_MODELS = 4


class _RunModels:
    """How many models loaded for one run alone the server holds now. Runs take their places in the order they
    asked (a Compare run needing two would wait for ever behind one-model runs that kept overlapping), and all of a
    run's places at once (two Compare runs holding one place each of the last two would wait on each other)."""

    def __init__(self):
        self.held, self.queue, self.changed = 0, deque(), threading.Condition()

    @contextmanager
    def places(self, count: int, limit: int, waiting):
        """Hold ``count`` places for the ``with``; ``waiting(held, count, limit)`` is called about once a second
        until they fit (it may raise: the session has gone). A run alone always fits, whatever it needs."""
        if not count:  # only known models, from the shared cache: nothing to wait for
            yield
            return
        ticket = object()
        with self.changed:
            self.queue.append(ticket)
        try:
            while not self._took(ticket, count, limit):
                waiting(self.held, count, limit)
        except BaseException:
            with self.changed:
                self.queue.remove(ticket)
                self.changed.notify_all()
            raise
        try:
            yield
        finally:
            with self.changed:
                self.held -= count
                self.changed.notify_all()

    def _took(self, ticket, count: int, limit: int) -> bool:
        with self.changed:
            if not self._fits(ticket, count, limit):
                self.changed.wait(1.0)
            if not self._fits(ticket, count, limit):
                return False
            self.queue.popleft()
            self.held += count
            self.changed.notify_all()  # the next in the queue may fit too
            return True

    def _fits(self, ticket, count: int, limit: int) -> bool:
        return self.queue[0] is ticket and (not self.held or self.held + count <= limit)


run_models = _RunModels()


def waiting_text(held: int, count: int, limit: int) -> str:
    """What a run waiting for places of ``run_models`` shows on its progress bar."""
    return (f"waiting: other runs hold {held} of the {limit} uploaded or local models this server loads at once, "
            f"and this run needs {count} (runs go in the order they asked)")


def run_models_limit() -> int:
    """Models loaded for one run alone held at once: ``$ATTNSCOPE_MAX_RUN_MODELS``, else ``RUN_MODELS``."""
    return env_count(ENV_RUN_MODELS, RUN_MODELS, "models")


def probes_ui(key: str):
    """The caller's probe texts, or None for AttnScope's default probes (``probe_texts``)."""
    probes = st.text_area("Probe texts, a blank line between two (empty: AttnScope's seven default paragraphs)",
                          key=key, persist_state=KEEP,
                          help="Give a paragraph each, a blank line between them; a paragraph's own line breaks "
                               "keep it one probe, as one --text on the command line. A probe of fewer than "
                               f"{MIN_JUDGED_TOKENS} tokens labels the heads but judges no finding (only information "
                               "where no probe is longer), "
                               f"since healthy heads cross the thresholds on a sentence. At most {MAX_PROBES} probes "
                               f"and {MAX_PROBE_CHARS:,} characters in all (a long probe is read up to the model's "
                               "position limit).")
    return probe_texts(probes)


def probe_texts(box: str) -> list[str] | None:
    """The paragraphs of ``box``, split at blank lines (a paragraph pasted from a PDF or an e-mail, wrapped at
    every line, had become seven probes of a line each, each too short to judge), or None where it holds none."""
    return [p.strip() for p in re.split(r"\n[ \t]*\n", box) if p.strip()] or None


def probes_problem(texts) -> str | None:
    """Why the server will not run ``texts`` (too many probes, or too much text in all), or None."""
    if not texts:
        return None
    chars = sum(len(t) for t in texts)
    if len(texts) > MAX_PROBES or chars > MAX_PROBE_CHARS:
        texts_ = f"{len(texts):,} probe text{'s' if len(texts) != 1 else ''}"
        return (f"Not run: {texts_} with {chars:,} characters in all; this server takes at most "
                f"{MAX_PROBES} probes and {MAX_PROBE_CHARS:,} characters. Give fewer or shorter probes, or run "
                "`python -m diagnostics` on your own machine, which has no such limit.")
    return None


def source_ui(prefix: str, label: str = "Checkpoint"):
    """Upload, folder path or known model; returns ``(input, name to show)`` or None."""
    kind = st.radio(label, ["Upload", "Local folder", "Known model"], key=f"{prefix}_kind", persist_state=KEEP,
                    horizontal=True)
    if kind == "Known model":
        name = st.selectbox(f"{label}: known model", core.MODEL_CHOICES, key=f"{prefix}_known", persist_state=KEEP,
                            format_func=lambda n: f"{n} — {core.describe_model(n)}")
        return name, name
    if kind == "Upload":
        return upload_ui(prefix)
    path = st.text_input("Model folder, archive, weights or .gguf file", key=f"{prefix}_path", persist_state=KEEP,
                         placeholder="/models/my-bert")
    return (path.strip(), display_name(path)) if path.strip() else None


def upload_limit(max_bytes: int) -> tuple[int, int] | None:
    """``(bytes, box_mb)``: the bytes one upload may take, stated in the caption, and the whole MB given to the
    upload box, so that the browser refuses a bigger file before sending it (at ATTNSCOPE_MAX_UPLOAD_BYTES=100MB the
    box said 2,000 MB, and a 150 MB upload was refused only once sent). None when ``server.maxUploadSize`` is not a
    number of at least 1: Streamlit's server then fails every upload ("abc": HTTP 500, 0.5: HTTP 413).

    Streamlit's server takes ``maxUploadSize`` MB of 2**20 bytes; the box counts its MB as 10**6 bytes in most
    browsers and as 2**20 on Windows. So the box gets whole MB of 10**6 bytes within ``max_bytes`` (the loader's
    ``Limits.max_upload_bytes``, ``ATTNSCOPE_MAX_UPLOAD_BYTES``; a monitor log's cap) and never more than
    ``maxUploadSize``: no browser lets through what the server refuses with a bare HTTP 413, and the caption states
    what the box allows."""
    configured = st.get_option("server.maxUploadSize")  # config.toml's value, as typed: 100.5 or "abc" too
    number = isinstance(configured, (int, float)) and not isinstance(configured, bool)
    if not number or not math.isfinite(configured) or not configured >= 1:  # TOML has inf and nan
        return None
    server_bytes = int(configured * 2**20)
    box_mb = max(1, min(min(server_bytes, max_bytes) // 10**6, int(configured)))
    return min(box_mb * 10**6, server_bytes, max_bytes), box_mb  # under 1 MB: the box says 1


def bad_upload_size_ui() -> None:
    """The error line in place of an uploader when ``upload_limit`` finds ``server.maxUploadSize`` unusable."""
    errors.shown(f"server.maxUploadSize is {st.get_option('server.maxUploadSize')!r} in .streamlit/config.toml, not "
                 "a number of MB of at least 1: Streamlit refuses every upload until whoever runs this server sets it "
                 "(2000 by default)")


def upload_ui(prefix: str):
    """The uploader; what it receives goes to disk at once (``uploads``), and the widget starts empty again."""
    s = st.session_state
    round_key, staged_key = f"{prefix}_upload_round", f"{prefix}_staged"
    s.setdefault(round_key, 0)
    try:
        limits = core.Limits()  # the operator's ATTNSCOPE_MAX_* settings, read now
    except core.AttnScopeError as err:  # a bad setting: said in one line, and no uploader until it is fixed
        errors.show(err)
        return None
    limit = upload_limit(limits.max_upload_bytes)
    if limit is None:
        bad_upload_size_ui()
        return None
    files = st.file_uploader(
        "A .zip / .tar.gz of a model folder, or its files together (config.json, model.safetensors or "
        "pytorch_model.bin, tokenizer files), a .gguf file, or a custom model's safetensors + config JSON",
        accept_multiple_files=True, key=f"{prefix}_upload_{s[round_key]}", max_upload_size=limit[1])
    st.caption(f"Limits: {size_text(limit[0])} per upload, a model of {size_text(limits.max_model_bytes)}, "
               f"{size_text(limits.max_total_bytes)} unpacked. "
               "Drop all files of a model together; a new upload replaces the last. Python files in an upload are "
               "never run.")
    if files:
        try:
            s[staged_key] = uploads.stage(s.get(staged_key), files, limits)
        except core.AttnScopeError as err:  # too big together, a full disk: the upload before stays
            s[f"{prefix}_upload_error"] = errors.message(err)
        uploads.release(files)
        s[round_key] += 1  # a fresh, empty uploader: Streamlit's copy of the files is dropped
        st.rerun()
    if f"{prefix}_upload_error" in s:
        errors.shown(s.pop(f"{prefix}_upload_error"))
    staged = s.get(staged_key)
    if staged is not None and not staged.alive:  # removed while its tab was away (``uploads.remove_abandoned``)
        del s[staged_key]
        st.info("Your upload was removed from the server while this tab was away; upload it again.")
        return None
    if staged is None:
        return None
    if held_ui(staged.names, staged.size, f"{prefix}_clear"):
        staged.remove()
        del s[staged_key]
        st.rerun()
    return staged, upload_name(staged.names)  # the name shown: the file's, not the server's staging folder


def held_ui(names, size: int, clear_key: str) -> bool:
    """The line naming the uploaded files a page holds, and its Clear button: True when it is pressed."""
    cols = st.columns([4, 1])
    shown = ", ".join(visible(name, spaces=False) for name in names)
    cols[0].text(f"Uploaded: {shown} ({size_text(size)})")  # st.text: file names stay plain text
    return cols[1].button("Clear", key=clear_key)


def source_key(source) -> str | None:
    """What ``source_ui`` returned, as a key that changes with the checkpoint chosen: a new upload of the same name
    is another (each is staged in a folder of its own), a path or a known model its text."""
    if source is None:
        return None
    inputs = source[0]
    return f"upload:{inputs.folder}" if isinstance(inputs, uploads.Staged) else f"path:{inputs}"


def stale_note_ui(shown_for: str | None, chosen: str | None, action: str) -> None:
    """A line over a result whose checkpoint is no longer the one chosen (a new upload of the same name showed the
    old report with nothing to say so)."""
    if shown_for is not None and chosen != shown_for:
        st.info(f"This result is of the checkpoint chosen before: press {action} for the one chosen now.",
                icon=":material/history:")


def load_source(inputs, n_heads: int | None = None, progress=None) -> core.LoadedCheckpoint:
    """What ``source_ui`` returned, loaded: ``LoadedCheckpoint`` (model, tokenizer, notes)."""
    with inputs.opened() if isinstance(inputs, uploads.Staged) else nullcontext(inputs) as source:
        return core.load_untrusted(source, n_heads=n_heads, progress=progress)


def _labelled(label: str | None, load, *args):
    """``load(*args)``, its errors' messages led by ``label`` (when there is one)."""
    try:
        return load(*args)
    except core.AttnScopeError as err:
        if label is None:
            raise
        raise type(err)(f"{label}: {err}") from err


def _known(inputs) -> bool:
    return isinstance(inputs, str) and inputs in core.MODEL_CHOICES


@contextmanager
def opened_models(inputs: list, n_heads: int | None, progress: list, labels: list[str] | None = None,
                  job: str = "diagnosis"):
    """``[(model, tokenizer, notes)]``, one per ``inputs`` (what ``source_ui`` returned), for the length of the
    ``with``. A known model comes from the server's model cache (the one Inspect uses: not loaded again) and is
    held under its lock; the rest are loaded first, for this run alone (``progress[i]`` follows input i), and an
    error loading one starts with its ``labels[i]`` ("Model B (tuned.zip)"): the same broken file on either side
    gave the same message. Locks are taken in name order, so two runs wanting the same two known models cannot
    wait on each other. The models loaded for this run alone take places of ``run_models`` (at most
    ``run_models_limit()`` held by every session together): past it, the run waits, and says so. ``job``
    ("diagnosis", "comparison") is what an Inspect waiting for a known model held here is told."""
    labels = labels or [None] * len(inputs)
    own = [i for i, x in enumerate(inputs) if not _known(x)]

    def waiting(held: int, count: int, limit: int) -> None:
        progress[own[0]](0.0, waiting_text(held, count, limit))
    with run_models.places(len(own), run_models_limit(), waiting):
        loaded = [None if _known(x) else _labelled(label, load_source, x, n_heads, tell)
                  for x, tell, label in zip(inputs, progress, labels)]
        shared = {name: cache.load_model(name) for name in sorted({x for x in inputs if _known(x)})}
        with ExitStack() as locks:
            for name, model in shared.items():  # one model object serves every session
                tell = progress[inputs.index(name)] or (lambda fraction, message: None)
                locks.enter_context(cache.held_for_run(model, lambda text, tell=tell: tell(0.0, text)))
                model.job = job  # told to an Inspect waiting for it (``cache.say_if_busy``)
                locks.callback(setattr, model, "job", "")  # cleared before the lock is let go
            yield [(shared[x].model, shared[x].tokenizer, []) if _known(x) else (c.model, c.tokenizer, c.notes)
                   for x, c in zip(inputs, loaded)]
