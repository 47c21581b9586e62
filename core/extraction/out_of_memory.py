"""A forward pass that runs out of memory, the CPU's or a device's, told as ``core.OutOfMemory`` with what to do.

It is no model AttnScope cannot read, nor a bug to report: the text is too long for this memory. CUDA's allocator
raises ``torch.OutOfMemoryError``, PyTorch's CPU one a RuntimeError, Python a MemoryError.
"""

from contextlib import contextmanager

import torch

from ..errors import AttnScopeError, OutOfMemory, first_line

# What to do about whole maps that do not fit; a streamed forward holds one chunk of them, so it gets other advice.
WHOLE_MAPS = "shorten it, or use diagnostics.stream_statistics, which never holds the maps"
STREAMED = "shorten it, or run it where there is more memory (the stream holds one chunk of the maps at a time)"


def out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` says memory ran out: Python's, a device allocator's (CUDA's, MPS's), PyTorch's CPU one."""
    return isinstance(err, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(err, RuntimeError) and "can't allocate memory" in str(err))


@contextmanager
def told_out_of_memory(model, advice: str = WHOLE_MAPS):
    """Running ``model``: memory running out becomes one ``OutOfMemory`` line with ``advice``."""
    try:
        yield
    except AttnScopeError:
        raise
    except Exception as err:  # noqa: BLE001  only memory running out is told; anything else goes on as it was
        if not out_of_memory(err):
            raise
        raise OutOfMemory(f"{type(model).__name__} ran out of memory on this text ({first_line(err)}); {advice}") \
            from None
