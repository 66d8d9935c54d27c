"""Progress of long work, for the library and the CLI alike (the library never imports the CLI).

* on a terminal (stderr is a TTY): a tqdm bar;
* without one (a log file, a batch job): one line every :data:`LINE_INTERVAL_S` seconds
  (``psnr | model-a: 40/100 batch [00:30<00:45, 1.33 batch/s]``), nothing for work shorter than that;
* ``GENMETRICS_PROGRESS``: ``1``/``true``/``yes``/``on`` always draws the bar, ``0``/``false``/``no``/``off``
  turns every progress output off (read by :func:`genmetrics.core.options.env`, a bad value is named).
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterable, Iterator
from typing import TypeVar

from tqdm.auto import tqdm

from genmetrics.core.options import env

T = TypeVar("T")

#: seconds between two progress lines when stderr is not a terminal
LINE_INTERVAL_S = 30.0
__all__ = ["LINE_INTERVAL_S", "progress", "progress_mode"]


def progress_mode() -> str:
    """``"bar"`` (a terminal, or ``GENMETRICS_PROGRESS=1``), ``"lines"`` (no terminal) or ``"off"``.

    >>> import os
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"GENMETRICS_PROGRESS": "no"}):
    ...     progress_mode()
    'off'
    >>> with mock.patch.dict(os.environ, {"GENMETRICS_PROGRESS": "yes"}):
    ...     progress_mode()
    'bar'
    """
    setting = env("GENMETRICS_PROGRESS")
    if setting == "0":
        return "off"
    if setting == "1" or sys.stderr.isatty():
        return "bar"
    return "lines"


def progress(
    iterable: Iterable[T], *, desc: str = "", total: int | None = None, unit: str = "it"
) -> Iterator[T]:
    """Iterate over ``iterable`` showing progress on stderr as :func:`progress_mode` says.

    >>> import os
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"GENMETRICS_PROGRESS": "0"}):
    ...     list(progress(range(3), desc="psnr"))
    [0, 1, 2]
    """
    mode = progress_mode()
    if mode == "bar":
        yield from tqdm(iterable, desc=desc, total=total, unit=unit, file=sys.stderr, dynamic_ncols=True)
    elif mode == "lines":
        yield from _lines(iterable, desc=desc, total=total, unit=unit)
    else:
        yield from iterable


def _lines(iterable: Iterable[T], *, desc: str, total: int | None, unit: str) -> Iterator[T]:
    """One line (tqdm's own format, without the bar) each time :data:`LINE_INTERVAL_S` has passed."""
    start = last = time.monotonic()
    for n, item in enumerate(iterable, 1):
        yield item
        now = time.monotonic()
        if now - last >= LINE_INTERVAL_S:
            last = now
            line = tqdm.format_meter(
                n,
                total,
                now - start,
                prefix=desc,
                unit=unit,
                bar_format="{desc}: {n_fmt}/{total_fmt} {unit} [{elapsed}<{remaining}, {rate_fmt}]",
            )
            print(line, file=sys.stderr, flush=True)
