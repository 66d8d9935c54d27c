"""Helpers shared by CLI commands: JSON output, option parsing; ``progress`` (re-exported from
:mod:`genmetrics.data.progress`, where the library finds it too)."""

from __future__ import annotations

import ast
import json
from collections.abc import Iterable
from typing import Any

import click

from genmetrics.data.progress import progress
from genmetrics.data.text.jsonable import jsonable
from genmetrics.errors import InputError

__all__ = ["echo_json", "parse_options", "progress"]


def echo_json(obj: Any) -> None:
    """Print ``obj`` as indented JSON (tensors, paths and numpy values converted)."""
    click.echo(json.dumps(jsonable(obj), indent=2))


def parse_options(pairs: Iterable[str]) -> dict[str, Any]:
    """``KEY=VALUE`` strings -> dict; values parsed as JSON when possible (numbers, booleans, lists), else as a
    Python literal (a tuple such as ``(0.0448, 0.2856)``, ``None``, ``True``, ``'to_first'``: the spelling
    messages use; never evaluated as code), else kept as text.

    >>> parse_options(["batch_size=16", "betas=(0.0448, 0.2856)", "betas2=[1, 2]", "weights=ViT-B-32/openai"])
    {'batch_size': 16, 'betas': (0.0448, 0.2856), 'betas2': [1, 2], 'weights': 'ViT-B-32/openai'}
    >>> parse_options(["resize='to_first'", 'resize2="to_first"', "resize3=to_first"])  # quoted or not: one value
    {'resize': 'to_first', 'resize2': 'to_first', 'resize3': 'to_first'}
    >>> parse_options(["max_db=("])  # not a value: the metric names it as text
    {'max_db': '('}

    A key given twice is refused (one of the two values would be dropped without a word).
    """
    out: dict[str, Any] = {}
    given: dict[str, str] = {}
    for item in pairs:
        key, sep, value = item.partition("=")
        key = key.strip()
        if not sep or not key:
            raise InputError(f"--option {item!r}: expected KEY=VALUE, e.g. --option batch_size=16")
        if key in given:
            raise InputError(
                f"--option {key}: given twice ({given[key]!r} and {item!r}); expected each key once. "
                f"Fix: keep the one --option {key}=... you mean"
            )
        given[key] = item
        try:
            out[key] = json.loads(value)
        except json.JSONDecodeError:
            out[key] = _literal(value)
    return out


def _literal(value: str) -> Any:
    """A Python literal (numbers, strings, tuples, lists, dicts, booleans, None) or the text itself."""
    if len(value) > 10_000:  # a literal that long is no option value; literal_eval would parse it all
        return value
    try:
        parsed = ast.literal_eval(value.strip())
    except (ValueError, TypeError, SyntaxError, MemoryError, RecursionError):
        return value
    return parsed if isinstance(parsed, (str, tuple, list, dict, bool, int, float, type(None))) else value
