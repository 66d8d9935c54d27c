"""genmetrics: evaluation metrics for generative image models.

>>> import genmetrics as gm
>>> gm.list_metrics("*sad")
['rsad', 'sad']

Nothing heavy is imported here: ``Metric`` and the families load on first use.
"""

from __future__ import annotations

from typing import Any

# the registry's old path, reachable as ``genmetrics.registry`` after ``import genmetrics`` as before
from genmetrics import registry  # noqa: F401  (re-exports genmetrics.core.registry; no torch)
from genmetrics.core.registry import MetricCard, create_metric, list_metrics, metric_info, register_metric
from genmetrics.errors import GenmetricsError, InputError, WeightsUnavailableError

__version__ = "0.1.0"
__all__ = [
    "GenmetricsError",
    "InputError",
    "Metric",
    "MetricCard",
    "WeightsUnavailableError",
    "__version__",
    "create_metric",
    "list_metrics",
    "metric_info",
    "register_metric",
]


def __getattr__(name: str) -> Any:
    if name == "Metric":
        from genmetrics.core.metric import Metric

        return Metric
    raise AttributeError(f"module 'genmetrics' has no attribute {name!r}")
