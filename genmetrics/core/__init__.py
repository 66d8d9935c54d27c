"""The contract in one home: the :class:`~genmetrics.core.metric.Metric` base and its parts (states, sample
ids, sample metrics, the torchmetrics shim), the registry of metric cards, option checks and the
card-to-inputs wiring.

Nothing heavy is imported here (the registry is read without importing torch): import the modules,
``genmetrics.core.metric`` for the classes, ``genmetrics.core.registry`` for cards and registration.
"""
