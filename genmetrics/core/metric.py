"""The common metric contract: a thin layer over ``torchmetrics.Metric``.

* ``update(reference=None, candidates=None, condition=None, *, ids=None)`` accumulates;
* ``compute()`` returns the accumulated value, synchronised across processes (torchmetrics semantics);
* ``compute(reference, candidates, condition)`` scores just these inputs and leaves the state untouched
  (by construction it equals ``reset(); update(...); compute()`` on a copy of the state).

Backbones are registered with :meth:`Metric.register_backbone`: they are frozen, kept in eval mode,
moved by ``.to(device)``, and are **not** part of ``state_dict()`` or ``parameters()``. A model the caller
passed (``callers=True``) is moved but keeps its ``requires_grad`` flags and train/eval mode; it is scored
inside :func:`eval_mode`.

:class:`SampleMetric` is the base of every metric that gives one score per candidate: it keeps the
per-sample scores (float64) and their ids, drops the duplicates a distributed sampler pads in, and
scores in chunks of ``batch_size`` with CUDA out-of-memory back-off. Results do not depend on
``batch_size``.

torchmetrics conventions hold (tested by ``tests/contract``): ``forward()`` / ``metric(batch)``
returns the batch value and accumulates every batch; ``merge_state``, pickling, ``torch.save``,
``state_dict`` round trips (with ``persistent(True)``), ``set_dtype`` (floating states only; the int64 id
state is never cast), ``MetricCollection(compute_groups=True)`` (metrics whose :meth:`Metric.options`
differ never share a state), DDP ranks without any update, ``plot()`` and the ``preds=``/``target=``
keywords of paired metrics (``preds`` = candidates, ``target`` = reference).

Sample ids: samples updated without ``ids=`` are all kept (never de-duplicated). Named ids
are de-duplicated only across processes, for the copies a ``DistributedSampler`` pads in; an id repeated
within one update is an error, an id already scored in this process is dropped with a warning.

The code lives in small modules, all re-exported here (import from ``genmetrics.core.metric``):
``metric_base`` (:class:`Metric`), ``sample_metric`` (:class:`SampleMetric`), ``sample_ids`` (ids and
their de-duplication), ``metric_states`` (option-state names, the agreed gather, state merging) and
``metric_batches`` (batch length / chunks, meta tensors, :func:`eval_mode`).
"""

from __future__ import annotations

from genmetrics.core.metric_base import Metric
from genmetrics.core.metric_batches import batch_len, eval_mode, slice_batch
from genmetrics.core.metric_states import OPTIONS_STATE_PREFIX, AgreedGather, finite_or_nan
from genmetrics.core.sample_ids import UNNAMED_ID, hash_id, keep_index
from genmetrics.core.sample_metric import SampleMetric

# as_text_list is re-exported: the text contract lives in data/text.py, below metric and backbones
from genmetrics.data.text.inputs import as_text_list

__all__ = [
    "OPTIONS_STATE_PREFIX",
    "UNNAMED_ID",
    "AgreedGather",
    "Metric",
    "SampleMetric",
    "as_text_list",
    "batch_len",
    "eval_mode",
    "finite_or_nan",
    "hash_id",
    "keep_index",
    "slice_batch",
]
