"""Hashes of input files' bytes, cached by path, size, times and inode (:class:`HashCache`), so a resumed run
knows which inputs changed without reading unchanged ones again."""

from __future__ import annotations

import hashlib
import json
import os
import sys
from pathlib import Path
from typing import Any

from genmetrics.data.output.atomic import atomic_write_text
from genmetrics.errors import InputError


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


def file_hash(path: str | os.PathLike) -> str:
    """sha256 (first 16 hex digits) of a file's bytes, cached in this process (see :class:`HashCache`).

    >>> import hashlib, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "a.png").write_bytes(b"abc")
    ...     file_hash(Path(d) / "a.png") == hashlib.sha256(b"abc").hexdigest()[:16]
    True
    """
    return _HASHES(path)
