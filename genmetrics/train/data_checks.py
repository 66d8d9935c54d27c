"""Training rows that cannot teach anything, found before any weights load.

Per case (docs/training.md, "Unlearnable rows"):

* the same **file** twice in a row that compares it with itself (both candidates of a preference pair, all
  three images of an odd-one-out triplet): refused, a data bug (``InputError`` with the count and the first
  rows);
* **identical content** in files of other names (byte-identical files) or in images given as objects
  (identical pixels): a warning with the count and the first rows; the row trains nothing and its label is
  noise, but duplicate outputs do happen (two generators, one seed), so training goes on;
* preference pairs that **contradict** each other (the same prompt, references and candidates, the other
  candidate preferred): a warning (raters disagree; the rank loss cannot fit both);
* when **no row** can be learned: refused.

Files are compared by path first, then by size, and hashed only when two sizes are equal; the same pixels
stored in two encodings (a PNG and its re-save) are not looked for, as that would decode every image.
"""

from __future__ import annotations

import hashlib
import os
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from PIL import Image

from genmetrics.errors import InputError

__all__ = ["check_pairs", "check_triplets", "sameness"]

SHOWN = 5  # rows named in a message


class _Contents:
    """Content hashes of files, computed once per file and only when two sizes are equal."""

    def __init__(self) -> None:
        self.hashes: dict[str, str] = {}

    def digest(self, path: str) -> str:
        if path not in self.hashes:
            h = hashlib.sha256()
            with open(path, "rb") as f:
                for block in iter(lambda: f.read(1 << 20), b""):
                    h.update(block)
            self.hashes[path] = h.hexdigest()
        return self.hashes[path]


def _pixels(image: Any) -> bytes:
    if isinstance(image, Image.Image):
        return f"{image.mode}{image.size}".encode() + image.tobytes()
    if isinstance(image, torch.Tensor):
        t = image.detach().cpu().contiguous()
        return f"{t.dtype}{tuple(t.shape)}".encode() + t.numpy().tobytes()
    array = np.ascontiguousarray(image)
    return f"{array.dtype}{array.shape}".encode() + array.tobytes()


def sameness(images: Sequence[Any], contents: _Contents | None = None) -> str | None:
    """``"the same file"`` when every image names one file, ``"identical content"`` when they hold the same
    bytes (files) or pixels (images given as objects), else ``None``.

    >>> import tempfile
    >>> from pathlib import Path
    >>> with tempfile.TemporaryDirectory() as d:
    ...     for name, data in (("a.png", b"x"), ("b.png", b"x"), ("c.png", b"y")):
    ...         _ = (Path(d) / name).write_bytes(data)
    ...     a, b, c = (Path(d) / n for n in ("a.png", "b.png", "c.png"))
    ...     sameness([a, a]), sameness([a, b]), sameness([a, c]), sameness([torch.zeros(2), torch.zeros(2)])
    ('the same file', 'identical content', None, 'identical content')
    """
    contents = contents or _Contents()
    if all(isinstance(x, (str, os.PathLike)) for x in images):
        paths = [os.path.realpath(x) for x in images]
        if len(set(paths)) == 1:
            return "the same file"
        if len({os.path.getsize(p) for p in paths}) == 1 and len({contents.digest(p) for p in paths}) == 1:
            return "identical content"
        return None
    if any(isinstance(x, (str, os.PathLike)) for x in images):
        return None  # a file and an object: not compared (the object may be a decoded copy)
    return "identical content" if len({_pixels(x) for x in images}) == 1 else None


def _names(ids: list[str]) -> str:
    shown = ", ".join(repr(i) for i in ids[:SHOWN])
    return shown + (f", ... (first {SHOWN} of {len(ids)})" if len(ids) > SHOWN else "")


def _report(
    source: str, found: dict[str, list[str]], total: int, unit: str, messages: dict[str, str]
) -> None:
    """Refuse "the same file" rows; warn about the other kinds; refuse when no row is left to learn from."""
    if found.get("the same file"):
        ids = found["the same file"]
        raise InputError(
            f"{source}: {len(ids)} of {total} {unit}(s) {messages['the same file']} ({_names(ids)})"
        )
    useless = {i for ids in found.values() for i in ids}
    if total and len(useless) == total:
        raise InputError(
            f"{source}: none of the {total} {unit}(s) can be learned (each has identical images or contradicts "
            "another); check how the data was made"
        )
    for kind, ids in found.items():
        if ids:
            warnings.warn(
                f"{source}: {len(ids)} of {total} {unit}(s) {messages[kind]} ({_names(ids)})", stacklevel=3
            )


_PAIR_MESSAGES = {
    "the same file": "name the same file as both candidates; a preference between an image and itself "
    "cannot be learned: remove those rows",
    "identical content": "have two candidates with identical content; they teach the rank loss nothing and "
    "their preference is noise (training goes on)",
    "contradicts": "contradict another pair (the same prompt, references and candidates, the other candidate "
    "preferred); the rank loss cannot fit both (training goes on)",
}


def check_pairs(records: Sequence[Any], source: str) -> None:
    """Check preference pairs (``MIBPairRecord``: ``id, prompt, references, candidates, preference``).

    >>> import tempfile, warnings
    >>> from pathlib import Path
    >>> from genmetrics.data.jsonl import MIBPairRecord
    >>> with tempfile.TemporaryDirectory() as d, warnings.catch_warnings(record=True) as seen:  # doctest: +ELLIPSIS
    ...     warnings.simplefilter("always")
    ...     a, b, c = Path(d) / "a.png", Path(d) / "b.png", Path(d) / "c.png"
    ...     _ = a.write_bytes(b"x"), b.write_bytes(b"y"), c.write_bytes(b"z")
    ...     pair = lambda i, cands, p: MIBPairRecord(i, "a cat", (a,), cands, ("g1", "g2"), p)
    ...     check_pairs([pair("p1", (b, c), 0), pair("p2", (c, b), 0), pair("p3", (b, a), 1)], "pairs.jsonl")
    ...     print(seen[0].message)  # p2 prefers c over b, p1 b over c
    pairs.jsonl: 2 of 3 pair(s) contradict another pair (...) ('p1', 'p2')
    >>> check_pairs([pair("p4", (c, c), 0), pair("p5", (a, a), 1)], "pairs.jsonl")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: pairs.jsonl: 2 of 2 pair(s) name the same file as both candidates; ... ('p4', 'p5')
    """
    contents = _Contents()
    found: dict[str, list[str]] = {"the same file": [], "identical content": [], "contradicts": []}
    winners: dict[tuple, dict[str, list[str]]] = {}
    for r in records:
        kind = sameness(list(r.candidates), contents)
        if kind:
            found[kind].append(r.id)
            continue
        refs = tuple(sorted(os.path.realpath(p) for p in r.references))
        key = (r.prompt, refs, frozenset(os.path.realpath(c) for c in r.candidates))
        winners.setdefault(key, {}).setdefault(os.path.realpath(r.candidates[r.preference]), []).append(r.id)
    for by_winner in winners.values():
        if len(by_winner) > 1:
            found["contradicts"] += sorted(i for ids in by_winner.values() for i in ids)
    _report(source, found, len(records), "pair", _PAIR_MESSAGES)


_TRIPLET_MESSAGES = {
    "the same file": "name the same file three times; no image can be the odd one out: remove those rows",
    "identical content": "hold three images with identical content; no image can be the odd one out and the "
    "votes are noise (training goes on)",
}


def check_triplets(records: Sequence[Any], source: str) -> None:
    """Check odd-one-out triplets (``OddOneOutRecord``: ``id, images``); two equal images of three are fine
    (the third is the odd one).

    >>> from genmetrics.data.jsonl import OddOneOutRecord
    >>> x, y = torch.zeros(3, 4, 4), torch.ones(3, 4, 4)
    >>> rows = [OddOneOutRecord("t1", (x, x, y), "color", (0, 0, 3)), OddOneOutRecord("t2", (x, x, x), "color", (1, 1, 1))]
    >>> import warnings
    >>> with warnings.catch_warnings(record=True) as w:
    ...     warnings.simplefilter("always")
    ...     check_triplets(rows, "triplets")
    >>> str(w[0].message)  # doctest: +ELLIPSIS
    "triplets: 1 of 2 triplet(s) hold three images with identical content; ... ('t2')"
    """
    contents = _Contents()
    found: dict[str, list[str]] = {"the same file": [], "identical content": []}
    for r in records:
        kind = sameness(list(r.images), contents)
        if kind:
            found[kind].append(r.id)
    _report(source, found, len(records), "triplet", _TRIPLET_MESSAGES)
