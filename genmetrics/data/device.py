"""Device and precision helpers: bf16 autocast on CUDA, fp32 on CPU (no bf16 units here)."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

import torch


def select_device(device: str | torch.device | None = None) -> torch.device:
    """``None`` -> the local CUDA device (``LOCAL_RANK``-aware) if available, else CPU."""
    if device is not None:
        from genmetrics.options import device as check_device

        return torch.device(check_device("device", device))
    if torch.cuda.is_available():
        import os

        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on CUDA, fp32 elsewhere."""
    return torch.bfloat16 if device.type == "cuda" else torch.float32


@contextlib.contextmanager
def autocast_for(device: torch.device, enabled: bool = True) -> Iterator[None]:
    """bf16 autocast on CUDA; a no-op on CPU."""
    if enabled and device.type == "cuda":
        with torch.autocast("cuda", dtype=torch.bfloat16):
            yield
    else:
        yield


def module_device(module: torch.nn.Module) -> torch.device:
    for p in module.parameters():
        return p.device
    for b in module.buffers():
        return b.device
    return torch.device("cpu")
