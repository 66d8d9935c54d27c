"""Reading the small records genmetrics keeps in ``GENMETRICS_HOME`` (``weights.json``, ``fast_paths.json``) and
taking their locks, with bounded size, nesting and time.

Whatever sits at such a path (a FIFO, a device, a 100,000-deep JSON document, a lock held by a stopped process)
gives one :class:`HomeFileError` naming the file and the fix, never a hang or a recursion message. The callers
decide the fallback: the fast-path record is measured again, the weights commands stop with one line.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import re
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = ["LOCK_WAIT", "MAX_BYTES", "MAX_DEPTH", "HomeFileError", "home_lock", "read_json_record"]

#: the largest record read (a weights manifest of every metric is a few hundred kB)
MAX_BYTES = 16 << 20
#: the deepest nesting of lists and objects a record may have (the records nest 4 deep)
MAX_DEPTH = 32
#: seconds a lock on a record is waited for (the records are held for milliseconds)
LOCK_WAIT = 10.0

_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_TOKENS = re.compile(r'"(?:[^"\\]|\\.)*"|[\[\]{}]')


class HomeFileError(OSError):
    """A record or lock under ``GENMETRICS_HOME`` cannot be used; the message names it and the fix.

    An ``OSError``, so a caller that already handles unreadable files handles it too:

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "fast_paths.json").write_text("[" * 100_000)
    ...     try:
    ...         read_json_record(Path(d) / "fast_paths.json")
    ...     except OSError as e:
    ...         print(type(e).__name__, "fast_paths.json" in str(e))
    HomeFileError True
    """


def _kind(mode: int) -> str:
    for test, name in (
        (stat.S_ISFIFO, "a FIFO (named pipe)"),
        (stat.S_ISCHR, "a character device"),
        (stat.S_ISBLK, "a block device"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISDIR, "a folder"),
    ):
        if test(mode):
            return name
    return "not a regular file"


def nesting_depth(text: str) -> int:
    """The deepest nesting of ``[`` / ``{`` in JSON ``text`` (brackets inside strings do not count).

    >>> nesting_depth('{"a": [1, {"b": "[[["}]}'), nesting_depth("[" * 5 + "]" * 5)
    (3, 5)
    """
    depth = deepest = 0
    for m in _TOKENS.finditer(text):
        tok = m.group()
        if tok in "[{":
            depth += 1
            deepest = max(deepest, depth)
        elif tok in "]}":
            depth -= 1
    return deepest


def read_json_record(
    path: str | os.PathLike, *, max_bytes: int = MAX_BYTES, max_depth: int = MAX_DEPTH
) -> Any | None:
    """The JSON value in ``path``, ``None`` when there is no file. Anything but a regular file (checked on the
    opened descriptor, opened without blocking), more than ``max_bytes``, nesting deeper than ``max_depth``,
    not UTF-8 or not JSON raises :class:`HomeFileError` naming the file and what to do.

    >>> import tempfile
    >>> d = tempfile.mkdtemp()
    >>> _ = (Path(d) / "r.json").write_text('{"a": [1]}')
    >>> _ = (Path(d) / "deep.json").write_text("[" * 100000 + "]" * 100000)
    >>> read_json_record(Path(d) / "r.json"), read_json_record(Path(d) / "none.json")
    ({'a': [1]}, None)
    >>> read_json_record(Path(d) / "deep.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.data.caches.homefile.HomeFileError: .../deep.json: nests 100000 levels deep (at most 32 are read); delete it ...
    """
    p = Path(path)
    fix = "delete it (genmetrics writes it again)"
    try:
        fd = os.open(p, os.O_RDONLY | _NONBLOCK | _CLOEXEC)
    except FileNotFoundError:
        return None
    except OSError as e:
        raise HomeFileError(f"{p}: cannot be opened ({e.strerror or e}); {fix}") from None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise HomeFileError(f"{p}: is {_kind(st.st_mode)}, not a file; {fix}")
        if st.st_size > max_bytes:
            raise HomeFileError(f"{p}: {st.st_size} bytes, more than the {max_bytes} read; {fix}")
        chunks, total = [], 0
        while True:
            try:
                block = os.read(fd, 1 << 20)
            except OSError as e:
                if e.errno in (errno.EAGAIN, errno.EWOULDBLOCK):
                    raise HomeFileError(f"{p}: cannot be read without waiting; {fix}") from None
                raise HomeFileError(f"{p}: cannot be read ({e.strerror or e}); {fix}") from None
            if not block:
                break
            total += len(block)
            if total > max_bytes:  # grew while read
                raise HomeFileError(f"{p}: more than the {max_bytes} bytes read; {fix}")
            chunks.append(block)
    finally:
        os.close(fd)
    try:
        text = b"".join(chunks).decode("utf-8-sig")
    except UnicodeDecodeError as e:
        raise HomeFileError(f"{p}: not UTF-8 text (byte {e.start}); {fix}") from None
    depth = nesting_depth(text)
    if depth > max_depth:
        raise HomeFileError(f"{p}: nests {depth} levels deep (at most {max_depth} are read); {fix}")
    try:
        return json.loads(text)
    except (ValueError, RecursionError) as e:
        what = e.msg if isinstance(e, json.JSONDecodeError) else type(e).__name__
        raise HomeFileError(f"{p}: not valid JSON ({what}); {fix}") from None


@contextlib.contextmanager
def home_lock(path: str | os.PathLike, *, wait: float | None = None) -> Iterator[None]:
    """Hold the lock file ``path`` (an OS lock: released when the process ends) for a read-modify-write of a
    record. Waits at most ``wait`` seconds (default :data:`LOCK_WAIT`); a holder that does not let go (a stopped
    or hung process) or a lock path that is not a regular file raises :class:`HomeFileError` naming it.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     with home_lock(Path(d) / "r.lock"):
    ...         try:
    ...             with home_lock(Path(d) / "r.lock", wait=0.05):  # a second holder
    ...                 pass
    ...         except HomeFileError as e:
    ...             print("held by another process" in str(e))
    True
    """
    p = Path(path)
    seconds = LOCK_WAIT if wait is None else wait
    with contextlib.suppress(FileNotFoundError):
        st = os.lstat(p)
        if not stat.S_ISREG(st.st_mode):
            raise HomeFileError(f"{p}: the lock file is {_kind(st.st_mode)}; delete it")
    from filelock import FileLock, Timeout  # here: most commands never write a home file (a light start-up)

    lock = FileLock(str(p), thread_local=False, is_singleton=False)
    try:
        lock.acquire(timeout=seconds)
    except Timeout:
        raise HomeFileError(
            f"{p}: held by another process for more than {seconds:g} s (a stopped or hung genmetrics?); let it "
            "finish or end it, then try again"
        ) from None
    except OSError as e:
        raise HomeFileError(f"{p}: the lock cannot be taken ({e.strerror or e})") from None
    try:
        yield
    finally:
        lock.release()
