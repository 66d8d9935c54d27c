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

torchmetrics conventions hold (issue 15, tested by ``tests/contract``): ``forward()`` / ``metric(batch)``
returns the batch value and accumulates every batch; ``merge_state``, pickling, ``torch.save``,
``state_dict`` round trips (with ``persistent(True)``), ``set_dtype`` (floating states only; the int64 id
state is never cast), ``MetricCollection(compute_groups=True)`` (metrics whose :meth:`Metric.options`
differ never share a state), DDP ranks without any update, ``plot()`` and the ``preds=``/``target=``
keywords of paired metrics (``preds`` = candidates, ``target`` = reference).

Sample ids (issue 14.2): samples updated without ``ids=`` are all kept (never de-duplicated). Named ids
are de-duplicated only across processes, for the copies a ``DistributedSampler`` pads in; an id repeated
within one update is an error, an id already scored in this process is dropped with a warning.
"""

from __future__ import annotations

import copy
import functools
import hashlib
import inspect
import math
import operator
import os
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar, cast

import torch
import torchmetrics
from torch import nn
from torchmetrics.utilities.distributed import gather_all_tensors
from torchmetrics.utilities.exceptions import TorchMetricsUserError
from torchmetrics.utilities.plot import plot_single_or_multi_val

from genmetrics._torchmetrics_compat import (
    BackbonesFollowTo,
    is_synced,
    set_forward_cache,
    set_reported_dtype,
    set_update_count,
)
from genmetrics.data.batching import map_batches

# as_text_list is re-exported: the text contract lives in data/text.py, below metric and backbones
from genmetrics.data.text import as_text_list as as_text_list
from genmetrics.errors import InputError
from genmetrics.options import device as check_device
from genmetrics.registry import get_card

#: the id of every sample updated without ``ids=`` (such samples are never de-duplicated)
UNNAMED_ID = -1
#: the prefix of the (always empty) state whose name encodes the metric's options: torchmetrics'
#: MetricCollection only groups metrics whose state names are equal, so differing options never share a state
OPTIONS_STATE_PREFIX = "_options_"


def hash_id(sample_id: Any, *, name: str = "ids") -> int:
    """A stable signed 64-bit integer for a sample id: integers (Python, NumPy or a one-element integer
    tensor, taken by value) as they are, anything else (strings, paths) by a hash of its text.

    >>> hash_id(7), hash_id(torch.tensor(7)), hash_id("img_001.png") == hash_id("img_001.png")
    (7, 7, True)
    """
    if isinstance(sample_id, torch.Tensor):
        if sample_id.is_meta:
            raise InputError(
                f"{name}: a meta tensor has no value to use as an id; pass the id itself (int or str)"
            )
        if (
            sample_id.numel() != 1
            or sample_id.is_floating_point()
            or sample_id.is_complex()
            or sample_id.dtype == torch.bool
        ):
            raise InputError(
                f"{name}: a tensor id must hold one integer, got a {str(sample_id.dtype)[6:]} tensor of "
                f"shape {tuple(sample_id.shape)}; pass ints or strings"
            )
        sample_id = int(sample_id.item())
    elif not isinstance(sample_id, (str, bytes, int, os.PathLike)) and hasattr(sample_id, "__index__"):
        sample_id = operator.index(sample_id)  # NumPy integers
    if isinstance(sample_id, bool) or not isinstance(sample_id, (str, bytes, int, os.PathLike)):
        # None, floats and other objects would be matched by their text ("None", "1.0" != 1): refuse them
        raise InputError(
            f"{name}: expected str or int sample ids, got {type(sample_id).__name__} {sample_id!r}"[:300]
        )
    if isinstance(sample_id, int):
        if not -(1 << 63) <= sample_id < (1 << 63):
            shown = str(sample_id) if len(str(sample_id)) < 40 else str(sample_id)[:36] + "..."
            raise InputError(
                f"{name}: the integer id {shown} does not fit in 64 bits (ids must be below 2**63); "
                "pass such ids as strings, e.g. ids=[str(i) for i in ids]"
            )
        return int(sample_id)
    # surrogateescape: a file name that is not valid UTF-8 (os.fsdecode gives lone surrogates) still has an id
    digest = hashlib.blake2b(str(sample_id).encode("utf-8", "surrogateescape"), digest_size=8).digest()
    return int.from_bytes(digest, "little", signed=True)


def _canonical(value: Any) -> str:
    """A stable text for an option value (modules and other objects by type: equal options, equal text)."""
    if value is None or isinstance(value, (bool, int, float, str, bytes, torch.dtype, torch.device)):
        return repr(value)
    if isinstance(value, os.PathLike):
        return repr(os.fspath(value))
    if isinstance(value, torch.Tensor):
        if value.is_meta:
            return f"tensor{tuple(value.shape)}:meta"
        data = value.detach().cpu().contiguous()
        return f"tensor{tuple(value.shape)}{value.dtype}:{hashlib.sha1(data.numpy().tobytes()).hexdigest()}"
    if isinstance(value, dict):
        return (
            "{"
            + ",".join(
                f"{_canonical(k)}:{_canonical(v)}"
                for k, v in sorted(value.items(), key=lambda kv: str(kv[0]))
            )
            + "}"
        )
    if isinstance(value, (list, tuple, set, frozenset)):
        items = sorted(value, key=repr) if isinstance(value, (set, frozenset)) else value
        return "[" + ",".join(_canonical(v) for v in items) + "]"
    return type(value).__module__ + "." + type(value).__qualname__


def _has_meta(value: Any, depth: int = 0) -> bool:
    if isinstance(value, torch.Tensor):
        return value.is_meta
    if isinstance(value, (list, tuple)) and depth < 3:
        return any(_has_meta(v, depth + 1) for v in value)
    if isinstance(value, dict) and depth < 3:
        return any(_has_meta(v, depth + 1) for v in value.values())
    return False


class AgreedGather:
    """torchmetrics' ``dist_sync_fn`` for genmetrics states: before the gather, every process agrees on the
    dtype and the trailing shape of the tensor, so a process without any update (whose list state is
    torchmetrics' empty float placeholder) sends an empty tensor that matches the others (gloo aborts on a
    dtype mismatch). Then ``gather`` (default: torchmetrics' ``gather_all_tensors``) does the gather.

    >>> fn = AgreedGather()
    >>> fn.gather is None, callable(fn)
    (True, True)
    """

    def __init__(self, gather: Any = None) -> None:
        if isinstance(gather, AgreedGather):
            gather = gather.gather
        self.gather: Any = gather

    def __call__(self, tensor: torch.Tensor, group: Any = None) -> list[torch.Tensor]:
        dist = torch.distributed
        if not (dist.is_available() and dist.is_initialized()):
            # a caller's own gather (dist_sync_fn=) that works without torch.distributed (XLA, a test's fake
            # gather): there is no process group to agree through, so it gets the tensor as it is
            return (self.gather or gather_all_tensors)(tensor, group=group)
        meta = None if tensor.numel() == 0 else (tensor.dtype, tuple(tensor.shape[1:]))
        metas: list[Any] = [None] * dist.get_world_size(group)
        dist.all_gather_object(metas, meta, group=group)
        known = [m for m in metas if m is not None]
        if known:  # empty everywhere: the placeholders already match
            dtype = functools.reduce(torch.promote_types, [m[0] for m in known])
            if tensor.numel():
                tensor = tensor.to(dtype)
            else:
                tensor = torch.empty((0, *known[0][1]), dtype=dtype, device=tensor.device)
        return (self.gather or gather_all_tensors)(tensor, group=group)


#: how genmetrics merges two states (forward, merge_state); torchmetrics' names
_REDUCTIONS = ("sum", "cat", "min", "max")


def _tensors(value: Any) -> list[Any]:
    return list(value) if isinstance(value, list) else [value]


def _merge_pair(reduce: Any, first: Any, second: Any) -> Any:
    """The state ``reduce`` gives for two states (first, then second), detached from any graph."""
    with torch.no_grad():
        if reduce == "cat":
            return [t.detach() for t in _tensors(first) + _tensors(second)]
        if reduce == "sum":
            return first.detach() + second.detach()
        if reduce in ("min", "max"):
            return getattr(torch, reduce)(first.detach(), second.detach())
        return reduce(torch.stack([first.detach(), second.detach()]))


def _after_load(module: Metric, incompatible_keys: Any) -> None:
    """``load_state_dict`` post-hook (a module-level function, so metrics stay picklable)."""
    module._state_loaded()


def _squeeze_scalars(value: Any) -> Any:
    """As torchmetrics' ``compute()`` returns it: one-element tensors as scalars, every tensor a copy."""
    if isinstance(value, dict):
        return {k: _squeeze_scalars(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return type(value)(_squeeze_scalars(v) for v in value)
    if isinstance(value, torch.Tensor):
        return (value.squeeze() if value.numel() == 1 else value).clone()
    return value


def _advertise_torchmetrics_keywords(cls: type) -> None:
    """torchmetrics' ``MetricCollection`` passes each metric only the keywords its ``update`` signature
    names: a paired metric's ``update`` also names ``preds=`` and ``target=`` (translated to
    ``candidates=`` / ``reference=`` before the update runs)."""
    update = cls.update  # type: ignore[attr-defined]
    sig = inspect.signature(update)
    params = list(sig.parameters.values())
    names = {p.name for p in params}
    if any(p.kind is p.VAR_KEYWORD for p in params) or {"preds", "target"} <= names:
        return
    extra = [
        inspect.Parameter(n, inspect.Parameter.KEYWORD_ONLY, default=None)
        for n in ("preds", "target")
        if n not in names
    ]

    @functools.wraps(update)
    def update_with_aliases(self: Metric, *args: Any, **kwargs: Any) -> Any:
        return update(self, *args, **self._translate_keywords(kwargs))

    update_with_aliases.__signature__ = sig.replace(parameters=params + extra)  # type: ignore[attr-defined]
    cls.update = update_with_aliases  # type: ignore[attr-defined]


class Metric(BackbonesFollowTo, torchmetrics.Metric):
    """Base class of every genmetrics metric (see module docstring for the contract).

    ``update`` accumulates; ``compute()`` gives the accumulated value; ``compute(reference, candidates)``
    (or ``score``) scores just those inputs and leaves the state alone:

    >>> import genmetrics as gm
    >>> m = gm.create_metric("psnr")
    >>> ref = torch.full((2, 3, 8, 8), 0.5)
    >>> m.update(reference=ref, candidates=ref + 0.1)
    >>> float(m.compute(ref, ref)), round(float(m.compute()), 3)  # one-shot (identical: max_db); accumulated
    (100.0, 20.0)
    >>> m.reset()
    >>> m.has_data()
    False
    """

    #: the registry name; set by each subclass
    name: ClassVar[str] = ""
    full_state_update: ClassVar[bool] = False
    is_differentiable: ClassVar[bool] = False
    higher_is_better: ClassVar[bool | None] = None
    #: a paired metric compares each candidate with its own reference and takes torchmetrics' ``preds=``
    #: (the candidates) and ``target=`` (the references) keywords too
    paired: ClassVar[bool] = False
    compute_on_cpu: bool

    def __init_subclass__(cls, **kwargs: Any) -> None:
        super().__init_subclass__(**kwargs)
        if cls.paired:
            _advertise_torchmetrics_keywords(cls)

    def __init__(
        self, *, batch_size: int = 32, device: str | torch.device | None = None, **kwargs: Any
    ) -> None:
        kwargs["dist_sync_fn"] = AgreedGather(kwargs.get("dist_sync_fn"))
        super().__init__(**kwargs)
        if not isinstance(batch_size, int) or isinstance(batch_size, bool) or batch_size < 1:
            raise InputError(f"batch_size: expected a positive integer, got {batch_size!r}")
        self.batch_size = batch_size
        self._backbones: dict[str, nn.Module] = {}
        #: name -> (default, reduction) of every state, as given to add_state
        self._state_specs: dict[str, tuple[Any, Any]] = {}
        self._in_forward = False
        self._loaded_empty = False  # loaded from a state_dict that held no accumulated state
        key = hashlib.blake2b(
            _canonical((type(self).__module__, type(self).__qualname__, self.options())).encode(),
            digest_size=8,
        ).hexdigest()
        self.add_state(OPTIONS_STATE_PREFIX + key, default=[], dist_reduce_fx="cat", persistent=False)
        self.register_load_state_dict_post_hook(_after_load)
        self._wrap_entry_points()
        if device is not None:
            self.to(check_device("device", device))

    # ----------------------------------------------------------------- entry points
    def _wrap_entry_points(self) -> None:
        """Put genmetrics' argument handling around the ``update`` and ``compute`` that torchmetrics
        installs on each instance (in ``__init__`` and again after unpickling): ``preds=``/``target=``,
        meta tensors, and ``compute(reference, candidates, condition)`` as a one-shot score that never goes
        through torchmetrics' cached, synchronised ``compute()``."""
        this: Any = self  # update/compute become instance attributes here (as torchmetrics makes them)
        accumulated, update = this.compute, this.update

        @functools.wraps(update)
        def checked_update(*args: Any, **kwargs: Any) -> None:
            args, kwargs = self._checked_inputs(args, kwargs)
            return update(*args, **kwargs)

        @functools.wraps(type(self).compute)
        def dispatch(
            reference: Any = None, candidates: Any = None, condition: Any = None, **kwargs: Any
        ) -> Any:
            kwargs = self._translate_keywords({"reference": reference, "candidates": candidates, **kwargs})
            reference, candidates = kwargs.pop("reference"), kwargs.pop("candidates")
            if reference is None and candidates is None and condition is None and not kwargs:
                distributed = torch.distributed.is_available() and torch.distributed.is_initialized()
                if self.update_count == 0 and not distributed:
                    raise InputError(self._nothing_to_compute())
                return accumulated()
            return self.score(reference, candidates, condition, **kwargs)

        this.update, this.compute = checked_update, dispatch

    def _checked_inputs(self, args: tuple, kwargs: dict[str, Any]) -> tuple[tuple, dict[str, Any]]:
        """``preds=``/``target=`` translated; a meta tensor anywhere is an error naming its role."""
        kwargs = self._translate_keywords(kwargs)
        roles = ("reference", "candidates", "condition")
        for i, a in enumerate(args):
            if _has_meta(a):
                raise InputError(_meta_message(roles[i] if i < len(roles) else f"argument {i}"))
        for k, v in kwargs.items():
            if _has_meta(v):
                raise InputError(_meta_message(k))
        return args, kwargs

    def _nothing_to_compute(self) -> str:
        label = self.name or type(self).__name__
        if self._loaded_empty:
            return (
                f"{label}: compute() found no accumulated state: the state_dict this metric was loaded from "
                "held none (metric states are left out of state_dict() unless metric.persistent(True) is "
                "called before it, or it was saved before any update()). Save with persistent(True), or "
                "call update(...) first"
            )
        return (
            f"{label}: compute() called before any update(); nothing to score. "
            "Call update(...) first, or compute(reference, candidates, condition) for a one-shot score."
        )

    def _translate_keywords(self, kwargs: dict[str, Any]) -> dict[str, Any]:
        """``preds=`` -> ``candidates=``, ``target=`` -> ``reference=`` (paired metrics only)."""
        if "preds" not in kwargs and "target" not in kwargs:
            return kwargs
        kwargs = dict(kwargs)
        label = self.name or type(self).__name__
        for alias, role in (("preds", "candidates"), ("target", "reference")):
            if alias not in kwargs:
                continue
            value = kwargs.pop(alias)
            if value is None:
                continue
            if not self.paired:
                raise InputError(
                    f"{label}: {alias}= is for paired metrics (a candidate against its own reference: "
                    f"psnr, ssim, ms_ssim, clip_i, dino, tpips); pass reference=/candidates=/condition= "
                    f"to {label}"
                )
            if kwargs.get(role) is not None:
                raise InputError(f"{label}: got both {alias}= and {role}= (the same input); pass one of them")
            kwargs[role] = value
        return kwargs

    def compute(
        self, reference: Any = None, candidates: Any = None, condition: Any = None, **kwargs: Any
    ) -> Any:
        """``compute()``: the accumulated value (synchronised across processes); ``compute(reference,
        candidates, condition)``: the value of just these inputs, the accumulated state left untouched
        (:meth:`score`)."""
        if reference is None and candidates is None and condition is None and not kwargs:
            return self._compute_state()
        return self.score(reference, candidates, condition, **kwargs)

    def score(
        self, reference: Any = None, candidates: Any = None, condition: Any = None, **kwargs: Any
    ) -> Any:
        """One-shot value of just these inputs; the accumulated state is left untouched. A differentiable
        metric (``is_differentiable``) keeps the autograd graph of its inputs, as a functional would.

        >>> import genmetrics as gm
        >>> m = gm.create_metric("psnr")
        >>> x = torch.full((1, 3, 8, 8), 0.5)
        >>> round(float(m.score(x, x + 0.1)), 3), m.has_data()
        (20.0, False)
        """
        args, kwargs = self._checked_inputs((reference, candidates, condition), kwargs)
        with self._aside():
            self._raw_update(args, kwargs)
            return self._compute_state()

    def _raw_update(self, args: tuple, kwargs: dict[str, Any]) -> None:
        """The class's own ``update`` (not torchmetrics' counting wrapper), with autograd on for a
        differentiable metric when the caller has it on."""
        with torch.set_grad_enabled(self.is_differentiable and torch.is_grad_enabled()):
            cls: Any = type(self)
            cls.update(self, *args, **kwargs)

    @contextmanager
    def _aside(self) -> Iterator[None]:
        """Inside the block the metric starts from an empty state; on leaving it the accumulated state is
        put back as it was (``reset`` gives new state objects, so the saved ones are never touched)."""
        saved, count, book, loaded = (
            dict(self.metric_state),
            self.update_count,
            self._bookkeeping(),
            self._loaded_empty,
        )
        self.reset()
        try:
            yield
        finally:
            for k, v in saved.items():
                setattr(self, k, v)
            set_update_count(self, count)
            self._set_bookkeeping(book)
            self._loaded_empty = loaded

    # ----------------------------------------------------------------- torchmetrics conventions
    def forward(self, *args: Any, **kwargs: Any) -> Any:
        """The value of this batch alone; the batch is also accumulated (torchmetrics' ``forward``).

        One ``update`` per batch. A batch that fails validation leaves the accumulated state as it was; a
        batch whose value alone is undefined (a set metric given one set) returns NaN and is accumulated.
        A differentiable metric's batch value keeps the autograd graph (the accumulated state never does).
        """
        if is_synced(self):
            raise TorchMetricsUserError(
                "The Metric shouldn't be synced when performing ``forward``. "
                "HINT: Did you forget to call ``unsync`` ?."
            )
        args, kwargs = self._checked_inputs(args, kwargs)
        count = self.update_count
        self._in_forward = True  # reset() keeps the per-process bookkeeping (ids seen so far)
        try:
            with self._aside():
                self._raw_update(args, kwargs)
                value = self._batch_value()
                batch, book = dict(self.metric_state), self._bookkeeping()
            self._merge_states(batch, other_first=False)
            self._set_bookkeeping(book)
            set_update_count(self, count + 1)
        finally:
            self._in_forward = False
        if self.compute_on_cpu:
            for k, v in self.metric_state.items():
                if isinstance(v, list):
                    setattr(self, k, [t.cpu() for t in v])
        set_forward_cache(self, value)
        return value

    def _batch_value(self) -> Any:
        """``forward``'s value of the batch now in the state: over every process with
        ``dist_sync_on_step``; NaN when the batch alone defines no value."""
        with self.sync_context(
            dist_sync_fn=self.dist_sync_fn, should_sync=self.dist_sync_on_step, should_unsync=True
        ):
            try:
                value = self._compute_state()
            except InputError:
                value = None
        return self._undefined_value() if value is None else _squeeze_scalars(value)

    def _undefined_value(self) -> Any:
        """What ``forward`` returns for a batch whose value alone is undefined."""
        return torch.tensor(float("nan"), dtype=torch.float64, device=self.device)

    def add_state(
        self, name: str, default: Any, dist_reduce_fx: Any = None, persistent: bool = False
    ) -> None:
        """torchmetrics' ``add_state``; genmetrics states reduce by ``"sum"``, ``"cat"``, ``"min"``,
        ``"max"`` or a callable over the stacked states (``forward`` and ``merge_state`` merge with it).

        >>> import genmetrics as gm
        >>> m = gm.create_metric("psnr")
        >>> m.add_state("total", default=torch.zeros(()), dist_reduce_fx="sum")
        >>> float(m.total)
        0.0
        """
        if not (dist_reduce_fx in _REDUCTIONS or callable(dist_reduce_fx)):
            raise ValueError(
                f"add_state({name!r}): dist_reduce_fx must be one of {', '.join(_REDUCTIONS)} or a callable "
                f"over the stacked states (genmetrics merges states with it), got {dist_reduce_fx!r}"
            )
        super().add_state(name, default, dist_reduce_fx=dist_reduce_fx, persistent=persistent)
        saved: Any = default.detach().clone() if isinstance(default, torch.Tensor) else []
        self._state_specs[name] = (saved, dist_reduce_fx)

    def reset(self) -> None:
        """Reset the accumulated state. List states get new lists (torchmetrics clears them in place, which
        would empty the copies a wrapper such as ``torchmetrics.wrappers.Running`` keeps); tensor states
        keep the dtype ``set_dtype`` gave them."""
        dtypes = {}
        for k, v in self.metric_state.items():
            if isinstance(self._state_specs[k][0], list):
                setattr(self, k, [])
            elif isinstance(v, torch.Tensor):
                dtypes[k] = v.dtype
        super().reset()
        for k, dtype in dtypes.items():
            if getattr(self, k).dtype != dtype:
                setattr(self, k, getattr(self, k).to(dtype))
        if not self.__dict__.get("_in_forward", False):
            self._set_bookkeeping(None)
        self._loaded_empty = False

    # per-process bookkeeping outside the torchmetrics states (e.g. the names of sample ids)
    def _bookkeeping(self) -> Any:
        return None

    def _set_bookkeeping(self, book: Any) -> None:
        """Put back a :meth:`_bookkeeping` copy; ``None`` clears it."""

    def _merge_bookkeeping(self, other: Metric) -> None:
        pass

    def _rebuild_bookkeeping(self) -> None:
        """Re-derive the bookkeeping from the states (after a state was loaded or merged from a dict)."""

    def _options_state(self) -> str:
        return next(k for k in self.metric_state if k.startswith(OPTIONS_STATE_PREFIX))

    def _merge_states(self, other: dict[str, Any], *, other_first: bool) -> None:
        """Merge a state dict into this state with each state's reduction (``cat`` keeps order: ``other``
        first when ``other_first``, as torchmetrics' ``merge_state`` does)."""
        missing = [k for k in self._state_specs if k not in other]
        if missing:
            raise ValueError(
                f"{self.name or type(self).__name__}: the incoming state has no {missing[0]!r}; expected the "
                f"states {', '.join(k for k in self._state_specs if not k.startswith(OPTIONS_STATE_PREFIX))}"
            )
        for k, (_, reduce) in self._state_specs.items():
            mine, theirs = getattr(self, k), other[k]
            setattr(self, k, _merge_pair(reduce, *((theirs, mine) if other_first else (mine, theirs))))

    def merge_state(self, incoming_state: dict[str, Any] | torchmetrics.Metric) -> None:
        """Add another metric's state (or a state dict) to this one: every incoming sample is kept (named
        ids present on both sides count once, as after a distributed gather).

        >>> import genmetrics as gm
        >>> a, b = gm.create_metric("psnr"), gm.create_metric("psnr")
        >>> x = torch.full((1, 3, 8, 8), 0.5)
        >>> a.update(x, x + 0.1); b.update(x, x)
        >>> a.merge_state(b)
        >>> round(float(a.compute()), 3), a.update_count  # (20 + 100) / 2
        (60.0, 2)
        """
        label = self.name or type(self).__name__
        if isinstance(incoming_state, torchmetrics.Metric):
            if type(incoming_state) is not type(self):
                raise InputError(
                    f"{label}: merge_state expects another {type(self).__name__}, got "
                    f"{type(incoming_state).__name__}"
                )
            assert isinstance(incoming_state, Metric)  # same type as self
            if incoming_state._options_state() != self._options_state():
                mine, theirs = self.options(), incoming_state.options()
                diff = sorted(
                    k for k in set(mine) | set(theirs) if _canonical(mine.get(k)) != _canonical(theirs.get(k))
                )
                raise InputError(
                    f"{label}: cannot merge the state of a metric built with other options "
                    f"({', '.join(diff) or 'options'} differ); merge metrics built alike"
                )
            self._merge_states(dict(incoming_state.metric_state), other_first=True)
            self._merge_bookkeeping(incoming_state)
            added = incoming_state.update_count
        elif isinstance(incoming_state, dict):
            options: dict[str, Any] = {k: [] for k in self.metric_state if k.startswith(OPTIONS_STATE_PREFIX)}
            self._merge_states({**options, **incoming_state}, other_first=True)
            self._rebuild_bookkeeping()
            added = 1
        else:
            raise ValueError(
                f"{label}: merge_state expects a dict of states or another {type(self).__name__}, got "
                f"{type(incoming_state).__name__}"
            )
        set_update_count(self, self.update_count + added)

    def set_dtype(self, dst_type: str | torch.dtype) -> Metric:
        """Cast the floating-point states to ``dst_type`` (``reset()`` keeps it); integer states (sample ids)
        and the backbones are never cast.

        >>> import genmetrics as gm
        >>> m = gm.create_metric("psnr").set_dtype(torch.float16)
        >>> m.update(torch.zeros(1, 3, 8, 8), torch.ones(1, 3, 8, 8))
        >>> m.scores[0].dtype, m.sample_ids[0].dtype
        (torch.float64, torch.int64)
        """
        dtype = getattr(torch, dst_type, None) if isinstance(dst_type, str) else dst_type
        if not isinstance(dtype, torch.dtype):
            raise InputError(
                f"set_dtype: expected a torch dtype such as torch.float64 or 'float16', got {dst_type!r}"
            )

        def cast(t: torch.Tensor) -> torch.Tensor:
            return t.to(dtype) if t.is_floating_point() else t

        for k, v in self.metric_state.items():
            setattr(self, k, [cast(t) for t in v] if isinstance(v, list) else cast(v))
        set_reported_dtype(self, dtype)  # ``metric.dtype`` reports it, as torchmetrics' own set_dtype does
        set_update_count(self, self.update_count)  # drops the cached value
        return self

    def _state_has_data(self) -> bool:
        for k, (default, _) in self._state_specs.items():
            v = getattr(self, k)
            if isinstance(v, list):
                if any(isinstance(t, torch.Tensor) and t.numel() for t in v):
                    return True
            elif isinstance(v, torch.Tensor) and isinstance(default, torch.Tensor):
                if v.shape != default.shape or not torch.equal(v.cpu(), default.to(v.dtype).cpu()):
                    return True
        return False

    def state_dict(self, destination: Any = None, prefix: str = "", keep_vars: bool = False) -> Any:
        """torchmetrics' ``state_dict`` (the accumulated state only after ``persistent(True)``), without
        the empty options state (so a state loads into a metric built with other runtime options).

        >>> import genmetrics as gm
        >>> m = gm.create_metric("psnr")
        >>> m.persistent(True)
        >>> sorted(m.state_dict())
        ['sample_ids', 'scores']
        """
        out = super().state_dict(destination=destination, prefix=prefix, keep_vars=keep_vars)
        for k in self.metric_state:
            if k.startswith(OPTIONS_STATE_PREFIX):
                out.pop(prefix + k, None)
        return out

    def _state_loaded(self) -> None:
        """After ``load_state_dict``: a reloaded state computes like the one that was saved."""
        has_data = self._state_has_data()
        set_update_count(self, max(self.update_count, 1) if has_data else self.update_count)
        self._rebuild_bookkeeping()
        self._loaded_empty = not has_data and self.update_count == 0

    def __setstate__(self, state: dict[str, Any]) -> None:
        super().__setstate__(state)  # torchmetrics wraps update/compute again (the wrappers are not pickled)
        self._wrap_entry_points()

    def __deepcopy__(self, memo: dict[int, Any]) -> Metric:
        # frozen backbones are shared by copies (clone(), BootStrapper, MetricTracker copy the metric)
        for module in self.__dict__.get("_backbones", {}).values():
            memo.setdefault(id(module), module)
        new = type(self).__new__(type(self))
        memo[id(self)] = new
        new.__setstate__(copy.deepcopy(self.__getstate__(), memo))
        return new

    # ----------------------------------------------------------------- plotting
    @property
    def plot_lower_bound(self) -> float | None:
        return self._card_range()[0]

    @property
    def plot_upper_bound(self) -> float | None:
        return self._card_range()[1]

    def _card_range(self) -> tuple[float | None, float | None]:
        try:
            rng = get_card(self.name).range if self.name else None
        except ValueError:
            rng = None
        if not rng:
            return None, None
        return tuple(float(b) if b is not None and math.isfinite(float(b)) else None for b in rng)  # type: ignore[return-value]

    def plot(self, val: Any = None, ax: Any = None) -> Any:
        """Plot a value (or a list of values, e.g. one per epoch) with torchmetrics' plotting helpers; the
        bounds are the card's range. Dict results plot their ``"mean"``. Returns ``(figure, axes)``.
        """
        val = val if val is not None else self.compute()

        def scalar(v: Any) -> Any:
            return v["mean"] if isinstance(v, dict) and "mean" in v else v

        val = [scalar(v) for v in val] if isinstance(val, (list, tuple)) else scalar(val)
        return plot_single_or_multi_val(
            val,
            ax=ax,
            higher_is_better=self.higher_is_better,
            name=type(self).__name__,
            lower_bound=self.plot_lower_bound,
            upper_bound=self.plot_upper_bound,
            legend_name=self.plot_legend_name,
        )

    def _compute_state(self) -> Any:
        raise NotImplementedError

    # ----------------------------------------------------------------- backbones
    def register_backbone(self, name: str, module: nn.Module, *, callers: bool = False) -> nn.Module:
        """Keep ``module`` outside ``state_dict()``; ``.to()`` moves it. A module the metric built or loaded
        is frozen and kept in eval mode. A caller's module (``callers=True``: a model the user passed, maybe
        one under training that the metric validates) keeps its ``requires_grad`` flags and its train/eval
        mode, also across the metric's own :meth:`train` / ``eval()``; the metric scores it inside
        :func:`eval_mode`."""
        callers_names = self.__dict__.setdefault("_callers_backbones", set())
        if callers:
            callers_names.add(name)
        else:
            callers_names.discard(name)
            module.eval()
            module.requires_grad_(False)
        self._backbones[name] = module
        try:
            module.to(self.device)
        except (RuntimeError, NotImplementedError):  # meta tensors etc.
            pass
        return module

    def backbone(self, name: str = "backbone") -> nn.Module:
        return self._backbones[name]

    # ----------------------------------------------------------------- public introspection
    #: constructor options that change how work is done, never the value (left out of :meth:`options`)
    RUNTIME_OPTIONS: ClassVar[frozenset[str]] = frozenset(
        {
            "device",
            "batch_size",
            "cache_dir",
            "compute_on_cpu",
            "dist_sync_on_step",
            "process_group",
            "dist_sync_fn",
            "distributed_available_fn",
            "sync_on_compute",
            "compute_with_cache",
        }
    )

    def __new__(cls, *args: Any, **kwargs: Any) -> Metric:
        self = super().__new__(cls)
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
        return {
            k: v for k, v in self.__dict__.get("_given_options", {}).items() if k not in self.RUNTIME_OPTIONS
        }

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
        return self.update_count > 0

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
        state against several candidate sets).

        >>> import genmetrics as gm
        >>> m = gm.create_metric("psnr")
        >>> ref = torch.full((1, 3, 8, 8), 0.5)
        >>> m.update(reference=ref, candidates=ref + 0.1)
        >>> snap = m.state_snapshot()
        >>> m.update(reference=ref, candidates=ref)  # one more (identical) pair: the mean moves to 60 dB
        >>> m.restore_state(snap)
        >>> round(float(m.compute()), 3), len(m.per_sample()["scores"])
        (20.0, 1)
        """
        state = {
            k: (v.clone() if isinstance(v, torch.Tensor) else [t.clone() for t in v])
            for k, v in self.metric_state.items()
        }
        return state, self.update_count, self._bookkeeping()

    def restore_state(self, snapshot: Any) -> None:
        """Put back the state of a :meth:`state_snapshot` (the snapshot stays reusable)."""
        state, count, book = snapshot
        for k, v in state.items():
            setattr(self, k, v.clone() if isinstance(v, torch.Tensor) else [t.clone() for t in v])
        set_update_count(self, count)
        self._set_bookkeeping(book)

    def train(self, mode: bool = True) -> Metric:
        super().train(mode)
        callers = self.__dict__.get("_callers_backbones", set())
        for name, module in self.__dict__.get("_backbones", {}).items():
            if name not in callers:  # a caller's module keeps the mode its owner gave it
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

    A complete plugin metric (register it with a :class:`~genmetrics.registry.MetricCard` to use it from
    the CLI and leaderboards):

    >>> class MeanAbsDiff(SampleMetric):
    ...     name = "mean_abs_diff"
    ...     paired = True
    ...     def _prepare(self, reference, candidates, condition):
    ...         return {"reference": list(reference), "candidates": list(candidates)}
    ...     def _score_batch(self, batch):
    ...         r, c = torch.stack(batch["reference"]), torch.stack(batch["candidates"])
    ...         return (r - c).abs().flatten(1).mean(1).double()
    >>> m = MeanAbsDiff(batch_size=2)  # results do not depend on batch_size
    >>> m.update(torch.zeros(3, 4), torch.tensor([[1.0], [2.0], [3.0]]).expand(3, 4), ids=["a", "b", "c"])
    >>> m.per_sample()["ids"], m.per_sample()["scores"].tolist(), float(m.compute())
    (['a', 'b', 'c'], [1.0, 2.0, 3.0], 2.0)
    """

    def __init__(self, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.add_state("scores", default=[], dist_reduce_fx="cat")
        self.add_state("sample_ids", default=[], dist_reduce_fx="cat")
        self._id_names: dict[int, str] = {}
        self._seen_ids: set[int] = set()

    # -- hooks ------------------------------------------------------------------------
    def _prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        raise NotImplementedError

    def _score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor | dict[str, torch.Tensor]:
        raise NotImplementedError

    def _peak_bytes(self, batch: dict[str, list[Any]]) -> Any:
        """A memory model ``peak(b)`` for :func:`~genmetrics.data.batching.map_batches` (None: none)."""
        return None

    # -- update -----------------------------------------------------------------------
    def update(
        self, reference: Any = None, candidates: Any = None, condition: Any = None, *, ids: Any = None
    ) -> None:
        """Score and accumulate one batch. ``ids`` (one per candidate; str, int or integer tensors) name the
        samples: a DistributedSampler's padded copies are then counted once. An id repeated within the
        update is an error; an id this metric already scored in this process is dropped with a warning."""
        batch = self._prepare(reference, candidates, condition)
        n = batch_len(batch)
        hashed, labels = self._hash_ids(ids, n)
        repeated = [j for j, h in enumerate(hashed) if h >= 0 and h in self._seen_ids]
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
            lambda sl: self._score_batch(slice_batch(batch, sl)),
            n,
            self.batch_size,
            peak_bytes=self._peak_bytes(batch),
            device=self.device,
        )
        score = torch.cat([r["score"] if isinstance(r, dict) else r for r in results], 0)
        if score.shape[0] != n:
            raise RuntimeError(
                f"{type(self).__name__}._score_batch returned {score.shape[0]} scores for {n} samples"
            )
        # _score_batch returns dicts for every slice or for none
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
        self.sample_ids.append(torch.tensor(hashed, dtype=torch.long, device=self.device))
        for h, label in zip(hashed, labels):
            if h >= 0:
                self._seen_ids.add(h)
                self._id_names[h] = label

    def _hash_ids(self, ids: Any, n: int) -> tuple[list[int], list[str]]:
        """``(hashed ids, their texts)``; unnamed samples all get :data:`UNNAMED_ID` (never de-duplicated)."""
        if ids is None:
            return [UNNAMED_ID] * n, [""] * n
        if isinstance(ids, torch.Tensor):
            if ids.is_meta:
                raise InputError("ids: a meta tensor has no values to use as ids; pass the ids themselves")
            ids = [ids] if ids.ndim == 0 else list(ids.reshape(-1).unbind(0)) if ids.ndim == 1 else [ids]
        else:
            ids = list(ids) if not isinstance(ids, (str, bytes)) else [ids]
        if len(ids) != n:
            raise InputError(f"ids: got {len(ids)} ids for {n} samples; pass one id per candidate")
        out, labels = [], []
        first: dict[int, int] = {}
        for j, i in enumerate(ids):
            h = hash_id(i, name=f"ids[{j}]")
            if isinstance(i, torch.Tensor) or (
                not isinstance(i, (str, bytes, os.PathLike)) and hasattr(i, "__index__")
            ):
                if h < 0:
                    raise InputError(f"ids[{j}]: integer ids must be >= 0, got {h}")
                text = str(h)  # integers by value: tensor(3) and 3 are the same id
            else:
                h = h & (
                    (1 << 62) - 1
                )  # keep named ids non-negative: negatives are reserved for unnamed samples
                text = str(i)
            if h in first:
                raise InputError(
                    f"ids: {text!r} appears twice in one update (positions {first[h]} and {j}); "
                    "every sample needs its own id"
                )
            first[h] = j
            out.append(h)
            labels.append(text)
        return out, labels

    def _bookkeeping(self) -> Any:
        return dict(self._id_names), set(self._seen_ids)

    def _set_bookkeeping(self, book: Any) -> None:
        names, seen = book if book is not None else ({}, set())
        self._id_names, self._seen_ids = dict(names), set(seen)

    def _merge_bookkeeping(self, other: Metric) -> None:
        self._id_names.update(getattr(other, "_id_names", {}))
        self._seen_ids |= getattr(other, "_seen_ids", set())

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
        return {"ids": [names.get(int(i)) if int(i) >= 0 else None for i in ids], "scores": scores}


@contextmanager
def eval_mode(module: nn.Module) -> Iterator[nn.Module]:
    """``module`` in eval mode and without gradients inside the block; the train/eval mode of each of its
    submodules is restored after it: how a metric scores a caller's model that may be under training.

    >>> net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5)).train()
    >>> with eval_mode(net):
    ...     net.training, net[1].training, torch.is_grad_enabled()
    (False, False, False)
    >>> net.training, net[1].training
    (True, True)
    """
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with torch.no_grad():
            yield module
    finally:
        for m, mode in modes:
            m.train(mode)


def batch_len(batch: dict[str, list[Any]]) -> int:
    """The number of samples of a prepared batch (``{input name: list or None}``): the common length of its
    given inputs; mismatched lengths, an empty batch or no input at all are an ``InputError``.

    >>> batch_len({"reference": None, "candidates": ["a.png", "b.png"], "condition": ["cat", "dog"]})
    2
    >>> batch_len({"candidates": ["a.png", "b.png"], "condition": ["cat"]})
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: mismatched input lengths (candidates=2, condition=1); every input needs one entry per sample
    """
    lengths = {k: len(v) for k, v in batch.items() if v is not None}
    if not lengths:
        raise InputError(
            "no inputs given; pass candidates (and reference/condition where the metric needs them)"
        )
    if len(set(lengths.values())) != 1:
        desc = ", ".join(f"{k}={v}" for k, v in lengths.items())
        raise InputError(f"mismatched input lengths ({desc}); every input needs one entry per sample")
    n = next(iter(lengths.values()))
    if n == 0:
        raise InputError("the batch is empty; pass at least one sample")
    return n


def slice_batch(batch: dict[str, Any], sl: slice) -> dict[str, Any]:
    """The samples ``sl`` of every given input of a prepared batch (absent inputs stay None): the chunks
    :class:`SampleMetric` scores ``batch_size`` at a time.

    >>> slice_batch({"reference": None, "candidates": ["a", "b", "c"]}, slice(1, 3))
    {'reference': None, 'candidates': ['b', 'c']}
    """
    return {k: (v[sl] if v is not None else None) for k, v in batch.items()}


def _meta_message(role: str) -> str:
    return (
        f"{role}: got a meta tensor (a shape without data), so there is nothing to score; materialise it "
        "first (load the data, or .to_empty(device=...) and fill it)"
    )


def keep_index(ids: torch.Tensor) -> torch.Tensor:
    """Positions to keep: every unnamed sample (id < 0, :data:`UNNAMED_ID`) and the first occurrence of every
    named id (the copies a distributed sampler pads in), in their original order.

    >>> keep_index(torch.tensor([7, -1, 3, 7, -1, 3])).tolist()  # the second 7 and 3 are padded copies
    [0, 1, 2, 4]
    """
    positions = torch.arange(ids.numel(), device=ids.device)
    named = ids >= 0
    if not bool(named.any()):
        return positions
    uniq, inverse = torch.unique(ids[named], return_inverse=True)
    if uniq.numel() == int(named.sum()):
        return positions
    pos_named = positions[named]
    first = torch.full((uniq.numel(),), ids.numel(), dtype=torch.long, device=ids.device)
    first = first.scatter_reduce(0, inverse, pos_named, reduce="amin")
    return torch.sort(torch.cat([positions[~named], first])).values


def _drop_duplicate_ids(scores: torch.Tensor, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Keep the first occurrence of every named id (distributed samplers pad by repeating samples) and every
    unnamed sample."""
    if ids.numel() == 0:
        return scores, ids
    keep = keep_index(ids)
    if keep.numel() == ids.numel():
        return scores, ids
    return scores[keep], ids[keep]


def finite_or_nan(x: float) -> float:
    """``x`` when it is finite, else NaN (one marker for "no value" in reports).

    >>> finite_or_nan(0.5), finite_or_nan(float("inf"))
    (0.5, nan)
    """
    return x if math.isfinite(x) else float("nan")
