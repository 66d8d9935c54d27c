"""The metric contract's old import path: :mod:`genmetrics.core.metric` is its home (re-exported here)."""

from __future__ import annotations

from genmetrics.core.metric import *  # noqa: F403  (the names of its __all__)
from genmetrics.core.metric import __all__ as __all__
