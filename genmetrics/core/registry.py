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
import warnings
from dataclasses import asdict, dataclass, field
from enum import Enum
from typing import Any

ENTRY_POINT_GROUP = "genmetrics.metrics"
_BUILTIN_FAMILIES = ("genmetrics.baselines", "genmetrics.raclip", "genmetrics.tpips", "genmetrics.mie")
#: torchmetrics' own constructor options, accepted by every metric (and never part of its options())
TORCHMETRICS_OPTIONS = frozenset(
    {
        "compute_on_cpu",
        "dist_sync_on_step",
        "process_group",
        "dist_sync_fn",
        "distributed_available_fn",
        "sync_on_compute",
        "compute_with_cache",
    }
)


class ReferenceKind(str, Enum):
    """What a metric's ``reference`` input is; the leaderboard and ``genmetrics score`` wire it from this."""

    MATCHED = "matched"  #: one reference image per candidate, matched by sample id (file stem)
    REAL_SET = "real_set"  #: the set of real images as a whole (fed once, before or after the candidates)
    IMAGE_LIST = "image_list"  #: a list of reference images per candidate (e.g. the subjects of a prompt)
    NONE = "none"  #: no reference


class ConditionKind(str, Enum):
    """What a metric's ``condition`` input is."""

    PROMPT = "prompt"  #: a text per candidate (its prompt or caption)
    ASPECTS = (
        "aspects"  #: an aspect text ("lighting", "overall"); the leaderboard scores one column per aspect
    )
    ATTRIBUTES = (
        "attributes"  #: a list of attributes, given as an option (``condition_option``), not per sample
    )
    NONE = "none"  #: no condition


class Need(str, Enum):
    """Whether an input must be given (``required``) or may be left out (``optional``)."""

    REQUIRED = "required"
    OPTIONAL = "optional"


class Granularity(str, Enum):
    """What one value describes: one candidate (``sample``) or a whole set of candidates (``set``)."""

    SAMPLE = "sample"
    SET = "set"


def _enum(enum: type[Enum], value: Any, what: str, card: str) -> Any:
    try:
        return enum(value.value if isinstance(value, Enum) else value)
    except ValueError:
        raise ValueError(
            f"metric card {card!r}: {what}={value!r} is not one of "
            f"{', '.join(repr(e.value) for e in enum)} ({enum.__name__})"
        ) from None


@dataclass(frozen=True)
class MetricCard:
    """Everything a user (or the CLI) needs to know about a metric before building it.

    The typed input fields say how callers wire inputs (the leaderboard planner and ``genmetrics score``
    read only these, never the prose of ``inputs``):

    * ``reference`` (:class:`ReferenceKind`) and ``reference_need`` (:class:`Need`);
    * ``condition`` (:class:`ConditionKind`) and ``condition_need``;
    * ``reference_option`` / ``condition_option``: a constructor option that supplies the input instead
      (hcs: ``image_center``; raclip metrics: ``attributes``); when the metric is built with it, the input
      is not fed per sample;
    * ``level`` (:class:`Granularity`): one value per candidate or per set.

    A card that describes a ``reference`` (or ``condition``) role in ``inputs`` but leaves its kind at
    ``NONE`` gets ``MATCHED`` (``PROMPT``); a kind other than ``NONE`` needs its role described. Strings are accepted for the
    enums (``reference="real_set"``). ``aliases`` are other names of the same metric. ``precheck`` names the
    family's check of the metric's own trained weights (see :func:`genmetrics.backbones.precheck.check_metric`).

    >>> card = get_card("psnr")
    >>> card.reference, card.condition, card.level
    (<ReferenceKind.MATCHED: 'matched'>, <ConditionKind.NONE: 'none'>, <Granularity.SAMPLE: 'sample'>)
    """

    name: str
    factory: str  # "package.module:ClassName", imported only when the metric is created
    family: str
    summary: str
    inputs: dict[str, str]  # role -> what it takes, in words (for people; never parsed)
    higher_is_better: bool | None
    range: tuple[float, float] | None
    paper: str = ""
    default_weights: str | None = None
    level: Granularity = Granularity.SAMPLE
    output: str = "scalar"  # what compute() returns, in words
    unit: str = ""  # the unit of the values ("dB", "nats"), "" for a unitless score; reports show it
    tags: tuple[str, ...] = field(default_factory=tuple)
    reference: ReferenceKind = ReferenceKind.NONE
    reference_need: Need = Need.REQUIRED
    reference_option: str | None = None
    condition: ConditionKind = ConditionKind.NONE
    condition_need: Need = Need.REQUIRED
    condition_option: str | None = None
    aliases: tuple[str, ...] = ()
    #: ``"module:function"`` in a module that imports no torch, called with the options before the metric is
    #: built: it raises what the metric would for its own trained weights when that is known without loading
    #: anything (MIE without ``heads``; a hub id offline), so the command line reports it in start-up time
    precheck: str | None = None

    def __post_init__(self) -> None:
        put = object.__setattr__
        put(self, "level", _enum(Granularity, self.level, "level", self.name))
        put(self, "reference_need", _enum(Need, self.reference_need, "reference_need", self.name))
        put(self, "condition_need", _enum(Need, self.condition_need, "condition_need", self.name))
        for role, enum, default in (
            ("reference", ReferenceKind, ReferenceKind.MATCHED),
            ("condition", ConditionKind, ConditionKind.PROMPT),
        ):
            described = role in self.inputs
            value = _enum(enum, getattr(self, role), role, self.name)
            if value.value == "none" and described:
                value = default
            if value is ConditionKind.ATTRIBUTES:
                if not self.condition_option:
                    raise ValueError(
                        f"metric card {self.name!r}: condition=ATTRIBUTES needs condition_option= (the "
                        "name of the constructor option that takes the attributes)"
                    )
            elif value.value != "none" and not described:
                raise ValueError(
                    f"metric card {self.name!r}: {role}={value.value!r} but inputs does not describe a {role!r} "
                    f"role; describe the input in inputs[{role!r}] (or drop {role}=)"
                )
            put(self, role, value)
        put(self, "tags", tuple(self.tags))
        put(self, "aliases", tuple(self.aliases))

    def feeds(self, role: str, options: Any = ()) -> bool:
        """Whether a caller must feed input ``role`` ("reference" or "condition") per sample to a metric
        built with ``options`` (names): the card has the input, it is required, no ``*_option`` that
        replaces it is among ``options``, and (for a condition) it is not given as an option anyway.

        >>> get_card("raclip").feeds("condition"), get_card("raclip").feeds("condition", {"attributes"})
        (True, False)
        """
        kind, need, option = (
            getattr(self, role),
            getattr(self, f"{role}_need"),
            getattr(self, f"{role}_option"),
        )
        if kind.value == "none" or kind is ConditionKind.ATTRIBUTES:
            return False
        if option is not None and option in options:
            return False
        return need is Need.REQUIRED

    def to_dict(self) -> dict[str, Any]:
        """The card as JSON-able values (enums as their strings).

        >>> get_card("tpips").to_dict()["condition"]
        'aspects'
        """
        d = asdict(self)
        d["range"] = list(self.range) if self.range is not None else None
        d["tags"] = list(self.tags)
        d["aliases"] = list(self.aliases)
        for k, v in d.items():
            if isinstance(v, Enum):
                d[k] = v.value
        return d


_CARDS: dict[str, MetricCard] = {}
_ALIASES: dict[str, str] = {}  # alias -> name of the card
_LOADED = False  # every card: built-ins and plugins
_BUILTINS_LOADED = False
#: entry point name -> why its plugin could not be registered (it is skipped; asking for it raises this)
_BROKEN: dict[str, str] = {}


def register_metric(card: MetricCard, *, overwrite: bool = False) -> MetricCard:
    """Register ``card`` under ``card.name`` (and its ``aliases``). Re-registering the same card is a no-op.

    >>> card = MetricCard(name="my_psnr", factory="genmetrics.baselines.pixel:PSNR", family="mine",
    ...                   summary="PSNR again", inputs={"reference": "images", "candidates": "images"},
    ...                   higher_is_better=True, range=None, reference=ReferenceKind.MATCHED)
    >>> _ = register_metric(card)
    >>> "my_psnr" in list_metrics("my_*"), get_card("my_psnr").reference.value
    (True, 'matched')
    >>> _ = unregister_metric("my_psnr")
    """
    if not isinstance(card, MetricCard):
        raise TypeError(f"register_metric expects a MetricCard, got {type(card).__name__}")
    old = _CARDS.get(card.name)
    if old is not None and old != card and not overwrite:
        raise ValueError(
            f"metric name {card.name!r} is already registered by {old.factory}; "
            f"choose another name for {card.factory} or pass overwrite=True"
        )
    for name in (card.name, *card.aliases):
        owner = _ALIASES.get(name) if name != card.name else None
        taken = (name in _CARDS and name != card.name) or (owner is not None and owner != card.name)
        if taken and not overwrite:
            raise ValueError(
                f"metric name {name!r} (of card {card.name!r}) is already registered "
                f"({'an alias of ' + repr(owner) if owner else 'as a metric'}); choose another name"
            )
    if old is not None:
        for a in old.aliases:
            _ALIASES.pop(a, None)
    _CARDS[card.name] = card
    _ALIASES.pop(card.name, None)
    for a in card.aliases:
        _CARDS.pop(a, None)
        _ALIASES[a] = card.name
    return card


def lazy_exports(package: str, names: dict[str, str]) -> tuple[Any, Any]:
    """Module ``__getattr__`` and ``__dir__`` that import ``names`` (``name -> module``) on first use, so a
    family's ``__init__`` stays free of heavy imports: ``__getattr__, __dir__ = lazy_exports(__name__, _LAZY)``.

    >>> getattr_, dir_ = lazy_exports("pkg", {"sqrt": "math"})
    >>> getattr_("sqrt")(9.0), dir_()
    (3.0, ['sqrt'])
    """
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
    """Remove ``name`` (and its aliases) from the registry (plugins and tests); returns its card, or None.

    >>> unregister_metric("no_such_metric") is None
    True
    """
    card = _CARDS.pop(name, None)
    for a in card.aliases if card is not None else ():
        _ALIASES.pop(a, None)
    return card


def _load_builtins() -> None:
    """Register the built-in families' cards (importing their packages: cards only, no torch)."""
    global _BUILTINS_LOADED
    if _BUILTINS_LOADED:
        return
    _BUILTINS_LOADED = True
    for module in _BUILTIN_FAMILIES:
        importlib.import_module(module)


def _load_all() -> None:
    """The built-in cards, then the plugins' (``genmetrics.metrics`` entry points: a scan of every installed
    package's metadata, done only when a name is not a built-in one or every name is asked for)."""
    global _LOADED
    if _LOADED:
        return
    _LOADED = True
    _load_builtins()
    from importlib.metadata import entry_points

    for ep in entry_points(group=ENTRY_POINT_GROUP):
        _load_plugin(ep)


def _load_plugin(ep: Any) -> None:
    """Register the card(s) of one ``genmetrics.metrics`` entry point. A plugin that fails (raises when
    imported or called, names something that is neither a card nor a function, or takes a registered name)
    is skipped with one warning naming it and the fix, so it cannot break the other metrics; asking for it
    by name raises that message (:func:`get_card`)."""
    dist = getattr(ep, "dist", None)
    where = f"{ep.name} = {ep.value!r}" + (f" of package {dist.name!r}" if dist is not None else "")
    fix = (
        f"fix the plugin or uninstall it (pip uninstall {dist.name})"
        if dist is not None
        else "fix the plugin"
    )
    try:
        obj = ep.load()
        if isinstance(obj, MetricCard):
            register_metric(obj)
        elif callable(obj):
            obj()
        else:
            raise TypeError(
                f"it names a {type(obj).__name__}; expected a MetricCard or a function that registers one"
            )
    except Exception as e:  # noqa: BLE001 - any failure of third-party code: reported, the others still load
        _BROKEN[ep.name] = f"metric plugin {where} could not be registered: {type(e).__name__}: {e}; {fix}"
        warnings.warn(_BROKEN[ep.name] + "; it is skipped", RuntimeWarning, stacklevel=2)


def _close_matches(word: str, options: list[str]) -> str:
    """``"; did you mean 'a', 'b'?"`` for up to three of ``options`` near ``word``, a spelling that differs
    in case only first (``PSNR`` gives ``psnr``); empty when none is near.

    >>> _close_matches("PSNR", ["ms_ssim", "psnr", "ssim"]), _close_matches("zzz", ["psnr"])
    ("; did you mean 'psnr'?", '')
    """
    same = [o for o in options if o.casefold() == word.casefold()]
    near = difflib.get_close_matches(word.casefold(), options, n=3, cutoff=0.5)
    close = [*same, *(c for c in near if c not in same)][:3]
    return f"; did you mean {', '.join(repr(c) for c in close)}?" if close else ""


def get_card(name: str) -> MetricCard:
    """The card of metric ``name`` (an alias gives the card of the metric it names).

    >>> get_card("clip_t").name, get_card("sad").level.value
    ('clipscore', 'set')
    """
    _load_builtins()  # a plugin cannot take a built-in name: the plugins are read only for another name
    if not (isinstance(name, str) and (name in _CARDS or name in _ALIASES)):
        _load_all()
    if isinstance(name, str) and name in _ALIASES:
        name = _ALIASES[name]
    if isinstance(name, str) and name not in _CARDS and name in _BROKEN:
        raise ValueError(_BROKEN[name])
    if not isinstance(name, str) or name not in _CARDS:
        names = sorted([*_CARDS, *_ALIASES])
        raise ValueError(
            f"unknown metric {name!r}{_close_matches(str(name), names)} "
            f"Available metrics: {', '.join(names)} (see `genmetrics list`)."
        )
    return _CARDS[name]


def alias_of(name: str) -> str | None:
    """The metric ``name`` is an alias of, or None when it is a metric's own name.

    >>> alias_of("clip_t"), alias_of("clipscore")
    ('clipscore', None)
    """
    _load_all()
    return _ALIASES.get(name)


def list_metrics(pattern: str = "*") -> list[str]:
    """Registered metric names (aliases included) matching the fnmatch ``pattern``, sorted.

    >>> list_metrics("*ssim")
    ['ms_ssim', 'ssim']
    """
    _load_all()
    return sorted(n for n in [*_CARDS, *_ALIASES] if fnmatch.fnmatchcase(n, pattern))


def metric_class(name: str) -> type:
    """The class that builds metric ``name`` (imported on this call), holding its card's facts
    (:func:`card_facts`).

    >>> metric_class("psnr").__name__, metric_class("psnr").higher_is_better
    ('PSNR', True)
    """
    card = get_card(name)
    module_name, _, attr = card.factory.partition(":")
    cls = getattr(importlib.import_module(module_name), attr)
    adopt = getattr(cls, "_adopt_card", None)
    # the cards naming this class where it is defined or by the path that just reached it (a re-export such
    # as "pkg:Cls" of pkg.metric.Cls): a class defined before its card was registered, or reached through a
    # re-export, takes (or checks) its facts now; a class that several cards name (registered again under
    # other names) keeps the facts it states itself
    paths = {card.factory, f"{cls.__module__}:{cls.__qualname__}"}
    if adopt is not None and [c for c in _CARDS.values() if c.factory in paths] == [card]:
        adopt(card)
    return cls


def card_facts(card: MetricCard) -> dict[str, Any]:
    """The facts a metric class exposes as class attributes that its card is the one declaration of:
    ``name``, ``higher_is_better`` and ``paired`` (a candidate against its own reference:
    ``reference=MATCHED``). A registered class reads them from its card; it does not state them.

    >>> card_facts(get_card("psnr"))
    {'name': 'psnr', 'higher_is_better': True, 'paired': True}
    """
    return {
        "name": card.name,
        "higher_is_better": card.higher_is_better,
        "paired": card.reference is ReferenceKind.MATCHED,
    }


def card_of_class(cls: type) -> MetricCard | None:
    """The registered card whose factory is ``cls`` (``"module:QualName"``), or None; loads nothing (a
    family registers its cards before its metric module is imported).

    >>> card_of_class(type(None)) is None
    True
    """
    path = f"{cls.__module__}:{cls.__qualname__}"
    found = [c for c in _CARDS.values() if c.factory == path]
    return found[0] if len(found) == 1 else None


def _accepted_kwargs(cls: type) -> tuple[set[str], bool]:
    names: set[str] = set()
    for klass in cls.__mro__:
        init = klass.__dict__.get("__init__")
        if init is None:
            continue
        params = inspect.signature(init).parameters
        names |= {
            p for p, v in params.items() if v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD) and p != "self"
        }
        if not any(v.kind == v.VAR_KEYWORD for v in params.values()):
            return names, False
    return names, True


def metric_options(name: str, *, static: bool = True) -> dict[str, Any]:
    """The keyword arguments ``create_metric(name, ...)`` accepts, with their defaults (repr). Read from the
    metric's source without importing it (``info`` imports no torch); ``static=False`` reads the signatures of
    the imported class instead (it imports the class: for a caller that builds the metric anyway, which then
    parses no source).

    >>> metric_options("psnr")["max_db"], metric_options("psnr", static=False)["max_db"]
    ('100.0', '100.0')
    """
    if static:
        from genmetrics.core.static_options import static_options

        found = static_options(get_card(name).factory)  # read from the source
        if found is not None:
            return found
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
    """The metric's card as a plain dict: inputs, higher_is_better, range, paper, default weights; for an
    alias, the card of the metric it names with ``name`` the alias and ``alias_of`` that metric (else None).

    >>> info = metric_info("clip_t")
    >>> info["name"], info["alias_of"], info["condition"]
    ('clip_t', 'clipscore', 'prompt')
    """
    d = get_card(name).to_dict()
    for role in ("reference", "condition"):  # an input the metric does not take has no need or option
        if d.get(role) == "none":
            d[f"{role}_need"] = d[f"{role}_option"] = None
    target = alias_of(name)
    if target is not None:
        d["name"] = name
    d["alias_of"] = target
    return d


def create_metric(name: str, **kwargs: Any):
    """Build the metric ``name``. Unknown names and unknown keyword arguments raise ``ValueError``.

    >>> from genmetrics.testing import random_images
    >>> psnr = create_metric("psnr", max_db=60.0)
    >>> images = random_images(2, 16)
    >>> float(psnr(reference=images, candidates=images))  # identical images: capped at max_db
    60.0
    >>> create_metric("psnr", max_dB=60.0)
    Traceback (most recent call last):
    ...
    ValueError: unknown option 'max_dB' for metric 'psnr'; did you mean 'max_db'? ...
    """
    card = get_card(name)
    cls = metric_class(name)
    accepted, _ = _accepted_kwargs(cls)
    # torchmetrics' own options (dist_sync_on_step, process_group, ...) stay allowed.
    accepted |= TORCHMETRICS_OPTIONS
    unknown = [k for k in kwargs if k not in accepted]
    if unknown:
        k = unknown[0]
        raise ValueError(
            f"unknown option {k!r} for metric {card.name!r}{_close_matches(k, sorted(accepted))} "
            f"Accepted options: {', '.join(sorted(accepted))}."
        )
    return cls(**kwargs)
