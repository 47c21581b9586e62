"""Reusable memory for the chunk-sized temporaries of streamed attention and its metrics.

Streaming computes the same few temporaries, each the size of one chunk
(about 8 MB), thousands of times. An allocation that size is handed back to the
operating system when it is freed (glibc maps it), so every new one pays its
page faults again: on a CPU that costs about as much as the arithmetic. A
``Scratch`` hands out the same memory for the same name each time.

One ``Scratch`` per computation: it is not thread-safe, and what a buffer holds
is overwritten by the next ``get`` of its name.
"""

from __future__ import annotations

import ctypes
import ctypes.util
import math
from functools import lru_cache

import torch


class Scratch:
    """Named flat buffers, grown as needed, viewed as whatever shape is asked for."""

    def __init__(self):
        self._flat: dict = {}

    def get(self, name: str, shape, like: torch.Tensor) -> torch.Tensor:
        """A contiguous tensor of ``shape`` with ``like``'s dtype and device; its contents are undefined."""
        numel = math.prod(shape)
        key = (name, like.dtype, like.device)
        flat = self._flat.get(key)
        if flat is None or flat.numel() < numel:
            flat = self._flat[key] = torch.empty(numel, dtype=like.dtype, device=like.device)
        return flat[:numel].view(shape)


def buffer(scratch: Scratch | None, name: str, shape, like: torch.Tensor) -> torch.Tensor:
    """``scratch.get(...)``, or a fresh ``torch.empty`` when there is no scratch."""
    if scratch is None:
        return torch.empty(shape, dtype=like.dtype, device=like.device)
    return scratch.get(name, shape, like)


@lru_cache(maxsize=1)
def _malloc_trim():
    try:
        return ctypes.CDLL(ctypes.util.find_library("c") or "libc.so.6").malloc_trim
    except (OSError, AttributeError):  # not glibc (macOS, musl): nothing to call
        return None


def release_freed_memory() -> None:
    """Hand the memory freed since the last call back to the operating system (glibc's ``malloc_trim``), once per
    streamed layer. glibc keeps freed chunk-sized temporaries in its heap: SmolLM2's streamed statistics peaked
    +0.21 GiB above the model at 2,048 tokens, +0.81 at 4,096 and +0.78 at 8,192 (1 thread); trimmed after each
    layer, +0.32 at 4,096 and +0.44 at 8,192, in the same time."""
    trim = _malloc_trim()
    if trim is not None:
        trim(0)
