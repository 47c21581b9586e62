"""GGUF checkpoints: a bounded header reader (``header``) and the checked load through transformers (``load``)."""

from .header import GGUFHeader, read_gguf_header
from .load import GGUF_SUFFIX, check_gguf, is_gguf, load_gguf, supported_architectures

__all__ = ["GGUFHeader", "GGUF_SUFFIX", "check_gguf", "is_gguf", "load_gguf", "read_gguf_header",
           "supported_architectures"]
