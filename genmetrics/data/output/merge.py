"""Merging results files (ranks of a sharded run, a resumed run) into one, each key once: :func:`merge_results`
(any order, the rows in memory) and :func:`merge_in_order` (a known order of keys, streamed: memory of a few
numbers per key, never the rows)."""

from __future__ import annotations

import contextlib
import json
import os
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any

import numpy as np

from genmetrics.data.output.atomic import atomic_output, atomic_write_text
from genmetrics.data.output.rows import dumps_line, iter_results, read_results


def merge_results(
    sources: Iterable[str | os.PathLike],
    dest: str | os.PathLike,
    *,
    key: Iterable[str] = ("generator", "metric", "id"),
    sort_key: Any = None,
    root: str | os.PathLike | None = None,
) -> list[dict[str, Any]]:
    """Union of the rows of several results files, written atomically to ``dest``.

    Torn last lines are ignored, the first row of each key wins (so a row is never duplicated), and
    ``sort_key(row)``, when given, orders the result (e.g. the canonical order of a run, so a sharded or
    resumed run writes the same file as an uninterrupted one). ``dest`` may be one of the sources.

    >>> import tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as d:
    ...     a, b = Path(d) / "rank-0.jsonl", Path(d) / "rank-1.jsonl"
    ...     _ = a.write_text(dumps_line({"generator": "g", "metric": "psnr", "id": "1", "score": 1}) + "\\n")
    ...     _ = b.write_text("".join(dumps_line({"generator": "g", "metric": "psnr", "id": i, "score": 2}) + "\\n"
    ...                              for i in ("0", "1")))  # id "1" again: the first source wins
    ...     rows = merge_results([a, b], Path(d) / "results.jsonl", sort_key=lambda r: r["id"])
    >>> [(r["id"], r["score"]) for r in rows]
    [('0', 2), ('1', 1)]
    """
    fields = tuple(key)
    seen: set[tuple] = set()
    rows: list[dict[str, Any]] = []
    for src in sources:
        for r in read_results(src):
            k = tuple(str(r.get(f)) for f in fields)
            if k not in seen:
                seen.add(k)
                rows.append(r)
    if sort_key is not None:
        rows.sort(key=sort_key)
    atomic_write_text(dest, "".join(dumps_line(r) + "\n" for r in rows), root=root)
    return rows


def merge_in_order(
    sources: Iterable[str | os.PathLike],
    dest: str | os.PathLike,
    position: Callable[[tuple[str, ...]], int | None],
    size: int,
    *,
    key: Iterable[str] = ("generator", "metric", "id"),
    visit: Callable[[int | None, dict[str, Any]], None] | None = None,
    root: str | os.PathLike | None = None,
) -> int:
    """:func:`merge_results` where the order is given as ``position(key) -> 0 .. size - 1`` (``None``: a key
    outside it, written after the others in the order read), streamed: the sources are read once line by line
    and each kept row is read again from its source when ``dest`` is written, so memory is a source index and
    a byte offset per position (9 bytes) plus the keys outside the order, never the rows. Each row kept (the
    first of its key) is passed to ``visit(position, row)`` once. ``dest`` may be one of the sources. Returns
    the number of rows written. ``dest`` is byte for byte what :func:`merge_results` writes with
    ``sort_key=position`` (keys outside the order last).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     a, b = Path(d) / "rank-0.jsonl", Path(d) / "rank-1.jsonl"
    ...     _ = a.write_text(dumps_line({"generator": "g", "metric": "psnr", "id": "1", "score": 1}) + "\\n")
    ...     _ = b.write_text("".join(dumps_line({"generator": "g", "metric": "psnr", "id": i, "score": 2}) + "\\n"
    ...                              for i in ("0", "1")))  # id "1" again: the first source wins
    ...     n = merge_in_order([a, b], Path(d) / "results.jsonl", lambda k: int(k[2]), 2)
    ...     lines = (Path(d) / "results.jsonl").read_text().splitlines()
    >>> n, [json.loads(x)["score"] for x in lines]
    (2, [2, 1])
    """
    fields = tuple(key)
    paths = [Path(s) for s in sources]
    src = np.full(size, -1, dtype=np.int16 if len(paths) < 2**15 else np.int64)
    offset = np.zeros(size, dtype=np.int64)
    outside: dict[tuple[str, ...], tuple[int, int]] = {}  # keys outside the order, first seen first
    for k, path in enumerate(paths):
        for row, off in iter_results(path):
            kk = tuple(str(row.get(f)) for f in fields)
            pos = position(kk)
            if pos is None:
                if kk in outside:
                    continue
                outside[kk] = (k, off)
            elif src[pos] >= 0:
                continue
            else:
                src[pos], offset[pos] = k, off
            if visit is not None:
                visit(pos, row)
    kept = np.flatnonzero(src >= 0)
    with contextlib.ExitStack() as stack, atomic_output(dest, root=root) as tmp:
        # a source that does not exist gave no rows (iter_results), so no kept row points into it
        files = [stack.enter_context(open(p, "rb")) if p.exists() else None for p in paths]
        out = stack.enter_context(open(tmp, "w", encoding="utf-8", newline="\n"))
        for k, off in _locations(src, offset, kept, outside):
            f = files[k]
            assert f is not None  # a kept row was read from this file
            f.seek(off)
            # parsed and written again as merge_results does (a BOM on a first line dropped)
            out.write(dumps_line(json.loads(f.readline().decode("utf-8-sig"))) + "\n")
    return len(kept) + len(outside)


def _locations(
    src: np.ndarray, offset: np.ndarray, kept: np.ndarray, outside: dict[tuple[str, ...], tuple[int, int]]
) -> Iterable[tuple[int, int]]:
    """``(source, offset)`` of every kept row: the ordered positions, then the keys outside the order."""
    for i in kept:
        yield int(src[i]), int(offset[i])
    yield from outside.values()
