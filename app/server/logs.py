"""Monitor logs the Timeline reads, uploaded or at server paths: each named, all of them within one size budget."""

from pathlib import Path

from core.checkpoints.checkpoint import check_allowed, resolve_roots
from core.errors import AttnScopeError, size_text
from diagnostics import timeline as tl


def read_uploaded(named) -> tuple[dict, list[str]]:
    """``({run name: Timeline}, problems)`` of uploaded logs: ``[(run name, UploadedFile)]``, as
    ``held_within_budget`` names them."""
    return _each(named, _parse_upload, lambda f: f.size)


def held_within_budget(files) -> tuple[list, list[str]]:
    """``([(run name, file)], problems)``: the uploaded logs ``read_uploaded`` would read, which the page holds until
    Load, named as they arrived (two ``attention.jsonl``: the second is "attention.jsonl (2)", also when the first
    is refused), and a problem naming each of the others, refused at once. Held, a tab's logs had no bound: 3 ×
    300 MB logs took 0.9 GB of the server's memory until Load or Clear, each over the cap Load refuses them by."""
    kept, problems = _each(zip(_distinct([f.name for f in files]), files), _within_cap, lambda f: f.size)
    return list(kept.items()), problems


def read_paths(paths) -> tuple[dict, list[str]]:
    """``({run name: Timeline}, problems)`` of the logs at ``paths`` (a path listed twice is one run)."""
    paths = list(dict.fromkeys(paths))
    return _each([(_short(path, paths), path) for path in paths], tl.read_log, _file_size)


def _file_size(path) -> int:
    """Bytes of the log ``read_log`` reads (``~`` expanded, links followed, as it does), or 0 for a path it refuses:
    measured before the roots were checked, a large file outside them was told apart from a missing one."""
    try:
        return check_allowed(Path(path), resolve_roots(None)).stat().st_size
    except (AttnScopeError, OSError):  # outside the roots, missing, or gone: ``read_log`` says which, in its words
        return 0


def _parse_upload(file) -> "tl.Timeline":
    """A log as uploaded, refused by its size before a byte of it is copied."""
    return tl.parse_log(_within_cap(file).getvalue())


def _within_cap(file):
    tl.check_log_size(file.size)
    return file


def _each(named, read, size) -> tuple[dict, list[str]]:
    """``read`` each ``(name, item)``: ``({name: Timeline}, ["name: why"])``. The logs kept together are at most
    ``tl.MAX_LOG_BYTES`` by ``size``, checked before each is read (the session holds what the Timeline reads of their
    records, up to ~4.2 × the file; 3 logs of 64 MB took 0.9 GB before, and nothing bounded how many)."""
    runs, problems, kept = {}, [], 0
    for name, item in named:
        if kept and size(item) <= tl.MAX_LOG_BYTES < kept + size(item):  # before it is read (one over alone:
            # ``read`` says so, whatever came before it: loading fewer at a time would not help it)
            problems.append(f"{name}: not loaded: with the logs above it, over {size_text(tl.MAX_LOG_BYTES)} of logs "
                            "in all; load fewer at a time")
            continue
        try:
            runs[name] = read(item)
        except AttnScopeError as err:
            problems.append(f"{name}: {err}")
            continue
        kept += size(item)
    return runs, problems


def _distinct(names) -> list[str]:
    """Upload names made distinct: two runs' ``attention.jsonl`` are "attention.jsonl" and "attention.jsonl (2)"."""
    out = []
    for name in names:
        label, copy = name, 1
        while label in out:
            copy += 1
            label = f"{name} ({copy})"
        out.append(label)
    return out


def _short(path, paths) -> str:
    """The file name, or the path where two logs share a name: runs are named, server paths not shown."""
    name = Path(path).name
    return name if sum(Path(p).name == name for p in paths) == 1 else path
