"""Helpers shared by CLI commands: progress bars, JSON output, option parsing."""

from __future__ import annotations

import json
import sys
from collections.abc import Iterable, Iterator
from typing import Any, TypeVar

import click

T = TypeVar("T")


def progress(
    iterable: Iterable[T], *, desc: str = "", total: int | None = None, unit: str = "it"
) -> Iterator[T]:
    """A tqdm bar on a terminal (stderr); silent when stderr is not a TTY or GENMETRICS_PROGRESS=0."""
    import os

    from tqdm.auto import tqdm

    disable = not sys.stderr.isatty() or os.environ.get("GENMETRICS_PROGRESS", "") == "0"
    if os.environ.get("GENMETRICS_PROGRESS", "") == "1":
        disable = False
    yield from tqdm(
        iterable, desc=desc, total=total, unit=unit, disable=disable, file=sys.stderr, dynamic_ncols=True
    )


def echo_json(obj: Any) -> None:
    from genmetrics.data.results import _jsonable

    click.echo(json.dumps(_jsonable(obj), indent=2))


def parse_options(pairs: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings -> dict; values parsed as JSON when possible (numbers, booleans, lists)."""
    from genmetrics.errors import InputError

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
