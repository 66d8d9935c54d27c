"""The base class :class:`SampleMetric`: one score (or score vector) per candidate, kept per sample with its
id (see :mod:`genmetrics.core.metric` for the contract; import the class from there).
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, cast

import torch

from genmetrics.core._torchmetrics_compat import is_synced
from genmetrics.core.metric_base import Metric
from genmetrics.core.metric_batches import batch_len, slice_batch
from genmetrics.core.sample_ids import collision_message, conflicting_ids, drop_duplicate_ids, hash_ids
from genmetrics.data.io.batching import map_batches
from genmetrics.errors import InputError, PluginError


class SampleMetric(Metric):
    """A metric with one score (or one score vector) per candidate.

    Subclasses implement two public hooks (docs/plugins.md): :meth:`prepare` (validate and normalise the
    inputs into a dict of equal-length lists, without loading weights) and :meth:`score_batch` (score one
    chunk, return a tensor ``[b]`` or ``[b, C]``, or a dict whose ``"score"`` entry is that and whose other
    entries are per-sample extras). ``compute()`` is the mean over samples (per column for ``[b, C]``).

    A complete metric used directly (registered with a :class:`~genmetrics.core.registry.MetricCard`, for the
    CLI and leaderboards, it reads ``name`` and ``paired`` from the card instead: docs/plugins.md):

    >>> class MeanAbsDiff(SampleMetric):
    ...     name = "mean_abs_diff"
    ...     paired = True
    ...     def prepare(self, reference, candidates, condition):
    ...         return {"reference": list(reference), "candidates": list(candidates)}
    ...     def score_batch(self, batch):
    ...         r, c = torch.stack(batch["reference"]), torch.stack(batch["candidates"])
    ...         return (r - c).abs().flatten(1).mean(1).double()
    >>> m = MeanAbsDiff(batch_size=2)  # results do not depend on batch_size
    >>> m.update(torch.zeros(3, 4), torch.tensor([[1.0], [2.0], [3.0]]).expand(3, 4), ids=["a", "b", "c"])
    >>> m.per_sample()["ids"], m.per_sample()["scores"].tolist(), float(m.compute())
    (['a', 'b', 'c'], [1.0, 2.0, 3.0], 2.0)
    """

    #: list states with one row per sample besides ``scores`` and ``sample_ids`` (e.g. mie's diagnostics):
    #: merged and loaded states are checked to have one row per sample id
    sample_states: ClassVar[tuple[str, ...]] = ()

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        self.add_state("sample_ids", default=[], dist_reduce_fx="cat")
        self._id_names: dict[int, str] = {}
        self._seen_ids: set[int] = set()

    # -- hooks ------------------------------------------------------------------------
    def prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        """The hook that checks one update's inputs (a plugin implements it): return a dict of equal-length
        lists, one entry per candidate (``None`` for an input the metric does not take). It loads no weights
        and raises :class:`~genmetrics.errors.InputError` naming the input for anything it cannot take."""
        raise NotImplementedError(
            f"{type(self).__name__}: implement prepare(reference, candidates, condition) -> dict of lists"
        )

    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor | dict[str, torch.Tensor]:
        """The hook that scores one chunk of at most ``batch_size`` samples of :meth:`prepare`'s dict (a
        plugin implements it): a tensor ``[b]`` or ``[b, C]``, or a dict whose ``"score"`` is that and whose
        other entries are per-sample extras kept as states of the same name (see :attr:`sample_states`)."""
        raise NotImplementedError(
            f"{type(self).__name__}: implement score_batch(batch) -> tensor [b] or [b, C]"
        )

    def _checked_result(self, result: Any, b: int) -> Any:
        """``result`` of :meth:`score_batch` for a chunk of ``b`` samples, or a :class:`~genmetrics.errors.PluginError` naming the
        class, what arrived and the fix: a real tensor ``[b]`` or ``[b, C]`` (or a dict with ``"score"`` that
        is one and per-sample extras kept as states, of ``b`` rows)."""
        where = f"{type(self).__name__}.score_batch"
        fix = "return a real tensor [b] or [b, C], or a dict whose 'score' is one (docs/plugins.md)"
        parts = result if isinstance(result, dict) else {"score": result}
        if "score" not in parts:
            raise PluginError(f"{where} returned a dict without 'score' (keys {sorted(parts)}); {fix}")
        for k, v in parts.items():
            if k != "score" and k not in self._state_specs:
                continue  # not kept
            what = "scores" if k == "score" else f"extra {k!r}"
            if not isinstance(v, torch.Tensor):
                raise PluginError(f"{where} returned {what} as {type(v).__name__} for {b} samples; {fix}")
            if v.is_complex():
                raise PluginError(f"{where} returned {what} as {v.dtype}; {fix}")
            if k == "score" and v.ndim not in (1, 2) or v.ndim == 0 or v.shape[0] != b:
                raise PluginError(f"{where} returned {what} of shape {tuple(v.shape)} for {b} samples; {fix}")
        return result

    def _peak_bytes(self, batch: dict[str, list[Any]]) -> Any:
        """A memory model ``peak(b)`` for :func:`~genmetrics.data.io.batching.map_batches` (None: none)."""
        return None

    # -- update -----------------------------------------------------------------------
    def update(
        self, reference: Any = None, candidates: Any = None, condition: Any = None, *, ids: Any = None
    ) -> None:
        """Score and accumulate one batch. ``ids`` (one per candidate; str, int or integer tensors) name the
        samples: a DistributedSampler's padded copies are then counted once. An id repeated within the
        update is an error; an id this metric already scored in this process is dropped with a warning."""
        batch = self.prepare(reference, candidates, condition)
        if not isinstance(batch, dict):
            raise PluginError(
                f"{type(self).__name__}.prepare returned {type(batch).__name__}; it must return a dict of "
                "equal-length lists, one entry per candidate (docs/plugins.md): return {'candidates': [...], ...}"
            )
        n = batch_len(batch)
        hashed, labels = hash_ids(ids, n)
        seen = self._seen_ids
        repeated = [j for j, h in enumerate(hashed) if h >= 0 and h in seen] if seen else []
        self._last_kept: list[int] | None = (
            None  # positions of this update's samples that were kept (None: all)
        )
        if repeated:
            warnings.warn(
                f"{self.name or type(self).__name__}: {len(repeated)} sample id(s) were already scored by this metric "
                f"in this process (first: {labels[repeated[0]]!r}); the repeats are dropped and the first score kept. "
                "De-duplication by id exists for the copies a DistributedSampler pads in across processes; call "
                "reset() between epochs, or give every sample its own id.",
                UserWarning,
                stacklevel=4,
            )
            keep = [j for j in range(n) if j not in set(repeated)]
            self._last_kept = keep
            if not keep:
                return
            batch = {k: (None if v is None else [v[j] for j in keep]) for k, v in batch.items()}
            hashed, labels, n = [hashed[j] for j in keep], [labels[j] for j in keep], len(keep)
        results = map_batches(
            lambda sl: self._checked_result(self.score_batch(slice_batch(batch, sl)), sl.stop - sl.start),
            n,
            self.batch_size,
            peak_bytes=self._peak_bytes(batch),
            device=self.device,
        )
        score = torch.cat([r["score"] if isinstance(r, dict) else r for r in results], 0)
        # score_batch returns dicts for every slice or for none
        extras = {
            k: torch.cat([cast(dict, r)[k] for r in results], 0)
            for k in (results[0] if isinstance(results[0], dict) else ())
            if k != "score" and k in self._state_specs
        }
        # no detach: a differentiable metric's forward / score keep the graph (merged states never do)
        self.scores.append(score.to(device=self.device, dtype=torch.float64))
        for (
            k,
            v,
        ) in extras.items():  # per-sample extras kept as states of the same name (e.g. mie diagnostics)
            getattr(self, k).append(v.detach().to(device=self.device, dtype=torch.float64))
        # built on the host, copied without waiting for the device (a blocking copy would synchronise per batch)
        self.sample_ids.append(torch.tensor(hashed, dtype=torch.long).to(self.device, non_blocking=True))
        for h, label in zip(hashed, labels):
            if h >= 0:
                self._seen_ids.add(h)
                self._id_names[h] = label

    def _bookkeeping(self) -> Any:
        return dict(self._id_names), set(self._seen_ids)

    def _set_bookkeeping(self, book: Any) -> None:
        names, seen = book if book is not None else ({}, set())
        self._id_names, self._seen_ids = dict(names), set(seen)

    def _merge_bookkeeping(self, other: Metric) -> None:
        self._id_names.update(getattr(other, "_id_names", {}))
        self._seen_ids |= getattr(other, "_seen_ids", set())

    def _id_labels(self) -> dict[int, str]:
        return dict(self._id_names)

    def _per_sample_states(self) -> list[str]:
        """The list states with one row per sample, besides ``sample_ids`` (``scores`` and the extras)."""
        return ["scores", *(k for k in self.sample_states if k in self._state_specs)]

    def _check_rows(self, states: dict[str, Any], action: str) -> None:
        label = self.name or type(self).__name__
        ids = states["sample_ids"]
        ids = ids if isinstance(ids, list) else [ids]
        if any(t.is_floating_point() or t.is_complex() or t.dtype == torch.bool for t in ids):
            raise InputError(f"{label}: {action}: state 'sample_ids' should hold int64 ids; it was edited")
        n = sum(int(t.shape[0]) if t.ndim else 1 for t in ids)
        for k in self._per_sample_states():
            v = states[k] if isinstance(states[k], list) else [states[k]]
            rows = sum(int(t.shape[0]) if t.ndim else 1 for t in v)
            if rows != n:
                raise InputError(
                    f"{label}: {action}: state {k!r} holds {rows} rows for {n} sample ids; one row per "
                    "sample is expected: the state was edited or belongs to another metric"
                )

    def _stacked(self, states: dict[str, Any], k: str) -> torch.Tensor:
        v = states[k]
        v = v if isinstance(v, list) else [v]
        return torch.cat([t.reshape(t.shape[0] if t.ndim else 1, *t.shape[1:]).to(self.device) for t in v], 0)

    def _check_merged_ids(self, states: dict[str, Any], names: dict[int, str], action: str) -> None:
        mine = dict(self.metric_state)
        if not self.has_data():
            return
        keys = ["sample_ids", *self._per_sample_states()]
        both = {k: torch.cat([self._stacked(mine, k), self._stacked(states, k)], 0) for k in keys}
        if not both["sample_ids"].numel():
            return
        bad = conflicting_ids(both["sample_ids"], [both[k] for k in keys[1:]])
        if bad.numel():
            labels = {**names, **self._id_names}
            shown = [repr(labels.get(int(h), str(int(h)))) for h in bad[:3].tolist()]
            raise InputError(collision_message(self.name or type(self).__name__, action, shown, bad.numel()))

    def _rebuild_bookkeeping(self) -> None:
        ids = self.sample_ids
        ids = torch.cat(ids) if isinstance(ids, list) and ids else ids
        if isinstance(ids, torch.Tensor) and ids.numel():
            self._seen_ids = {int(i) for i in ids.tolist() if i >= 0}

    # -- results ----------------------------------------------------------------------
    def _gathered(self) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self.scores
        ids = self.sample_ids
        if isinstance(scores, list):
            if not scores:
                raise InputError(
                    f"{self.name or type(self).__name__}: compute() called before any update(); nothing to score"
                )
            scores, ids = torch.cat(scores, 0), torch.cat(ids, 0)
        if scores.numel() == 0:
            raise InputError(f"{self.name or type(self).__name__}: no samples were scored")
        bad = conflicting_ids(ids, [scores])  # gathered from processes that named different samples alike
        if bad.numel():
            shown = [repr(self._id_names.get(int(h), str(int(h)))) for h in bad[:3].tolist()]
            raise InputError(
                collision_message(self.name or type(self).__name__, "compute", shown, bad.numel())
            )
        return drop_duplicate_ids(scores, ids)

    def compute_state(self) -> torch.Tensor:
        """The value of the mean of the per-sample scores from the accumulated (synced) state (the
        :meth:`~genmetrics.core.metric_base.Metric.compute_state` hook)."""
        scores, _ = self._gathered()
        return self._reduce(scores)

    def _reduce(self, scores: torch.Tensor) -> torch.Tensor:
        return scores.mean(0)

    def has_data(self) -> bool:
        """Whether at least one sample was scored in this process since the last :meth:`reset` (an
        ``update`` that raised on bad input adds none)."""
        ids = self.sample_ids
        return bool(ids.numel()) if isinstance(ids, torch.Tensor) else any(t.numel() for t in ids)

    @contextmanager
    def _synced(self, sync: bool = True) -> Iterator[dict[int, str]]:
        """Inside the block the states hold every process's samples (when ``sync`` and running distributed);
        yields the names of the ids of every process."""
        names = dict(self._id_names)
        dist = torch.distributed
        if (
            sync
            and dist.is_available()
            and dist.is_initialized()
            and dist.get_world_size(self.process_group) > 1
            and not is_synced(self)
        ):
            gathered: list[Any] = [None] * dist.get_world_size(self.process_group)
            dist.all_gather_object(gathered, names, group=self.process_group)
            for g in gathered:
                names.update(g)
            with self.sync_context(dist_sync_fn=self.dist_sync_fn, should_sync=True, should_unsync=True):
                yield names
        else:
            yield names

    def per_sample(self, *, sync: bool = True) -> dict[str, Any]:
        """Per-sample scores, gathered from every process when running distributed (``sync=True``).

        Returns ``{"ids": [str|None], "scores": Tensor [N] or [N,C]}`` with padded duplicates dropped;
        ids are ``None`` for samples updated without ``ids=``.

        >>> import genmetrics as gm
        >>> m = gm.create_metric("psnr")
        >>> ref = torch.full((2, 3, 8, 8), 0.5)
        >>> m.update(reference=ref, candidates=ref, ids=["cat.png", "dog.png"])
        >>> m.update(reference=ref[:1], candidates=ref[:1] + 0.1)
        >>> ps = m.per_sample()
        >>> ps["ids"], [round(v, 3) for v in ps["scores"].tolist()]
        (['cat.png', 'dog.png', None], [100.0, 100.0, 20.0])
        """
        with self._synced(sync) as names:
            scores, ids = self._gathered()
        return {"ids": [names.get(i) if i >= 0 else None for i in ids.tolist()], "scores": scores}
