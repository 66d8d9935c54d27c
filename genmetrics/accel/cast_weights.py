"""Model weights cast to bfloat16 once, not at every forward.

Under CPU bfloat16 autocast (a metric's ``precision="bf16"``) every matrix product and convolution casts
its float32 weight to bfloat16 again at each call: for ViT-B/16 that is 86M weights read and rounded per
batch. :func:`autocast_weight` keeps the cast copy instead, with the weight, and hands it out while the
weight is unchanged. The copy is the same ``Tensor.to(torch.bfloat16)`` autocast itself applies, so every
result is bit for bit the one of the uncached pass.

* **Kept with the weight**: one copy per weight and precision, in a weak-keyed table: it is freed with the
  weight (the model), or by :func:`release_cast_weights`. Memory: one bfloat16 copy of the weights that
  went through a product (half the float32 model: 172 MB for ViT-B/16, about 4 GB for a 2B model).
* **Invalidated when the weight changes**: the copy is used only while the weight's storage (itself, not
  only its address: ``weight.data = new`` whose memory lands where the old values were is a new storage),
  shape and in-place version counter are the ones it was made from (an optimizer step, ``load_state_dict``,
  ``weight.data = ...`` or any in-place change makes a new copy). A write through ``weight.data`` is not counted by torch's version
  counter: call :func:`release_cast_weights` after one. Weights made under ``torch.inference_mode``
  have no version counter and are never kept (cast at every call, as without the cache).
* **Only where autocast would cast**: a float32 CPU weight, CPU autocast on with bfloat16, and no autograd
  through the weight (a weight that needs its gradient is cast at every call, by autocast).

:func:`cached_weight_scope` applies it to the stock ``nn.Linear`` / ``nn.Conv1d/2d/3d`` modules of a
model during their own forward (every other module sees the float32 parameters, as before); code that
calls the products itself (the open_clip blocks) passes its weights through :func:`autocast_weight`.
``GENMETRICS_CAST_CACHE=off`` (or :func:`set_cast_cache`) casts at every call, as autocast does.

* **Only for weights the metric loaded**: a metric keeps copies of the model it built from weights by name
  (``cached_weight_scope(model, keep=True)``); a model the caller passed (``backbone=``, ``model=``) may be
  one under training whose weights change in ways torch does not count (an EMA update through
  ``p.data.mul_``), so within ``cached_weight_scope(..., keep=False)`` -- and every scope inside it -- each
  call casts anew, and no packed copy (:mod:`genmetrics.accel.clip_packed`) is used either.
"""

from __future__ import annotations

import contextlib
import contextvars
import os
import weakref
from collections.abc import Iterator
from typing import Any

import torch

from genmetrics.accel._torch_internals import weight_identity

#: the environment variable that switches the cache off (``off``)
CAST_CACHE_ENV = "GENMETRICS_CAST_CACHE"
#: per target dtype, {id(weight): (weakref to the weight, identity of its values when cast
#: (:func:`~genmetrics.accel._torch_internals.weight_identity`), the copy)}; an
#: entry leaves with its weight (a weak-keyed dict cannot hold tensors: their ``==`` is elementwise)
_copies: dict[torch.dtype, dict[int, tuple[weakref.ref, tuple, torch.Tensor]]] = {}
_enabled: list[bool | None] = [None]  # None: read CAST_CACHE_ENV
#: False inside a ``cached_weight_scope(..., keep=False)`` (a caller's model): no copy is kept or used there
_keep_here: contextvars.ContextVar[bool | None] = contextvars.ContextVar("genmetrics_cast_keep", default=None)


def cast_cache_enabled() -> bool:
    """Whether :func:`autocast_weight` keeps copies (:func:`set_cast_cache`, else ``GENMETRICS_CAST_CACHE``
    not ``off``).

    >>> set_cast_cache(False); cast_cache_enabled()
    False
    >>> set_cast_cache(None)
    """
    if _enabled[0] is not None:
        return _enabled[0]
    return os.environ.get(CAST_CACHE_ENV, "").strip().lower() not in ("off", "0", "false", "no")


def set_cast_cache(enabled: bool | None) -> None:
    """Keep cast copies (True), cast at every call (False), or follow ``GENMETRICS_CAST_CACHE`` (None).

    >>> set_cast_cache(False)
    >>> w = torch.nn.Linear(3, 2).weight
    >>> with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
    ...     autocast_weight(w) is w  # left to autocast, which casts it at the product
    True
    >>> set_cast_cache(None)
    """
    _enabled[0] = enabled


def _bf16_autocast_kept() -> bool:
    """Whether CPU bfloat16 autocast is on and the copies are kept."""
    return (
        torch.is_autocast_enabled("cpu")
        and torch.get_autocast_dtype("cpu") == torch.bfloat16
        and cast_cache_enabled()
    )


def weights_may_be_kept() -> bool:
    """False inside a ``cached_weight_scope(..., keep=False)`` (the weights of a caller's model: neither cast
    nor packed copies may stand for them there), else True.

    >>> with cached_weight_scope(keep=False):
    ...     inner = weights_may_be_kept()
    >>> inner, weights_may_be_kept()
    (False, True)
    """
    return _keep_here.get() is not False


def _autocast_target(t: torch.Tensor) -> torch.dtype | None:
    """The dtype CPU autocast would cast ``t`` to in a product now, when a kept copy may stand for it."""
    if (
        t.dtype != torch.float32
        or t.device.type != "cpu"
        or (t.requires_grad and torch.is_grad_enabled())
        or t.is_inference()
        or not _bf16_autocast_kept()
    ):
        return None
    return torch.bfloat16


def autocast_weight(t: torch.Tensor) -> torch.Tensor:
    """``t`` as the next product under the current CPU autocast would see it: its kept bfloat16 copy
    (made now if missing or stale) when autocast would cast it, else ``t`` itself. Pass a weight itself,
    not a view of it (slice the result).

    >>> w = torch.nn.Linear(3, 2).weight
    >>> autocast_weight(w) is w  # no autocast: the weight itself
    True
    >>> with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
    ...     a = autocast_weight(w)
    ...     same = a is autocast_weight(w) and torch.equal(a, w.to(torch.bfloat16))
    >>> a.dtype, same
    (torch.bfloat16, True)
    """
    dtype = _autocast_target(t)
    if dtype is None or _keep_here.get() is False:  # nothing to keep, or a caller's weights: autocast casts
        return t
    key = weight_identity(t)
    table = _copies.setdefault(dtype, {})
    entry = table.get(id(t))
    if entry is not None and entry[0]() is t and entry[1] == key:
        return entry[2]
    with torch.no_grad():
        copy = t.detach().to(dtype)  # the cast autocast applies (cached_cast: arg.to(dtype))
    table[id(t)] = (weakref.ref(t, _forget(table, id(t))), key, copy)
    return copy


def _forget(table: dict[int, Any], ident: int) -> Any:
    """The callback that drops ``table[ident]`` when its weight is freed (unless the slot was taken by a
    newer weight at the same address)."""

    def drop(ref: weakref.ref) -> None:
        entry = table.get(ident)
        if entry is not None and entry[0] is ref:
            del table[ident]

    return drop


def cast_weights_kept() -> int:
    """Bytes of the cast copies kept now.

    >>> release_cast_weights(); cast_weights_kept()
    0
    """
    return sum(c.numel() * c.element_size() for table in _copies.values() for _, _, c in table.values())


def release_cast_weights() -> None:
    """Free every kept cast copy (they are made again at the next call).

    >>> w = torch.nn.Linear(3, 2).weight
    >>> with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
    ...     _ = autocast_weight(w)
    >>> release_cast_weights(); cast_weights_kept()
    0
    """
    _copies.clear()


_STOCK_CONVS = (torch.nn.Conv1d, torch.nn.Conv2d, torch.nn.Conv3d)


def _stock(m: torch.nn.Module) -> bool:
    """Whether ``m`` runs torch's own ``Linear`` / ``ConvNd`` forward (its weight and bias read only by the
    product): a ``Linear`` whose class keeps ``nn.Linear.forward``, or a ``Conv1d/2d/3d`` itself (a subclass
    may read its weight elsewhere, so it keeps autocast's own cast)."""
    return type(m) in _STOCK_CONVS or type(m).forward is torch.nn.Linear.forward


def _parameter(m: torch.nn.Module, name: str) -> torch.nn.Parameter | None:
    """``m``'s own parameter ``name`` (None when it has none, e.g. a conv without bias)."""
    p = getattr(m, name, None)
    return p if isinstance(p, torch.nn.Parameter) else None


def _swap_in(m: torch.nn.Module, args: Any) -> None:
    for name in ("weight", "bias"):
        p = _parameter(m, name)
        if p is not None:
            c = autocast_weight(p)
            if c is not p:
                m.__dict__[name] = c  # found before Module.__getattr__ reaches the parameter


def _swap_out(m: torch.nn.Module, args: Any, out: Any) -> None:
    m.__dict__.pop("weight", None)
    m.__dict__.pop("bias", None)


@contextlib.contextmanager
def cached_weight_scope(*modules: Any, keep: bool = True) -> Iterator[None]:
    """Within the block, each stock ``nn.Linear`` / ``nn.Conv1d/2d/3d`` of ``modules`` runs its forward on
    :func:`autocast_weight` of its weight and bias (decided at the call: only under CPU bfloat16 autocast);
    the parameters themselves are not replaced, and every other module reads them as before. Arguments
    that are not modules are skipped. ``keep=False`` (a caller's model, whose weights may change where
    torch's version counter does not see it) keeps and uses no copy in the block, nor in any scope within.

    >>> lin = torch.nn.Linear(3, 2)
    >>> x = torch.randn(4, 3, generator=torch.Generator().manual_seed(0))
    >>> with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
    ...     plain = lin(x)
    ...     with cached_weight_scope(lin):
    ...         kept = lin(x)
    >>> torch.equal(plain, kept), lin.weight.dtype
    (True, torch.float32)
    """
    handles = []
    keep = keep and _keep_here.get() is not False
    token = _keep_here.set(keep)
    # no hooks at all outside CPU bfloat16 autocast (a float32 pass pays nothing), nor on weights that
    # autocast would not cast (another dtype or device)
    if keep and _bf16_autocast_kept():
        for root in modules:
            for m in root.modules() if isinstance(root, torch.nn.Module) else ():
                w = _parameter(m, "weight") if _stock(m) else None
                if w is not None and w.dtype == torch.float32 and w.device.type == "cpu":
                    handles.append(m.register_forward_pre_hook(_swap_in))
                    handles.append(m.register_forward_hook(_swap_out, always_call=True))
    try:
        yield
    finally:
        for h in handles:
            h.remove()
        _keep_here.reset(token)
