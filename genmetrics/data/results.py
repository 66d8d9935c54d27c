"""Results that survive a crash: atomic JSON writes, an append-only JSONL writer that resumes
without loss or duplicates, and a run manifest."""

from __future__ import annotations

import json
import math
import os
import platform
import sys
import tempfile
import time
from collections.abc import Callable, Iterable
from pathlib import Path
from typing import Any


def _jsonable(x: Any) -> Any:
    torch = sys.modules.get("torch")  # a tensor can only exist if torch is imported; never import it here
    if torch is not None and isinstance(x, torch.Tensor):
        x = x.detach().cpu().tolist()
    if isinstance(x, float) and not math.isfinite(x):
        return None if math.isnan(x) else (1e308 if x > 0 else -1e308)
    if isinstance(x, dict):
        return {str(k): _jsonable(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_jsonable(v) for v in x]
    if hasattr(x, "item") and callable(x.item):
        try:
            return _jsonable(x.item())
        except (ValueError, TypeError):
            pass
    if isinstance(x, Path):
        return str(x)
    return x


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def atomic_write_text(path: str | os.PathLike, text: str) -> Path:
    """Write ``text`` to ``path`` atomically (temp file in the same folder, fsync, rename).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = atomic_write_text(Path(d) / "sub" / "a.txt", "hello")  # folders are created
    ...     p.read_text(), sorted(q.name for q in p.parent.iterdir())  # no temp file left behind
    ('hello', ['a.txt'])
    """
    p = Path(path)
    p.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=str(p.parent))
    try:
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, p)
    except BaseException:
        if os.path.exists(tmp):
            os.unlink(tmp)
        raise
    return p


def atomic_write_json(path: str | os.PathLike, obj: Any, *, indent: int = 2) -> Path:
    """:func:`atomic_write_text` of ``obj`` as indented JSON (tensors, paths and numpy values converted).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     json.loads(atomic_write_json(Path(d) / "a.json", {"path": Path("x.png"), "n": 2}).read_text())
    {'path': 'x.png', 'n': 2}
    """
    return atomic_write_text(path, json.dumps(_jsonable(obj), indent=indent, sort_keys=False) + "\n")


def dumps_line(obj: Any) -> str:
    """One compact JSON line (the JSONL row format), tensors and paths converted.

    >>> dumps_line({"generator": "blur", "id": "000", "score": 0.5})
    '{"generator":"blur","id":"000","score":0.5}'
    """
    return json.dumps(_jsonable(obj), separators=(",", ":"))


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
    if s is not None and not (_is_number(s) and math.isfinite(s)):
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
    from genmetrics.errors import InputError

    p = Path(path)
    if not p.exists():
        return []
    rows = []
    with open(p, encoding="utf-8") as f:
        lines = f.read().split("\n")
    for i, line in enumerate(lines):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            if i >= len(lines) - 2:  # the last line (possibly torn by a kill)
                break
            raise InputError(
                f"{p}:{i + 1}: corrupt results line (not the last one); fix or delete the line, or run "
                "without --resume to start afresh"
            ) from None
        if check is not None:
            why = check(row)
            if why:
                raise InputError(
                    f"{p}:{i + 1}: not a result row of this run ({why}); fix or delete the line, or run "
                    "without --resume to start afresh"
                )
        rows.append(row)
    return rows


def _sha256_file(path: str) -> str:
    import hashlib

    d = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            d.update(block)
    return d.hexdigest()[:16]


class HashCache:
    """sha256 (first 16 hex digits) of files' bytes, computed once per file and cached by absolute path,
    size, modification time, change time and inode (hashing is cheap next to decoding the image).

    With ``file`` the cache persists as JSON, so a resumed run does not read unchanged files again. A file
    replaced by another of the same size, even with its modification time set back (``cp -p``, ``rsync
    -t``), gets a new change time (ctime cannot be set by a program) or inode and is hashed again. An
    unreadable or torn cache file is ignored (hashes are computed afresh); the cache only saves reading,
    it never decides a result on its own.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     img = Path(d) / "a.png"
    ...     _ = img.write_bytes(b"abc")
    ...     cache = HashCache(Path(d) / "hashes.json")
    ...     h = cache(img)
    ...     cache.save()
    ...     again = HashCache(Path(d) / "hashes.json")(img)  # from the file, not re-read
    ...     _ = img.write_bytes(b"abd")  # same size, new content
    ...     changed = HashCache(Path(d) / "hashes.json")(img)
    >>> h == again, h == changed, len(h)
    (True, False, 16)
    """

    VERSION = 1

    def __init__(self, file: str | os.PathLike | None = None):
        self.file = Path(file) if file is not None else None
        self._known: dict[str, list[Any]] = {}
        self._dirty = False
        if self.file is not None:
            try:
                data = json.loads(self.file.read_text(encoding="utf-8"))
            except (OSError, ValueError):
                data = None
            if (
                isinstance(data, dict)
                and data.get("version") == self.VERSION
                and isinstance(data.get("files"), dict)
            ):
                self._known = {k: v for k, v in data["files"].items() if self._valid(v)}

    @staticmethod
    def _valid(v: Any) -> bool:
        return (
            isinstance(v, list)
            and len(v) == 5
            and all(type(x) is int for x in v[:4])
            and isinstance(v[4], str)
            and len(v[4]) == 16
        )

    def __call__(self, path: str | os.PathLike) -> str:
        p = os.path.abspath(os.fspath(path))
        st = os.stat(p)
        stamp = [st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino]
        hit = self._known.get(p)
        if hit is not None and hit[:4] == stamp:
            return hit[4]
        h = _sha256_file(p)
        self._known[p] = [*stamp, h]
        self._dirty = True
        return h

    def save(self) -> None:
        """Write the cache file (when there is one and something new was hashed)."""
        if self.file is not None and self._dirty:
            try:
                atomic_write_text(
                    self.file, json.dumps({"version": self.VERSION, "files": self._known}) + "\n"
                )
            except OSError as e:  # only a cost: a later resume reads the files again
                print(
                    f"warning: could not keep the input hashes in {str(self.file)!r} ({e.strerror or e}); a later "
                    "--resume reads the input files again (delete or free that path to keep them)",
                    file=sys.stderr,
                )
            self._dirty = False


_HASHES = HashCache()


def content_hash(path: str | os.PathLike) -> str:
    """sha256 (first 16 hex digits) of a file's bytes, cached in this process (see :class:`HashCache`).

    >>> import hashlib, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "a.png").write_bytes(b"abc")
    ...     content_hash(Path(d) / "a.png") == hashlib.sha256(b"abc").hexdigest()[:16]
    True
    """
    return _HASHES(path)


LOCK = ".genmetrics.lock"


class OutputLock:
    """An exclusive lock on an output folder while a run writes to it (``fcntl.flock`` on ``OUT/.genmetrics.lock``:
    released by the OS when the process ends, so a killed run leaves no stale lock). A second run on the
    same folder refuses with one line naming the holder.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     lock = OutputLock(Path(d))
    ...     try:
    ...         OutputLock(Path(d))  # a second run on the same folder
    ...     except Exception as e:
    ...         print(type(e).__name__, "in use by another run" in str(e))
    ...     lock.release()
    ...     OutputLock(Path(d)).release()  # free again
    InputError True
    """

    def __init__(self, out_dir: Path, *, flag: str = "--out"):
        self.path = Path(out_dir) / LOCK
        self._f = open(self.path, "a+", encoding="utf-8")
        try:
            import fcntl
        except ImportError:  # pragma: no cover - Windows: no advisory locks here; runs are not guarded
            return
        try:
            fcntl.flock(self._f.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            self._f.seek(0)
            holder = self._f.read().strip() or "another process"
            self._f.close()
            from genmetrics.errors import InputError

            raise InputError(
                f"{flag} {str(out_dir)!r} is in use by another run ({holder}); wait for it to finish or "
                f"choose another {flag} folder"
            ) from None
        self._f.seek(0)
        self._f.truncate()
        import socket

        self._f.write(
            f"pid {os.getpid()} on {socket.gethostname()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}"
        )
        self._f.flush()

    created_dir = False  # set by lock_output_folder when it made the folder for this run

    def release(self) -> None:
        if not self._f.closed:
            self._f.close()  # closing the descriptor releases the flock
            folder = self.path.parent
            if self.created_dir and [p.name for p in folder.iterdir()] == [LOCK]:
                self.path.unlink(
                    missing_ok=True
                )  # a run that failed before writing leaves no empty folder behind
                folder.rmdir()


def lock_output_folder(folder: str | os.PathLike, *, flag: str = "--out") -> OutputLock:
    """Create the output folder ``folder`` (given as ``flag``) and take its :class:`OutputLock`: a file in its
    place, a folder that cannot be created, or a second run writing there is refused with one line.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     lock = lock_output_folder(Path(d) / "report", flag="--out")
    ...     try:
    ...         lock_output_folder(Path(d) / "report", flag="--out")  # a second writer
    ...     except Exception as e:
    ...         print(str(e).startswith("--out"), "in use by another run" in str(e))
    ...     lock.release()  # nothing was written: the folder it made is removed again
    ...     gone = not (Path(d) / "report").exists()
    ...     lock_output_folder(d).release()  # a folder that was there before stays
    ...     gone, Path(d).is_dir()
    True True
    (True, True)
    """
    from genmetrics.errors import InputError

    out = Path(folder)
    if out.exists() and not out.is_dir():
        raise InputError(f"{flag} {str(out)!r} is a file; pass a folder")
    created = not out.exists()
    try:
        out.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(
            f"{flag} {str(out)!r} cannot be created ({e.strerror}); choose a writable folder"
        ) from None
    lock = OutputLock(out, flag=flag)
    lock.created_dir = created
    return lock


class ResultsWriter:
    """Append-only JSONL with one row per key; flushes (and fsyncs) every :meth:`write` call.

    With ``resume=True`` existing rows are kept, a torn last line is cut off, and :meth:`done` tells
    which keys are finished so they are skipped; writing a key twice is refused.

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
    ):
        self.path = Path(path)
        self.key_fields = tuple(key)
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._done: set[tuple] = set()
        if resume and self.path.exists():
            rows = read_results(self.path)
            self._rewrite_clean(rows)
            self._done = {self.key(r) for r in rows}
        elif self.path.exists():
            self.path.unlink()
        self._f = open(self.path, "a", encoding="utf-8")

    def _rewrite_clean(self, rows: list[dict[str, Any]]) -> None:
        with open(self.path, "rb") as f:
            data = f.read()
        if data and not data.endswith(b"\n") or len(rows) != sum(1 for ln in data.split(b"\n") if ln.strip()):
            atomic_write_text(self.path, "".join(dumps_line(r) + "\n" for r in rows))

    def key(self, row: dict[str, Any]) -> tuple:
        return tuple(str(row.get(k)) for k in self.key_fields)

    def done(self, row_or_key: dict[str, Any] | tuple) -> bool:
        k = row_or_key if isinstance(row_or_key, tuple) else self.key(row_or_key)
        return k in self._done

    @property
    def n_done(self) -> int:
        return len(self._done)

    def write(self, rows: Iterable[dict[str, Any]]) -> int:
        lines, n = [], 0
        for r in rows:
            k = self.key(r)
            if k in self._done:
                continue
            self._done.add(k)
            lines.append(dumps_line(r) + "\n")
            n += 1
        if lines:
            self._f.write("".join(lines))
            self._f.flush()
            os.fsync(self._f.fileno())
        return n

    def close(self) -> None:
        if not self._f.closed:
            self._f.close()

    def __enter__(self) -> ResultsWriter:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def package_versions(
    names: Iterable[str] = (
        "genmetrics",
        "torch",
        "torchvision",
        "open_clip_torch",
        "transformers",
        "peft",
        "accelerate",
        "torchmetrics",
        "numpy",
        "scipy",
        "pillow",
    ),
) -> dict[str, str | None]:
    """Installed versions of ``names`` (``None`` for a package that is not installed), for manifests.

    >>> v = package_versions(["genmetrics", "no-such-package"])
    >>> isinstance(v["genmetrics"], str), v["no-such-package"]
    (True, None)
    """
    from importlib.metadata import PackageNotFoundError, version

    out: dict[str, str | None] = {}
    for n in names:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            out[n] = None
    if out.get("genmetrics") is None and "genmetrics" in out:  # running from a source checkout
        import genmetrics

        out["genmetrics"] = f"{genmetrics.__version__} (source)"
    return out


def _command() -> str:
    """The command line, with ``python -m genmetrics`` for ``.../genmetrics/__main__.py``."""
    argv = list(sys.argv)
    if argv and Path(argv[0]).name == "__main__.py" and Path(argv[0]).parent.name == "genmetrics":
        argv[0] = "python -m genmetrics"
    return " ".join(argv)


def manifest(**extra: Any) -> dict[str, Any]:
    """Versions, platform, command and time, plus whatever the caller adds (options, weights, seed).

    >>> m = manifest(seed=0)
    >>> m["seed"], {"created", "versions"} <= set(m)
    (0, True)
    """
    return {
        "created": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "command": _command(),
        "python": sys.version.split()[0],
        "platform": platform.platform(),
        "versions": package_versions(),
        **extra,
    }


def merge_results(
    sources: Iterable[str | os.PathLike],
    dest: str | os.PathLike,
    *,
    key: Iterable[str] = ("generator", "metric", "id"),
    sort_key: Any = None,
) -> list[dict[str, Any]]:
    """Union of the rows of several results files, written atomically to ``dest``.

    Torn last lines are ignored, the first row of each key wins (so a row is never duplicated), and
    ``sort_key(row)``, when given, orders the result (e.g. the canonical order of a run, so a sharded or
    resumed run writes the same file as an uninterrupted one). ``dest`` may be one of the sources.

    >>> import tempfile
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
    atomic_write_text(dest, "".join(dumps_line(r) + "\n" for r in rows))
    return rows
