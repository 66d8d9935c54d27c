"""The common metric contract: a thin layer over ``torchmetrics.Metric``.

* ``update(reference=None, candidates=None, condition=None, *, ids=None)`` accumulates;
* ``compute()`` returns the accumulated value, synchronised across processes (torchmetrics semantics);
* ``compute(reference, candidates, condition)`` scores just these inputs and leaves the state untouched
  (by construction it equals ``reset(); update(...); compute()`` on a copy of the state).

Backbones are registered with :meth:`Metric.register_backbone`: they are frozen, kept in eval mode,
moved by ``.to(device)``, and are **not** part of ``state_dict()`` or ``parameters()``.

:class:`SampleMetric` is the base of every metric that gives one score per candidate: it keeps the
per-sample scores (float64) and their ids, drops the duplicates a distributed sampler pads in, and
scores in chunks of ``batch_size`` with CUDA out-of-memory back-off. Results do not depend on
``batch_size``.
"""

from __future__ import annotations

import hashlib
import math
from collections.abc import Sequence
from typing import Any, ClassVar

import torch
import torchmetrics
from torch import nn

from genmetrics.errors import InputError


def hash_id(sample_id: Any) -> int:
    """A stable signed 64-bit integer for a sample id (strings, ints, paths)."""
    if isinstance(sample_id, bool):
        raise InputError(f"ids: expected str or int sample ids, got {sample_id!r}")
    if isinstance(sample_id, int):
        return int(sample_id)
    digest = hashlib.blake2b(str(sample_id).encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


class Metric(torchmetrics.Metric):
    """Base class of every genmetrics metric (see module docstring for the contract)."""

    #: the registry name; set by each subclass
    name: ClassVar[str] = ""
    full_state_update: ClassVar[bool] = False
    is_differentiable: ClassVar[bool] = False
    higher_is_better: ClassVar[bool | None] = None

    def __init__(self, *, batch_size: int = 32, device: str | torch.device | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise InputError(f"batch_size: expected a positive integer, got {batch_size!r}")
        self.batch_size = batch_size
        self._backbones: dict[str, nn.Module] = {}
        self._install_compute()
        if device is not None:
            self.to(device)

    # ----------------------------------------------------------------- compute dispatch
    def _install_compute(self) -> None:
        self._compute_accumulated = self._wrap_compute(self._compute_state)
        self.compute = self._dispatch_compute  # type: ignore[method-assign]

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)
        self._install_compute()

    def compute(self, reference: Any = None, candidates: Any = None, condition: Any = None) -> Any:  # noqa: D102
        # Replaced per instance by _dispatch_compute; kept for signature and docs.
        return self._dispatch_compute(reference, candidates, condition)

    def _dispatch_compute(self, reference: Any = None, candidates: Any = None, condition: Any = None) -> Any:
        if reference is None and candidates is None and condition is None:
            distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
            if self._update_count == 0 and not distributed:
                raise InputError(
                    f"{self.name or type(self).__name__}: compute() called before any update(); nothing to score. "
                    "Call update(...) first, or compute(reference, candidates, condition) for a one-shot score."
                )
            return self._compute_accumulated()
        return self.score(reference, candidates, condition)

    def score(self, reference: Any = None, candidates: Any = None, condition: Any = None, **kwargs: Any) -> Any:
        """One-shot value of just these inputs; the accumulated state is left untouched."""
        saved = {k: (v.clone() if isinstance(v, torch.Tensor) else list(v)) for k, v in
                 ((k, getattr(self, k)) for k in self._defaults)}
        saved_meta = (self._update_count, self._computed, dict(self.__dict__.get("_id_names", {})))
        try:
            self.reset()
            self.update(reference, candidates, condition, **kwargs)
            return self._compute_state()
        finally:
            for k, v in saved.items():
                setattr(self, k, v)
            self._update_count, self._computed, names = saved_meta
            if "_id_names" in self.__dict__:
                self._id_names = names

    def _compute_state(self) -> Any:
        raise NotImplementedError

    # ----------------------------------------------------------------- backbones
    def register_backbone(self, name: str, module: nn.Module) -> nn.Module:
        """Keep ``module`` frozen and in eval mode, outside ``state_dict()``; ``.to()`` moves it."""
        module.eval()
        module.requires_grad_(False)
        self._backbones[name] = module
        if self._device is not None:
            try:
                module.to(self._device)
            except (RuntimeError, NotImplementedError):  # meta tensors etc.
                pass
        return module

    def backbone(self, name: str = "backbone") -> nn.Module:
        return self._backbones[name]

    # ----------------------------------------------------------------- public introspection
    #: constructor options that change how work is done, never the value (left out of :meth:`options`)
    RUNTIME_OPTIONS: ClassVar[frozenset[str]] = frozenset({
        "device", "batch_size", "cache_dir", "compute_on_cpu", "dist_sync_on_step", "process_group",
        "dist_sync_fn", "distributed_available_fn", "sync_on_compute", "compute_with_cache"})

    def __new__(cls, *args: Any, **kwargs: Any) -> Metric:
        self = super().__new__(cls)
        import inspect

        try:
            bound = inspect.signature(cls.__init__).bind_partial(self, *args, **kwargs).arguments
        except TypeError:  # __init__ will raise its own, clearer error
            bound = dict(kwargs)
        opts: dict[str, Any] = {}
        for k, v in bound.items():
            if k == "self":
                continue
            if isinstance(v, dict) and k == "kwargs":
                opts.update(v)
            else:
                opts[k] = v
        self.__dict__["_given_options"] = opts  # before nn.Module.__init__: plain attribute
        return self

    def options(self) -> dict[str, Any]:
        """The options this metric was built with that define its values (``create_metric(name, **opts)``),
        for manifests and for grouping equal metrics; runtime options (:attr:`RUNTIME_OPTIONS`: device,
        batch size, caches, torchmetrics' sync settings) are left out. Values are as given (a backbone
        module stays a module).

        >>> import genmetrics as gm
        >>> gm.create_metric("psnr", max_db=80.0, batch_size=4).options()
        {'max_db': 80.0}
        """
        return {k: v for k, v in self.__dict__.get("_given_options", {}).items() if k not in self.RUNTIME_OPTIONS}

    def has_data(self) -> bool:
        """Whether :meth:`update` was called since construction or the last :meth:`reset` (in this process).

        >>> import genmetrics as gm, torch
        >>> m = gm.create_metric("psnr")
        >>> m.has_data()
        False
        >>> m.update(reference=torch.zeros(1, 3, 8, 8), candidates=torch.ones(1, 3, 8, 8))
        >>> m.has_data()
        True
        """
        return self._update_count > 0

    def backbones(self) -> dict[str, nn.Module]:
        """The backbones loaded so far, by name (a metric that loads default weights lazily has none before
        it first scores). They are frozen and outside ``state_dict()``.

        >>> import genmetrics as gm
        >>> from genmetrics.testing import tiny_dino
        >>> sorted(gm.create_metric("dino", backbone=tiny_dino()).backbones())
        ['backbone']
        """
        return dict(self.__dict__.get("_backbones", {}))

    def state_snapshot(self) -> Any:
        """An opaque copy of the accumulated state, for :meth:`restore_state` (e.g. score the same reference
        state against several candidate sets)."""
        state = {k: (v.clone() if isinstance(v, torch.Tensor) else [t.clone() for t in v])
                 for k, v in ((k, getattr(self, k)) for k in self._defaults)}
        return state, self._update_count, dict(self.__dict__.get("_id_names", {}))

    def restore_state(self, snapshot: Any) -> None:
        """Put back the state of a :meth:`state_snapshot` (the snapshot stays reusable)."""
        state, count, names = snapshot
        for k, v in state.items():
            setattr(self, k, v.clone() if isinstance(v, torch.Tensor) else [t.clone() for t in v])
        self._update_count = count
        self._computed = None
        if "_id_names" in self.__dict__:
            self._id_names = dict(names)

    def _apply(self, fn: Any, exclude_state: Sequence[str] = "") -> nn.Module:  # type: ignore[override]
        this = super()._apply(fn, exclude_state)
        for module in self.__dict__.get("_backbones", {}).values():
            module._apply(fn)
        return this

    def train(self, mode: bool = True) -> Metric:
        super().train(mode)
        for module in self.__dict__.get("_backbones", {}).values():
            module.eval()
        return self

    def extra_repr(self) -> str:
        return ", ".join(f"{k}={type(v).__name__}" for k, v in self.__dict__.get("_backbones", {}).items())


class SampleMetric(Metric):
    """A metric with one score (or one score vector) per candidate.

    Subclasses implement :meth:`_prepare` (validate and normalise the inputs into a dict of equal-length
    lists, without loading weights) and :meth:`_score_batch` (score one chunk, return a tensor ``[b]`` or
    ``[b, C]``, or a dict whose ``"score"`` entry is that and whose other entries are per-sample extras).
    ``compute()`` is the mean over samples (per column for ``[b, C]``).
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        self.add_state("sample_ids", default=[], dist_reduce_fx="cat")
        self._id_names: dict[int, str] = {}
        self._extras: dict[str, list[torch.Tensor]] = {}

    # -- hooks ------------------------------------------------------------------------
    def _prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        raise NotImplementedError

    def _score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor | dict[str, torch.Tensor]:
        raise NotImplementedError

    # -- update -----------------------------------------------------------------------
    def update(self, reference: Any = None, candidates: Any = None, condition: Any = None, *, ids: Any = None) -> None:
        from genmetrics.data.batching import map_batches

        batch = self._prepare(reference, candidates, condition)
        n = _batch_len(batch)
        hashed = self._hash_ids(ids, n)
        results = map_batches(lambda sl: self._score_batch(_slice(batch, sl)), n, self.batch_size)
        score = torch.cat([r["score"] if isinstance(r, dict) else r for r in results], 0)
        if score.shape[0] != n:
            raise RuntimeError(f"{type(self).__name__}._score_batch returned {score.shape[0]} scores for {n} samples")
        self.scores.append(score.detach().to(device=self.device, dtype=torch.float64))
        self.sample_ids.append(torch.tensor(hashed, dtype=torch.long, device=self.device))

    def _hash_ids(self, ids: Any, n: int) -> list[int]:
        if ids is None:
            # Unnamed samples never collide: a negative running counter per metric instance and rank.
            start = sum(int(t.numel()) for t in self.sample_ids)
            rank = torch.distributed.get_rank() if torch.distributed.is_available() and torch.distributed.is_initialized() else 0
            return [-(1 + start + i) - (rank << 40) for i in range(n)]
        ids = list(ids) if not isinstance(ids, (str, bytes)) else [ids]
        if len(ids) != n:
            raise InputError(f"ids: got {len(ids)} ids for {n} samples; pass one id per candidate")
        out = []
        for i in ids:
            h = hash_id(i)
            if h < 0 and not isinstance(i, int):
                h = h & ((1 << 62) - 1)  # keep named ids non-negative: negatives are reserved for unnamed samples
            elif isinstance(i, int) and i < 0:
                raise InputError(f"ids: integer ids must be >= 0, got {i}")
            self._id_names[h] = str(i)
            out.append(h)
        return out

    # -- results ----------------------------------------------------------------------
    def _gathered(self) -> tuple[torch.Tensor, torch.Tensor]:
        scores = self.scores
        ids = self.sample_ids
        if isinstance(scores, list):
            if not scores:
                raise InputError(f"{self.name or type(self).__name__}: compute() called before any update(); nothing to score")
            scores, ids = torch.cat(scores, 0), torch.cat(ids, 0)
        if scores.numel() == 0:
            raise InputError(f"{self.name or type(self).__name__}: no samples were scored")
        return _drop_duplicate_ids(scores, ids)

    def _compute_state(self) -> torch.Tensor:
        scores, _ = self._gathered()
        return self._reduce(scores)

    def _reduce(self, scores: torch.Tensor) -> torch.Tensor:
        return scores.mean(0)

    def has_data(self) -> bool:
        """Whether at least one sample was scored in this process since the last :meth:`reset` (an
        ``update`` that raised on bad input adds none)."""
        ids = self.sample_ids
        return bool(ids.numel()) if isinstance(ids, torch.Tensor) else any(t.numel() for t in ids)

    def per_sample(self, *, sync: bool = True) -> dict[str, Any]:
        """Per-sample scores, gathered from every process when running distributed (``sync=True``).

        Returns ``{"ids": [str|None], "scores": Tensor [N] or [N,C]}`` with padded duplicates dropped;
        ids are ``None`` for samples updated without ``ids=``.
        """
        names = dict(self._id_names)
        distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
        if sync and distributed and torch.distributed.get_world_size() > 1:
            gathered: list[Any] = [None] * torch.distributed.get_world_size()
            torch.distributed.all_gather_object(gathered, names)
            for g in gathered:
                names.update(g)
            with self.sync_context(dist_sync_fn=self.dist_sync_fn, should_sync=True, should_unsync=True):
                scores, ids = self._gathered()
        else:
            scores, ids = self._gathered()
        return {"ids": [names.get(int(i)) if int(i) >= 0 else None for i in ids], "scores": scores}


def _batch_len(batch: dict[str, list[Any]]) -> int:
    lengths = {k: len(v) for k, v in batch.items() if v is not None}
    if not lengths:
        raise InputError("no inputs given; pass candidates (and reference/condition where the metric needs them)")
    if len(set(lengths.values())) != 1:
        desc = ", ".join(f"{k}={v}" for k, v in lengths.items())
        raise InputError(f"mismatched input lengths ({desc}); every input needs one entry per sample")
    n = next(iter(lengths.values()))
    if n == 0:
        raise InputError("the batch is empty; pass at least one sample")
    return n


def _slice(batch: dict[str, Any], sl: slice) -> dict[str, Any]:
    return {k: (v[sl] if v is not None else None) for k, v in batch.items()}


def _drop_duplicate_ids(scores: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the first occurrence of every id (distributed samplers pad by repeating samples)."""
    if ids.numel() == 0:
        return scores, ids
    uniq, inverse = torch.unique(ids, return_inverse=True)
    if uniq.numel() == ids.numel():
        return scores, ids
    positions = torch.arange(ids.numel(), device=ids.device)
    first = torch.full((uniq.numel(),), ids.numel(), dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, inverse, positions, reduce="amin")
    keep = torch.sort(first).values
    return scores[keep], ids[keep]


def as_text_list(texts: Any, *, name: str = "condition", allow_empty: bool = False) -> list[str]:
    """A string or a list of strings -> list of stripped-checked strings (empty ones are an error)."""
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, Sequence) or isinstance(texts, (bytes, bytearray)):
        raise InputError(f"{name}: expected a string or a list of strings, got {type(texts).__name__}")
    out = []
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InputError(f"{name}[{i}]: expected a string, got {type(t).__name__} {t!r}"[:200])
        if not allow_empty and not t.strip():
            raise InputError(f"{name}[{i}]: the text is empty or whitespace only; give a non-empty text")
        out.append(t)
    return out


def finite_or_nan(x: float) -> float:
    return x if math.isfinite(x) else float("nan")
