"""``python -m diagnostics SOURCE [--text TEXT]... [--format json|markdown|html] [--out FILE]``.

Exit status: 0 when no finding has "error" severity, 1 when one does, 2 on bad
input (unknown model, unreadable folder, bad option), with a one-line message
on stderr and no traceback. An unexpected failure (a bug) exits 3, also with
one line.
"""

import argparse
import sys
from pathlib import Path

from core.errors import AttnScopeError

EXIT_OK, EXIT_FINDINGS, EXIT_BAD_INPUT, EXIT_INTERNAL = 0, 1, 2, 3
FORMATS = ("markdown", "json", "html")


class _UsageError(Exception):
    """argparse's complaint, raised instead of printing usage and exiting."""


class _Parser(argparse.ArgumentParser):
    def error(self, message):
        raise _UsageError(message)


def build_parser():
    parser = _Parser(prog="python -m diagnostics",
                     description="Diagnose the attention heads of a model and report findings with suggested fixes.")
    parser.add_argument("source", help="a known model (sentence-transformers/all-MiniLM-L6-v2 or minilm, "
                        "HuggingFaceTB/SmolLM2-135M-Instruct or smollm2, demo-bert, demo-gpt2), a model folder, "
                        "an archive, a weights or .gguf file, or a Hugging Face id")
    parser.add_argument("--text", action="append", metavar="TEXT",
                        help="probe text (repeatable); default: AttnScope's built-in probe sentences")
    parser.add_argument("--format", choices=FORMATS, default="markdown", help="report format (default: markdown)")
    parser.add_argument("--out", metavar="FILE", help="write the report to FILE instead of stdout")
    parser.add_argument("--heads", type=int, metavar="N",
                        help="attention heads per layer, for a bare state dict whose weights do not say it")
    parser.add_argument("--device", help="cpu, cuda, cuda:0 or mps (default: best available)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar on stderr")
    return parser


def main(argv=None):
    """Run the CLI; returns the exit status instead of exiting."""
    try:
        args = build_parser().parse_args(argv)
    except _UsageError as err:
        return _fail(f"usage: {err} (try --help)", EXIT_BAD_INPUT)
    try:
        from diagnostics.diagnose import diagnose
        with _progress(args.quiet) as progress:
            report = diagnose(args.source, texts=args.text, device=args.device, progress=progress,
                              n_heads=args.heads)
        text = {"json": report.to_json, "markdown": report.to_markdown, "html": report.to_html}[args.format]()
        if args.out:
            Path(args.out).write_text(text, encoding="utf-8")
        else:
            sys.stdout.write(text if text.endswith("\n") else text + "\n")
    except AttnScopeError as err:
        return _fail(str(err), EXIT_BAD_INPUT)
    except OSError as err:
        return _fail(f"cannot write {args.out}: {err.strerror or err}", EXIT_BAD_INPUT)
    except Exception as err:  # a bug: still one line, but a distinct status
        return _fail(f"internal error ({type(err).__name__}: {err}); please report it", EXIT_INTERNAL)
    return EXIT_FINDINGS if report.has_errors else EXIT_OK


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
