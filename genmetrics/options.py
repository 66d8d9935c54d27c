"""The option checks' old import path: :mod:`genmetrics.core.options` is their home (re-exported here)."""

from __future__ import annotations

from genmetrics.core.options import *  # noqa: F403  (the names of its __all__)
from genmetrics.core.options import __all__ as __all__
