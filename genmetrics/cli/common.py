"""Helpers shared by CLI commands: JSON output, option parsing; ``progress`` (re-exported from
:mod:`genmetrics.data.progress`, where the library finds it too)."""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

import click

from genmetrics.data.progress import progress
from genmetrics.data.results import jsonable
from genmetrics.errors import InputError

__all__ = ["echo_json", "parse_options", "progress"]


def echo_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON (tensors, paths and numpy values converted)."""
    click.echo(json.dumps(jsonable(obj), indent=2))


def parse_options(pairs: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings -> dict; values parsed as JSON when possible (numbers, booleans, lists)."""
    out: dict[str, Any] = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        if not sep or not key:
            raise InputError(f"--option {item!r}: expected KEY=VALUE, e.g. --option batch_size=16")
        try:
            out[key.strip()] = json.loads(value)
        except json.JSONDecodeError:
            out[key.strip()] = value
    return out
