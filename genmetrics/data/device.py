"""Device and precision helpers.

* :func:`select_device`, :func:`module_device`: where a metric runs;
* the ``precision`` option of every model-based metric (``"fp32"``, the default and the papers' numbers, or
  ``"bf16"``): :func:`check_precision` checks it, :func:`precision_autocast` runs a model's forward under
  it (bfloat16 autocast for ``"bf16"``, autocast switched off for ``"fp32"``), :func:`bf16_units` says
  whether the device has bfloat16 arithmetic units (CPU flags ``amx_bf16`` / ``avx512_bf16``; a GPU with
  ``torch.cuda.is_bf16_supported()``). See docs/performance.md, "bfloat16".
"""

from __future__ import annotations

import contextlib
import functools
import os
import warnings
from collections.abc import Iterator
from pathlib import Path

import torch

from genmetrics.core.options import choice
from genmetrics.core.options import device as check_device

#: the values of the ``precision`` option of model-based metrics (the first is the default)
PRECISIONS = ("fp32", "bf16")
#: ``/proc/cpuinfo`` flags of x86 CPUs with bfloat16 arithmetic (Intel AMX, AVX512-BF16; AMD Zen 4+)
BF16_CPU_FLAGS = ("amx_bf16", "avx512_bf16")
_warned: set[str] = set()  # device types already warned about (one warning per process and type)


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


def check_precision(value: object, *, owner: str | None = None) -> str:
    """The ``precision`` option checked: ``"fp32"`` or ``"bf16"`` (an :class:`~genmetrics.errors.InputError`
    naming the option otherwise).

    >>> check_precision("bf16")
    'bf16'
    >>> check_precision("bfloat16", owner="clip_i")
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: clip_i: option precision: expected one of 'fp32', 'bf16', got 'bfloat16'; did you mean 'bf16'?
    """
    return choice("precision", value, PRECISIONS, owner=owner)


@functools.lru_cache(maxsize=1)
def cpu_flags(cpuinfo: str = "/proc/cpuinfo") -> frozenset[str] | None:
    """The CPU's feature flags from the first ``flags`` line of ``/proc/cpuinfo`` (None where there is no
    such file, e.g. not Linux).

    >>> flags = cpu_flags()
    >>> flags is None or isinstance(flags, frozenset)
    True
    """
    try:
        text = Path(cpuinfo).read_text(errors="replace")
    except OSError:
        return None
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key.strip() == "flags":
            return frozenset(value.split())
    return None


def bf16_units(device: torch.device | str) -> tuple[bool, str]:
    """``(has_units, why)``: whether ``device`` computes bfloat16 products in hardware, and in words why
    (or why not). A CPU has them with one of :data:`BF16_CPU_FLAGS` in ``/proc/cpuinfo``; a CUDA device
    when ``torch.cuda.is_bf16_supported()`` (compute capability 8.0+).

    >>> has, why = bf16_units("cpu")
    >>> isinstance(has, bool) and why.startswith("CPU")
    True
    """
    dev = torch.device(device)
    if dev.type == "cuda":
        ok = bool(torch.cuda.is_available() and torch.cuda.is_bf16_supported(including_emulation=False))
        return ok, "CUDA device " + ("with bfloat16 support" if ok else "without native bfloat16 support")
    if dev.type != "cpu":
        return True, f"{dev.type} device (bfloat16 autocast left to torch)"
    flags = cpu_flags()
    if flags is None:
        return False, "CPU flags unknown (no /proc/cpuinfo): " + " / ".join(BF16_CPU_FLAGS) + " not seen"
    have = [f for f in BF16_CPU_FLAGS if f in flags]
    if have:
        return True, "CPU with " + ", ".join(have)
    return False, "CPU without " + " or ".join(BF16_CPU_FLAGS)


@contextlib.contextmanager
def precision_autocast(precision: str, device: torch.device | str) -> Iterator[None]:
    """Run a model forward in ``precision`` on ``device``: ``"bf16"`` under ``torch.autocast(dtype=bfloat16)``
    (products and convolutions in bfloat16, reductions such as layer norm and softmax in float32, as torch's
    autocast lists them), ``"fp32"`` with autocast switched off, so a metric called inside a caller's autocast
    region (a Lightning ``bf16-mixed`` validation step) still computes in float32. On a device without
    bfloat16 units (:func:`bf16_units`) ``"bf16"`` still runs (torch emulates it) but warns once per process
    that it is slower than float32 there. Callers cast what comes out to float32.

    >>> x, w = torch.ones(2, 3), torch.ones(4, 3)
    >>> with precision_autocast("fp32", "cpu"):
    ...     torch.nn.functional.linear(x, w).dtype
    torch.float32
    >>> import warnings
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # this CPU may have no bf16 units
    ...     with precision_autocast("bf16", "cpu"):
    ...         torch.nn.functional.linear(x, w).dtype
    torch.bfloat16
    """
    dev = torch.device(device)
    precision = check_precision(precision)
    if precision == "fp32":
        with torch.autocast(dev.type, enabled=False):
            yield
        return
    has, why = bf16_units(dev)
    if not has and dev.type not in _warned:
        _warned.add(dev.type)
        warnings.warn(
            f"precision='bf16' on a {why}: bfloat16 runs emulated there, slower than float32 (several times "
            "on a CPU); use precision='fp32' on this machine, or bf16 on a GPU or a CPU with AMX / AVX512-BF16",
            UserWarning,
            stacklevel=3,
        )
    with torch.autocast(dev.type, dtype=torch.bfloat16):
        yield


def autocast_scope(device: torch.device | str) -> str:
    """The autocast state of ``device``'s type, as a suffix for feature-cache keys: ``""`` without autocast,
    else ``"+autocast:<dtype>"`` (features made under bfloat16 autocast are never served to a float32 pass,
    nor the reverse).

    >>> autocast_scope("cpu")
    ''
    >>> with torch.autocast("cpu", dtype=torch.bfloat16):
    ...     autocast_scope("cpu")
    '+autocast:torch.bfloat16'
    """
    kind = torch.device(device).type
    if not torch.is_autocast_enabled(kind):
        return ""
    return f"+autocast:{torch.get_autocast_dtype(kind)}"


def available_devices() -> list[str]:
    """The devices torch can use here: ``cpu``, every ``cuda:N``, and ``mps`` on Apple silicon (as a
    configuration names them: leaderboard ``devices``, the training ``device``).

    >>> available_devices()[0]
    'cpu'
    """
    found = ["cpu"]
    if torch.cuda.is_available():
        found += [f"cuda:{i}" for i in range(torch.cuda.device_count())]
    if torch.backends.mps.is_available():
        found.append("mps")
    return found


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
