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

import math

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
