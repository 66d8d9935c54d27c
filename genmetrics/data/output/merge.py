"""Merging results files (ranks of a sharded run, a resumed run) into one, each key once (:func:`merge_results`)."""

from __future__ import annotations

import os
from collections.abc import Iterable
from typing import Any

from genmetrics.data.output.atomic import atomic_write_text
from genmetrics.data.output.rows import dumps_line, read_results


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
