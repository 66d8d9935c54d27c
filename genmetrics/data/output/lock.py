"""The output-folder lock: one run at a time writes to a folder (:class:`OutputLock`, :func:`lock_output_folder`)."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path

from filelock import FileLock, Timeout

from genmetrics.data.output.write_rule import CLOEXEC, NOFOLLOW, destination
from genmetrics.errors import InputError

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
            fd = os.open(self.path, os.O_RDONLY | NOFOLLOW | CLOEXEC)
            try:
                text = os.read(fd, 500).decode("utf-8", "replace").strip()
            finally:
                os.close(fd)
        except OSError:  # Windows keeps a locked file unreadable
            text = ""
        return text or "another process"

    def release(self) -> None:
        """Release the lock; a folder the run wrote nothing into is left as it was found (no lock file, and
        no folder when the lock created it)."""
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
