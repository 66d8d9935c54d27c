"""Every private torch API genmetrics calls, in one place.

Each use stays for a measured reason (docs/performance.md, "Fast paths"):

* ``torch.ops.mkldnn._reorder_linear_weight`` / ``torch.ops.mkldnn._linear_pointwise``: oneDNN's linear
  on weights reordered once into its blocked layout (the kernels ``torch.compile`` itself emits for CPU
  linears). No public API packs a weight once and reuses it across calls. Used only when asked for
  (``GENMETRICS_FAST_PATHS``) and where a micro-benchmark
  on the running machine measured it faster than ``F.linear`` (:mod:`genmetrics.accel.fastpath`).
* ``Tensor._version``: the in-place version counter, so a packed copy of the weights is rebuilt after an
  optimizer step or ``load_state_dict`` (no public API tells an in-place change apart).
* ``UntypedStorage._weak_ref`` (through ``torch.multiprocessing.reductions.StorageWeakRef``): the identity of
  a weight's storage, held so that its address cannot be taken by another storage while a copy made from it
  is kept (``weight.data = new`` whose memory lands where the old weights were keeps the version counter
  and the address: only the storage tells them apart).

Callers fall back to the public path whenever :func:`onednn_linear_available` is False, so a torch that
renames or drops these ops costs speed, never correctness. ``tests/accel/test_torch_internals.py``
fails with a message naming the op and this file when the installed torch changes them.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
from torch.multiprocessing.reductions import StorageWeakRef

#: the private names used here, for the loud test and for error messages
PRIVATE_APIS = (
    "torch.ops.mkldnn._reorder_linear_weight",
    "torch.ops.mkldnn._linear_pointwise",
    "torch.Tensor._version",
    "torch.UntypedStorage._weak_ref",
)


def reorder_linear_weight(weight: torch.Tensor, rows_hint: int) -> torch.Tensor:
    """``weight [out, in]`` (float32, CPU) reordered once into oneDNN's blocked layout for about
    ``rows_hint`` input rows; only :func:`linear_pointwise` can read the result.

    >>> w = torch.eye(3)
    >>> packed = reorder_linear_weight(w, 4) if onednn_linear_available() else w
    >>> tuple(linear_pointwise(torch.ones(2, 3), packed, None).shape) if onednn_linear_available() else (2, 3)
    (2, 3)
    """
    return torch.ops.mkldnn._reorder_linear_weight(weight.contiguous(), int(rows_hint))


def linear_pointwise(x: torch.Tensor, packed: torch.Tensor, bias: Any, act: str = "none") -> torch.Tensor:
    """``act(x @ W.T + bias)`` with ``W`` packed by :func:`reorder_linear_weight`; ``act`` is ``"none"`` or
    ``"swish"`` (``silu``, fused into the product).

    >>> if onednn_linear_available():
    ...     y = linear_pointwise(torch.ones(1, 3), reorder_linear_weight(torch.ones(2, 3), 1), torch.zeros(2))
    ... else:
    ...     y = torch.full((1, 2), 3.0)
    >>> y.tolist()
    [[3.0, 3.0]]
    """
    return torch.ops.mkldnn._linear_pointwise(x, packed, bias, act, [], "")


def version_counter(t: torch.Tensor) -> int:
    """The in-place version of ``t`` (bumped by every in-place change); ``t`` must not be an inference tensor.

    >>> t = torch.zeros(2)
    >>> before = version_counter(t)
    >>> _ = t.add_(1)
    >>> version_counter(t) > before
    True
    """
    return int(t._version)


def weight_identity(t: torch.Tensor) -> tuple[Any, ...]:
    """What a copy made from ``t`` now stays valid for: ``t``'s storage (a weak reference, which keeps that
    storage's identity from being reused while the key is kept), address, in-place version, offset, shape and
    stride. Two keys are equal only when the values are the same ones, unchanged in place, in the same
    storage; ``t`` must not be an inference tensor.

    >>> t = torch.zeros(2, 2)
    >>> k = weight_identity(t)
    >>> k == weight_identity(t), k == weight_identity(t.add_(1)), weight_identity(t) == weight_identity(t.clone())
    (True, False, False)
    """
    return (
        StorageWeakRef(t.untyped_storage()),
        t.data_ptr(),
        version_counter(t),
        t.storage_offset(),
        tuple(t.shape),
        t.stride(),
    )


def check_torch_private_apis() -> dict[str, str]:
    """``{private name: what went wrong}`` for each private API that is missing or behaves differently in
    the installed torch (empty when all work). The oneDNN ops are only checked where oneDNN is built in.

    >>> isinstance(check_torch_private_apis(), dict)
    True
    """
    problems: dict[str, str] = {}
    if torch.backends.mkldnn.is_available():
        w = torch.tensor([[1.0, 2.0, 3.0], [0.5, -1.0, 2.0]])
        try:
            packed = reorder_linear_weight(w, 4)
        except Exception as e:  # noqa: BLE001 - reported, not raised: the test names the API
            problems[PRIVATE_APIS[0]] = f"{type(e).__name__}: {e}"
        else:
            x = torch.tensor([[1.0, 1.0, 1.0], [2.0, 0.0, -1.0]])
            b = torch.tensor([0.25, -0.5])
            try:
                y = linear_pointwise(x, packed, b)
                s = linear_pointwise(x, packed, b, "swish")
            except Exception as e:  # noqa: BLE001
                problems[PRIVATE_APIS[1]] = f"{type(e).__name__}: {e}"
            else:
                ref = torch.nn.functional.linear(x, w, b)  # small integers and halves: exact in float32
                if not torch.equal(y, ref):
                    problems[PRIVATE_APIS[1]] = f"returned {y.tolist()} for x @ W.T + b = {ref.tolist()}"
                elif not torch.allclose(s, torch.nn.functional.silu(ref), rtol=1e-6, atol=1e-6):
                    problems[PRIVATE_APIS[1]] = "the fused 'swish' activation is not silu"
    try:
        t = torch.zeros(1)
        v0 = version_counter(t)
        t.add_(1)
        if version_counter(t) != v0 + 1:
            problems[PRIVATE_APIS[2]] = "an in-place add did not bump the version by one"
    except Exception as e:  # noqa: BLE001
        problems[PRIVATE_APIS[2]] = f"{type(e).__name__}: {e}"
    try:
        a, b = torch.zeros(1), torch.zeros(1)
        ka = weight_identity(a)
        if ka != weight_identity(a) or ka == weight_identity(b) or ka[0].expired():
            problems[PRIVATE_APIS[3]] = "a storage's weak reference does not tell it from another one"
    except Exception as e:  # noqa: BLE001
        problems[PRIVATE_APIS[3]] = f"{type(e).__name__}: {e}"
    return problems


@functools.cache
def onednn_linear_available() -> bool:
    """Whether oneDNN's packed linear exists and computes ``x @ W.T + b`` in this torch build (checked once).

    >>> isinstance(onednn_linear_available(), bool)
    True
    """
    if not torch.backends.mkldnn.is_available():
        return False
    with torch.autocast("cpu", enabled=False):  # the float32 reference products, whatever the caller's state
        problems = check_torch_private_apis()
    return PRIVATE_APIS[0] not in problems and PRIVATE_APIS[1] not in problems
