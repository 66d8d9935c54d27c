"""Metric cards and lazy registration (timm-style: metrics register where they are defined).

A family's ``__init__`` calls :func:`register_metric` with a :class:`MetricCard` whose ``factory`` is a
``"module:Class"`` string, so listing metrics imports neither torch nor any model code. Third-party
plugins register through the entry-point group ``genmetrics.metrics``: each entry point names a
callable that is called once (it calls :func:`register_metric`) or a :class:`MetricCard`.
"""

from __future__ import annotations

import difflib
import fnmatch
import importlib
import inspect
from dataclasses import asdict, dataclass, field
from typing import Any

ENTRY_POINT_GROUP = "genmetrics.metrics"
_BUILTIN_FAMILIES = ("genmetrics.baselines", "genmetrics.raclip", "genmetrics.tpips", "genmetrics.mie")


@dataclass(frozen=True)
class MetricCard:
    """Everything a user (or the CLI) needs to know about a metric before building it."""

    name: str
    factory: str  # "package.module:ClassName", imported only when the metric is created
    family: str
    summary: str
    inputs: dict[str, str]  # role -> what it takes; roles: reference, candidates, condition
    higher_is_better: bool | None
    range: tuple[float, float] | None
    paper: str = ""
    default_weights: str | None = None
    level: str = "sample"  # "sample": one score per candidate; "set": one value per pair of sets
    output: str = "scalar"  # what compute() returns, in words
    tags: tuple[str, ...] = field(default_factory=tuple)

    def to_dict(self) -> dict[str, Any]:
        d = asdict(self)
        d["range"] = list(self.range) if self.range is not None else None
        d["tags"] = list(self.tags)
        return d


_CARDS: dict[str, MetricCard] = {}
_LOADED = False


def register_metric(card: MetricCard, *, overwrite: bool = False) -> MetricCard:
    """Register ``card`` under ``card.name``. Re-registering the same card is a no-op."""
    if not isinstance(card, MetricCard):
        raise TypeError(f"register_metric expects a MetricCard, got {type(card).__name__}")
    old = _CARDS.get(card.name)
    if old is not None and old != card and not overwrite:
        raise ValueError(
            f"metric name {card.name!r} is already registered by {old.factory}; "
            f"choose another name for {card.factory} or pass overwrite=True"
        )
    _CARDS[card.name] = card
    return card


def lazy_exports(package: str, names: dict[str, str]) -> tuple[Any, Any]:
    """Module ``__getattr__`` and ``__dir__`` that import ``names`` (``name -> module``) on first use, so a
    family's ``__init__`` stays free of heavy imports: ``__getattr__, __dir__ = lazy_exports(__name__, _LAZY)``."""
    exported = sorted(names)

    def __getattr__(name: str) -> Any:
        mod = names.get(name)
        if mod is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        return getattr(importlib.import_module(mod), name)

    def __dir__() -> list[str]:
        return exported

    return __getattr__, __dir__


def unregister_metric(name: str) -> MetricCard | None:
    """Remove ``name`` from the registry (plugins and tests); returns its card, or None if absent."""
    return _CARDS.pop(name, None)


def _load_all() -> None:
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    for module in _BUILTIN_FAMILIES:
        importlib.import_module(module)
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        obj = ep.load()
        if isinstance(obj, MetricCard):
            register_metric(obj)
        elif callable(obj):
            obj()


def _close_matches(word: str, options: list[str]) -> str:
    close = difflib.get_close_matches(word, options, n=3, cutoff=0.5)
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def get_card(name: str) -> MetricCard:
    _load_all()
    if not isinstance(name, str) or name not in _CARDS:
        names = sorted(_CARDS)
        raise ValueError(
            f"unknown metric {name!r}{_close_matches(str(name), names)} "
            f"Available metrics: {', '.join(names)} (see `genmetrics list`)."
        )
    return _CARDS[name]


def list_metrics(pattern: str = "*") -> list[str]:
    """Registered metric names matching the fnmatch ``pattern``, sorted."""
    _load_all()
    return sorted(n for n in _CARDS if fnmatch.fnmatchcase(n, pattern))


def metric_class(name: str) -> type:
    card = get_card(name)
    module_name, _, attr = card.factory.partition(":")
    return getattr(importlib.import_module(module_name), attr)


def _accepted_kwargs(cls: type) -> tuple[set[str], bool]:
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        names |= {p for p, v in params.items() if v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD) and p != "self"}
        if not any(v.kind == v.VAR_KEYWORD for v in params.values()):
            return names, False
    return names, True


def metric_options(name: str) -> dict[str, Any]:
    """The keyword arguments ``create_metric(name, ...)`` accepts, with their defaults (repr)."""
    cls = metric_class(name)
    out: dict[str, Any] = {}
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        for p, v in params.items():
            if p == "self" or v.kind in (v.VAR_POSITIONAL, v.VAR_KEYWORD) or p in out:
                continue
            out[p] = None if v.default is inspect.Parameter.empty else repr(v.default)
        if not any(v.kind == v.VAR_KEYWORD for v in params.values()):
            break
    return out


def metric_info(name: str) -> dict[str, Any]:
    """The metric's card as a plain dict: inputs, higher_is_better, range, paper, default weights."""
    return get_card(name).to_dict()


def create_metric(name: str, **kwargs: Any):
    """Build the metric ``name``. Unknown names and unknown keyword arguments raise ``ValueError``."""
    card = get_card(name)
    cls = metric_class(name)
    accepted, _ = _accepted_kwargs(cls)
    # torchmetrics' own options (dist_sync_on_step, process_group, ...) stay allowed.
    accepted |= {"compute_on_cpu", "dist_sync_on_step", "process_group", "dist_sync_fn", "distributed_available_fn",
                 "sync_on_compute", "compute_with_cache"}
    unknown = [k for k in kwargs if k not in accepted]
    if unknown:
        k = unknown[0]
        raise ValueError(
            f"unknown option {k!r} for metric {card.name!r}{_close_matches(k, sorted(accepted))} "
            f"Accepted options: {', '.join(sorted(accepted))}."
        )
    return cls(**kwargs)
