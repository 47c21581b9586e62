"""Pick the device attention is computed on: CUDA, else Apple MPS, else CPU."""

from __future__ import annotations

import torch

from .errors import InputError
from .extraction.offload import execution_device, first_weight

SUPPORTED_TYPES = ("cpu", "cuda", "mps")  # torch parses more (vulkan, meta, xla...); models do not run there


def pick_device(override: str | torch.device | None = None) -> torch.device:
    """Return ``override`` when given (validated), otherwise the best available device."""
    if override is not None:
        return _checked(override)
    if torch.cuda.is_available():
        return torch.device("cuda")
    if _mps_available():
        return torch.device("mps")
    return torch.device("cpu")


def available_devices() -> list[str]:
    """The device names this machine can compute on: ``["cpu"]``, then ``"cuda"`` and ``"mps"`` where present."""
    return ["cpu", *(["cuda"] if torch.cuda.is_available() else []), *(["mps"] if _mps_available() else [])]


def _checked(override: str | torch.device) -> torch.device:
    """``override`` as a device, or InputError naming the devices here when it is unknown or unavailable."""
    usable = " or ".join(repr(d) for d in available_devices())
    try:
        device = torch.device(override)
    except (RuntimeError, TypeError):
        raise InputError(f"unknown device {override!r}; use {usable}") from None
    if device.type not in SUPPORTED_TYPES:
        raise InputError(f"device {override!r} is not one AttnScope computes on; use {usable}")
    if device.type == "cuda" and not torch.cuda.is_available():
        raise InputError(f"device {override!r} was requested but no CUDA GPU is available; use {usable}")
    if device.type == "cuda" and device.index is not None and device.index >= torch.cuda.device_count():
        raise InputError(f"device {override!r} was requested but this machine has {torch.cuda.device_count()} "
                         f"CUDA GPU(s), cuda:0 to cuda:{torch.cuda.device_count() - 1}; use 'cuda' for the first")
    if device.type == "mps" and not _mps_available():
        raise InputError(f"device {override!r} was requested but Apple MPS is not available here; use {usable}")
    return device


def _mps_available() -> bool:
    return getattr(torch.backends, "mps", None) is not None and torch.backends.mps.is_available()


def model_device(model: torch.nn.Module) -> torch.device:
    """Device of the model's first parameter that holds data (its input embeddings under ``device_map``; accelerate
    keeps offloaded ones on ``meta``); of a model offloaded whole, the device its forwards run on; else the CPU."""
    first = first_weight(model)
    if first is not None:
        return first.device
    return execution_device(model) or torch.device("cpu")
