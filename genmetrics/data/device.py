"""Device and precision helpers: bf16 autocast on CUDA, fp32 on CPU (no bf16 units here)."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

import torch

from genmetrics.options import device as check_device


def select_device(device: str | torch.device | None = None) -> torch.device:
    """``None`` -> the local CUDA device (``LOCAL_RANK``-aware) if available, else CPU.

    >>> select_device("cpu")
    device(type='cpu')
    >>> select_device("gpu")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: ...gpu...
    """
    if device is not None:
        return torch.device(check_device("device", device))
    if torch.cuda.is_available():
        return torch.device("cuda", int(os.environ.get("LOCAL_RANK", 0)))
    return torch.device("cpu")


def default_dtype(device: torch.device) -> torch.dtype:
    """bf16 on CUDA, fp32 elsewhere.

    >>> default_dtype(torch.device("cpu")), default_dtype(torch.device("cuda", 0))
    (torch.float32, torch.bfloat16)
    """
    return torch.bfloat16 if device.type == "cuda" else torch.float32


@contextlib.contextmanager
def autocast_for(device: torch.device, enabled: bool = True) -> Iterator[None]:
    """bf16 autocast on CUDA; a no-op on CPU.

    >>> with autocast_for(torch.device("cpu")):
    ...     (torch.ones(2, 2) @ torch.ones(2, 2)).dtype
    torch.float32
    """
    if enabled and device.type == "cuda":
        with torch.autocast("cuda", dtype=torch.bfloat16):
            yield
    else:
        yield


def module_device(module: torch.nn.Module) -> torch.device:
    """The device of a module's first parameter (or buffer); CPU for a module with neither.

    >>> module_device(torch.nn.Linear(2, 2)), module_device(torch.nn.ReLU())
    (device(type='cpu'), device(type='cpu'))
    """
    for p in module.parameters():
        return p.device
    for b in module.buffers():
        return b.device
    return torch.device("cpu")
