"""``AttentionMonitor``: the diagnosis of fixed probes, every few training steps, as one JSON line each.

``on_step(model, step)`` is framework-free: call it from any training loop; a measurement that fails there is
logged as an error and skipped, so that it never ends a run (``check(model)`` before training raises instead).
Every ``every`` steps it diagnoses the probes (``diagnose`` with streamed
statistics: per-head metrics, patterns, roles when the diagnosis gives them,
findings, no attention maps held) under ``torch.no_grad``, puts every module
back in the train/eval mode it found, and appends one line to ``log_path``
(schema ``attnscope.monitor/1``, docs/training.md). ``callback()`` wraps it as
a ``transformers.TrainerCallback``.

It warns through ``logging`` (logger ``attnscope.monitor``) the first time an
error finding other than near-uniform heads appears, e.g. entropy collapse (Zhai et al. 2023: most heads
saturate at once and training diverges), and once when heads are still near
uniform ``uniform_after`` steps in: the usual sign of a Q/K initialisation
far below 1/√d_in or of no gradient reaching Q/K (the warning gives the finding's own advice, which says when
their Q/K are as large as the other heads' and what feeds them is at fault). It also warns once when the
probes cannot bear a verdict (``findings.INPUT_NOTES``: too short, too repetitive, out of vocabulary).

Under torch.distributed / accelerate every process measures (a sharded model
needs all of them for its forward pass) and only the main process writes.
TensorBoard scalars (entropy and sink score per head, error count) are written
to ``tensorboard_dir`` when tensorboard is installed; it is optional.
"""

from __future__ import annotations

import json
import logging
import numbers
import os
import stat
import time
from pathlib import Path

import torch

from core.errors import AttnScopeError, InputError, clipped, first_line, is_failure, panicked
from core.extraction.extract import check_tokenizer
from core.extraction.streaming import can_stream
from core.extraction.text_config import is_encoder_decoder
from diagnostics.diagnose import diagnose
from diagnostics.findings import INPUT_NOTES
from diagnostics.probes import as_probes, user_texts
from diagnostics.reports.exports import strict_json, unwritable
from diagnostics.texts import MONITOR_TEXTS

SCHEMA = "attnscope.monitor/1"
MAX_STEP = 2**53  # the largest whole step a float64 holds exactly; plotly's JSON (orjson) fails at 2**64
# One measurement of the 7 default probes (a decoder's, 297-360 tokens) on a 6-layer, 8-head GPT-2 (d 256)
# costs 1.0-1.2 of its training steps at batch 16 × 128 tokens on the CPU (2-core machines at load 1.0-1.7; 0.7
# with the 117-128-token probes of before), so every 200 steps costs ~0.5-0.6% of the training time:
# python -m benchmarks.monitor_overhead, docs/training.md.
DEFAULT_EVERY = 200
# Heads near uniform this many steps in have not started to learn where to look.
DEFAULT_UNIFORM_AFTER = 1000
# Error findings that are the normal state of a freshly initialised model (every head
# starts near uniform): warned about only when they outlast ``uniform_after``.
EXPECTED_EARLY = ("diffuse_heads",)
DROPPED_METRICS = ("diag_mass", "rest_diag_mass")  # per-offset masses: long, summarised by best_offset(_mass)

log = logging.getLogger("attnscope.monitor")


def _unwritable_folder(folder: Path) -> str | None:
    """Why files cannot be written in ``folder`` (made if missing), or None."""
    if folder.is_dir():
        return None if os.access(folder, os.W_OK) else "permission denied"
    return unwritable(folder / "events", make_folders=True)  # its nearest existing parent must be a writable folder


class AttentionMonitor:
    def __init__(self, tokenizer=None, probes=None, every: int = DEFAULT_EVERY, log_path=None,
                 uniform_after: int = DEFAULT_UNIFORM_AFTER, tensorboard_dir=None):
        """tokenizer: the model's; probes: texts as ``diagnose`` takes them (None: its default probes);
        every: measure when ``step % every == 0``; log_path: the JSONL file appended to (None: no file).
        Every argument is checked here, so that a bad one stops the run before training, not at a measurement."""
        for name, value, least in (("every", every, 1), ("uniform_after", uniform_after, 0)):
            if type(value) is not int or value < least:
                raise InputError(f"{name} must be a whole number of steps, at least {least}; got {value!r}")
        if tokenizer is not None:  # a name ("gpt2") failed at the first measurement
            check_tokenizer(tokenizer)
        probes = user_texts(probes)  # a generator, read once here, had left the measurements the default probes
        _check_probes(probes)
        self.tokenizer, self.probes, self.every = tokenizer, probes, every
        self.log_path = None if log_path is None else Path(log_path)
        problem = self.log_path and unwritable(self.log_path, make_folders=True)
        if problem:
            raise InputError(f"cannot write the monitor log {self.log_path}: {problem}")
        self.uniform_after = uniform_after
        # a file in the folder's place raised FileExistsError out of the training loop at the first measurement
        problem = tensorboard_dir is not None and _unwritable_folder(Path(tensorboard_dir))
        if problem:
            raise InputError(f"cannot write TensorBoard events in {tensorboard_dir}: {problem}")
        self.tensorboard_dir = tensorboard_dir
        self._writer = None
        self._warned: set = set()  # (code, part) of the findings already warned about
        self._warned_uniform = False
        self._learned: dict = {}  # part: the last step it was measured with no near-uniform heads above "info"
        self.seconds = 0.0  # spent measuring, in total
        # the Trainer callback's optimiser steps over its train() calls, and (a weak reference to) the model they
        # trained: a later call on that same model goes on from them
        self.trainer_steps, self.trainer_model = 0, None

    def on_step(self, model, step: int) -> dict | None:
        """Measure ``model`` at ``step`` if it is due; returns the logged record (None when not due)."""
        if isinstance(step, bool) or not isinstance(step, numbers.Integral) or not 0 <= step < MAX_STEP:
            raise InputError(f"step must be a whole number from 0 to 2**53 - 1 (the training step), not {step!r}")
        step = int(step)  # numpy's too
        if step % self.every:
            return None
        try:
            record = self.measure(model, step)
            self.publish(record)
        except BaseException as error:  # a measurement that fails (disk full, ...) must not end the run
            if not is_failure(error):  # Ctrl-C, SystemExit: they do
                raise
            where = f"; {self.log_path} has no line for it" if self.log_path else ""
            log.error(MONITOR_TEXTS["measure_failed"].format(step=step, error=_why(error), where=where))
            log.debug("the failed measurement", exc_info=True)
            return None
        return record

    def check(self, model, step: int = 0) -> dict:
        """Measure ``model`` once before training (the Trainer callback does at ``on_train_begin``): a model or
        tokenizer the monitor cannot read (no attention, another model's tokenizer) stops the run with one
        InputError before its first step, not as a logged error at every measurement; so does a model of another
        shape than the last record in ``log_path``. Returns the record."""
        try:
            record = self.measure(model, step)
        except BaseException as error:  # any cause, told in one line; a native library's panic too
            if not is_failure(error):
                raise
            raise InputError(f"the attention monitor cannot measure this model: {_why(error)}") from error
        if not record["heads"]:  # only its weights checked (no tokenizer, no vocab_size): every record would be empty
            note = next((f["message"] for f in record["findings"] if f["code"] == "no_tokenizer"), "")
            raise InputError("the attention monitor measured no head of this model" + (f" ({note})" if note else "")
                             + "; give it the model's tokenizer: AttentionMonitor(tokenizer=...)")
        self._check_same_model(record)
        return record

    def publish(self, record: dict) -> None:
        """Warn about, chart and write ``record`` (on the main process only: every process measures). The line is
        written last, so a log that refuses it (a full disk, another model's records) loses no warning."""
        if is_main_process():
            self._warn(record)
            self._scalars(record)
            self._write(record)

    def measure(self, model, step: int) -> dict:
        """The record of ``model`` at ``step``, without gradients, every module's mode restored."""
        start = time.perf_counter()
        model = unwrap(model)
        modes = [(module, module.training) for module in model.modules()]
        try:
            with torch.no_grad():
                source = (model, self.tokenizer) if self.tokenizer is not None else model
                report = diagnose(source, self.probes, stream=_streams(model, self.tokenizer))
        finally:
            for module, training in modes:
                module.training = training
        seconds = time.perf_counter() - start
        self.seconds += seconds
        return record_of(report, step, seconds)

    def callback(self):
        """This monitor as a ``transformers.TrainerCallback`` (``check`` at the start, logged as step 0 in a new
        run; then ``on_step`` at ``state.global_step``)."""
        from diagnostics.trainer_callback import AttentionMonitorCallback
        return AttentionMonitorCallback(self)

    def _write(self, record):
        if self.log_path is None:
            return
        self._check_same_model(record)
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with self.log_path.open("a+b") as out:
            out.write(_fresh_line(out) + (strict_json(record, ensure_ascii=False) + "\n").encode())  # NaN: null

    def _check_same_model(self, record):
        """InputError when ``record`` measures a model of another shape than the log's last record (a layer dropped
        mid-run, another model's run in the same file): written, it made the Timeline refuse the whole log. The
        file is read each time, as another process may be writing to it."""
        known = None if self.log_path is None else _last_shape(self.log_path)
        shape = model_shape(record)
        if known is not None and shape != known:
            raise InputError(f"the model is now {clipped(shape, 200)}, but {self.log_path} holds "
                             f"{clipped(known, 200)}; a model that changes shape (or another model) needs its own "
                             "log_path, as the Timeline reads one model per log")

    def _scalars(self, record):
        writer = self._tensorboard()
        if writer is None:
            return
        step = record["step"]
        for head in record["heads"]:
            name = f"L{head['layer']}H{head['head']}" + ("" if head["part"] == "self" else f"_{head['part']}")
            writer.add_scalar(f"attention/entropy/{name}", head["metrics"]["entropy"], step)
            writer.add_scalar(f"attention/sink_score/{name}", head["metrics"]["sink_score"], step)
        errors = sum(f["severity"] == "error" for f in record["findings"])
        writer.add_scalar("attention/error_findings", errors, step)
        writer.flush()

    def _tensorboard(self):
        if self.tensorboard_dir is None or self._writer is False:
            return None
        if self._writer is None:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:
                log.info(MONITOR_TEXTS["no_tensorboard"])
                self._writer = False
                return None
            self._writer = SummaryWriter(str(self.tensorboard_dir))
        return self._writer

    def _warn(self, record):
        for f in record["findings"]:
            key = (f["code"], f["part"])
            learned = self._learned.get(f["part"]) if f["code"] in EXPECTED_EARLY else None
            alarming = f["severity"] == "error" and (f["code"] not in EXPECTED_EARLY or learned is not None)
            if (alarming or f["code"] in INPUT_NOTES) and key not in self._warned:
                self._warned.add(key)
                text = MONITOR_TEXTS["error_appeared" if learned is None else "uniform_again"]
                self._warned_uniform |= learned is not None  # said: not again as "still near uniform"
                log.warning(text.format(step=record["step"], message=f["message"], suggestion=f["suggestion"],
                                        learned=learned))
        self._note_learned(record)
        # not an "info" finding: a few broad heads are a trained model's normal state, and short probes cap it
        diffuse = next((f for f in record["findings"] if f["code"] == "diffuse_heads" and f["severity"] != "info"),
                       None)
        if diffuse and record["step"] >= self.uniform_after and not self._warned_uniform:
            self._warned_uniform = True
            count = len(diffuse["heads"])
            log.warning(MONITOR_TEXTS["still_uniform"].format(  # the finding's own advice: Q/K, or what feeds them
                step=record["step"], message=diffuse["message"], heads=f"{count} head{'s' * (count != 1)}",
                suggestion=diffuse["suggestion"]))


    def _note_learned(self, record):
        """Parts whose heads are not near uniform in ``record``: a ``diffuse_heads`` error in them later is no longer
        a new model's normal state but heads that lost what they had learned (a fine-tune at a learning rate too
        high: MiniLM at 1e-2 was near uniform by step 10, and nothing was said before ``uniform_after``)."""
        uniform = {f["part"] for f in record["findings"] if f["code"] == "diffuse_heads" and f["severity"] != "info"}
        for part in {head["part"] for head in record["heads"]} - uniform:
            self._learned[part] = record["step"]


def unwrap(model):
    """The model inside DataParallel / DistributedDataParallel (``.module``) and ``torch.compile`` (``._orig_mod``):
    a wrapper is a module whose only child is one of those, unwrapped until none is left."""
    while True:
        children = dict(model.named_children()) if isinstance(model, torch.nn.Module) else {}
        inner = children.get("module", children.get("_orig_mod")) if len(children) == 1 else None
        if inner is None:
            return model
        model = inner


def _check_probes(probes):
    for probe in as_probes(probes):
        if not isinstance(probe.text, str) or not probe.text.strip() or (
                probe.text_pair is not None and (not isinstance(probe.text_pair, str) or not probe.text_pair.strip())):
            raise InputError(f"every monitor probe must be non-empty text (or a pair of texts); got {probe.text!r}")


def _why(error: BaseException) -> str:
    """An AttnScope error's own message, a native library's panic told (``panicked``), or any other's type and
    first line."""
    return str(error) if isinstance(error, AttnScopeError) else panicked(error) or first_line(error)


def model_shape(record: dict) -> str:
    """``architecture: part layers × heads, ...`` of the model a record measured."""
    model = record.get("model") if isinstance(record.get("model"), dict) else {}
    parts = model.get("parts") if isinstance(model.get("parts"), dict) else {}
    shapes = [f"{name} {p.get('layers')} × {p.get('heads')}" for name, p in parts.items() if isinstance(p, dict)]
    return f"{model.get('architecture')}: {', '.join(shapes) or 'no heads'}"


def _last_shape(path: Path, chunk: int = 1 << 20, most: int = 1 << 26) -> str | None:
    """``model_shape`` of the last monitor record in the log at ``path``, read back from its end a ``chunk`` at a
    time (a record of a model with ~11,000 heads is over 8 MB), at most ``most`` bytes; None when there is none,
    or no regular file to read (a FIFO's open waits for a writer: the run hung at ``check``)."""
    try:
        if not stat.S_ISREG(path.stat().st_mode):
            return None
        with path.open("rb") as log:
            start = log.seek(0, os.SEEK_END)
            end, head = start, b""  # head: the start of a line that begins before ``start``
            while start > 0 and end - start < most:
                step = min(chunk, start)
                start -= step
                log.seek(start)
                lines = (log.read(step) + head).split(b"\n")
                head = lines.pop(0) if start else b""
                for line in reversed(lines):
                    shape = _record_shape(line)
                    if shape is not None:
                        return shape
    except OSError:  # no log yet, or unreadable: its write will say so
        return None
    return _record_shape(head)  # stopped at ``most``: the line that begins there may be whole


def _record_shape(line: bytes) -> str | None:
    """``model_shape`` of a monitor record's line; None for a cut line or one that is not a monitor record."""
    try:
        record = json.loads(line)
    except (ValueError, RecursionError):  # cut short; nested past the parser's depth
        return None
    return model_shape(record) if isinstance(record, dict) and record.get("schema") == SCHEMA else None


def _fresh_line(log) -> bytes:
    """A newline when the log (opened ``a+b``) ends inside a line, from a write cut short (disk full, killed):
    the next record then starts its own line, and the reader skips the cut one."""
    if log.seek(0, os.SEEK_END) == 0:
        return b""
    log.seek(-1, os.SEEK_END)
    return b"" if log.read(1) == b"\n" else b"\n"


def _streams(model, tokenizer):
    """Stream (no maps held) whenever the model can be streamed; otherwise maps of the short probes, dropped after."""
    if tokenizer is None or is_encoder_decoder(model):
        return None
    return True if can_stream(model) else None


def record_of(report, step: int, seconds: float = 0.0) -> dict:
    """One log line's record from a ``Report`` at ``step`` (the checkpoint timeline writes the same)."""
    model = {key: report.model.get(key) for key in ("name", "architecture", "layers", "heads", "parts", "causal")}
    return {"schema": SCHEMA, "step": int(step), "time": round(time.time(), 3), "measure_s": round(seconds, 3),
            "model": model, "heads": [_head_record(h) for h in report.heads],
            "findings": [{key: f.to_dict()[key] for key in ("code", "severity", "part", "heads", "message",
                                                             "suggestion")} for f in report.findings]}


def _head_record(head) -> dict:
    record = head.to_dict()
    record["metrics"] = {k: v for k, v in record["metrics"].items() if k not in DROPPED_METRICS}
    return record


def is_main_process() -> bool:
    """Rank 0 of torch.distributed, or accelerate's main process; True when neither is running."""
    import torch.distributed as dist

    if dist.is_available() and dist.is_initialized():
        return dist.get_rank() == 0
    try:
        from accelerate import PartialState
    except ImportError:
        return True
    if not PartialState._shared_state:  # never initialised: asking would initialise it
        return True
    return PartialState().is_main_process
