"""The public path of :mod:`genmetrics.data.io.batching` (kept: the documented names, re-exported)."""

from genmetrics.data.io.batching import (
    device_memory,
    fixed_batches,
    iter_decoded,
    map_batches,
    padding_efficiency,
    safe_batch_size,
    token_budget_batches,
)

__all__ = [
    "device_memory",
    "fixed_batches",
    "iter_decoded",
    "map_batches",
    "padding_efficiency",
    "safe_batch_size",
    "token_budget_batches",
]
