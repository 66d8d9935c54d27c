"""Everything genmetrics writes goes through this module: one write rule, atomic writes, an append-only
JSONL writer that resumes without loss or duplicates, the output-folder lock and the run manifest.

The write rule (:func:`destination`; docs/errors.md, "Writing files"): a file is written only inside the
folder the user chose (``root``), never through a symbolic link, and always whole:

* a destination that is a symbolic link is refused (the file it points to stays byte-identical), and so is
  one whose folder resolves outside ``root`` (a link planted as a sub-folder);
* files are written to a fresh temporary file in the destination's folder (created with ``O_EXCL`` and
  ``O_NOFOLLOW``), flushed to disk and renamed over the destination (:func:`atomic_write_bytes`,
  :func:`atomic_output` for writers that take a path: matplotlib, Pillow, safetensors, faiss, ...); a
  rename replaces a link planted in between instead of following it;
* appending writers (:class:`ResultsWriter`, :func:`open_append`) open with ``O_NOFOLLOW``.
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import json
import os
import platform
import shutil
import socket
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import IO, Any

from filelock import FileLock, Timeout

from genmetrics.data.jsonable import jsonable
from genmetrics.data.jsonl import decode_line, finite_number, parse_line
from genmetrics.errors import InputError

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)  # POSIX; on Windows the lstat check of destination() stands alone
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)


# ------------------------------------------------------------------------------------------ the write rule
def _within(path: str, root: str) -> bool:
    try:
        return os.path.commonpath([path, root]) == root
    except ValueError:  # another drive (Windows)
        return False


def _refuse_link(p: Path, name: str) -> None:
    if p.is_symlink():
        raise InputError(
            f"{name}: {str(p)!r} is a symbolic link (to {os.readlink(p)!r}); genmetrics never writes through "
            "a link: remove the link or choose another name"
        )


def _make_dirs(folder: Path, base: Path, name: str) -> None:
    """Create ``base`` (the user's folder) and the folders from it down to ``folder``; a component that is a
    link (or anything but a folder) is refused before anything is created through it."""
    try:
        base.mkdir(parents=True, exist_ok=True)
    except OSError as e:
        raise InputError(f"{name}: the folder {str(base)!r} cannot be created ({e.strerror or e})") from None
    cur = base
    for part in folder.relative_to(base).parts:
        cur = cur / part
        _refuse_link(cur, name)
        if cur.exists() and not cur.is_dir():
            raise InputError(f"{name}: {str(cur)!r} is a file where a folder is needed; move it away")
        if not cur.exists():
            try:
                os.mkdir(cur)
            except FileExistsError:  # made by another process meanwhile
                pass


def destination(
    path: str | os.PathLike, *, root: str | os.PathLike | None = None, what: str | None = None
) -> Path:
    """THE write rule, checked before anything is written to ``path``; returns ``path`` made absolute, with
    its folder created. ``root`` is the folder the user chose (default: the folder ``path`` is in); ``what``
    names the destination in the error (default: the path).

    Refused with :class:`~genmetrics.errors.InputError`: ``path`` outside ``root`` (``..``), a folder
    between them that is a symbolic link or resolves outside ``root``, and ``path`` itself being a link.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     target = Path(d) / "precious.txt"
    ...     _ = target.write_text("keep")
    ...     (Path(d) / "out").mkdir()
    ...     (Path(d) / "out" / "results.jsonl").symlink_to(target)  # a link planted in the output folder
    ...     ok = destination(Path(d) / "out" / "plots" / "a.png", root=Path(d) / "out")
    ...     try:
    ...         destination(Path(d) / "out" / "results.jsonl", root=Path(d) / "out")
    ...     except InputError as e:
    ...         print("refused:", "is a symbolic link" in str(e), target.read_text())
    ...     ok.parent.is_dir()
    refused: True keep
    True
    """
    p = Path(os.path.abspath(path))
    base = Path(os.path.abspath(root)) if root is not None else p.parent
    name = what or str(path)
    if not _within(str(p.parent), str(base)):
        raise InputError(
            f"{name}: {str(p)!r} is outside the folder {str(base)!r}; genmetrics writes only inside the "
            "folder you chose"
        )
    _make_dirs(p.parent, base, name)
    real_root, real_parent = os.path.realpath(base), os.path.realpath(p.parent)
    if not _within(real_parent, real_root):
        raise InputError(
            f"{name}: its folder {str(p.parent)!r} resolves to {real_parent!r}, outside {str(base)!r} (a "
            "symbolic link?); genmetrics never writes outside the folder you chose: remove the link"
        )
    _refuse_link(p, name)
    return p


def make_folder(
    path: str | os.PathLike, *, root: str | os.PathLike | None = None, what: str | None = None
) -> Path:
    """The folder ``path`` (created when missing) under the write rule: not a link, inside ``root``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     make_folder(Path(d) / "out" / "plots", root=Path(d) / "out").is_dir()
    True
    """
    p = destination(path, root=root, what=what)
    if p.exists() and not p.is_dir():
        raise InputError(f"{what or str(path)}: {str(p)!r} is a file; expected a folder")
    p.mkdir(exist_ok=True)
    return p


class DiskFullError(OSError):
    """No space left (or the quota is used up) on the disk of the run folder: one line that names the disk,
    its free space and the path being written (an ``OSError``: the CLI exits 1, an environment problem).

    >>> e = DiskFullError("no space left on the disk holding 'runs/a' ...")
    >>> isinstance(e, OSError), e.errno == errno.ENOSPC, str(e).startswith("no space left")
    (True, True, True)
    """

    def __init__(self, message: str, path: str | os.PathLike | None = None):
        super().__init__(message)
        self.errno = errno.ENOSPC
        self.path = path


def _mount_point(path: Path) -> Path:
    p = Path(os.path.abspath(path))
    while not p.exists() or not os.path.ismount(p):
        if p.parent == p:
            break
        p = p.parent
    return p


def describe_disk(path: Path) -> str:
    """The disk that holds ``path``: its mount point, the device where the system says (Linux), free space.

    >>> describe_disk(Path("/")).startswith("/ (")
    True
    """
    mount = _mount_point(path)
    device = ""
    with contextlib.suppress(OSError, ValueError):
        for line in Path("/proc/self/mounts").read_text(encoding="utf-8").splitlines():
            fields = line.split()
            if len(fields) > 1 and fields[1] == str(mount):
                device = f"{fields[0]}, "
    try:
        free = f"{shutil.disk_usage(mount).free / 2**20:.1f} MiB free"
    except OSError:
        free = "free space unknown"
    return f"{mount} ({device}{free})"


def is_disk_full(err: BaseException) -> bool:
    """Whether ``err`` is a full disk or a used-up quota (also as a library's wrapped message).

    >>> is_disk_full(OSError(errno.ENOSPC, "No space left on device")), is_disk_full(OSError(errno.EACCES, "no"))
    (True, False)
    >>> is_disk_full(RuntimeError("I/O error: No space left on device (os error 28)"))
    True
    """
    if isinstance(err, OSError) and err.errno in (errno.ENOSPC, errno.EDQUOT):
        return True
    text = str(err)  # libraries that wrap the OS error (safetensors: "... (os error 28)")
    return f"os error {errno.ENOSPC}" in text or "No space left on device" in text


def disk_full_message(folder: str | os.PathLike, path: Any, kept: str, then: str) -> str:
    """The one line for a full disk: the disk (mount point, device, free space), the file being written,
    what is kept and how to continue.

    >>> line = disk_full_message(tempfile.gettempdir(), "results.jsonl", "finished rows are kept", "rerun")
    >>> line.startswith("no space left on the disk "), line.endswith(
    ...     " while writing results.jsonl; finished rows are kept: rerun"
    ... )
    (True, True)
    """
    where = f" while writing {path}" if path else f" while writing into {folder}"
    return f"no space left on the disk {describe_disk(Path(folder))}{where}; {kept}: {then}"


@contextlib.contextmanager
def disk_full_named(folder: str | os.PathLike, *, kept: str, then: str) -> Iterator[None]:
    """Turn a full disk inside the block into one :class:`DiskFullError` that names the disk, the file, what
    is kept and how to continue (a :class:`DiskFullError` raised inside gets this block's words).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     with disk_full_named(d, kept="finished rows are kept", then="free space and rerun with --resume"):
    ...         raise OSError(errno.ENOSPC, "No space left on device", "results.jsonl")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.data.results.DiskFullError: no space left on the disk ... while writing results.jsonl; finished rows are kept: free space and rerun with --resume
    """
    try:
        yield
    except Exception as e:  # noqa: BLE001 - OSError and the errors libraries wrap it in
        if not is_disk_full(e):
            raise
        path = getattr(e, "path", None) or getattr(e, "filename", None)
        raise DiskFullError(disk_full_message(folder, path, kept, then), path) from None


#: what a generic writer's full-disk message says is kept and how to continue (callers with more context,
#: such as the leaderboard runner, say more)
_KEPT = "files already finished there are kept, this one is left as it was"
_THEN = "free space (or write to a folder on a larger disk) and run the command again"


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


@contextlib.contextmanager
def atomic_output(
    path: str | os.PathLike,
    *,
    root: str | os.PathLike | None = None,
    what: str | None = None,
    directory: bool = False,
    merge: bool = False,
) -> Iterator[Path]:
    """A fresh temporary path next to ``path`` for writers that take a file name (matplotlib's ``savefig``,
    Pillow's ``save``, safetensors' ``save_file``, ``faiss.write_index``, ``torch.save``, ``numpy.save``;
    with ``directory=True`` a temporary folder, for ``save_pretrained`` / ``save_state``). When the block ends
    without an error the result is flushed to disk and renamed over ``path`` (``merge=True``: each file of
    the temporary folder is renamed into the folder ``path``, which keeps its other files); on an error it
    is removed and ``path`` is left as it was. :func:`destination` is checked first. The temporary name ends with ``path``'s
    suffix, so writers that pick the format from the name still do.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     with atomic_output(Path(d) / "a.bin") as tmp:
    ...         _ = tmp.write_bytes(b"data")  # any writer that takes a path
    ...     sorted(p.name for p in Path(d).iterdir()), (Path(d) / "a.bin").read_bytes()
    (['a.bin'], b'data')
    """
    p = destination(path, root=root, what=what)
    if directory:
        tmp = tempfile.mkdtemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent)
    else:
        fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp" + p.suffix, dir=p.parent)
        os.close(fd)
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; give the file the usual permissions
    try:
        yield Path(tmp)
        if directory and merge:
            _merge_folder(Path(tmp), p)
        elif directory:
            _swap_folder(Path(tmp), p)
        else:
            _fsync(tmp)
            os.replace(tmp, p)  # replaces a link planted meanwhile, never follows it
    except BaseException as e:
        if directory:
            shutil.rmtree(tmp, ignore_errors=True)
        elif os.path.lexists(tmp):
            os.unlink(tmp)
        if isinstance(e, Exception) and is_disk_full(e) and not isinstance(e, DiskFullError):
            raise DiskFullError(disk_full_message(p.parent, p, _KEPT, _THEN), p) from None
        raise


def _swap_folder(tmp: Path, p: Path) -> None:
    """Put the finished folder ``tmp`` in the place of ``p`` (the old one is moved aside, then deleted)."""
    for f in tmp.rglob("*"):
        if f.is_file() and not f.is_symlink():
            _fsync(str(f))
    if not os.path.lexists(p):
        os.replace(tmp, p)
        return
    if not p.is_dir() or p.is_symlink():
        raise InputError(f"{str(p)!r} exists and is not a folder; move it away")
    old = Path(tempfile.mkdtemp(prefix=f".{p.name}.", suffix=".old", dir=p.parent))
    os.replace(p, old / p.name)
    os.replace(tmp, p)
    shutil.rmtree(old, ignore_errors=True)  # rmtree never follows links


def _merge_folder(tmp: Path, p: Path) -> None:
    """Move every file of the finished folder ``tmp`` into the folder ``p`` (each one checked by the rule and
    renamed over its destination), then remove ``tmp``."""
    p = make_folder(p, root=p.parent)
    for f in sorted(tmp.rglob("*")):
        if f.is_file() and not f.is_symlink():
            _fsync(str(f))
            os.replace(f, destination(p / f.relative_to(tmp), root=p))
    shutil.rmtree(tmp, ignore_errors=True)


def atomic_write_bytes(
    path: str | os.PathLike, data: bytes, *, root: str | os.PathLike | None = None
) -> Path:
    """Write ``data`` to ``path`` whole or not at all, under the write rule (:func:`atomic_output`).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     atomic_write_bytes(Path(d) / "sub" / "a.bin", b"\\x00\\x01").read_bytes()  # folders are created
    b'\\x00\\x01'
    """
    with atomic_output(path, root=root) as tmp:
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC | _NOFOLLOW | _CLOEXEC)
        with os.fdopen(fd, "wb") as f:
            f.write(data)
    return Path(os.path.abspath(path))


def atomic_write_text(path: str | os.PathLike, text: str, *, root: str | os.PathLike | None = None) -> Path:
    """Write ``text`` (UTF-8, ``\\n`` line ends on every platform) to ``path`` atomically, under the write rule.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = atomic_write_text(Path(d) / "sub" / "a.txt", "hello")  # folders are created
    ...     p.read_text(), sorted(q.name for q in p.parent.iterdir())  # no temp file left behind
    ('hello', ['a.txt'])
    """
    # surrogateescape: a file name that is not UTF-8 (kept by Python as surrogates) is written back as its bytes
    return atomic_write_bytes(path, text.encode("utf-8", "surrogateescape"), root=root)


def atomic_write_json(
    path: str | os.PathLike, obj: Any, *, indent: int = 2, root: str | os.PathLike | None = None
) -> Path:
    """:func:`atomic_write_text` of ``obj`` as indented JSON (tensors, paths and numpy values converted).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     json.loads(atomic_write_json(Path(d) / "a.json", {"path": Path("x.png"), "n": 2}).read_text())
    {'path': 'x.png', 'n': 2}
    """
    return atomic_write_text(
        path, json.dumps(jsonable(obj), indent=indent, sort_keys=False) + "\n", root=root
    )


def open_append(
    path: str | os.PathLike, *, root: str | os.PathLike | None = None, what: str | None = None
) -> IO[str]:
    """``path`` opened for appending UTF-8 text under the write rule (``O_NOFOLLOW``: never through a link).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     for line in ("a", "b"):
    ...         with open_append(Path(d) / "log.txt") as f:
    ...             _ = f.write(line + "\\n")
    ...     (Path(d) / "log.txt").read_text()
    'a\\nb\\n'
    """
    p = destination(path, root=root, what=what)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:  # a link planted after the check
            _refuse_link(p, what or str(path))
        raise
    return os.fdopen(fd, "a", encoding="utf-8", newline="\n")


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
    p = Path(path)
    if not p.exists():
        return []
    rows = []
    with open(p, "rb") as f:
        lines = f.read().split(b"\n")
    for i, raw in enumerate(lines):
        if not raw.strip():
            continue
        try:
            row = parse_line(decode_line(raw, p, i + 1), p, i + 1)
        except InputError as e:
            if i >= len(lines) - 2:  # the last line (possibly torn by a kill, even inside a character)
                break
            raise InputError(
                f"{p}:{i + 1}: corrupt results line (not the last one: {str(e).split(': ', 1)[-1]}); fix or "
                "delete the line, or run without --resume to start afresh"
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

    def __init__(self, file: str | os.PathLike | None = None, *, root: str | os.PathLike | None = None):
        self.file = Path(file) if file is not None else None
        self.root = root
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
                    self.file,
                    json.dumps({"version": self.VERSION, "files": self._known}) + "\n",
                    root=self.root,
                )
            except (OSError, InputError) as e:  # only a cost: a later resume reads the files again
                print(
                    f"warning: could not keep the input hashes in {str(self.file)!r} ({getattr(e, 'strerror', None) or e}); a later "
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


# ------------------------------------------------------------------------------------------ the output lock
LOCK = ".genmetrics.lock"


class OutputLock:
    """An exclusive lock on an output folder while a run writes to it (``filelock`` on ``OUT/.genmetrics.lock``:
    an OS lock, released when the process ends, so a killed run leaves no stale lock; it works on Windows
    too). A second run on the same folder refuses with one line naming the holder. The lock file is a
    destination like any other (:func:`destination`): a link planted in its place is refused.

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

    created_dir = False  # set by lock_output_folder when it made the folder for this run

    def __init__(self, out_dir: str | os.PathLike, *, flag: str = "--out"):
        out = Path(out_dir)
        self.path = destination(out / LOCK, root=out, what=f"{flag} {str(out)!r}: the lock file")
        self._lock = FileLock(self.path, on_acquired=self._stamp)
        try:
            self._lock.acquire(timeout=0)
        except Timeout:
            raise InputError(
                f"{flag} {str(out)!r} is in use by another run ({self._holder()}); wait for it to finish or "
                f"choose another {flag} folder"
            ) from None

    @staticmethod
    def _stamp(fd: int) -> None:
        """Write who holds the lock into the lock file (through the lock's own descriptor)."""
        who = f"pid {os.getpid()} on {socket.gethostname()}, started {time.strftime('%Y-%m-%d %H:%M:%S')}"
        os.ftruncate(fd, 0)
        os.lseek(fd, 0, os.SEEK_SET)
        os.write(fd, who.encode("utf-8"))

    def _holder(self) -> str:
        try:
            fd = os.open(self.path, os.O_RDONLY | _NOFOLLOW | _CLOEXEC)
            try:
                text = os.read(fd, 500).decode("utf-8", "replace").strip()
            finally:
                os.close(fd)
        except OSError:  # Windows keeps a locked file unreadable
            text = ""
        return text or "another process"

    def release(self) -> None:
        if self._lock.is_locked:
            self._lock.release()
            folder = self.path.parent
            if [p.name for p in folder.iterdir()] == [
                LOCK
            ]:  # a run that wrote nothing leaves nothing behind:
                self.path.unlink(missing_ok=True)  # no lock file, and no folder when it made the folder
                if self.created_dir:
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
        root: str | os.PathLike | None = None,
    ):
        self.path = destination(path, root=root)
        self.root = root
        self.key_fields = tuple(key)
        self._done: set[tuple] = set()
        if resume and self.path.exists():
            rows = read_results(self.path)
            self._rewrite_clean(rows)
            self._done = {self.key(r) for r in rows}
        elif self.path.exists():
            self.path.unlink()
        self._f = open_append(self.path, root=root)

    def _rewrite_clean(self, rows: list[dict[str, Any]]) -> None:
        with open(self.path, "rb") as f:
            data = f.read()
        if data and not data.endswith(b"\n") or len(rows) != sum(1 for ln in data.split(b"\n") if ln.strip()):
            atomic_write_text(self.path, "".join(dumps_line(r) + "\n" for r in rows), root=self.root)

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
            kept = f"the rows already in {self.path.name} are kept (a resume continues after them)"
            with disk_full_named(self.path.parent, kept=kept, then=_THEN):
                try:
                    self._f.write("".join(lines))
                    self._f.flush()
                    os.fsync(self._f.fileno())
                except OSError as e:
                    e.filename = e.filename or str(self.path)
                    raise
        return n

    def close(self) -> None:
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
    out: dict[str, str | None] = {}
    for n in names:
        try:
            out[n] = version(n)
        except PackageNotFoundError:
            out[n] = None
    if out.get("genmetrics") is None and "genmetrics" in out:  # a source checkout that is not installed
        out["genmetrics"] = "source checkout (not installed)"
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
    root: str | os.PathLike | None = None,
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
    atomic_write_text(dest, "".join(dumps_line(r) + "\n" for r in rows), root=root)
    return rows
