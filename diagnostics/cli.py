"""``python -m diagnostics SOURCE [--text TEXT]... [--format json|markdown|html] [--out FILE]``.

``python -m diagnostics compare A B [...same options]`` compares two models head
by head (``diagnostics.compare``); it exits 1 when B has an error finding A
lacks. (A model folder named ``compare`` is given as ``./compare``.)

Exit status: 0 when no finding has "error" severity, 1 when one does, 2 on bad
input (unknown model, unreadable folder, bad option), with a one-line message
on stderr and no traceback. An unexpected failure (a bug) exits 3, also with
one line.
"""

import argparse
import logging
import sys
from pathlib import Path

from core.errors import AttnScopeError, InputError
from diagnostics.probes import MIN_JUDGED_TOKENS
from diagnostics.reports.exports import unwritable

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
FORMATS = ("markdown", "json", "html")


class _UsageError(Exception):
    """argparse's complaint, raised instead of printing usage and exiting."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(message)


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
    parser.add_argument("--heads", type=int, metavar="N",
                        help="attention heads per layer, for a bare state dict whose weights do not say it")
    parser.add_argument("--text", action="append", metavar="TEXT",
                        help=f"probe text (repeatable), a paragraph each: findings from a probe under "
                             f"{MIN_JUDGED_TOKENS} tokens are info only; default: AttnScope's seven built-in "
                             "probe paragraphs")
    parser.add_argument("--format", choices=FORMATS, default="markdown", help="report format (default: markdown)")
    parser.add_argument("--out", metavar="FILE", help="write the report to FILE instead of stdout")
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
        return _fail(f"usage: {err} (try --help)", EXIT_BAD_INPUT)
    problem = args.out and unwritable(Path(args.out))
    if problem:  # said before minutes of diagnosis, not after
        return _fail(f"cannot write {args.out}: {problem}", EXIT_BAD_INPUT)
    problem = args.device and _unusable_device(args.device)
    if problem:  # before the model is loaded, not after
        return _fail(problem, EXIT_BAD_INPUT)
    _print_load_notes()
    try:
        with _progress(args.quiet) as progress:
            report = _compare(args, progress) if comparing else _diagnose(args, progress)
        text = {"json": report.to_json, "markdown": report.to_markdown, "html": report.to_html}[args.format]()
        if args.out:
            _write(Path(args.out), text)
        else:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
    except AttnScopeError as err:
        return _fail(str(err), EXIT_BAD_INPUT)
    except Exception as err:  # a bug: still one line, but a distinct status
        return _fail(f"internal error ({type(err).__name__}: {err}); please report it", EXIT_INTERNAL)
    failed = report.has_new_errors if comparing else report.has_errors
    return EXIT_FINDINGS if failed else EXIT_OK


def _print_load_notes() -> None:
    """What loading a checkpoint inferred, borrowed or ignored (an architecture read from the weights, a demo
    model's tokenizer): one ``note:`` line each on stderr, as the app shows them above its report."""
    load_log = logging.getLogger("attnscope.load")
    for old in [h for h in load_log.handlers if getattr(h, "attnscope_cli", False)]:
        load_log.removeHandler(old)  # an earlier main()'s, bound to the stderr of then
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(logging.Formatter("note: %(message)s"))
    handler.attnscope_cli = True
    load_log.addHandler(handler)
    load_log.propagate = False


def _unusable_device(device: str) -> str | None:
    """Why ``--device`` cannot be used on this machine (unknown, or absent here), or None."""
    from core.device import pick_device  # imports torch: not for --help or a bad option

    try:
        pick_device(device)
    except InputError as err:
        return str(err)
    return None


def _write(path: Path, text: str) -> None:
    try:
        path.write_text(text, encoding="utf-8")
    except OSError as err:
        raise InputError(f"cannot write {path}: {err.strerror or err}") from None


def _diagnose(args, progress):
    from diagnostics.diagnose import diagnose
    return diagnose(args.source, texts=args.text, device=args.device, progress=progress, n_heads=args.heads)


def _compare(args, progress):
    from diagnostics.compare import compare
    return compare(args.a, args.b, texts=args.text, device=args.device, progress=progress, n_heads=args.heads)


def _fail(message, status):
    one_line = " ".join(str(message).split())
    print(f"error: {one_line}", file=sys.stderr)
    return status


class _progress:
    """A tqdm bar on stderr when it is a terminal (and tqdm is installed); otherwise nothing."""

    def __init__(self, quiet):
        self.bar = None
        if not quiet and sys.stderr.isatty():
            try:
                from tqdm import tqdm
                self.bar = tqdm(total=100, file=sys.stderr, leave=False, bar_format="{l_bar}{bar}| {desc}")
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
