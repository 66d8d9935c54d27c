"""How many processes decode images (the input pipeline's workers) and the ``--workers`` flag; no torch here,
so a command's start-up stays light."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any, TypeVar

import click

from genmetrics.core.options import MAX_WORKERS
from genmetrics.errors import InputError

__all__ = ["MAX_DEFAULT_WORKERS", "MAX_WORKERS", "check_workers", "default_workers", "workers_option"]

#: the most workers :func:`default_workers` chooses (decoding a batch rarely needs more to keep up)
MAX_DEFAULT_WORKERS = 8

_F = TypeVar("_F", bound=Callable[..., Any])


def default_workers() -> int:
    """Decoding workers when none are asked for: one per available core but one (kept for the model and the
    main loop), at most :data:`MAX_DEFAULT_WORKERS`; 0 (decode in the calling process) on one core.

    >>> 0 <= default_workers() <= MAX_DEFAULT_WORKERS
    True
    """
    try:
        cores = len(os.sched_getaffinity(0))
    except AttributeError:  # macOS, Windows
        cores = os.cpu_count() or 1
    return max(0, min(cores - 1, MAX_DEFAULT_WORKERS))


def check_workers(workers: int | None, *, flag: str = "workers") -> int:
    """``workers`` checked (``None``: :func:`default_workers`).

    >>> check_workers(2)
    2
    >>> check_workers(-1)
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: workers: expected a number of worker processes in [0, 256], got -1 (0 decodes in the calling process)
    """
    if workers is None:
        return default_workers()
    if isinstance(workers, bool) or not isinstance(workers, int) or not 0 <= workers <= MAX_WORKERS:
        raise InputError(
            f"{flag}: expected a number of worker processes in [0, {MAX_WORKERS}], got {workers!r} "
            "(0 decodes in the calling process)"
        )
    return workers


_WORKERS_OPTION = click.option(
    "--workers",
    type=click.IntRange(min=0, max=MAX_WORKERS),
    default=None,
    help="Processes that decode images, overlapped with the model (default: one per available core but "
    f"one, at most {MAX_DEFAULT_WORKERS}; 0 decodes in the main process; at most {MAX_WORKERS}).",
)


def workers_option(command: _F) -> _F:
    """Add ``--workers N`` (processes that decode the images) to a click command; click refuses a value
    outside ``[0, MAX_WORKERS]`` as :func:`check_workers` does in the Python API, and no flag gives ``None``.

    >>> from click.testing import CliRunner
    >>> cmd = click.command()(workers_option(lambda workers: print(workers)))
    >>> [CliRunner().invoke(cmd, a).output.strip() for a in ([], ["--workers", "0"], ["--workers", "256"])]
    ['None', '0', '256']
    >>> CliRunner().invoke(cmd, ["--workers", "257"]).exit_code
    2
    """
    return _WORKERS_OPTION(command)
