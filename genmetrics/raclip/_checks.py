"""Input checks shared by the raclip modules (no torch import)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from genmetrics.errors import InputError

__all__ = ["check_attributes"]


def check_attributes(attributes: Any, *, name: str = "attributes") -> list[str]:
    """A non-empty list of distinct, non-empty strings (a single string is one attribute)."""
    if isinstance(attributes, str):
        attributes = [attributes]
    if attributes is None:
        raise InputError(f"{name}: no attributes given; pass a list of strings or an attribute set name")
    if not isinstance(attributes, Sequence) or isinstance(attributes, (bytes, bytearray)):
        raise InputError(f"{name}: expected a list of strings, got {type(attributes).__name__}")
    attrs = list(attributes)
    if not attrs:
        raise InputError(
            f"{name}: the attribute list is empty; pass at least one attribute (e.g. ['smiling'])"
        )
    seen: dict[str, int] = {}
    for i, a in enumerate(attrs):
        if not isinstance(a, str):
            raise InputError(f"{name}[{i}]: expected a string, got {type(a).__name__} {a!r}"[:200])
        if not a.strip():
            raise InputError(f"{name}[{i}]: the attribute is empty or whitespace only; remove it")
        key = " ".join(a.split()).lower()
        if key in seen:
            raise InputError(
                f"{name}: duplicate attribute {a!r} at positions {seen[key]} and {i}; every attribute must appear "
                "once (remove the duplicate)"
            )
        seen[key] = i
    return attrs
