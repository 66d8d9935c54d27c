"""Sample ids: the stable 64-bit identity of a sample and the de-duplication of the copies a
``DistributedSampler`` pads in.

Samples updated without ``ids=`` are all kept (never de-duplicated: they share :data:`UNNAMED_ID`). Named
ids are de-duplicated only across processes, for the copies a sampler pads in; an id repeated within one
update is an error (:func:`hash_ids`). :class:`~genmetrics.core.metric.SampleMetric` keeps the hashed ids as
an int64 state next to the scores.
"""

from __future__ import annotations

import hashlib
import operator
import os
from typing import Any

import torch

from genmetrics.errors import InputError

#: the id of every sample updated without ``ids=`` (such samples are never de-duplicated)
UNNAMED_ID = -1


def hash_id(sample_id: Any, *, name: str = "ids") -> int:
    """A stable signed 64-bit integer for a sample id: integers (Python, NumPy or a one-element integer
    tensor, taken by value) as they are, anything else (strings, paths) by a hash of its text.

    >>> hash_id(7), hash_id(torch.tensor(7)), hash_id("img_001.png") == hash_id("img_001.png")
    (7, 7, True)
    """
    if isinstance(sample_id, torch.Tensor):
        if sample_id.is_meta:
            raise InputError(
                f"{name}: a meta tensor has no value to use as an id; pass the id itself (int or str)"
            )
        if (
            sample_id.numel() != 1
            or sample_id.is_floating_point()
            or sample_id.is_complex()
            or sample_id.dtype == torch.bool
        ):
            raise InputError(
                f"{name}: a tensor id must hold one integer, got a {str(sample_id.dtype)[6:]} tensor of "
                f"shape {tuple(sample_id.shape)}; pass ints or strings"
            )
        sample_id = int(sample_id.item())
    elif not isinstance(sample_id, (str, bytes, int, os.PathLike)) and hasattr(sample_id, "__index__"):
        sample_id = operator.index(sample_id)  # NumPy integers
    if isinstance(sample_id, bool) or not isinstance(sample_id, (str, bytes, int, os.PathLike)):
        # None, floats and other objects would be matched by their text ("None", "1.0" != 1): refuse them
        raise InputError(
            f"{name}: expected str or int sample ids, got {type(sample_id).__name__} {sample_id!r}"[:300]
        )
    if isinstance(sample_id, int):
        if not -(1 << 63) <= sample_id < (1 << 63):
            shown = str(sample_id) if len(str(sample_id)) < 40 else str(sample_id)[:36] + "..."
            raise InputError(
                f"{name}: the integer id {shown} does not fit in 64 bits (ids must be below 2**63); "
                "pass such ids as strings, e.g. ids=[str(i) for i in ids]"
            )
        return int(sample_id)
    # surrogateescape: a file name that is not valid UTF-8 (os.fsdecode gives lone surrogates) still has an id
    digest = hashlib.blake2b(str(sample_id).encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def hash_ids(ids: Any, n: int) -> tuple[list[int], list[str]]:
    """``(hashed ids, their texts)`` of the ``n`` samples of one update; unnamed samples (``ids=None``) all
    get :data:`UNNAMED_ID` (never de-duplicated). Integer ids are kept by value, other ids are hashed and
    masked to non-negative values (negatives are reserved for unnamed samples); an id repeated within the
    update is an ``InputError``.

    >>> hash_ids([3, torch.tensor(5)], 2)
    ([3, 5], ['3', '5'])
    >>> hash_ids(None, 2)
    ([-1, -1], ['', ''])
    """
    if ids is None:
        return [UNNAMED_ID] * n, [""] * n
    if isinstance(ids, torch.Tensor):
        if ids.is_meta:
            raise InputError("ids: a meta tensor has no values to use as ids; pass the ids themselves")
        ids = [ids] if ids.ndim == 0 else list(ids.reshape(-1).unbind(0)) if ids.ndim == 1 else [ids]
    else:
        ids = list(ids) if not isinstance(ids, (str, bytes)) else [ids]
    if len(ids) != n:
        raise InputError(f"ids: got {len(ids)} ids for {n} samples; pass one id per candidate")
    out, labels = [], []
    first: dict[int, int] = {}
    for j, i in enumerate(ids):
        h = hash_id(i, name=f"ids[{j}]")
        if isinstance(i, torch.Tensor) or (
            not isinstance(i, (str, bytes, os.PathLike)) and hasattr(i, "__index__")
        ):
            if h < 0:
                raise InputError(f"ids[{j}]: integer ids must be >= 0, got {h}")
            text = str(h)  # integers by value: tensor(3) and 3 are the same id
        else:
            h = h & ((1 << 62) - 1)  # keep named ids non-negative: negatives are reserved for unnamed samples
            text = str(i)
        if h in first:
            raise InputError(
                f"ids: {text!r} appears twice in one update (positions {first[h]} and {j}); "
                "every sample needs its own id"
            )
        first[h] = j
        out.append(h)
        labels.append(text)
    return out, labels


def keep_index(ids: torch.Tensor) -> torch.Tensor:
    """Positions to keep: every unnamed sample (id < 0, :data:`UNNAMED_ID`) and the first occurrence of every
    named id (the copies a distributed sampler pads in), in their original order.

    >>> keep_index(torch.tensor([7, -1, 3, 7, -1, 3])).tolist()  # the second 7 and 3 are padded copies
    [0, 1, 2, 4]
    """
    positions = torch.arange(ids.numel(), device=ids.device)
    named = ids >= 0
    if not bool(named.any()):
        return positions
    uniq, inverse = torch.unique(ids[named], return_inverse=True)
    if uniq.numel() == int(named.sum()):
        return positions
    pos_named = positions[named]
    first = torch.full((uniq.numel(),), ids.numel(), dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, inverse, pos_named, reduce="amin")
    return torch.sort(torch.cat([positions[~named], first])).values


def drop_duplicate_ids(scores: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the first occurrence of every named id (distributed samplers pad by repeating samples) and every
    unnamed sample: ``(scores, ids)`` at :func:`keep_index`.

    >>> scores, ids = drop_duplicate_ids(torch.tensor([0.5, 1.5, 2.5]), torch.tensor([4, -1, 4]))
    >>> scores.tolist(), ids.tolist()
    ([0.5, 1.5], [4, -1])
    """
    if ids.numel() == 0:
        return scores, ids
    keep = keep_index(ids)
    if keep.numel() == ids.numel():
        return scores, ids
    return scores[keep], ids[keep]


#: two copies of one named sample (a DistributedSampler's padding, scored on two processes) agree to float32
#: rounding of the score's last reductions: 64 units in the last place of float32, relative and absolute
COPY_TOLERANCE = 64 * float(torch.finfo(torch.float32).eps)


def conflicting_ids(ids: torch.Tensor, rows: list[torch.Tensor]) -> torch.Tensor:
    """The named ids whose copies disagree: the same id on two samples whose per-sample values (``rows``,
    each ``[N, ...]`` aligned with ``ids``) differ beyond :data:`COPY_TOLERANCE`: two sources that named
    different samples alike (a per-process counter), not a sampler's padded copy. Sorted, unique.

    >>> ids = torch.tensor([0, 1, 0, 1, -1, -1])
    >>> conflicting_ids(ids, [torch.tensor([5.0, 6.0, 5.0, 7.0, 1.0, 2.0])]).tolist()  # id 1: 6 vs 7
    [1]
    """
    named = ids >= 0
    n_named = int(named.sum())
    if n_named < 2:
        return ids.new_empty(0)
    uniq, inverse = torch.unique(ids[named], return_inverse=True)
    if uniq.numel() == n_named:
        return ids.new_empty(0)
    order = torch.arange(n_named, device=ids.device)
    first = torch.full((uniq.numel(),), n_named, dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, inverse, order, reduce="amin")[inverse]
    same = torch.ones(n_named, dtype=torch.bool, device=ids.device)
    for r in rows:
        r = r[named]
        a, b = r.reshape(n_named, -1), r[first].reshape(n_named, -1)
        if r.is_floating_point():
            a, b = a.double(), b.double()
            ok = torch.isclose(a, b, rtol=COPY_TOLERANCE, atol=COPY_TOLERANCE, equal_nan=True)
        else:
            ok = a == b
        same &= ok.all(1)
    return torch.unique(ids[named][~same])


def collision_message(label: str, action: str, shown: list[str], count: int) -> str:
    """The one line for ids that name different samples in two sources (:func:`conflicting_ids`): the
    metric, the step, the count, at most three of the ids and the fix.

    >>> line = collision_message("psnr", "merge_state", ["s1", "s2", "s3", "s4"], 4)
    >>> line.startswith("psnr: merge_state: 4 sample id(s) "), "(first: s1, s2, s3)" in line, "s4" in line
    (True, True, False)
    """
    return (
        f"{label}: {action}: {count} sample id(s) name different samples in different sources (first: "
        f"{', '.join(shown[:3])}); each id must name one sample across every process and metric merged: "
        "prefix per-process ids with the rank, e.g. ids=[f'rank{rank}-{i}' for i in local_ids] "
        "(copies a DistributedSampler pads in have equal scores and count once)"
    )
