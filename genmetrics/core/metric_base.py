"""The base class :class:`Metric`: genmetrics' update / compute contract on ``torchmetrics.Metric`` (see
:mod:`genmetrics.core.metric` for the contract; import both classes from there).

Argument handling around torchmetrics' per-instance ``update`` / ``compute``, the one-shot score,
``forward``, state merging, ``set_dtype``, ``state_dict``, pickling and deep copies that share the frozen
backbones, plotting from the metric card, and the public introspection the leaderboard uses.

Why ``update`` / ``compute`` are wrapped per instance (:meth:`Metric._wrap_entry_points`) and not once per
class in ``__init_subclass__``: torchmetrics itself replaces ``update`` and ``compute`` on every instance
(in ``Metric.__init__`` and again in ``__setstate__``) with wrappers that count updates, cache the computed
value and synchronise across processes. genmetrics' argument handling must sit *outside* those wrappers:
a bad input (a meta tensor, ``preds=`` on a metric that is not paired) is refused before torchmetrics counts
an update, and the one-shot ``compute(reference, candidates, condition)`` must never reach the cached,
synchronised ``compute()``. A class-level wrapper would sit inside them (torchmetrics wraps whatever the
class defines). The only class-level alternative is to override torchmetrics' private ``_wrap_update`` /
``_wrap_compute``, which adds private members to the list in :mod:`genmetrics.core._torchmetrics_compat`.
What can be done once per class is: ``preds=`` / ``target=`` in a paired metric's ``update`` signature,
the options section of its docstring and the facts read from its card (``__init_subclass__``).
"""

from __future__ import annotations

import copy
import functools
import inspect
import math
import warnings
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any, ClassVar

import torch
import torchmetrics
from torch import nn
from torchmetrics.utilities.exceptions import TorchMetricsUserError
from torchmetrics.utilities.plot import plot_single_or_multi_val

from genmetrics.core._torchmetrics_compat import (
    BackbonesFollowTo,
    is_synced,
    set_forward_cache,
    set_reported_dtype,
    set_update_count,
)
from genmetrics.core.metric_batches import has_meta, meta_message
from genmetrics.core.metric_states import (
    IDENTITY_KEY,
    OPTIONS_STATE_PREFIX,
    REDUCTIONS,
    AgreedGather,
    decode_identity,
    encode_identity,
    identity,
    identity_mismatch,
    merge_pair,
    nonfinite_count,
    options_of_state,
    options_state_name,
    squeeze_scalars,
)
from genmetrics.core.options import COUNT_MAX
from genmetrics.core.options import device as check_device
from genmetrics.core.registry import TORCHMETRICS_OPTIONS, MetricCard, card_facts, card_of_class, get_card
from genmetrics.errors import InputError, PluginError


def _after_load(module: Metric, incompatible_keys: Any) -> None:
    """``load_state_dict`` post-hook (a module-level function, so metrics stay picklable)."""
    module._state_loaded()


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


#: the plugin hooks' names before they were public (old, new); the old names work until the next release
RENAMED_HOOKS = (
    ("_prepare", "prepare"),
    ("_score_batch", "score_batch"),
    ("_compute_state", "compute_state"),
)


def _adopt_renamed_hooks(cls: type) -> None:
    """A class that implements a hook under its old private name gets it under the public name too, with a
    ``DeprecationWarning``; every hook is also reachable under its old name, so an older subclass's
    ``super()._score_batch(batch)`` still finds its parent's ``score_batch``."""
    for old, new in RENAMED_HOOKS:
        own = cls.__dict__
        if old in own and new not in own:
            warnings.warn(
                f"{cls.__qualname__} implements {old}(); the hook is public now: rename it to {new}() "
                f"({old} is still called in this release, not after)",
                DeprecationWarning,
                stacklevel=4,
            )
            setattr(cls, new, own[old])
        elif new in own and old not in own:
            setattr(cls, old, own[new])
        elif new in own and own[old] is not own[new]:
            warnings.warn(
                f"{cls.__qualname__} implements both {old}() and {new}(); only {new}() is called: move what "
                f"{old}() does into {new}() and delete {old}()",
                DeprecationWarning,
                stacklevel=4,
            )
            setattr(cls, old, own[new])


class _OptionsDoc:
    """A registered metric class's docstring, ended with its options (:mod:`genmetrics.core.option_docs`, the
    table ``genmetrics info`` shows) when first read: the names and defaults come from the class's source
    (:mod:`genmetrics.core.static_options`, never imported), which is parsed only for a reader of the
    docstring (``help``, ``inspect.getdoc``, documentation), not by every command that defines the class."""

    def __init__(self, cls: type, doc: str) -> None:
        self._factory = f"{cls.__module__}:{cls.__qualname__}"
        self._name = cls.__dict__["name"]
        self._doc = doc
        self._full: str | None = None

    def __get__(self, obj: Any, owner: Any = None) -> str:
        if self._full is None:
            from genmetrics.core.option_docs import options_section
            from genmetrics.core.static_options import static_options

            try:
                defaults = static_options(self._factory)
            except Exception:  # noqa: BLE001 - documentation only: never in the way of reading the class
                defaults = None
            self._full = self._doc
            if defaults:
                self._full = self._doc.rstrip() + "\n\n" + options_section(self._name, defaults) + "\n"
        return self._full


def _document_options(cls: type) -> None:
    """End a registered metric class's docstring with its options, built when the docstring is first read
    (:class:`_OptionsDoc`)."""
    name = cls.__dict__.get("name")
    doc = cls.__dict__.get("__doc__")
    if not isinstance(name, str) or not isinstance(doc, str) or not doc:
        return
    cls.__doc__ = _OptionsDoc(cls, doc)  # type: ignore[assignment]


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
        _adopt_renamed_hooks(cls)
        card = card_of_class(cls)
        if card is not None:
            cls._adopt_card(card)
        elif cls.paired:
            _advertise_torchmetrics_keywords(cls)
        _document_options(cls)

    @classmethod
    def _adopt_card(cls, card: MetricCard) -> None:
        """Set the facts the card declares (``name``, ``higher_is_better``, ``paired``) as class attributes; a
        value the class body states itself must agree (the card is the one declaration)."""
        for attr, value in card_facts(card).items():
            own = cls.__dict__.get(attr, value)
            if own != value:
                raise PluginError(
                    f"{cls.__qualname__}.{attr} = {own!r} but its metric card {card.name!r} says {value!r}; the "
                    f"card is the one declaration: drop {attr} from the class"
                )
            setattr(cls, attr, value)
        if cls.paired:
            _advertise_torchmetrics_keywords(cls)

    def __init__(
        self, *, batch_size: int = 32, device: str | torch.device | None = None, **kwargs: Any
    ) -> None:
        kwargs["dist_sync_fn"] = AgreedGather(kwargs.get("dist_sync_fn"))
        super().__init__(**kwargs)
        if (
            not isinstance(batch_size, int)
            or isinstance(batch_size, bool)
            or not 1 <= batch_size <= COUNT_MAX
        ):
            raise InputError(f"batch_size: expected an integer in [1, {COUNT_MAX}], got {batch_size!r}")
        self.batch_size = batch_size
        self._backbones: dict[str, nn.Module] = {}
        #: name -> (default, reduction) of every state, as given to add_state
        self._state_specs: dict[str, tuple[Any, Any]] = {}
        self._in_forward = False
        self._loaded_empty = False  # loaded from a state_dict that held no accumulated state
        self.add_state(
            options_state_name(type(self), self.options()), default=[], dist_reduce_fx="cat", persistent=False
        )
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
            if has_meta(a):
                raise InputError(meta_message(roles[i] if i < len(roles) else f"argument {i}"))
        for k, v in kwargs.items():
            if has_meta(v):
                raise InputError(meta_message(k))
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
            return self._state_value()
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
            return self._state_value()

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
                value = self._state_value()
            except InputError:
                value = None
        return self._undefined_value() if value is None else squeeze_scalars(value)

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
        if not (dist_reduce_fx in REDUCTIONS or callable(dist_reduce_fx)):
            raise ValueError(
                f"add_state({name!r}): dist_reduce_fx must be one of {', '.join(REDUCTIONS)} or a callable "
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
            setattr(self, k, merge_pair(reduce, *((theirs, mine) if other_first else (mine, theirs))))

    def merge_state(self, incoming_state: dict[str, Any] | torchmetrics.Metric) -> None:
        """Add another metric's state (or a state dict) to this one: every incoming sample is kept (named
        ids present on both sides with equal values count once, as after a distributed gather).

        The other side must be the same metric built with the same options: a metric, ``metric.metric_state``
        and ``metric.state_dict()`` say which they are and are checked; a hand-made dict of states
        (torchmetrics' dict form) is taken as this metric's. Every state must be present, of this metric's
        structure and finite; an id naming different samples on the two sides is refused.

        >>> import genmetrics as gm
        >>> a, b = gm.create_metric("psnr"), gm.create_metric("psnr")
        >>> x = torch.full((1, 3, 8, 8), 0.5)
        >>> a.update(x, x + 0.1); b.update(x, x)
        >>> a.merge_state(b)
        >>> round(float(a.compute()), 3), a.update_count  # (20 + 100) / 2
        (60.0, 2)
        """
        label = self.name or type(self).__name__
        names: dict[int, str] = {}
        if isinstance(incoming_state, torchmetrics.Metric):
            if type(incoming_state) is not type(self):
                raise InputError(
                    f"{label}: merge_state expects another {type(self).__name__}, got "
                    f"{type(incoming_state).__name__}"
                )
            assert isinstance(incoming_state, Metric)  # same type as self
            why = identity_mismatch(self._identity(), incoming_state._identity())
            if why:
                raise InputError(
                    f"{label}: cannot merge the state of a metric {why}; merge metrics built alike"
                )
            states = {
                k: v for k, v in incoming_state.metric_state.items() if not k.startswith(OPTIONS_STATE_PREFIX)
            }
            names = incoming_state._id_labels()
            added = incoming_state.update_count
        elif isinstance(incoming_state, dict):
            states = self._identified_states(dict(incoming_state), "merge_state")
            added = 1
        else:
            raise ValueError(
                f"{label}: merge_state expects a dict of states or another {type(self).__name__}, got "
                f"{type(incoming_state).__name__}"
            )
        self._check_incoming(states, "merge_state")
        self._check_merged_ids(states, names, "merge_state")
        options: dict[str, Any] = {k: [] for k in self.metric_state if k.startswith(OPTIONS_STATE_PREFIX)}
        self._merge_states({**options, **states}, other_first=True)
        if isinstance(incoming_state, Metric):
            self._merge_bookkeeping(incoming_state)
        else:
            self._rebuild_bookkeeping()
        set_update_count(self, self.update_count + added)

    # ----------------------------------------------------------------- checks of incoming states
    def _identity(self) -> dict[str, Any]:
        """The metric and options a state of this metric belongs to (:func:`~genmetrics.core.metric_states.identity`)."""
        return identity(type(self), self.name or type(self).__name__, self.options())

    def _identified_states(self, incoming: dict[str, Any], action: str, prefix: str = "") -> dict[str, Any]:
        """The states of a dict (``metric_state`` or ``state_dict()`` form) after checking what it says it
        belongs to: the identity entry of ``state_dict()`` or the options state of ``metric_state``."""
        label = self.name or type(self).__name__
        record = incoming.pop(prefix + IDENTITY_KEY, None)
        if record is not None:
            why = identity_mismatch(self._identity(), decode_identity(record, f"{label}: {action}"))
            if why:
                raise InputError(
                    f"{label}: {action}: the state belongs to a metric {why}; use a metric built alike "
                    f"(genmetrics.create_metric with those options)"
                )
        mine = self._options_state()
        for k in [k for k in incoming if k.startswith(prefix + OPTIONS_STATE_PREFIX)]:
            incoming.pop(k)
            if k != prefix + mine:
                theirs, ours = options_of_state(k[len(prefix) :]), self._identity()
                why = None  # known when a metric of this class built in this process marked the state
                if theirs is not None and theirs["class"] == ours["class"]:
                    why = identity_mismatch(ours, {**ours, "options": theirs["options"]})
                if why:
                    raise InputError(
                        f"{label}: {action}: the state belongs to a metric {why}; merge metrics built alike "
                        "(genmetrics.create_metric with those options)"
                    )
                raise InputError(
                    f"{label}: {action}: the state belongs to another metric or to one built with other "
                    f"options (its options state {k[len(prefix) :]!r} is not this metric's {mine!r}); "
                    "merge metrics built alike"
                )
        return incoming

    def _nonfinite_allowed(self, state: str) -> tuple[float, ...]:
        """The non-finite values state ``state`` may legitimately hold (default none: a NaN or an infinity in
        a state is damage, or the trace of bad inputs)."""
        return ()

    def _check_incoming(self, states: dict[str, Any], action: str) -> None:
        """Refuse states that cannot be this metric's: a state it does not have or lacks, a value that is not
        a tensor (or a list of tensors for a list state), a tensor state of another shape, non-finite values."""
        label = self.name or type(self).__name__
        known = [k for k in self._state_specs if not k.startswith(OPTIONS_STATE_PREFIX)]
        extra = sorted(k for k in states if k not in self._state_specs)
        missing = [k for k in known if k not in states]
        if extra or missing:
            what = (
                f"has {extra[0]!r}, a state this metric does not have" if extra else f"has no {missing[0]!r}"
            )
            raise InputError(
                f"{label}: {action}: the incoming state {what} (this metric's states: {', '.join(known)}); "
                "it belongs to another metric"
            )
        for k in known:
            value, is_list = states[k], isinstance(self._state_specs[k][0], list)
            tensors = value if isinstance(value, list) else [value]
            if not all(isinstance(t, torch.Tensor) for t in tensors) or (
                not is_list and isinstance(value, list)
            ):
                raise InputError(
                    f"{label}: {action}: state {k!r} should be {'a list of tensors' if is_list else 'a tensor'}, "
                    f"got {type(value).__name__}; it belongs to another metric or was edited"
                )
            narrow = next((t.dtype for t in tensors if self._narrower_than_mine(t)), None)
            if narrow is not None:
                raise InputError(
                    f"{label}: {action}: state {k!r} holds {narrow} values, this metric keeps {self.dtype}: "
                    f"its precision was lost (set_dtype({narrow}) or a cast); use a metric with "
                    f".set_dtype({narrow}), or recompute the state at {self.dtype}"
                )
            current = getattr(self, k)
            if not is_list and value.shape != current.shape:
                raise InputError(
                    f"{label}: {action}: state {k!r} has shape {list(value.shape)}, this metric's has "
                    f"{list(current.shape)}; it belongs to a metric built with other options"
                )
            allowed = self._nonfinite_allowed(k)
            bad = sum(nonfinite_count(t, allowed) for t in tensors)
            if bad:
                ok = f" (allowed here: {', '.join(map(str, allowed))})" if allowed else ""
                raise InputError(
                    f"{label}: {action}: state {k!r} holds {bad} NaN or infinite value(s){ok}; a metric "
                    "state holds finite values: it was damaged or accumulated from bad inputs; recompute it"
                )
        self._check_rows(states, action)

    def _narrower_than_mine(self, t: torch.Tensor) -> bool:
        """A floating-point state ``t`` of less precision than this metric keeps (its ``set_dtype``, at most
        float32's: a float32 state joins a float64 metric exactly)."""
        if not t.is_floating_point():
            return False
        mine = max(torch.finfo(self.dtype).eps, torch.finfo(torch.float32).eps)
        return torch.finfo(t.dtype).eps > mine

    def _check_rows(self, states: dict[str, Any], action: str) -> None:
        """Per-sample metrics: every per-sample state has one row per sample (a hook)."""

    def _check_merged_ids(self, states: dict[str, Any], names: dict[int, str], action: str) -> None:
        """Per-sample metrics: refuse ids that name different samples here and in ``states`` (a hook)."""

    def _id_labels(self) -> dict[int, str]:
        """The names of this process's hashed sample ids (per-sample metrics)."""
        return {}

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
        the empty options state (so a state loads into a metric built with other runtime options); with the
        states comes ``_genmetrics_metric``, the metric and options they belong to (``load_state_dict`` and
        ``merge_state`` check it).

        >>> import genmetrics as gm
        >>> m = gm.create_metric("psnr")
        >>> m.persistent(True)
        >>> sorted(m.state_dict())  # the states and the metric and options they belong to
        ['_genmetrics_metric', 'sample_ids', 'scores']
        """
        out = super().state_dict(destination=destination, prefix=prefix, keep_vars=keep_vars)
        for k in self.metric_state:
            if k.startswith(OPTIONS_STATE_PREFIX):
                out.pop(prefix + k, None)
        if any(prefix + k in out for k in self._state_specs):  # the states say which metric they belong to
            out[prefix + IDENTITY_KEY] = encode_identity(self._identity())
        return out

    def _load_from_state_dict(
        self,
        state_dict: dict[str, Any],
        prefix: str,
        local_metadata: dict[str, Any],
        strict: bool,
        missing_keys: list[str],
        unexpected_keys: list[str],
        error_msgs: list[str],
    ) -> None:
        """``load_state_dict`` (also as a submodule): the states are checked before any is set: the metric
        and options they belong to, their structure and finite values. A state dict without the identity
        entry (written by an earlier genmetrics) loads with a warning, its structure and values checked."""
        label = self.name or type(self).__name__
        had_identity = prefix + IDENTITY_KEY in state_dict
        incoming = self._identified_states(
            {k: v for k, v in state_dict.items() if k.startswith(prefix)}, "load_state_dict", prefix
        )
        for k in list(state_dict):
            if k.startswith(prefix) and k not in incoming:
                state_dict.pop(k)  # the identity and options entries, checked
        local = {k[len(prefix) :]: v for k, v in incoming.items() if "." not in k[len(prefix) :]}
        own = {n for n, _ in self.named_children()} | {n for n, _ in self.named_parameters(recurse=False)}
        own |= {n for n, _ in self.named_buffers(recurse=False)}
        states = {k: v for k, v in local.items() if k in self._state_specs or (strict and k not in own)}
        if states:
            self._check_incoming(states, "load_state_dict")
            if not had_identity:
                warnings.warn(
                    f"{label}: load_state_dict: the state dict does not say which metric and options it "
                    "belongs to (saved by an earlier genmetrics); loaded as this metric's state. Save it "
                    "again with state_dict() to have it checked",
                    UserWarning,
                    stacklevel=3,
                )
        super()._load_from_state_dict(
            state_dict, prefix, local_metadata, strict, missing_keys, unexpected_keys, error_msgs
        )

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
        """The lower end of the card's ``range`` (``None``: unbounded), the y-axis floor of torchmetrics' ``plot``."""
        return self._card_range()[0]

    @property
    def plot_upper_bound(self) -> float | None:
        """The upper end of the card's ``range`` (``None``: unbounded), the y-axis ceiling of torchmetrics' ``plot``."""
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

    def compute_state(self) -> Any:
        """The hook that gives the value of the accumulated state (a set-level plugin implements it with
        ``update``; :class:`~genmetrics.core.sample_metric.SampleMetric` implements it as the mean over
        samples). ``compute()``, ``forward`` and the one-shot score all call it; it raises
        :class:`~genmetrics.errors.InputError` when the state holds too little to define a value."""
        raise NotImplementedError(
            f"{type(self).__name__}: implement compute_state() (or subclass SampleMetric)"
        )

    _compute_state = compute_state  # the hook's old name (RENAMED_HOOKS)

    def _state_value(self) -> Any:
        """:meth:`compute_state`'s value, or a :class:`~genmetrics.errors.PluginError` naming the class, what
        arrived and the fix: a real tensor, a number, or a dict of names to those (``None``, text, lists and
        complex values used to come back as the metric's value)."""
        value = self.compute_state()
        parts = value.items() if isinstance(value, dict) else [("", value)]
        for k, v in parts:
            real = isinstance(v, torch.Tensor) and not v.is_complex()
            number = isinstance(v, (int, float)) and not isinstance(v, bool)
            if not (real or number) or not isinstance(k, str):
                what = f"{type(v).__name__}" + (f" {v.dtype}" if isinstance(v, torch.Tensor) else "")
                where = f" under {k!r}" if k else ""
                raise PluginError(
                    f"{type(self).__name__}.compute_state returned {what}{where}; return a real tensor (or a "
                    "number), or a dict of names to those (docs/plugins.md); raise InputError when the state "
                    "holds too little to define a value"
                )
        return value

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
        """The backbone module the metric holds as ``name`` (``KeyError`` when it holds none by that name)."""
        return self._backbones[name]

    # ----------------------------------------------------------------- public introspection
    #: constructor options that change how work is done, never the value (left out of :meth:`options`)
    RUNTIME_OPTIONS: ClassVar[frozenset[str]] = TORCHMETRICS_OPTIONS | {"device", "batch_size", "cache_dir"}

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
        """``nn.Module.train``, except that backbones the metric loaded itself stay in eval mode (a caller's
        module keeps the mode its owner gave it); returns the metric."""
        super().train(mode)
        callers = self.__dict__.get("_callers_backbones", set())
        for name, module in self.__dict__.get("_backbones", {}).items():
            if name not in callers:  # a caller's module keeps the mode its owner gave it
                module.eval()
        return self

    def extra_repr(self) -> str:
        """The backbones held, as ``name=Type`` pairs, for ``repr(metric)``."""
        return ", ".join(f"{k}={type(v).__name__}" for k, v in self.__dict__.get("_backbones", {}).items())
