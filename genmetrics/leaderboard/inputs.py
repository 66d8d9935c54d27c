"""What each result row was computed from, by content: the ``input`` hash of a row (candidate, its
reference(s) or the real set, its condition text), so a resumed run rescores exactly the rows whose files
changed (even under the same names and sizes)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

from genmetrics.core.registry import Granularity
from genmetrics.data.output.hashes import HashCache
from genmetrics.leaderboard.plan import SET_ID, Column, MetricPlan, Plan, Sample

#: the run folder's cache of file hashes (path, size, mtime, ctime, inode -> sha256); safe to delete
HASHES = ".genmetrics.hashes.json"
__all__ = ["HASHES", "InputHashes"]


class InputHashes:
    """sha256 over the bytes of the candidate, its reference(s) (or the whole real set) and the condition
    text of each planned row. File hashes are computed once per file, cached by path, size, mtime, ctime and
    inode in ``cache_file`` (the run folder's ``.genmetrics.hashes.json``), so a resumed run does not read
    unchanged files again.

    >>> import tempfile
    >>> from genmetrics.leaderboard import build_plan, load_config
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    ...     key = ("copy", "psnr", "000")  # (generator, column, sample id)
    ...     before = InputHashes(plan).of_key(key)
    ...     same = before == InputHashes(plan).of_key(key)
    ...     _ = (Path(d) / "copy" / "000.png").write_bytes(b"another file")  # the candidate changes
    ...     changed = before != InputHashes(plan).of_key(key)
    >>> same, changed
    (True, True)
    """

    def __init__(self, plan: Plan, cache_file: Path | None = None, *, root: str | os.PathLike | None = None):
        self.plan = plan
        self.hash = HashCache(cache_file, root=root)
        self._real: dict[int, str] = {}
        self._index: dict[tuple[str, str, str], tuple[MetricPlan, Column, Sample | None]] | None = None

    def save(self) -> None:
        """Keep the file hashes in the cache file (a warning, never an error, when it cannot be written)."""
        self.hash.save()

    def _files(self, files: list[Path]) -> str:
        h = hashlib.sha256()
        for f in sorted(files, key=lambda p: (p.stem, p.name)):
            h.update(f"{f.stem}\t{self.hash(f)}\n".encode())
        return h.hexdigest()[:16]

    def real(self, mp: MetricPlan) -> str:
        """The hash of ``mp``'s real set (computed once per metric plan)."""
        k = id(mp)
        if k not in self._real:
            self._real[k] = self._files(list(mp.real or []))
        return self._real[k]

    def sample(self, mp: MetricPlan, col: Column, s: Sample) -> str:
        """The ``input`` of one per-sample row."""
        h = hashlib.sha256(self.hash(s.candidate).encode())
        refs = s.reference if isinstance(s.reference, list) else [s.reference] if s.reference else []
        for r in refs:
            h.update(b"|r" + self.hash(r).encode())
        if "real" in mp.uses:
            h.update(b"|real" + self.real(mp).encode())
        if col.aspect is None and s.condition is not None:
            h.update(b"|c" + s.condition.encode())
        return h.hexdigest()[:16]

    def set_level(self, mp: MetricPlan, generator: str) -> str:
        """The ``input`` of a set-level row: the real set and the generator's whole folder."""
        both = f"{self.real(mp)}|{self._files(self.plan.images[generator])}"
        return hashlib.sha256(both.encode()).hexdigest()[:16]

    def of_key(self, key: tuple[str, str, str]) -> str | None:
        """The ``input`` of the planned row ``(generator, column, id)``; ``None`` when it is not planned."""
        if self._index is None:
            self._index = {}
            for mp in self.plan.metrics:
                for col in mp.columns:
                    for g in self.plan.generators:
                        if mp.level is Granularity.SET:
                            self._index[(g.name, col.name, SET_ID)] = (mp, col, None)
                        else:
                            for s in mp.samples[g.name]:
                                self._index[(g.name, col.name, s.id)] = (mp, col, s)
        hit = self._index.get(key)
        if hit is None:
            return None
        mp, col, sample = hit
        return self.set_level(mp, key[0]) if sample is None else self.sample(mp, col, sample)
