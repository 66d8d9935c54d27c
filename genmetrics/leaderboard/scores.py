"""The scores of a run in columns: one float64 array per (column, generator), aligned with the plan's samples,
so merging and summarising a run of any size never holds its rows (:class:`ScoreTable`).

Memory: 9 bytes per planned row (the score and its state) and an id index per generator (shared by the
metrics with the same samples); set-level rows (one per generator and column) are kept as they are.
:class:`KeySet` holds which rows a run has (finished, written) in one byte per planned row.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from typing import Any

import numpy as np

from genmetrics.core.registry import Granularity
from genmetrics.leaderboard.plan import SET_ID, Plan

__all__ = ["MISSING", "FINITE", "NOT_FINITE", "KeySet", "ScoreTable"]

#: states of a planned row: no row, a finite score, a row whose score is not a finite number (null, nan...)
MISSING, FINITE, NOT_FINITE = 0, 1, 2


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


class ScoreTable:
    """Every planned ``(generator, column, id)`` at a position in the canonical order of ``plan.keys()``
    (:meth:`position`), its score in a float64 array and its state (:data:`MISSING`, :data:`FINITE`,
    :data:`NOT_FINITE`); set-level rows kept whole (:meth:`set_row`). Rows outside the plan are left out;
    a key given twice keeps the last row (:meth:`put`), as a dict keyed by it would.

    >>> import tempfile
    >>> from pathlib import Path
    >>> from genmetrics.leaderboard import build_plan, load_config
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    >>> t = ScoreTable.from_rows(plan, [{"generator": "copy", "metric": "psnr", "id": "001", "score": 40.0},
    ...                                 {"generator": "copy", "metric": "psnr", "id": "x", "score": 1.0}])
    >>> t.size, t.position(("copy", "psnr", "001")), t.position(("copy", "psnr", "x"))
    (6, 4, None)
    >>> ids, values = t.finite("psnr", "copy")
    >>> ids, values.tolist(), t.counts("psnr", "copy")
    (['001'], [40.0], (1, 0, 3))
    """

    def __init__(self, plan: Plan):
        self.plan = plan
        # (column, generator) -> (start, ids of the block or None for a set-level column, id -> index)
        self._blocks: dict[tuple[str, str], tuple[int, list[str] | None, dict[str, int] | None]] = {}
        shared: dict[str, list[tuple[list[str], dict[str, int]]]] = {}
        start = 0
        names = [g.name for g in plan.generators]
        for mp in plan.metrics:
            # the plan's generators in its order (samples of a generator it does not name: after them)
            gens = names + [g for g in mp.samples if g not in names]
            for c in mp.columns:
                for g in gens:
                    if mp.level is Granularity.SET:
                        self._blocks[(c.name, g)] = (start, None, None)
                        start += 1
                        continue
                    ids = [s.id for s in mp.samples.get(g, [])]
                    index = next((ix for known, ix in shared.get(g, []) if known == ids), None)
                    if index is None:  # metrics with the same samples share one index
                        index = {i: k for k, i in enumerate(ids)}
                        shared.setdefault(g, []).append((ids, index))
                    self._blocks[(c.name, g)] = (start, ids, index)
                    start += len(ids)
        self.size = start
        self.values = np.full(start, np.nan)
        self.state = np.zeros(start, dtype=np.uint8)
        self._set_rows: dict[int, dict[str, Any]] = {}
        self._set_starts = {start for start, ids, _ in self._blocks.values() if ids is None}

    @classmethod
    def from_rows(cls, plan: Plan, rows: Iterable[dict[str, Any]]) -> ScoreTable:
        """The table of ``rows`` (any iterable: a list, or rows read one at a time)."""
        table = cls(plan)
        for r in rows:
            table.put(table.position((str(r.get("generator")), str(r.get("metric")), str(r.get("id")))), r)
        return table

    def position(self, key: tuple[str, ...]) -> int | None:
        """The place of ``(generator, column, id)`` in ``plan.keys()`` (``None``: not a planned key)."""
        g, col, sid = key
        block = self._blocks.get((col, g))
        if block is None:
            return None
        start, _, index = block
        if index is None:
            return start if sid == SET_ID else None
        k = index.get(sid)
        return None if k is None else start + k

    def put(self, pos: int | None, row: dict[str, Any]) -> None:
        """Record ``row`` at ``pos`` (from :meth:`position`; ``None`` is left out)."""
        if pos is None:
            return
        if pos in self._set_starts:
            self._set_rows[pos] = row
            return
        s = row.get("score")
        if isinstance(s, (int, float)) and _finite(s):
            self.values[pos], self.state[pos] = float(s), FINITE
        else:
            self.values[pos], self.state[pos] = np.nan, NOT_FINITE

    def _block(self, column: str, generator: str) -> tuple[int, list[str], dict[str, int]]:
        start, ids, index = self._blocks.get((column, generator), (0, [], {}))
        assert ids is not None and index is not None, f"{column} is a set-level column"
        return start, ids, index

    def set_row(self, column: str, generator: str) -> dict[str, Any] | None:
        """The ``__set__`` row of a set-level column for ``generator`` (``None``: none)."""
        block = self._blocks.get((column, generator))
        return None if block is None else self._set_rows.get(block[0])

    def finite(self, column: str, generator: str) -> tuple[list[str], np.ndarray]:
        """``(ids, scores)`` of the finite scores of a per-sample column, in the plan's sample order."""
        start, ids, _ = self._block(column, generator)
        ok = np.flatnonzero(self.state[start : start + len(ids)] == FINITE)
        return [ids[k] for k in ok], self.values[start + ok]

    def counts(self, column: str, generator: str) -> tuple[int, int, int]:
        """``(finite, present but not finite, expected)`` rows of a per-sample column."""
        start, ids, _ = self._block(column, generator)
        st = self.state[start : start + len(ids)]
        return int((st == FINITE).sum()), int((st == NOT_FINITE).sum()), len(ids)

    def value(self, column: str, generator: str, sid: str) -> float | None:
        """The finite score of one sample (``None``: no row, or not finite)."""
        block = self._blocks.get((column, generator))
        if block is None or block[2] is None:
            return None
        k = block[2].get(sid)
        if k is None or self.state[block[0] + k] != FINITE:
            return None
        return float(self.values[block[0] + k])

    def paired(self, column: str, a: str, b: str) -> tuple[np.ndarray, np.ndarray]:
        """The finite scores of generators ``a`` and ``b`` on the ids both have, ids in sorted order."""
        sa, ids_a, ia = self._block(column, a)
        sb, ids_b, ib = self._block(column, b)
        fa, fb = self.state[sa : sa + len(ids_a)] == FINITE, self.state[sb : sb + len(ids_b)] == FINITE
        shared = sorted(i for k, i in enumerate(ids_a) if fa[k] and (j := ib.get(i)) is not None and fb[j])
        pa = np.fromiter((sa + ia[i] for i in shared), dtype=np.int64, count=len(shared))
        pb = np.fromiter((sb + ib[i] for i in shared), dtype=np.int64, count=len(shared))
        return self.values[pa], self.values[pb]


class KeySet:
    """A set of ``(generator, column, id)`` keys in one byte per planned key (a flag at its
    :meth:`ScoreTable.position`), keys outside the plan in a plain set: what a run keeps of the rows it has
    finished or written, instead of a tuple per row (about 150 bytes).

    >>> import tempfile
    >>> from genmetrics.leaderboard import build_plan, load_config
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    >>> done = KeySet(ScoreTable(plan))
    >>> done.add(("copy", "psnr", "001")); done.add(("copy", "psnr", "001")); done.add(("x", "psnr", "1"))
    >>> len(done), ("copy", "psnr", "001") in done, ("copy", "psnr", "000") in done, ("x", "psnr", "1") in done
    (2, True, False, True)
    """

    def __init__(self, table: ScoreTable, keys: Iterable[tuple[str, ...]] = ()):
        self._position = table.position
        self._flags = np.zeros(table.size, dtype=bool)
        self._other: set[tuple[str, ...]] = set()
        self._n = 0
        for k in keys:
            self.add(k)

    def add(self, key: tuple[str, ...]) -> None:
        """Add ``key`` (a tuple of strings; adding it again changes nothing)."""
        pos = self._position(key)
        if pos is None:
            self._other.add(key)
        elif not self._flags[pos]:
            self._flags[pos] = True
            self._n += 1

    def __contains__(self, key: object) -> bool:
        if not isinstance(key, tuple) or len(key) != 3:
            return False
        pos = self._position(key)
        return key in self._other if pos is None else bool(self._flags[pos])

    def __len__(self) -> int:
        return self._n + len(self._other)
