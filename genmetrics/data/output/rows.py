"""Result rows: the JSONL row format (:func:`dumps_line`), the row check (:func:`check_result_row`), reading a
results file that may end in a torn line (:func:`read_results`) and the append-only :class:`ResultsWriter` that
resumes without loss or duplicates."""

from __future__ import annotations

import json
import os
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

from genmetrics.data.jsonl import decode_line, finite_number, parse_line
from genmetrics.data.output.atomic import atomic_output, open_append
from genmetrics.data.output.disk import GENERIC_THEN, disk_full_named, is_disk_full
from genmetrics.data.output.write_rule import destination
from genmetrics.data.text.jsonable import jsonable
from genmetrics.errors import InputError


def dumps_line(obj: Any) -> str:
    """One compact JSON line (the JSONL row format), tensors and paths converted.

    >>> dumps_line({"generator": "blur", "id": "000", "score": 0.5})
    '{"generator":"blur","id":"000","score":0.5}'
    """
    return json.dumps(jsonable(obj), separators=(",", ":"))


RowCheck = Callable[[Any], "str | None"]


def _is_number(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool)


def check_result_row(row: Any, key: Iterable[str] = ("generator", "metric", "id")) -> str | None:
    """Why ``row`` is not a result row (``None`` when it is): a JSON object with string key fields and a
    ``score`` that is a finite number (or null), ``scores`` a list of numbers when present.

    >>> check_result_row({"generator": "blur", "metric": "psnr", "id": "000", "score": 31.5}) is None
    True
    >>> check_result_row({"generator": "blur", "metric": "psnr", "id": "000", "score": "high"}) is not None
    True
    """
    if not isinstance(row, dict):
        return f"expected a JSON object (a result row), got {type(row).__name__}"
    for k in key:
        v = row.get(k)
        if not isinstance(v, str) or not v:
            return f"{k!r} should be a non-empty string, got {v!r}"[:200]
    if "score" not in row:
        return "no 'score'"
    s = row["score"]
    if s is not None and not finite_number(s):  # also an integer too large for a float
        return f"'score' should be a finite number, got {s!r}"[:200]
    if "scores" in row and not (
        isinstance(row["scores"], list) and all(_is_number(x) for x in row["scores"])
    ):
        return "'scores' should be a list of numbers"
    return None


def read_results(path: str | os.PathLike, *, check: RowCheck | None = None) -> list[dict[str, Any]]:
    """Rows of a results JSONL file; a torn (unterminated or unparsable) last line is ignored.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "r.jsonl").write_text('{"id": "a", "score": 1}\\n{"id": "b", "sco')  # killed mid-write
    ...     read_results(Path(d) / "r.jsonl")
    [{'id': 'a', 'score': 1}]

    With ``check`` (e.g. :func:`check_result_row`), a line that parses but is not an acceptable row is
    refused with :class:`~genmetrics.errors.InputError` naming the file and line; it is never used."""
    return [row for row, _ in iter_results(path, check=check)]


def iter_results(path: str | os.PathLike, *, check: RowCheck | None = None) -> Iterator[tuple[Any, int]]:
    """:func:`read_results` one row at a time: ``(row, byte offset of its line)``, reading the file line by line
    (memory of one line, whatever the size of the file), with the same rules for a torn last line and
    ``check``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "r.jsonl").write_text('{"id": "a"}\\n\\n{"id": "b"}\\n{"id"')
    ...     list(iter_results(Path(d) / "r.jsonl"))
    [({'id': 'a'}, 0), ({'id': 'b'}, 13)]
    """
    p = Path(path)
    if not p.exists():
        return
    with open(p, "rb") as f:
        offset, n = 0, 0
        cur = f.readline()
        while cur:
            nxt = f.readline()
            n += 1
            raw = cur[:-1] if cur.endswith(b"\n") else cur
            if raw.strip():
                try:
                    row = parse_line(decode_line(raw, p, n), p, n)
                except InputError as e:
                    # the last line, or the one before an unterminated last line (possibly torn by a kill, even
                    # inside a character): the end of the rows
                    if not nxt or not nxt.endswith(b"\n"):
                        return
                    raise InputError(
                        f"{p}:{n}: corrupt results line (not the last one: {str(e).split(': ', 1)[-1]}); fix or "
                        "delete the line, or run without --resume to start afresh"
                    ) from None
                if check is not None:
                    why = check(row)
                    if why:
                        raise InputError(
                            f"{p}:{n}: not a result row of this run ({why}); fix or delete the line, or run "
                            "without --resume to start afresh"
                        )
                yield row, offset
            offset += len(cur)
            cur = nxt


class ResultsWriter:
    """Append-only JSONL with one row per key; flushes (and fsyncs) every :meth:`write` call.

    With ``resume=True`` existing rows are kept, a torn last line is cut off, and :meth:`done` tells
    which keys are finished so they are skipped; writing a key twice is refused. ``keys``: where the keys
    written are held (default: a ``set``; anything with ``add``, ``in`` and ``len``, e.g. a
    :class:`~genmetrics.leaderboard.scores.KeySet` of one byte per planned row). The file is read line by line,
    never held.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     w = ResultsWriter(Path(d) / "results.jsonl")
    ...     _ = w.write([{"generator": "blur", "metric": "psnr", "id": "000", "score": 31.5}])
    ...     w.close()
    ...     resumed = ResultsWriter(Path(d) / "results.jsonl", resume=True)
    ...     done = resumed.done({"generator": "blur", "metric": "psnr", "id": "000"}), resumed.n_done
    ...     resumed.close()
    >>> done
    (True, 1)
    """

    def __init__(
        self,
        path: str | os.PathLike,
        *,
        key: Iterable[str] = ("generator", "metric", "id"),
        resume: bool = False,
        root: str | os.PathLike | None = None,
        keys: Any = None,
    ):
        self.path = destination(path, root=root)
        self.root = root
        self.key_fields = tuple(key)
        self._done: Any = set() if keys is None else keys
        if resume and self.path.exists():
            n_rows = 0
            for row, _ in iter_results(self.path):
                self._done.add(self.key(row))
                n_rows += 1
            self._rewrite_clean(n_rows)
        elif self.path.exists():
            self.path.unlink()
        self._f = open_append(self.path, root=root)

    def _rewrite_clean(self, n_rows: int) -> None:
        """Rewrite the file without a torn last line (streamed: a line at a time) when it has one."""
        lines, last = 0, b"\n"
        with open(self.path, "rb") as f:
            for ln in f:
                lines += bool(ln.strip())
                last = ln
        if last.endswith(b"\n") and lines == n_rows:
            return
        with (
            atomic_output(self.path, root=self.root) as tmp,
            open(tmp, "w", encoding="utf-8", newline="\n") as out,
        ):
            for row, _ in iter_results(self.path):
                out.write(dumps_line(row) + "\n")

    def key(self, row: dict[str, Any]) -> tuple:
        """The key of ``row``: its ``key_fields`` as strings."""
        return tuple(str(row.get(k)) for k in self.key_fields)

    def done(self, row_or_key: dict[str, Any] | tuple) -> bool:
        """Whether a row with this key is already in the file (written now or by an earlier run)."""
        k = row_or_key if isinstance(row_or_key, tuple) else self.key(row_or_key)
        return k in self._done

    @property
    def n_done(self) -> int:
        """How many distinct keys the file holds."""
        return len(self._done)

    def write(self, rows: Iterable[dict[str, Any]]) -> int:
        """Append the rows whose key is not in the file yet, flushed and fsynced in one write; returns how
        many were written. A full disk is one error naming the folder, the rows already there kept."""
        lines, n = [], 0
        for r in rows:
            k = self.key(r)
            if k in self._done:
                continue
            self._done.add(k)
            lines.append(dumps_line(r) + "\n")
            n += 1
        if lines:
            kept = f"the rows already in {self.path.name} are kept (a resume continues after them)"
            with disk_full_named(self.path.parent, kept=kept, then=GENERIC_THEN):
                try:
                    self._f.write("".join(lines))
                    self._f.flush()
                    os.fsync(self._f.fileno())
                except OSError as e:
                    e.filename = e.filename or str(self.path)
                    raise
        return n

    def close(self) -> None:
        """Close the file (a full disk at close leaves the rows as they are)."""
        if not self._f.closed:
            try:
                self._f.close()
            except (
                OSError
            ) as e:  # the unwritten tail of a failed write (full disk): the rows stay as they are
                if not is_disk_full(e):
                    raise

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()
