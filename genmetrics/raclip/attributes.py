"""Attribute sets shipped as data (``genmetrics/data/attributes/*.txt``) and attribute-list resolution.

An attribute spec is a list of strings, a comma-separated string (``"smiling, wearing hat"``), the
name of a shipped set (``celeba-20``, ``hcs-celeba-20``,
``celeba-28``, ``celeba-12-irrelevant``, ``celeba-40``, ``coco-80``, ``imagenet-1k``; case and ``_``/``-``
do not matter) or the path of a UTF-8 text file with one attribute per line (blank lines and lines
starting with ``#`` are skipped). No torch import here.
"""

from __future__ import annotations

import difflib
import os
from importlib import resources
from pathlib import Path
from typing import Any

from genmetrics.errors import InputError
from genmetrics.raclip._checks import check_attributes

ATTRIBUTE_SETS: dict[str, str] = {
    "celeba-20": "celeba_20.txt",
    "hcs-celeba-20": "hcs_celeba_20.txt",
    "celeba-28": "celeba_28.txt",
    "celeba-12-irrelevant": "celeba_12_irrelevant.txt",
    "celeba-40": "celeba_40.txt",
    "coco-80": "coco_80.txt",
    "imagenet-1k": "imagenet_1k.txt",
}


def list_attribute_sets() -> list[str]:
    """Names of the shipped attribute sets.

    >>> "celeba-20" in list_attribute_sets()
    True
    """
    return sorted(ATTRIBUTE_SETS)


def _norm(name: str) -> str:
    return name.strip().lower().replace("_", "-")


def parse_attribute_text(text: str) -> list[str]:
    """One attribute per line; blank lines and ``#`` comment lines skipped; surrounding spaces stripped.

    >>> parse_attribute_text("# CelebA, my subset\\nsmiling\\n\\n  wearing hat  \\n")
    ['smiling', 'wearing hat']
    """
    return [ln.strip() for ln in text.splitlines() if ln.strip() and not ln.lstrip().startswith("#")]


def load_attribute_set(name: str) -> list[str]:
    """The attributes of a shipped set (see :data:`ATTRIBUTE_SETS`).

    >>> attrs = load_attribute_set("celeba-20")
    >>> len(attrs), attrs[:2], load_attribute_set("CelebA_20") == attrs
    (20, ['arched eyebrows', 'bald'], True)
    """
    key = _norm(name)
    compact = {k.replace("-", ""): k for k in ATTRIBUTE_SETS}  # "celeba20", "coco80", "imagenet1k"
    key = compact.get(key.replace("-", ""), key)
    if key not in ATTRIBUTE_SETS:
        close = difflib.get_close_matches(key, list(ATTRIBUTE_SETS), n=3, cutoff=0.5)
        hint = f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""
        raise InputError(
            f"attributes: unknown attribute set {name!r}{hint} Shipped sets: {', '.join(list_attribute_sets())}; "
            "or pass a text file with one attribute per line, or a list of strings"
        )
    text = (resources.files("genmetrics.data") / "attributes" / ATTRIBUTE_SETS[key]).read_text(
        encoding="utf-8"
    )
    return parse_attribute_text(text)


def read_attribute_file(path: str | os.PathLike) -> list[str]:
    """The attributes of a UTF-8 text file (one per line, see :func:`parse_attribute_text`).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "attrs.txt").write_text("smiling\\nwearing hat\\n", encoding="utf-8")
    ...     read_attribute_file(Path(d) / "attrs.txt")
    ['smiling', 'wearing hat']
    """
    p = Path(path)
    if not p.exists():
        raise InputError(
            f"attributes: file {str(p)!r} does not exist; pass a shipped set name "
            f"({', '.join(list_attribute_sets())}) or an existing text file"
        )
    if p.is_dir():
        raise InputError(
            f"attributes: {str(p)!r} is a folder; expected a text file with one attribute per line"
        )
    try:
        text = p.read_text(encoding="utf-8")
    except UnicodeDecodeError:
        raise InputError(
            f"attributes: file {str(p)!r} is not UTF-8 text; save it as UTF-8, one attribute per line"
        ) from None
    attrs = parse_attribute_text(text)
    if not attrs:
        raise InputError(
            f"attributes: file {str(p)!r} lists no attributes (only blank or '#' lines); add one per line"
        )
    return attrs


def resolve_attributes(spec: Any, *, name: str = "attributes") -> list[str]:
    """A list of attribute strings from a list, a shipped set name or a text file; validated
    (non-empty, no empty strings, no duplicates).

    >>> resolve_attributes("smiling, wearing hat"), len(resolve_attributes("coco-80"))
    (['smiling', 'wearing hat'], 80)
    """
    if spec is None:
        raise InputError(
            f"{name}: no attributes given; pass a list of strings, a shipped set name "
            f"({', '.join(list_attribute_sets())}) or a text file with one attribute per line"
        )
    if isinstance(spec, os.PathLike):
        return check_attributes(read_attribute_file(spec), name=name)
    if isinstance(spec, str):
        if _norm(spec) in ATTRIBUTE_SETS:
            return check_attributes(load_attribute_set(spec), name=name)
        p = Path(spec)
        if "," in spec and not p.exists():  # "smiling, wearing hat": an inline comma-separated list
            return check_attributes([a.strip() for a in spec.split(",") if a.strip()], name=name)
        if p.suffix or os.sep in spec or (os.altsep and os.altsep in spec) or p.exists():
            return check_attributes(read_attribute_file(p), name=name)
        return check_attributes(load_attribute_set(spec), name=name)  # raises with close matches
    return check_attributes(spec, name=name)
