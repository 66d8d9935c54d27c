"""How many processes decode images (the input pipeline's workers) and the ``--workers`` flag; no torch here,
so a command's start-up stays light."""

from __future__ import annotations

import os

import click

from genmetrics.errors import InputError
from genmetrics.options import MAX_WORKERS

__all__ = ["MAX_DEFAULT_WORKERS", "MAX_WORKERS", "check_workers", "default_workers", "workers_option"]

#: the most workers :func:`default_workers` chooses (decoding a batch rarely needs more to keep up)
MAX_DEFAULT_WORKERS = 8


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


#: ``--workers N``: processes that decode the images (every command that reads image files)
workers_option = click.option(
    "--workers",
    type=click.IntRange(min=0, max=MAX_WORKERS),
    default=None,
    help="Processes that decode images, overlapped with the model (default: one per available core but "
    f"one, at most {MAX_DEFAULT_WORKERS}; 0 decodes in the main process; at most {MAX_WORKERS}).",
)
