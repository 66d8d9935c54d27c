"""Batching shared by every family: fixed-size chunks with CUDA out-of-memory back-off, a safe starting
batch from a memory model and the device's memory, token-budget batches for samples of different sizes
(MIE), and a DataLoader path that decodes images in workers."""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterator, Sequence
from typing import Any, TypeVar

import torch

log = logging.getLogger(__name__)
T = TypeVar("T")


def _is_oom(err: BaseException) -> bool:
    if isinstance(err, torch.cuda.OutOfMemoryError):
        return True
    return isinstance(err, RuntimeError) and "out of memory" in str(err).lower()


def device_memory(device: Any = None) -> int | None:
    """Total bytes of a CUDA device (``None`` for the CPU or when CUDA is absent).

    >>> device_memory("cpu") is None
    True
    """
    dev = torch.device(device) if device is not None else None
    if dev is not None and dev.type != "cuda":
        return None
    if not torch.cuda.is_available():
        return None
    return int(torch.cuda.get_device_properties(dev if dev is not None else 0).total_memory)


def safe_batch_size(
    peak_bytes: Callable[[int], float],
    *,
    memory: int | None,
    max_batch_size: int,
    headroom: float = 0.9,
    min_batch_size: int = 1,
) -> int:
    """The largest batch in ``[min_batch_size, max_batch_size]`` whose predicted peak (``peak_bytes(b)``,
    e.g. :func:`genmetrics.backbones.memory_model.predict_memory`) fits in ``headroom * memory`` bytes.

    ``memory=None`` (CPU, or unknown) returns ``max_batch_size``; when even ``min_batch_size`` does not fit,
    ``min_batch_size`` (the out-of-memory back-off of :func:`map_batches` then decides). The predicted peak
    must grow with the batch (it is searched by bisection).

    >>> peak = lambda b: 4e9 + b * 1e9  # 4 GB of weights, 1 GB per item
    >>> safe_batch_size(peak, memory=24 * 10**9, max_batch_size=64)  # 4 + 17 <= 21.6 GB
    17
    >>> safe_batch_size(peak, memory=None, max_batch_size=64), safe_batch_size(peak, memory=10**9, max_batch_size=8)
    (64, 1)
    """
    if max_batch_size < min_batch_size or min_batch_size < 1:
        raise ValueError(
            f"need 1 <= min_batch_size <= max_batch_size, got {min_batch_size}, {max_batch_size}"
        )
    if memory is None:
        return max_batch_size
    budget = headroom * memory
    lo, hi = min_batch_size, max_batch_size
    if peak_bytes(lo) > budget:
        return min_batch_size
    while lo < hi:  # invariant: lo fits
        mid = (lo + hi + 1) // 2
        if peak_bytes(mid) <= budget:
            lo = mid
        else:
            hi = mid - 1
    return lo


def map_batches(
    fn: Callable[[slice], T],
    n: int,
    batch_size: int,
    *,
    min_batch_size: int = 1,
    peak_bytes: Callable[[int], float] | None = None,
    memory: int | None = None,
    device: Any = None,
) -> list[T]:
    """Call ``fn`` on consecutive slices covering ``range(n)`` and return the results in order.

    With ``peak_bytes`` (a memory model: predicted peak bytes for a batch) the first batch is the largest
    that fits the device's memory (:func:`safe_batch_size`; ``memory`` in bytes, else read from ``device``),
    at most ``batch_size``, instead of starting high. On a CUDA out-of-memory error the slice is retried
    with half the batch size (down to ``min_batch_size``); the smaller size is kept for the rest of the
    run. Every sample is scored exactly once and the order is kept.

    >>> map_batches(lambda s: (s.start, s.stop), 5, 2)
    [(0, 2), (2, 4), (4, 5)]
    >>> def scorer(s):  # runs out of memory on any slice longer than 2
    ...     if s.stop - s.start > 2:
    ...         raise RuntimeError("CUDA out of memory (simulated)")
    ...     return list(range(s.start, s.stop))
    >>> map_batches(scorer, 5, 4)  # backs off to 2, every sample once, in order
    [[0, 1], [2, 3], [4]]
    >>> peak = lambda b: 4e9 + b * 1e9  # a memory model: the first batch is the one that fits 8 GB
    >>> map_batches(lambda s: s.stop - s.start, 7, 32, peak_bytes=peak, memory=8 * 10**9)
    [3, 3, 1]
    """
    if batch_size < 1:
        raise ValueError(f"batch_size must be >= 1, got {batch_size}")
    if peak_bytes is not None:
        mem = memory if memory is not None else device_memory(device)
        batch_size = safe_batch_size(
            peak_bytes, memory=mem, max_batch_size=batch_size, min_batch_size=min(min_batch_size, batch_size)
        )
    out: list[T] = []
    start, bs = 0, batch_size
    while start < n:
        stop = min(n, start + bs)
        try:
            out.append(fn(slice(start, stop)))
        except Exception as err:  # noqa: BLE001 - re-raised unless it is an OOM we can back off from
            if not _is_oom(err) or bs <= min_batch_size:
                raise
            bs = max(min_batch_size, bs // 2)
            log.warning("CUDA out of memory at batch size %d; retrying with %d", stop - start, bs)
            if torch.cuda.is_available():
                torch.cuda.empty_cache()
            continue
        start = stop
    return out


def fixed_batches(items: Sequence[T], batch_size: int) -> Iterator[list[T]]:
    """Consecutive chunks of ``batch_size`` items (the last may be smaller).

    >>> list(fixed_batches("abcde", 2))
    [['a', 'b'], ['c', 'd'], ['e']]
    """
    for i in range(0, len(items), batch_size):
        yield list(items[i : i + batch_size])


def chunk_slices(n: int, size: int) -> list[slice]:
    """The slices of consecutive chunks of ``size`` over ``n`` items (the last may be smaller): the chunks of
    :func:`fixed_batches`, as slices, for indexing several aligned sequences at once.

    >>> chunk_slices(5, 2)
    [slice(0, 2, None), slice(2, 4, None), slice(4, 5, None)]
    >>> [list("abcde")[s] for s in chunk_slices(5, 2)] == list(fixed_batches("abcde", 2))
    True
    """
    return [slice(i, min(n, i + size)) for i in range(0, n, size)]


def token_budget_batches(
    costs: Sequence[int], budget: int, *, max_batch_size: int | None = None, sort: bool = True
) -> list[list[int]]:
    """Group sample indices into batches whose padded cost ``len(batch) * max(cost)`` stays within
    ``budget``. With ``sort=True`` samples of similar cost are grouped (less padding); the returned
    index lists still cover every sample exactly once. A sample larger than the budget gets a batch
    of its own.

    >>> costs = [10, 90, 12, 85, 200]
    >>> batches = token_budget_batches(costs, 200)
    >>> batches, sorted(i for b in batches for i in b) == list(range(5))
    ([[0, 2], [3, 1], [4]], True)
    """
    if budget < 1:
        raise ValueError(f"token budget must be >= 1, got {budget}")
    order = sorted(range(len(costs)), key=lambda i: (costs[i], i)) if sort else list(range(len(costs)))
    batches: list[list[int]] = []
    cur: list[int] = []
    cur_max = 0
    for i in order:
        c = int(costs[i])
        new_max = max(cur_max, c)
        too_big = cur and (
            new_max * (len(cur) + 1) > budget or (max_batch_size and len(cur) >= max_batch_size)
        )
        if too_big:
            batches.append(cur)
            cur, new_max = [], c
        cur.append(i)
        cur_max = new_max
    if cur:
        batches.append(cur)
    return batches


def padding_efficiency(costs: Sequence[int], batches: Sequence[Sequence[int]]) -> float:
    """Useful tokens over padded tokens for a batching of samples with the given costs.

    >>> costs = [10, 90, 12, 85]
    >>> padding_efficiency(costs, [[0, 1], [2, 3]]) == 197 / (2 * 90 + 2 * 85)  # useful / padded tokens
    True
    >>> round(padding_efficiency(costs, [[0, 2], [1, 3]]), 4)  # similar lengths together: less padding
    0.9657
    """
    useful = sum(int(costs[i]) for b in batches for i in b)
    padded = sum(len(b) * max(int(costs[i]) for i in b) for b in batches if b)
    return useful / padded if padded else 1.0


class _ImageFiles(torch.utils.data.Dataset):
    def __init__(self, paths: Sequence[Any], loader: Callable[[Any], Any]):
        self.paths, self.loader = list(paths), loader

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, i: int) -> tuple[int, Any]:
        try:
            return i, self.loader(self.paths[i])
        except Exception as err:  # noqa: BLE001 - reported to the caller, which decides to skip or stop
            return i, err


def iter_decoded(
    paths: Sequence[Any], loader: Callable[[Any], Any], *, batch_size: int = 32, num_workers: int = 0
) -> Iterator[list[tuple[int, Any]]]:
    """Decode files in DataLoader worker processes; yields lists of ``(index, decoded or exception)``
    in input order, so a bad file can be reported and skipped without losing the good ones.

    >>> def loader(name):
    ...     if name == "bad":
    ...         raise ValueError("cannot decode")
    ...     return name.upper()
    >>> [(i, str(x)) for batch in iter_decoded(["a", "bad", "c"], loader, batch_size=2) for i, x in batch]
    [(0, 'A'), (1, 'cannot decode'), (2, 'C')]
    """
    ds = _ImageFiles(paths, loader)
    dl = torch.utils.data.DataLoader(
        ds,
        batch_size=batch_size,
        num_workers=num_workers,
        collate_fn=list,
        shuffle=False,
        persistent_workers=False,
    )
    yield from dl
