"""JSONL datasets of DESIGN section 6, validated with errors that name the file and line.

Paths inside a record are relative to the JSONL file. Loaders return plain dataclasses with absolute
``Path`` objects; they do not open the images (that happens in batches, where a bad image can be
reported and skipped).
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from genmetrics.errors import InputError


def iter_jsonl(path: str | os.PathLike[str]) -> Iterator[tuple[int, dict[str, Any]]]:
    """``(line_number, object)`` for every non-blank line; bad JSON (malformed, not UTF-8, nested too deeply,
    not an object) is an error naming file and line. A UTF-8 byte-order mark and CRLF line ends are fine.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "a.jsonl").write_text('{"id": 1}\\n\\n{"id": 2}\\n')
    ...     list(iter_jsonl(Path(d) / "a.jsonl"))
    [(1, {'id': 1}), (3, {'id': 2})]
    """
    p = Path(path)
    if not p.exists():
        raise InputError(f"data file {str(p)!r} does not exist; check the path")
    if p.is_dir():
        raise InputError(f"data file {str(p)!r} is a folder; expected a .jsonl file")
    with open(p, "rb") as f:
        for n, raw in enumerate(f, 1):
            line = decode_line(raw, p, n)
            if not line.strip():
                continue
            obj = parse_line(line, p, n)
            if not isinstance(obj, dict):
                raise InputError(f"{p}:{n}: expected a JSON object, got {type(obj).__name__}")
            yield n, obj


def decode_line(raw: bytes, path: Path, n: int) -> str:
    """Line ``n`` of ``path`` as text (a byte-order mark on line 1 is dropped); not UTF-8 is an error naming
    the file, the line and the byte.

    >>> decode_line(b"\\xef\\xbb\\xbf{}", Path("a.jsonl"), 1), decode_line(b"{}", Path("a.jsonl"), 2)
    ('{}', '{}')
    """
    try:
        return raw.decode("utf-8-sig" if n == 1 else "utf-8")
    except UnicodeDecodeError as e:
        raise InputError(
            f"{path}:{n}: not UTF-8 text (byte {e.start + 1} of the line is 0x{raw[e.start]:02x}); save the file "
            "as UTF-8"
        ) from None


def parse_line(line: str, path: Path, n: int) -> Any:
    """One JSON value; malformed or too deeply nested JSON is an error naming the file and line.

    >>> parse_line('{"id": 1}', Path("a.jsonl"), 3)
    {'id': 1}
    >>> parse_line("[" * 100000, Path("a.jsonl"), 3)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: a.jsonl:3: invalid JSON (nested too deeply...
    """
    try:
        return json.loads(line)
    except json.JSONDecodeError as e:
        raise InputError(
            f"{path}:{n}: invalid JSON ({e.msg} at column {e.colno}); one JSON object per line"
        ) from None
    except RecursionError:
        raise InputError(
            f"{path}:{n}: invalid JSON (nested too deeply to read); one flat JSON object per line"
        ) from None


class _Line:
    def __init__(self, path: Path, n: int, obj: dict[str, Any]):
        self.path, self.n, self.obj = path, n, obj

    def where(self) -> str:
        return f"{self.path}:{self.n}"

    def get(
        self, key: str, typ: type | tuple[type, ...], *, required: bool = True, default: Any = None
    ) -> Any:
        if key not in self.obj:
            if required:
                raise InputError(
                    f"{self.where()}: missing key {key!r} (keys present: {', '.join(sorted(self.obj))})"
                )
            return default
        v = self.obj[key]
        if typ is float and isinstance(v, int) and not isinstance(v, bool):
            v = float(v)
        if not isinstance(v, typ) or (isinstance(v, bool) and typ in (int, float, (int, float))):
            tname = typ.__name__ if isinstance(typ, type) else "/".join(t.__name__ for t in typ)
            raise InputError(
                f"{self.where()}: key {key!r} should be {tname}, got {type(v).__name__} {v!r}"[:300]
            )
        return v

    def text(self, key: str) -> str:
        v: str = self.get(key, str)
        if not v.strip():
            raise InputError(f"{self.where()}: key {key!r} is empty or whitespace only")
        return v

    def path_(self, value: Any, key: str) -> Path:
        if not isinstance(value, str) or not value.strip():
            raise InputError(f"{self.where()}: {key} should be a non-empty path string, got {value!r}")
        p = Path(value)
        return p if p.is_absolute() else (self.path.parent / p)

    def paths(
        self, key: str, n: int | None = None, *, min_n: int = 1, max_n: int | None = None
    ) -> list[Path]:
        v = self.get(key, list)
        if n is not None and len(v) != n:
            raise InputError(f"{self.where()}: {key!r} should list {n} paths, got {len(v)}")
        if len(v) < min_n or (max_n is not None and len(v) > max_n):
            raise InputError(
                f"{self.where()}: {key!r} should list {min_n}..{max_n or 'any'} paths, got {len(v)}"
            )
        return [self.path_(x, f"{key}[{i}]") for i, x in enumerate(v)]

    def votes(self, key: str, n: int) -> list[float]:
        v = self.get(key, list)
        if len(v) != n:
            raise InputError(f"{self.where()}: {key!r} should have {n} counts, got {len(v)}")
        out = []
        for i, x in enumerate(v):
            if not finite_number(x) or x < 0:
                raise InputError(
                    f"{self.where()}: {key}[{i}] should be a non-negative number, got {x!r}"[:300]
                )
            out.append(float(x))
        if not math.isfinite(sum(out)):  # each finite, the sum not: every share would read 0 / inf
            raise InputError(
                f"{self.where()}: {key!r} sum to more than a float holds ({sum(out)}); divide the counts "
                "by a common factor"
            )
        if sum(out) <= 0:
            raise InputError(f"{self.where()}: {key!r} sums to zero; every record needs at least one vote")
        return out


def finite_number(x: Any) -> bool:
    """Whether ``x`` (a value read from JSON) is a number a float holds finitely: an int or float, not a
    bool, not NaN or infinite, and not an integer too large for a float (JSON integers are unbounded, and
    ``float()`` of one of 400 digits raises OverflowError).

    >>> finite_number(3), finite_number(2.5), finite_number(10**400), finite_number(True), finite_number("1")
    (True, True, False, False, False)
    """
    if isinstance(x, bool) or not isinstance(x, (int, float)):
        return False
    try:
        return math.isfinite(x)
    except OverflowError:
        return False


def _unique_id(ids: set[str], line: _Line, default: str) -> str:
    raw = line.obj.get("id", default)
    if not isinstance(raw, (str, int)) or isinstance(raw, bool):
        raise InputError(f"{line.where()}: key 'id' should be a string or integer, got {raw!r}")
    sid = str(raw)
    if sid in ids:
        raise InputError(f"{line.where()}: duplicate id {sid!r}; ids must be unique within a file")
    ids.add(sid)
    return sid


def _read(path: str | os.PathLike[str], parse) -> list:
    p = Path(path)
    ids: set[str] = set()
    out = [parse(_Line(p, n, obj), ids) for n, obj in iter_jsonl(p)]
    if not out:
        raise InputError(f"data file {str(p)!r} has no records")
    return out


@dataclass(frozen=True)
class OddOneOutRecord:
    """One odd-one-out triplet: three images, the aspect, the votes for each image being the odd one.

    >>> OddOneOutRecord("t1", (Path("a.png"), Path("b.png"), Path("c.png")), "color", (0.0, 1.0, 4.0)).source is None
    True
    """

    id: str
    images: tuple[Path, Path, Path]
    aspect: str
    votes: tuple[float, float, float]
    source: str | None = None


def load_odd_one_out(path: str | os.PathLike[str]) -> list[OddOneOutRecord]:
    """``{"id", "images": [p1,p2,p3], "aspect", "votes": [n1,n2,n3], "source"?}``; votes count which
    image is the odd one out.

    >>> import json, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     row = {"id": "t1", "images": ["a.png", "b.png", "c.png"], "aspect": "color", "votes": [0, 1, 4]}
    ...     _ = (Path(d) / "t.jsonl").write_text(json.dumps(row) + "\\n")
    ...     [(r.id, r.aspect, r.votes, r.images[2].name) for r in load_odd_one_out(Path(d) / "t.jsonl")]
    [('t1', 'color', (0.0, 1.0, 4.0), 'c.png')]
    """

    def parse(line: _Line, ids: set[str]) -> OddOneOutRecord:
        return OddOneOutRecord(
            id=_unique_id(ids, line, f"line{line.n}"),
            images=tuple(line.paths("images", 3)),  # type: ignore[arg-type]
            aspect=line.text("aspect"),
            votes=tuple(line.votes("votes", 3)),  # type: ignore[arg-type]
            source=line.get("source", str, required=False),
        )

    return _read(path, parse)


@dataclass(frozen=True)
class TwoAFCRecord:
    """One 2AFC judgement: a reference, two candidates, the aspect, the votes for each candidate.

    >>> TwoAFCRecord("p1", Path("r.png"), (Path("a.png"), Path("b.png")), "overall", (3.0, 1.0)).votes
    (3.0, 1.0)
    """

    id: str
    reference: Path
    candidates: tuple[Path, Path]
    aspect: str
    votes: tuple[float, float]
    source: str | None = None


def load_two_afc(path: str | os.PathLike[str]) -> list[TwoAFCRecord]:
    """``{"id", "reference", "candidates": [p0,p1], "aspect", "votes": [n0,n1], "source"?}``; votes count
    which candidate is more similar to the reference.

    >>> import json, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     row = {"id": "p1", "reference": "r.png", "candidates": ["a.png", "b.png"], "aspect": "overall", "votes": [3, 1]}
    ...     _ = (Path(d) / "p.jsonl").write_text(json.dumps(row) + "\\n")
    ...     [(r.id, r.votes, r.reference.name) for r in load_two_afc(Path(d) / "p.jsonl")]
    [('p1', (3.0, 1.0), 'r.png')]
    """

    def parse(line: _Line, ids: set[str]) -> TwoAFCRecord:
        c0, c1 = line.paths("candidates", 2)
        v0, v1 = line.votes("votes", 2)
        return TwoAFCRecord(
            id=_unique_id(ids, line, f"line{line.n}"),
            reference=line.path_(line.get("reference", str), "reference"),
            candidates=(c0, c1),
            aspect=line.text("aspect"),
            votes=(v0, v1),
            source=line.get("source", str, required=False),
        )

    return _read(path, parse)


@dataclass(frozen=True)
class MIBPairRecord:
    """One MIB preference pair: prompt, reference subjects, two candidates from two generators, which one
    the rater preferred, and optional diagnostic labels.

    >>> r = MIBPairRecord("m1", "a cat and a dog", (Path("cat.png"),), (Path("x.png"), Path("y.png")), ("a", "b"), 1)
    >>> r.candidates[r.preference].name, r.diagnostics
    ('y.png', None)
    """

    id: str
    prompt: str
    references: tuple[Path, ...]
    candidates: tuple[Path, Path]
    generators: tuple[str, str]
    preference: int
    diagnostics: tuple[tuple[float, float, float], tuple[float, float, float]] | None = None
    bucket: dict[str, Any] = field(default_factory=dict)


MAX_REFERENCES = 8


def load_mib_pairs(
    path: str | os.PathLike[str], *, max_references: int = MAX_REFERENCES
) -> list[MIBPairRecord]:
    """``{"id", "prompt", "references": [...], "candidates": [pa,pb], "generators": [ga,gb],
    "preference": 0|1, "diagnostics"?: [[e,a,i],[e,a,i]], "bucket"?: {...}}``.

    >>> import json, tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     row = {"id": "m1", "prompt": "a cat and a dog", "references": ["cat.png", "dog.png"],
    ...            "candidates": ["x.png", "y.png"], "generators": ["gen_a", "gen_b"], "preference": 2}
    ...     _ = (Path(d) / "m.jsonl").write_text(json.dumps(row) + "\\n")
    ...     load_mib_pairs(Path(d) / "m.jsonl")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: ...m.jsonl:1: 'preference' should be 0 (first candidate) or 1 (second), got 2
    """

    def parse(line: _Line, ids: set[str]) -> MIBPairRecord:
        pref = line.get("preference", int)
        if pref not in (0, 1):
            raise InputError(
                f"{line.where()}: 'preference' should be 0 (first candidate) or 1 (second), got {pref!r}"
            )
        gens = line.get("generators", list, required=False, default=["?", "?"])
        if len(gens) != 2 or not all(isinstance(g, str) for g in gens):
            raise InputError(f"{line.where()}: 'generators' should be two strings, got {gens!r}")
        diag = line.get("diagnostics", list, required=False)
        if diag is not None:
            ok = len(diag) == 2 and all(
                isinstance(d, list)
                and len(d) == 3
                and all(isinstance(x, (int, float)) and not isinstance(x, bool) and 0 <= x <= 1 for x in d)
                for d in diag
            )
            if not ok:
                raise InputError(
                    f"{line.where()}: 'diagnostics' should be [[e,a,i],[e,a,i]] with values in [0,1], got {diag!r}"[
                        :300
                    ]
                )
            diag = tuple(tuple(float(x) for x in d) for d in diag)
        cands = line.paths("candidates", 2)
        return MIBPairRecord(
            id=_unique_id(ids, line, f"line{line.n}"),
            prompt=line.text("prompt"),
            references=tuple(line.paths("references", min_n=1, max_n=max_references)),
            candidates=(cands[0], cands[1]),
            generators=(gens[0], gens[1]),
            preference=pref,
            diagnostics=diag,
            bucket=line.get("bucket", dict, required=False, default={}),
        )

    return _read(path, parse)
