"""Regular expressions in an uploaded ``tokenizer.json`` that can run for minutes.

A tokenizer's pre-tokenizer or normalizer may split or replace on a regex (``{"Regex": "..."}``), run by the
``tokenizers`` library's Oniguruma engine while holding the GIL. Many shapes backtrack: a repeated group that can
match the same text in several ways (``(\\D|\\D\\D){1,22}\\d`` took 1.2 s on 45 characters, 12 s on 180), and a chain
of repeated classes (``\\w*\\w*\\w*\\w*\\w*\\W``: 14 s on 100 letters); past Oniguruma's retry limit the library panics
with an exception that is not an ``Exception`` (``[\\s\\S]*[\\s\\S]*[\\s\\S]*[\\s\\S]*\\d`` on the first default probe).
Judging the shape missed the chains (only repeated groups were suspected) and caught harmless patterns of
released tokenizers (SuperBPE's ``(?=(\\d{3})+(?!\\d))``), so a tokenizer holding any regex is run first in a
child process on long runs of one kind of character (``slow_pattern``), and refused when that takes over
``TIME_LIMIT_S`` or crashes (released GPT-2, Llama 3, GPT-4o and Bloom patterns: 0.1-0.2 s). The main process never
runs a regex that was not timed. A regex whose cost grows as the square of a run's length, one scan to the run's
end from each start, passes while that stays under the limit: SuperBPE's took 1.2 s here, and 6 s on a probe of
50,000 digits, the most a probe holds; ``\\w*\\d`` (8.6 s on 50,000 letters) is refused.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

TIME_LIMIT_S = 5.0  # for the child to load the tokenizer and encode every adversarial text (a safe one: ~0.3 s)
RUN_CHARS = 20_000  # long enough that a regex backtracking on each of its starts crashes or times out
# Runs of one kind of character, none completing a match of a pattern that needs another kind after it
_RUNS = ("a", "1", " ", "!", "é", "ж", "中", "\n", "a1", "a ", "aé")
# The child: load tokenizer.json alone (no transformers) under a 2 GB address space, encode each text from stdin
_CHILD = ("import resource, sys, json; resource.setrlimit(resource.RLIMIT_AS, (2 << 30, 2 << 30)); "
          "from tokenizers import Tokenizer; t = Tokenizer.from_file(sys.argv[1]); "
          "[t.encode(text) for text in json.load(sys.stdin)]")


def slow_pattern(path: Path) -> str | None:
    """The first regex of the ``tokenizer.json`` at ``path`` when, run in a child process on ``adversarial_texts``,
    the tokenizer takes over ``TIME_LIMIT_S`` or crashes; else None (also when it holds no regex)."""
    patterns = regex_patterns(json.loads(path.read_bytes()))
    if not patterns:
        return None
    try:
        child = subprocess.run([sys.executable, "-c", _CHILD, str(path)], input=json.dumps(adversarial_texts()),
                               capture_output=True, text=True, timeout=TIME_LIMIT_S)
    except subprocess.TimeoutExpired:
        return patterns[0]
    return patterns[0] if child.returncode else None


def adversarial_texts() -> list[str]:
    """``RUN_CHARS`` of each of ``_RUNS``, and English prose, on which backtracking regexes fail slowly."""
    prose = "The quick brown fox jumps over the lazy dog, again and again. "
    return [run * (RUN_CHARS // len(run)) for run in _RUNS] + [prose * (RUN_CHARS // len(prose))]


def regex_patterns(node) -> list[str]:
    """Every ``{"Regex": pattern}`` in a parsed ``tokenizer.json``, at any depth."""
    found, stack = [], [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if isinstance(item.get("Regex"), str):
                found.append(item["Regex"])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found
