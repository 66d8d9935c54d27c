"""Count Pillow's file opens and image decodes, per file, in this process and in the worker processes it forks
(the counters live in shared memory), for tests and benchmarks of the input pipeline."""

from __future__ import annotations

import contextlib
import multiprocessing
import os
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from typing import Any

from PIL import Image, ImageFile


@dataclass
class PILCounts:
    """Opens and decodes per file path (absolute, resolved), filled when the ``count_pil`` block ends.

    >>> c = PILCounts()
    >>> c.opens.update([os.path.realpath("a.png")] * 2 + [os.path.realpath("b.png")])
    >>> c.decodes.update([os.path.realpath("a.png")])
    >>> c.per_file(["a.png", "b.png"])
    (1, 2, 0, 1)
    """

    opens: Counter = field(default_factory=Counter)
    decodes: Counter = field(default_factory=Counter)

    def per_file(self, files: list[Any]) -> tuple[int, int, int, int]:
        """``(min opens, max opens, min decodes, max decodes)`` over ``files``."""
        keys = [os.path.realpath(f) for f in files]
        o = [self.opens[k] for k in keys]
        d = [self.decodes[k] for k in keys]
        return min(o), max(o), min(d), max(d)


@contextlib.contextmanager
def count_pil(max_events: int = 200_000) -> Iterator[PILCounts]:
    """Patch ``Image.open`` and ``ImageFile.ImageFile.load`` to log ``(kind, path)`` events into a shared
    buffer (forked DataLoader workers write to it too); the counts are in the yielded object afterwards.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     Image.new("RGB", (2, 2)).save(f"{d}/a.png")
    ...     with count_pil() as c:
    ...         with Image.open(f"{d}/a.png") as im:
    ...             _ = im.load()
    ...             _ = im.load()  # already decoded: not counted again
    ...     c.per_file([f"{d}/a.png"])
    (1, 1, 1, 1)
    """
    ctx = multiprocessing.get_context("fork")
    log = ctx.Array("c", max_events * 256, lock=True)
    pos = ctx.Value("i", 0, lock=False)
    open0, load0 = Image.open, ImageFile.ImageFile.load

    def record(kind: str, path: Any) -> None:
        entry = f"{kind}\t{os.path.realpath(path)}\n".encode()[:255]
        with log.get_lock():
            i = pos.value
            if i + len(entry) <= len(log):
                log[i : i + len(entry)] = entry
                pos.value = i + len(entry)

    def counted_open(fp: Any, *args: Any, **kwargs: Any) -> Any:
        if isinstance(fp, (str, os.PathLike)):
            record("open", fp)
        return open0(fp, *args, **kwargs)

    def counted_load(self: Any) -> Any:
        if getattr(self, "tile", None) and getattr(self, "filename", None):
            record("decode", self.filename)
        return load0(self)

    out = PILCounts()
    Image.open = counted_open
    ImageFile.ImageFile.load = counted_load  # type: ignore[method-assign]
    try:
        yield out
    finally:
        Image.open = open0
        ImageFile.ImageFile.load = load0  # type: ignore[method-assign]
        for line in bytes(log[: pos.value]).decode().splitlines():
            kind, path = line.split("\t", 1)
            (out.opens if kind == "open" else out.decodes)[path] += 1
