"""Hashes of input files' bytes, cached by path, size, times and inode (:class:`HashCache`), so a resumed run
knows which inputs changed without reading unchanged ones again."""

from __future__ import annotations

import hashlib
import json
import os
import re
import struct
import sys
from pathlib import Path
from typing import Any

from genmetrics.data.output.atomic import atomic_output
from genmetrics.errors import InputError

#: a cache entry packed: size, mtime_ns, ctime_ns (signed), inode (unsigned), the 8 bytes of the hash
_ENTRY = struct.Struct("<qqqQ8s")
#: the hash of a file that cannot be read (never cached: the file is read again once it is fixed)
UNREADABLE = "unreadable"
_HEX16 = re.compile(r"[0-9a-f]{16}")


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
    it never decides a result on its own. Each file's entry is held packed (40 bytes), its key shares the
    caller's path string when that is already absolute and normal, and the file is written a line at a
    time: memory of about 150 bytes per file, not 450.

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
        self._known: dict[str, bytes] = {}
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
                files = data["files"]
                for k in list(files):
                    packed = self._pack(files.pop(k))
                    if packed is not None:
                        self._known[k] = packed

    @staticmethod
    def _pack(v: Any) -> bytes | None:
        """An entry ``[size, mtime_ns, ctime_ns, inode, hash]`` packed (``None``: not a valid entry)."""
        if not (
            isinstance(v, list)
            and len(v) == 5
            and all(type(x) is int for x in v[:4])
            and isinstance(v[4], str)
            and _HEX16.fullmatch(v[4])
        ):
            return None
        try:
            return _ENTRY.pack(*v[:4], bytes.fromhex(v[4]))
        except struct.error:  # a number outside the stat fields' range
            return None

    def __call__(self, path: str | os.PathLike) -> str:
        given = os.fspath(path)
        p = os.path.abspath(given)
        if p == given:
            p = given  # the caller's string (a Path keeps its own): one copy of each name, not two
        try:
            st = os.stat(p)
            hit = self._known.get(p)
            if hit is not None:
                size, mtime, ctime, ino, h = _ENTRY.unpack(hit)
                if (size, mtime, ctime, ino) == (st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino):
                    return h.hex()
            digest = _sha256_file(p)
        except OSError:  # missing, a broken link, no permission: the reader names the file per --on-error
            return UNREADABLE
        self._known[p] = _ENTRY.pack(
            st.st_size, st.st_mtime_ns, st.st_ctime_ns, st.st_ino, bytes.fromhex(digest)
        )
        self._dirty = True
        return digest

    def save(self) -> None:
        """Write the cache file (when there is one and something new was hashed)."""
        if self.file is not None and self._dirty:
            try:
                # what json.dumps({"version": ..., "files": {path: [size, mtime, ctime, inode, hash]}}) writes,
                # an entry at a time
                with (
                    atomic_output(self.file, root=self.root) as tmp,
                    open(tmp, "w", encoding="utf-8", newline="\n") as out,
                ):
                    out.write(f'{{"version": {json.dumps(self.VERSION)}, "files": {{')
                    for i, (k, v) in enumerate(self._known.items()):
                        size, mtime, ctime, ino, h = _ENTRY.unpack(v)
                        entry = json.dumps([size, mtime, ctime, ino, h.hex()])
                        out.write(f"{', ' if i else ''}{json.dumps(k)}: {entry}")
                    out.write("}}\n")
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
