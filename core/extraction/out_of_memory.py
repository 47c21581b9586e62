"""A forward pass that runs out of memory, the CPU's or a device's, told as ``core.OutOfMemory`` with what to do.

It is no model AttnScope cannot read, nor a bug to report: the text is too long for this memory. CUDA's allocator
raises ``torch.OutOfMemoryError``, PyTorch's CPU one a RuntimeError, Python a MemoryError.
"""

from contextlib import contextmanager

import torch

from ..errors import AttnScopeError, OutOfMemory, first_line

# What to do about whole maps that do not fit, for a model AttnScope can stream, and for one it cannot (GPT-Neo,
# Bloom, encoder-decoders: streaming reads only an encoder); a streamed forward holds one chunk of them.
WHOLE_MAPS = "shorten it, or use diagnostics.stream_statistics, which never holds the maps"
NOT_STREAMABLE = "shorten it, or run it where there is more memory"
STREAMED = "shorten it, or run it where there is more memory (the stream holds one chunk of the maps at a time)"


def whole_maps_advice(model) -> str:
    """``WHOLE_MAPS`` for a model ``stream_statistics`` reads whole, else ``NOT_STREAMABLE``."""
    from .streaming import can_stream  # streaming imports the extractors, which import this

    config = getattr(model, "config", None)
    whole = can_stream(model) and not getattr(config, "is_encoder_decoder", False)
    return WHOLE_MAPS if whole else NOT_STREAMABLE


def out_of_memory(err: BaseException) -> bool:
    """Whether ``err`` says memory ran out: Python's, a device allocator's (``torch.OutOfMemoryError``), or PyTorch's
    CPU allocator's (a RuntimeError)."""
    return isinstance(err, (MemoryError, torch.OutOfMemoryError)) or (
        isinstance(err, RuntimeError) and "can't allocate memory" in str(err))


@contextmanager
def told_out_of_memory(model, advice: str | None = None):
    """Running ``model``: memory running out becomes one ``OutOfMemory`` line with ``advice`` (by default,
    ``whole_maps_advice``)."""
    try:
        yield
    except AttnScopeError:
        raise
    except Exception as err:  # noqa: BLE001  only memory running out is told; anything else goes on as it was
        if not out_of_memory(err):
            raise
        advice = advice or whole_maps_advice(model)
        raise OutOfMemory(f"{type(model).__name__} ran out of memory on this text ({first_line(err)}); {advice}") \
            from None
