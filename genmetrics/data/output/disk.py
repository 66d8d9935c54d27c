"""A full disk (or a used-up quota) while writing: one :class:`DiskFullError` line that names the disk, its free
space, the file being written, what is kept and how to continue."""

from __future__ import annotations

import contextlib
import errno
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import Any


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

    >>> import tempfile
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
    genmetrics.data.output.disk.DiskFullError: no space left on the disk ... while writing results.jsonl; finished rows are kept: free space and rerun with --resume
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
GENERIC_KEPT = "files already finished there are kept, this one is left as it was"
GENERIC_THEN = "free space (or write to a folder on a larger disk) and run the command again"
