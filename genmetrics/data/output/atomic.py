"""Atomic writes: a file (or folder) is written to a fresh temporary name in the destination's folder (created
with ``O_EXCL`` and ``O_NOFOLLOW``), flushed to disk and renamed over the destination (:func:`atomic_write_bytes`,
:func:`atomic_output` for writers that take a path: matplotlib, Pillow, safetensors, faiss, ...); a rename replaces
a link planted in between instead of following it. :func:`open_append` opens for appending with ``O_NOFOLLOW``.
Every destination is checked by the write rule first (:mod:`genmetrics.data.output.write_rule`).
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any

from genmetrics.data.output.disk import (
    GENERIC_KEPT,
    GENERIC_THEN,
    DiskFullError,
    disk_full_message,
    is_disk_full,
)
from genmetrics.data.output.write_rule import CLOEXEC, NOFOLLOW, destination, make_folder, refuse_link
from genmetrics.data.text.jsonable import jsonable
from genmetrics.errors import InputError


def _umask() -> int:
    mask = os.umask(0)
    os.umask(mask)
    return mask


def _fsync(path: str) -> None:
    fd = os.open(path, os.O_RDONLY | NOFOLLOW | CLOEXEC)
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
            raise DiskFullError(disk_full_message(p.parent, p, GENERIC_KEPT, GENERIC_THEN), p) from None
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
        fd = os.open(tmp, os.O_WRONLY | os.O_TRUNC | NOFOLLOW | CLOEXEC)
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
    """``path`` opened for appending UTF-8 text under the write rule (``ONOFOLLOW``: never through a link).

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
        fd = os.open(p, os.O_WRONLY | os.O_APPEND | os.O_CREAT | NOFOLLOW | CLOEXEC, 0o666)
    except OSError as e:
        if e.errno == errno.ELOOP:  # a link planted after the check
            refuse_link(p, what or str(path))
        raise
    return os.fdopen(fd, "a", encoding="utf-8", newline="\n")
