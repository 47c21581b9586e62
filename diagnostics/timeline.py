"""A model's attention over training steps: read a monitor log or diagnose a folder of checkpoints.

Both give a ``Timeline``: one record per step, what it reads of ``monitor.record_of``'s (what
``monitor.AttentionMonitor`` writes to its JSONL log; ``_kept``: a finding's heads as an ``(n, 2)`` array of
``[layer, head]``), with the aggregations
the app's Timeline page draws: a per-head metric as ``[steps, layers, heads]``,
the pattern (and role) changes between consecutive steps, and the step at which
each finding first appeared.

``read_log`` takes a path (``parse_log`` the text or bytes of an upload); ``from_checkpoints`` loads each
``checkpoint-<step>/`` of a Hugging Face Trainer output folder through
``core.load_checkpoint`` (the safe loader: allowed roots, size caps, no code
run) and diagnoses it.
"""

from __future__ import annotations

import itertools
import json
import math
import re
import sys
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from core.cancel import progress_span
from core.checkpoints.build import MAX_HEADS, MAX_LAYERS
from core.checkpoints.checkpoint import check_allowed, resolve_roots
from core.errors import InputError, clipped, size_text
from diagnostics.compare import role_names
from diagnostics.findings import DESCRIBING, head_names
from diagnostics.monitor import MAX_STEP, SCHEMA, model_shape, record_of

MAX_LOG_BYTES = 256 * 10**6  # 256 MB, as the pages say it; a 12 × 12 model logs ~110 KB a step: ~2,300 measurements
# Steps × layers × heads of one part's grid (8 MiB of float32): SmolLM2's 30 × 9 heads over 7,700 steps. A real
# log writes each cell as a ~740-byte head entry, so one under MAX_LOG_BYTES fills fewer than 350,000 cells.
MAX_CELLS = 2**21
# A monitor log measures every head at every step: a larger grid that its head entries fill less than 1/64 of
# (one head at layer 511, head 1023) is damage, so the grid stays bounded by what the file really holds.
SPARSE_CELLS, SPARSE_RATIO = 2**16, 64
# A log cut short (disk full, a killed run) has a broken line per cut: more is no monitor log, and is refused.
MAX_CUT_LINES, MAX_CUT_SHOWN = 100, 10
# One record: a head entry is ~740 bytes, so 16 MB is 22,000 heads (SmolLM2's 270 heads: 200 KB).
MAX_LINE_CHARS = 16 * 2**20
MAX_METRICS = 64  # numeric metrics kept per head: a monitor writes 23
# Measurements (lines) of one log: each costs ~0.6 KB kept even with no heads, so 4.5 million headless lines under
# MAX_LOG_BYTES took 3.9 GB. A 1 × 1-head model logs ~1.3 KB a step: a log of 200,000 steps is past 256 MB anyway.
MAX_RECORDS = 2**17
MAX_CHECKPOINTS = 40  # more are sampled evenly (first and last kept): each is a model load and a diagnosis
_CHECKPOINT = re.compile(r"checkpoint-([0-9]+)", re.ASCII)  # as the Trainer names them: ASCII digits


@dataclass
class Timeline:
    records: list[dict]  # what the Timeline reads of monitor records (``_kept``), one per step, by step
    notes: list[str] = field(default_factory=list)  # what was skipped or sampled, for the user

    @property
    def steps(self) -> list[int]:
        return [r["step"] for r in self.records]

    @property
    def parts(self) -> list[str]:
        return list(dict.fromkeys(h["part"] for r in self.records for h in r["heads"]))

    def shape(self, part=None) -> tuple[int, int]:
        """``(layers, heads)`` of ``part`` (default: the first); (0, 0) when no record measured its heads."""
        return tuple(_grids(self.records).get(self._part(part), (0, 0, 0))[:2])

    def metric(self, name: str, part=None) -> np.ndarray:
        """``[steps, layers, heads]`` of one head metric (``entropy``, ``sink_score``, ...); NaN where missing."""
        part = self._part(part)
        n_layers, n_heads, filled = _grids(self.records).get(part, (0, 0, 0))
        _check_cells(part, (len(self.records), n_layers, n_heads), filled)
        out = np.full((len(self.records), n_layers, n_heads), np.nan, dtype=np.float32)
        for i, record in enumerate(self.records):
            for h in record["heads"]:
                value = h["metrics"].get(name)
                if h["part"] == part and h["layer"] < n_layers and h["head"] < n_heads and _number(value):
                    out[i, h["layer"], h["head"]] = value
        return out

    def _part(self, part):
        """``part``, or the first part of the log (None when it measured no heads)."""
        return part if part is not None else next(iter(self.parts), None)  # a part may be named ""

    def pattern_changes(self) -> list[dict]:
        """Every head whose pattern or roles differ from the previous step: step, part, layer, head, before, after."""
        changes, previous = [], {}
        for record in self.records:
            for h in record["heads"]:
                key = (h["part"], h["layer"], h["head"])
                now = (h["pattern"], tuple(role_names(h)))
                if key in previous and previous[key] != now:
                    changes.append({"step": record["step"], "part": key[0], "layer": key[1], "head": key[2],
                                    "pattern_before": previous[key][0], "pattern_after": now[0],
                                    "roles_before": list(previous[key][1]), "roles_after": list(now[1])})
                previous[key] = now
        return changes

    def first_findings(self) -> list[dict]:
        """Per finding code and part: the first step it appeared, its severity then, its first error step, and the
        later steps at which it named heads it had not named before (``new_heads``, "step 2: L4H0, L4H5"; not for
        ``DESCRIBING`` findings): its first message names only its first heads."""
        seen, named = {}, {}
        for record in self.records:
            now = {}  # (code, part) -> the heads this step's findings of it name
            for f in record["findings"]:
                key = (f["code"], f["part"])
                entry = seen.setdefault(key, {
                    "code": f["code"], "part": f["part"], "first_step": record["step"], "severity": f["severity"],
                    "first_error_step": None, "last_step": record["step"], "message": f["message"], "new_heads": ""})
                entry["last_step"] = record["step"]
                if f["severity"] == "error" and entry["first_error_step"] is None:
                    entry["first_error_step"] = record["step"]
                now[key] = np.union1d(now.get(key, NO_HEADS), _codes(f["heads"]))  # as ``_kept`` keeps them
            for key, heads in now.items():
                new = np.setdiff1d(heads, named[key]) if key in named else NO_HEADS
                named[key] = np.union1d(named.get(key, NO_HEADS), heads)
                if new.size and key[0] not in DESCRIBING:
                    names = head_names([divmod(int(code), MAX_HEADS) for code in new], key[1])
                    seen[key]["new_heads"] = "; ".join(filter(None, (seen[key]["new_heads"],
                                                                     f"step {record['step']}: {names}")))
        return sorted(seen.values(), key=lambda e: (e["first_step"], e["code"]))


def _check_cells(part, shape: tuple[int, int, int], filled: int) -> None:
    """Refuse a ``[steps, layers, heads]`` grid over ``MAX_CELLS``, or far emptier than a monitor's, before it is
    allocated (and drawn with a row per head)."""
    cells, grid, part = math.prod(shape), "{:,} steps × {} layers × {} heads".format(*shape), clipped(str(part))
    if cells > MAX_CELLS:
        raise InputError(f"the log's {part} heads need {grid} = {cells:,} cells, over the Timeline's {MAX_CELLS:,}; "
                         "log less often (every=...) or split the log")
    if cells > max(SPARSE_CELLS, SPARSE_RATIO * filled):
        raise InputError(f"the log's {part} heads fill {filled:,} of the {cells:,} cells of their {grid}; the file "
                         "is damaged (a monitor log measures every head at every step)")


def read_log(path, allowed_roots=None) -> Timeline:
    """The ``Timeline`` of the monitor log at ``path`` (under the allowed roots, as ``core.load_checkpoint``)."""
    path = check_allowed(Path(path), resolve_roots(allowed_roots), wanted="the .jsonl written by AttentionMonitor")
    if not path.is_file():
        raise InputError(f"{path.name} is not a file; give the .jsonl written by AttentionMonitor")
    check_log_size(path.stat().st_size, path.name)
    return parse_log(path.read_bytes())


def check_log_size(size: int, name: str = "the log") -> None:
    """InputError for a log of more than ``MAX_LOG_BYTES``, checked before its bytes are read or copied."""
    if size > MAX_LOG_BYTES:
        raise InputError(f"{name} is over {size_text(MAX_LOG_BYTES)}; log less often (every=...)")


def parse_log(data) -> Timeline:
    """The ``Timeline`` of a monitor log's text or bytes (an upload)."""
    if isinstance(data, bytes):
        check_log_size(len(data))
        data = data.decode("utf-8-sig", errors="replace")  # a log re-saved by a Windows editor starts with a BOM
    records, cut, first_cut, other = [], [], None, []
    for number, line in enumerate(_LINE_END.split(str(data).removeprefix("\ufeff")), 1):
        if not line.strip():
            continue
        try:
            records.append(_kept(_parse_line(line, number)))
            if len(records) > MAX_RECORDS:  # a parsed one: a last line cut short is skipped, not counted
                raise InputError(f"the log holds more than {MAX_RECORDS:,} measurements; log less often (every=...) "
                                 "or split the log")
        except _OtherVersion as err:  # the lines this version can read still show, the others are named
            other.append((err.number, err.schema, str(err)))  # not the error: its traceback holds the parsed record
        except _NotJSON as err:  # a write cut short (disk full, a killed run) leaves half a line
            first_cut = first_cut or err
            cut.append(number)
            if len(cut) > MAX_CUT_LINES:  # no log cut short: a text or CSV file (it took 1.3 GB a MB to list)
                raise InputError(f"more than {MAX_CUT_LINES} lines of the log are not JSON, the first line {cut[0]}; "
                                 "give the .jsonl written by AttentionMonitor") from None
    if not records and (cut or other):
        raise InputError(other[0][2] if other else str(first_cut))
    notes = ([_cut_note(cut)] if cut else []) + ([_other_note(other)] if other else [])
    return _timeline(records, notes)


def _other_note(skipped: list[tuple[int, str, str]]) -> str:
    """The note on the lines of other schema versions, ``[(line number, schema, message)]``, naming each version."""
    versions = _listed(list(dict.fromkeys(schema for _, schema, _ in skipped)))
    return (f"{_lines([number for number, _, _ in skipped], 'was', 'were')} written by another version of AttnScope "
            f"(schema {versions}; this one reads {SCHEMA}): skipped; update AttnScope to read them")


def _cut_note(numbers: list[int]) -> str:
    return f"{_lines(numbers, 'is', 'are')} not JSON (a write cut short?): skipped"


def _lines(numbers: list[int], verb: str, verb_plural: str) -> str:
    """``"line 3 of the log is"``, ``"lines 3, 4 and 7 more of the log are"``: at most ``MAX_CUT_SHOWN`` named."""
    shown = _listed([str(n) for n in numbers])
    return f"line {shown} of the log {verb}" if len(numbers) == 1 else f"lines {shown} of the log {verb_plural}"


def _listed(items: list[str]) -> str:
    """``"a, b, c and 7 more"``: at most ``MAX_CUT_SHOWN`` of ``items``."""
    more = f" and {len(items) - MAX_CUT_SHOWN} more" if len(items) > MAX_CUT_SHOWN else ""
    return ", ".join(items[:MAX_CUT_SHOWN]) + more


def _kept(record: dict) -> dict:
    """What the Timeline reads of a checked record: its step, model shape, findings and each head's place, pattern,
    role names and numeric metrics (at most ``MAX_METRICS``). Fields it never reads had been kept too: a 16 MB log
    padded with them took 346 MB."""
    model = record.get("model") if isinstance(record.get("model"), dict) else {}
    shape = {key: model.get(key) for key in ("name", "architecture", "layers", "heads", "causal")
             if isinstance(model.get(key), (str, int, float, bool))}
    heads = [{"part": sys.intern(h["part"]), "layer": h["layer"], "head": h["head"], "pattern": _name(h["pattern"]),
              "metrics": _metrics(h["metrics"]), **_roles(h)} for h in record["heads"]]
    findings = [{**{key: f[key] for key in ("code", "severity", "part", "message")},
                 "heads": _head_array(f.get("heads", []))} for f in record["findings"]]
    parts = {name: {"layers": layers, "heads": n_heads} for name, (layers, n_heads) in _declared(record).items()}
    return {"schema": SCHEMA, "step": record["step"], "heads": heads, "findings": findings,
            "model": {**shape, "parts": parts}}


def _roles(head: dict) -> dict:
    """``{"roles": (names, ...)}``, or ``{}`` for a head without roles: a key and a list each had cost more than the
    JSON of a bare head entry."""
    names = role_names(head)
    return {"roles": tuple(map(sys.intern, names))} if names else {}


def _name(value):
    """A pattern name shared by every head that has it (``json.loads`` makes each anew: 9 bytes a head took ~60)."""
    return sys.intern(value) if isinstance(value, str) else value


def _metrics(metrics: dict) -> dict:
    numbers = ((sys.intern(key), value) for key, value in metrics.items() if isinstance(key, str) and len(key) <= 64
               and _number(value))
    return dict(itertools.islice(numbers, MAX_METRICS))


# Line ends a log may have (a Windows editor's, an old Mac's): not splitlines' U+2028, U+0085, ..., which the
# monitor's JSON (ensure_ascii=False) leaves unescaped inside a string, and which split a record in two
_LINE_END = re.compile(r"\r\n|\r|\n")
_SURROGATE_ESCAPE = re.compile(r"\\u[dD][89a-fA-F]")  # "\ud800": JSON decodes a lone one to text no UTF-8 holds
_SURROGATE = re.compile("[\ud800-\udfff]")


class _NotJSON(InputError):
    def __init__(self, number: int, why: str):
        super().__init__(f"line {number} of the log is not JSON ({why}); give the .jsonl written by AttentionMonitor")
        self.number = number


class _OtherVersion(InputError):
    """A monitor record of another schema version: a run whose AttnScope was upgraded while it trained."""

    def __init__(self, number: int, schema: str):
        self.number, self.schema = number, clipped(schema)  # the file's text: a 2 MB schema made a 2 MB message
        super().__init__(f"line {number} of the log was written by another version of AttnScope (schema "
                         f"{self.schema}; this one reads {SCHEMA}); read it with that version, or update AttnScope")


def _parse_line(line: str, number: int) -> dict:
    if len(line) > MAX_LINE_CHARS:  # parsing takes ~20 × a line padded with "[],": refused before
        raise InputError(f"line {number} of the log is over {MAX_LINE_CHARS:,} characters, more than a monitor "
                         "record of any model; the file is damaged")
    try:
        record = json.loads(line)
    except (ValueError, RecursionError) as err:  # bad JSON, a 5,000-digit number, deep nesting
        raise _NotJSON(number, err.msg if isinstance(err, json.JSONDecodeError) else type(err).__name__) from None
    if _SURROGATE_ESCAPE.search(line) and _holds_lone_surrogate(record):
        raise InputError(f"line {number} of the log holds an unpaired surrogate escape (\\ud800-\\udfff), text "
                         "that no UTF-8 file holds; the file is damaged")
    schema = record.get("schema") if isinstance(record, dict) else None
    if isinstance(schema, str) and schema.startswith(SCHEMA.split("/")[0] + "/") and schema != SCHEMA:
        raise _OtherVersion(number, schema)
    if not isinstance(record, dict) or schema != SCHEMA:
        raise InputError(f"line {number} of the log is not an AttnScope monitor record (schema {SCHEMA})")
    record.setdefault("findings", [])
    damage = _damage(record)
    if damage:
        raise InputError(f"line {number} of the log has {damage}; the file is damaged")
    return record


def _holds_lone_surrogate(record) -> bool:
    """Whether the parsed ``record`` holds a lone surrogate in a key or a string (a pair is one character once
    parsed): Streamlit cannot send one to the page, and a finding's message with one stopped the Timeline drawing
    every run. Walked without recursion: a record nested nearly as deep as ``json.loads`` reads is no error."""
    items = [record]
    while items:
        item = items.pop()
        if isinstance(item, str) and _SURROGATE.search(item):
            return True
        if isinstance(item, dict):
            items += [*item.keys(), *item.values()]
        elif isinstance(item, list):
            items += item
    return False


def _damage(record: dict) -> str | None:
    """What a record lacks that the Timeline reads (``monitor.record_of``'s fields), or None."""
    heads, findings = record.get("heads"), record["findings"]
    if not _whole(record.get("step"), 0, None) or not isinstance(heads, list):  # [] when the monitor measured
        return "no step or heads"                                                  # weights only (no tokenizer)
    if record["step"] >= MAX_STEP:
        return "a step of 2**53 or more"
    for h in heads:
        if not (isinstance(h, dict) and _text(h, "part") and _label(h) and _whole(h.get("layer"), 0, MAX_LAYERS)
                and _whole(h.get("head"), 0, MAX_HEADS) and isinstance(h.get("metrics"), dict)
                and isinstance(h.get("roles", []), list)):
            return "a head without its part, layer, head, pattern, roles and metrics"
    outside = _outside(heads, _declared(record))
    if outside:
        return outside
    if not isinstance(findings, list) or not all(
            isinstance(f, dict) and _text(f, "code", "severity", "part", "message") for f in findings):
        return "a finding without its code, severity, part and message"
    if not all(_head_pairs(f.get("heads", [])) for f in findings):
        return "a finding whose heads are not [layer, head] pairs"
    return None


def _declared(record: dict) -> dict:
    """``{part: (layers, heads)}`` the record's ``model.parts`` declares (a part declared badly: none)."""
    model = record.get("model") if isinstance(record.get("model"), dict) else {}
    parts = model.get("parts") if isinstance(model.get("parts"), dict) else {}
    return {name: (p["layers"], p["heads"]) for name, p in parts.items() if isinstance(p, dict)
            and _whole(p.get("layers"), 0, MAX_LAYERS + 1) and _whole(p.get("heads"), 0, MAX_HEADS + 1)}


def _outside(heads: list, declared: dict) -> str | None:
    """The first head outside its part's declared layers × heads, said as damage, or None."""
    for h in heads:
        if h["part"] not in declared:
            return "a head of a part that its model.parts does not declare"
        layers, n_heads = declared[h["part"]]
        if h["layer"] >= layers or h["head"] >= n_heads:
            return f"a head (L{h['layer']}H{h['head']}) outside the {layers} layers × {n_heads} heads of model.parts"
    return None


def _number(value) -> bool:
    """A metric the float32 grid can hold (a hand-edited 10**400 is left out, as text is)."""
    return isinstance(value, (int, float)) and not isinstance(value, bool) and abs(value) <= 3.4e38


def _label(head: dict) -> bool:
    """A pattern name, or null: a head whose attention is NaN or infinite has none (a diverged run's log)."""
    return "pattern" in head and (head["pattern"] is None or isinstance(head["pattern"], str))


NO_HEADS = np.zeros(0, dtype=np.int64)


def _head_array(heads) -> np.ndarray:
    """A finding's ``[layer, head]`` pairs as a sorted ``(n, 2)`` int32 array, each once: 8 bytes a head, where the
    parsed lists of a log padded with long ``heads`` had taken 16 × its size."""
    return np.unique(np.asarray(heads, dtype=np.int32).reshape(-1, 2), axis=0)


def _codes(pairs: np.ndarray) -> np.ndarray:
    """``(n, 2)`` pairs as codes ``layer * MAX_HEADS + head``, for set operations."""
    return pairs[:, 0].astype(np.int64) * MAX_HEADS + pairs[:, 1]


def _head_pairs(heads) -> bool:
    """Whether a finding's ``heads`` are ``[layer, head]`` pairs (``first_findings`` names the new ones)."""
    return isinstance(heads, list) and all(
        isinstance(h, list) and len(h) == 2 and _whole(h[0], 0, MAX_LAYERS) and _whole(h[1], 0, MAX_HEADS)
        for h in heads)


def _whole(value, low, high) -> bool:
    return type(value) is int and value >= low and (high is None or value < high)


def _text(entry: dict, *keys) -> bool:
    return all(isinstance(entry.get(key), str) for key in keys)


def _timeline(records: list[dict], notes=()) -> Timeline:
    if not records:
        raise InputError("the log holds no measurement yet; train past the monitor's first step")
    _one_model(records)
    by_step = {}
    for record in records:  # a restarted run appends again: its later measurement of a step wins
        by_step[record["step"]] = record
    repeated = len(records) - len(by_step)
    notes = list(notes) + ([f"{repeated} repeated step: the later measurement is shown" if repeated == 1 else
                            f"{repeated} repeated steps: the later measurements are shown"] if repeated else [])
    timeline = Timeline([by_step[s] for s in sorted(by_step)], notes)
    for part, (n_layers, n_heads, filled) in _grids(timeline.records).items():  # refused while reading, by name
        _check_cells(part, (len(timeline.records), n_layers, n_heads), filled)
    return timeline


def _grids(records: list[dict]) -> dict:
    """``{part: [layers, heads, head entries]}`` of the records, in one pass over their heads (a pass per part was
    quadratic: 8,000 one-head parts took 4.5 s)."""
    grids = {}
    for record in records:
        for h in record["heads"]:
            grid = grids.setdefault(h["part"], [0, 0, 0])
            grid[0], grid[1], grid[2] = max(grid[0], h["layer"] + 1), max(grid[1], h["head"] + 1), grid[2] + 1
    return grids


def _one_model(records: list[dict]) -> None:
    """Refuse a log in which two runs of different models were appended to one file (merged, one's steps would
    overwrite the other's and its heads would be drawn in the other's grid)."""
    first = model_shape(records[0])
    for record in records[1:]:
        if model_shape(record) != first:
            raise InputError(f"the log measures two different models ({clipped(first, 200)}, then "
                             f"{clipped(model_shape(record), 200)} at "
                             f"step {record['step']}); give each run its own log_path")


def checkpoint_folders(folder, allowed_roots=None) -> list[tuple[int, Path]]:
    """``[(step, path)]`` of the ``checkpoint-<step>`` folders of a Trainer output folder, by step, each path under
    ``folder`` as given; two folders of one step (``checkpoint-01``, ``checkpoint-1``) are refused, and a step of
    2**53 or more is not one. A link of such a name counts whatever it leads to (the loader refuses one out of the
    roots): followed here, a link to a folder outside counted and one to nothing did not, and the loader's refusal
    named the link's absolute path."""
    root = check_allowed(Path(folder), resolve_roots(allowed_roots), wanted="the Trainer's output_dir")
    if not root.is_dir():
        raise InputError(f"{Path(folder).name} is not a folder; give the Trainer's output_dir")
    found = sorted((int(m.group(1)), Path(folder) / p.name) for p in root.iterdir()
                   if (p.is_symlink() or p.is_dir()) and (m := _CHECKPOINT.fullmatch(p.name))
                   and int(m.group(1)) < MAX_STEP)
    if not found:
        raise InputError(f"{Path(folder).name} has no checkpoint-<step> folders; give the Trainer's output_dir")
    for (step, a), (later, b) in zip(found, found[1:]):
        if step == later:
            raise InputError(f"{a.name} and {b.name} are both step {step}; keep one of them")
    return found


def from_checkpoints(folder, texts=None, progress=None, allowed_roots=None) -> Timeline:
    """Diagnose every ``checkpoint-<step>/`` of ``folder`` (at most ``MAX_CHECKPOINTS``, sampled evenly)."""
    import core
    from diagnostics.diagnose import diagnose

    tell = progress or (lambda fraction, message: None)
    found = checkpoint_folders(folder, allowed_roots)
    chosen = _sample(found, MAX_CHECKPOINTS)
    notes = [f"{len(chosen)} of {len(found)} checkpoints, evenly spaced"] if len(chosen) < len(found) else []
    records = []
    for i, (step, path) in enumerate(chosen):
        name = f"checkpoint {step} ({i + 1}/{len(chosen)})"
        this = progress_span(tell, i / len(chosen), (i + 1) / len(chosen), name)
        this(0.0, "loading")
        try:
            loaded = core.load_checkpoint(path, allowed_roots=allowed_roots, device="cpu",
                                          progress=progress_span(this, 0.0, 0.2, "loading"))
        except core.ServerError:  # a setting, the disk: the server's, not the checkpoint's; none would load
            raise
        except core.ModelLoadError as err:  # a save cut short, or still being written: the others still tell
            notes.append(f"{path.name} skipped: {err}")
            continue
        source = (loaded.model, loaded.tokenizer) if loaded.tokenizer is not None else loaded.model
        record = record_of(diagnose(source, texts, progress=progress_span(this, 0.2, 1.0)), step)
        del loaded, source  # one model alive at a time: the next one loads before this loop names it
        _same_model(records, record, chosen)
        records.append(_kept(record))  # as a log's: the same records whichever way the Timeline was read
    tell(1.0, "done")
    if not records:
        raise InputError(f"no checkpoint of {Path(folder).name} could be loaded: " + "; ".join(notes))
    timeline = _timeline(records)
    timeline.notes += notes
    return timeline


def _same_model(records: list[dict], record: dict, chosen) -> None:
    """Refuse, as soon as it is measured, a checkpoint of another model than the first one's."""
    if records and model_shape(record) != model_shape(records[0]):
        names = {step: path.name for step, path in chosen}
        raise InputError(f"{names[record['step']]} is a different model ({model_shape(record)}) from "
                         f"{names[records[0]['step']]} ({model_shape(records[0])}); give one run's output_dir")


def _sample(items, limit):
    if len(items) <= limit:
        return items
    picks = np.linspace(0, len(items) - 1, limit).round().astype(int)
    return [items[i] for i in sorted(set(picks.tolist()))]
