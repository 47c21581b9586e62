"""Pick the device attention is computed on: CUDA, else Apple MPS, else CPU."""

from __future__ import annotations

import torch

from .errors import InputError


def pick_device(override: str | torch.device | None = None) -> torch.device:
    """Return ``override`` when given (validated), otherwise the best available device."""
    if override is not None:
        try:
            device = torch.device(override)
        except RuntimeError:
            raise InputError(f"unknown device {override!r}; use 'cpu', 'cuda', 'cuda:0' or 'mps'") from None
        if device.type == "cuda" and not torch.cuda.is_available():
            raise InputError("device 'cuda' was requested but no CUDA GPU is available; use 'cpu'")
        return device
    if torch.cuda.is_available():
        return torch.device("cuda")
    if getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available():
        return torch.device("mps")
    return torch.device("cpu")


def model_device(model: torch.nn.Module) -> torch.device:
    """Device of the model's first parameter (its input embeddings under ``device_map``)."""
    try:
        return next(model.parameters()).device
    except StopIteration:
        return torch.device("cpu")
