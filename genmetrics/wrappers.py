"""torchmetrics' wrappers, adapted to genmetrics metrics (import explicitly: ``from genmetrics.wrappers import ...``).

torchmetrics' own ``BootStrapper``, ``MetricTracker`` and ``ClasswiseWrapper`` work with every genmetrics
metric whose inputs are tensors and whose result is a tensor (copies share the frozen backbone). These
subclasses cover the rest:

* :class:`BootStrapper` resamples *every* per-sample input (tensors along dim 0 and lists: prompts, image
  paths, reference lists, ids) with the same indices, so a candidate keeps its reference and its prompt
  (torchmetrics resamples tensors only); a set metric (sad, pad, rsad) resamples each set on its own; dict
  results (``{"mean", "per_attribute"}``) are bootstrapped entry by entry.
* :class:`MetricTracker` ranks dict results by their ``"mean"``.
* :class:`ClasswiseWrapper` labels the ``per_attribute`` / ``per_pair`` entry of a dict result, with the
  metric's attributes (or attribute pairs) as default labels.
"""

from __future__ import annotations

from typing import Any

import torch
import torchmetrics.wrappers as tw

from genmetrics.core.metric import SampleMetric
from genmetrics.errors import InputError


def _is_batch(value: Any) -> bool:
    if isinstance(value, torch.Tensor):
        return value.ndim >= 1
    return isinstance(value, (list, tuple))


def _take(value: Any, idx: torch.Tensor) -> Any:
    if isinstance(value, torch.Tensor):
        return value.index_select(0, idx.to(value.device))
    return [value[i] for i in idx.tolist()]


class BootStrapper(tw.BootStrapper):
    """``torchmetrics.wrappers.BootStrapper`` that keeps pairs together and bootstraps dict results.

    >>> import torch, genmetrics as gm
    >>> from genmetrics.wrappers import BootStrapper
    >>> boot = BootStrapper(gm.create_metric("psnr"), num_bootstraps=4)
    >>> x = torch.rand(6, 3, 8, 8)
    >>> boot.update(reference=x, candidates=x)  # identical pairs: every resample gives max_db
    >>> boot.compute()["mean"].item()
    100.0
    """

    def _indices(self, n: int) -> torch.Tensor:
        if self.sampling_strategy == "poisson":
            return torch.arange(n).repeat_interleave(torch.poisson(torch.ones(n)).long())
        return torch.multinomial(torch.ones(n), n, replacement=True)

    def update(self, *args: Any, **kwargs: Any) -> None:
        """Feed each bootstrap copy of the metric a resample of this batch: one shared index set for
        per-candidate inputs of equal length, an independent one per input otherwise (real vs
        generated sets)."""
        named = {f"#{i}": v for i, v in enumerate(args)} | dict(kwargs)
        batch = {k: len(v) for k, v in named.items() if v is not None and _is_batch(v)}
        if not batch:
            raise InputError("bootstrap: no per-sample inputs (tensors or lists) to resample")
        joint = isinstance(self.metrics[0], SampleMetric) and len(set(batch.values())) == 1
        for metric in self.metrics:
            if joint:  # one entry per candidate: resample every input with the same indices
                idx = self._indices(next(iter(batch.values())))
                picks = {k: idx for k in batch}
            else:  # independent sets (real vs generated): each set is resampled on its own
                picks = {k: self._indices(n) for k, n in batch.items()}
            if any(p.numel() == 0 for p in picks.values()):
                continue
            new = {k: (_take(v, picks[k]) if k in picks else v) for k, v in named.items()}
            metric.update(
                *[new[f"#{i}"] for i in range(len(args))],
                **{k: v for k, v in new.items() if not k.startswith("#")},
            )

    def _summary(self, values: torch.Tensor) -> dict[str, torch.Tensor]:
        out: dict[str, torch.Tensor] = {}
        if self.mean:
            out["mean"] = values.mean(0)
        if self.std:
            out["std"] = values.std(0)
        if self.quantile is not None:
            out["quantile"] = torch.quantile(
                values, torch.as_tensor(self.quantile, dtype=values.dtype), dim=0
            )
        if self.raw:
            out["raw"] = values
        return out

    def compute(self) -> dict[str, Any]:
        """The summaries over the bootstrap copies (``mean``, ``std``, ``quantile``, ``raw`` as configured), per
        key for a metric that returns a dict."""
        values = [m.compute() for m in self.metrics]
        if isinstance(values[0], dict):
            return {k: self._summary(torch.stack([v[k] for v in values])) for k in values[0]}
        return self._summary(torch.stack(values))


class MetricTracker(tw.MetricTracker):
    """``torchmetrics.wrappers.MetricTracker`` whose ``best_metric`` also ranks dict results (by ``"mean"``).

    >>> import torch, genmetrics as gm
    >>> from genmetrics.wrappers import MetricTracker
    >>> tracker = MetricTracker(gm.create_metric("psnr"))
    >>> ref = torch.full((2, 3, 8, 8), 0.5)
    >>> for noise in (0.2, 0.1, 0.3):  # one step per epoch; less noise is better
    ...     tracker.increment()
    ...     tracker.update(reference=ref, candidates=ref + noise)
    >>> value, step = tracker.best_metric(return_step=True)
    >>> round(value, 3), step
    (20.0, 1)
    """

    def best_metric(self, return_step: bool = False) -> Any:
        """The best tracked value (highest or lowest by ``maximize``) and, with ``return_step``, its step; for a
        bootstrapped metric the best ``mean``."""
        res = self.compute_all()
        if isinstance(res, dict) and "mean" in res and not isinstance(self.maximize, list):
            value, step = (torch.max if self.maximize else torch.min)(res["mean"], 0)
            return (value.item(), step.item()) if return_step else value.item()
        return super().best_metric(return_step=return_step)


class ClasswiseWrapper(tw.ClasswiseWrapper):
    """``torchmetrics.wrappers.ClasswiseWrapper`` for per-attribute results: a dict result gives its
    ``per_attribute`` (or ``per_pair``) entry; ``labels`` default to the metric's attributes (pairs as
    ``"a|b"``).

    >>> import genmetrics as gm
    >>> from genmetrics.testing import random_images, tiny_clip
    >>> from genmetrics.wrappers import ClasswiseWrapper
    >>> model, tokenizer = tiny_clip()
    >>> sad = gm.create_metric("sad", attributes=["smiling", "wearing hat"], backbone=model, tokenizer=tokenizer)
    >>> per_attribute = ClasswiseWrapper(sad)
    >>> per_attribute.update(reference=random_images(4, seed=1), candidates=random_images(4, seed=2))
    >>> sorted(per_attribute.compute())
    ['sad_smiling', 'sad_wearing hat']
    """

    def __init__(
        self,
        metric: Any,
        labels: list[str] | None = None,
        prefix: str | None = None,
        postfix: str | None = None,
    ) -> None:
        if labels is None and getattr(metric, "attributes", None) is not None:
            labels = (
                [f"{a}|{b}" for a, b in metric.pairs]
                if getattr(metric, "name", "") == "pad"
                else list(metric.attributes)
            )
        super().__init__(metric, labels=labels, prefix=prefix, postfix=postfix)
        # kept here: torchmetrics' own converter is private (renamed between 1.4 and 1.9)
        self.label_prefix, self.label_postfix = prefix, postfix

    def _labelled(self, x: Any) -> dict[str, Any]:
        """``{prefix + label + postfix: value}`` as torchmetrics names them (default prefix: the metric's
        class name in lower case and ``_``); a dict result gives its per-attribute entry."""
        if isinstance(x, dict):
            key = next((k for k in ("per_attribute", "per_pair") if k in x), None)
            if key is None:
                raise InputError(
                    f"ClasswiseWrapper: the result has no per-attribute entry (keys: {sorted(x)})"
                )
            x = x[key]
        prefix, postfix = self.label_prefix or "", self.label_postfix or ""
        if not prefix and not postfix:
            prefix = f"{type(self.metric).__name__.lower()}_"
        labels = self.labels if self.labels is not None else range(len(x))
        return {f"{prefix}{label}{postfix}": value for label, value in zip(labels, x)}

    def forward(self, *args: Any, **kwargs: Any) -> dict[str, Any]:
        """The batch value, labelled."""
        return self._labelled(self.metric(*args, **kwargs))

    def compute(self) -> dict[str, Any]:
        """The accumulated value, labelled."""
        return self._labelled(self.metric.compute())
