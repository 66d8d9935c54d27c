"""The registry's old import path: :mod:`genmetrics.core.registry` is its home (re-exported here)."""

from __future__ import annotations

from genmetrics.core.registry import (
    ENTRY_POINT_GROUP,
    TORCHMETRICS_OPTIONS,
    ConditionKind,
    Granularity,
    MetricCard,
    Need,
    ReferenceKind,
    alias_of,
    create_metric,
    get_card,
    lazy_exports,
    list_metrics,
    metric_class,
    metric_info,
    metric_options,
    register_metric,
    unregister_metric,
)

__all__ = [
    "ENTRY_POINT_GROUP",
    "TORCHMETRICS_OPTIONS",
    "ConditionKind",
    "Granularity",
    "MetricCard",
    "Need",
    "ReferenceKind",
    "alias_of",
    "create_metric",
    "get_card",
    "lazy_exports",
    "list_metrics",
    "metric_class",
    "metric_info",
    "metric_options",
    "register_metric",
    "unregister_metric",
]
