"""A batch tensor found again behind its rows, so that a batch is not copied just to be stacked back.

``genmetrics.data.images.as_image_list`` unbinds a ``[B,3,H,W]`` tensor into ``B`` views; the pixel metrics'
batch path asks :func:`batch_view` for one tensor over them. Public torch API only: two views are rows of
one tensor when they share a storage and their offsets step evenly with one shape and strides.
"""

from __future__ import annotations

import torch


def batch_view(items: list[torch.Tensor]) -> torch.Tensor | None:
    """One ``[B,...]`` view over ``items`` when they are views of one storage with one dtype, shape and
    strides whose storage offsets advance by one positive step (the consecutive rows of a batch tensor), so
    row ``i`` of the result is ``items[i]``; else None (the caller stacks a copy). None as well when autograd
    follows an item: a view made here would carry the graph of the first item only.

    >>> x = torch.arange(24.0).view(4, 6)
    >>> v = batch_view(list(x.unbind(0))[1:3])
    >>> v.data_ptr() == x[1].data_ptr(), torch.equal(v, x[1:3])
    (True, True)
    >>> batch_view([x[0], x[2]]) is None, batch_view([x[0], x[0].clone()]) is None  # a gap; another storage
    (False, True)
    """
    if not items or any(not isinstance(t, torch.Tensor) for t in items):
        return None
    first = items[0]
    if first.layout != torch.strided or first.is_nested or any(t.requires_grad for t in items):
        return None
    if len(items) == 1:
        return first.detach().unsqueeze(0)
    storage = first.untyped_storage().data_ptr()
    off0, step = first.storage_offset(), items[1].storage_offset() - first.storage_offset()
    if step <= 0:
        return None
    shape, strides, dtype, device = first.shape, first.stride(), first.dtype, first.device
    for i, t in enumerate(items):  # one pass (this runs for every batch of every update)
        if (
            t.storage_offset() != off0 + i * step
            or t.shape != shape
            or t.stride() != strides
            or t.dtype != dtype
            or t.device != device
            or t.untyped_storage().data_ptr() != storage
        ):
            return None
    return first.detach().as_strided((len(items), *shape), (step, *strides), off0)
