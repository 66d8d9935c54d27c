"""From a metric card to the inputs a metric is fed: the one place that reads a card's typed input fields
(:class:`~genmetrics.core.registry.ReferenceKind`, :class:`~genmetrics.core.registry.ConditionKind`,
:class:`~genmetrics.core.registry.Granularity`). The leaderboard planner and ``genmetrics score`` both call it,
so the two feed every metric, built-in or plugin, the same inputs (``tests/cli/test_one_wiring.py``).

* :func:`feeds` decides *which* inputs a metric gets from its card and the options it is built with;
* :func:`wire` fills them in for a list of candidate files from the caller's :class:`Sources` (each keyed
  by sample id, the file stem);
* :meth:`Feeds.update_args` / :meth:`Feeds.real_args` are the ``metric.update`` keyword arguments of a
  chunk of samples / of the real set.

A missing input is a :class:`WiringError` whose ``need`` names it; each caller words the fix with its own
flag or config key. Nothing here reads the card's prose nor a metric's name.
"""

from __future__ import annotations

import sys
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genmetrics.core.registry import ConditionKind, Granularity, MetricCard, ReferenceKind
from genmetrics.errors import InputError

NONE_REF, NONE_COND = ReferenceKind.NONE, ConditionKind.NONE

#: the name of each fed reference kind in :attr:`Feeds.uses`
REFERENCE_USE = {
    ReferenceKind.MATCHED: "reference",
    ReferenceKind.REAL_SET: "real",
    ReferenceKind.IMAGE_LIST: "reference_sets",
}


@dataclass(slots=True)  # no __dict__: a large run holds one per image, metric and generator
class Sample:
    """One planned sample: its id (the candidate's file stem), the candidate and what it is compared with.

    >>> import tempfile
    >>> from genmetrics.leaderboard import build_plan, load_config
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    >>> s = plan.metrics[0].samples["noisy"][0]
    >>> s.id, s.candidate.parent.name, s.reference.parent.name, s.condition
    ('000', 'noisy', 'refs', None)
    """

    id: str
    candidate: Path
    reference: Path | list[Path] | None = None
    condition: str | None = None


class WiringError(InputError):
    """A metric needs an input that was not given, or was given one it does not take.

    ``need`` names it: ``"reference"``, ``"reference_sets"``, ``"real"``, ``"condition"``, ``"aspects"``
    (missing) or ``"no_reference"``, ``"no_condition"``, ``"no_aspects"`` (not taken); ``missing`` lists the
    sample ids without it (empty when the whole source is absent).

    >>> card = __import__("genmetrics").registry.get_card("psnr")
    >>> try:
    ...     wire(feeds(card), [Path("gen/000.png")], Sources())
    ... except WiringError as e:
    ...     print(e.need, e.missing)
    reference []
    """

    def __init__(self, need: str, message: str, missing: Sequence[str] = ()):
        super().__init__(message)
        self.need = need
        self.missing = list(missing)


@dataclass(frozen=True)
class Feeds:
    """Which inputs a metric gets: its level, the reference and condition kinds fed per sample (``NONE``: not
    fed) and the aspects scored one column each.

    >>> from genmetrics.core.registry import get_card
    >>> feeds(get_card("psnr")).uses, feeds(get_card("tpips"), aspects=["overall"]).uses
    (('reference',), ('reference', 'aspects'))
    >>> feeds(get_card("raclip"), {"attributes"}).uses  # the option replaces the per-sample prompt
    ()
    """

    level: Granularity
    reference: ReferenceKind = NONE_REF
    condition: ConditionKind = NONE_COND
    aspects: tuple[str, ...] = ()

    @property
    def uses(self) -> tuple[str, ...]:
        """The inputs filled in, by name: ``reference_sets``, ``reference``, ``real``, ``prompt``, ``aspects``."""
        ref = REFERENCE_USE.get(self.reference)
        on = {
            "reference_sets": ref == "reference_sets",
            "reference": ref == "reference",
            "real": ref == "real",
            "prompt": self.condition is not NONE_COND and not self.aspects,
            "aspects": bool(self.aspects),
        }
        return tuple(u for u, yes in on.items() if yes)

    @property
    def uses_reference(self) -> bool:
        """Whether any reference (matched, a list per sample, or the real set) is fed."""
        return self.reference is not NONE_REF

    @property
    def texts(self) -> bool:
        """Whether every sample carries its own condition text (a prompt)."""
        return "prompt" in self.uses

    def update_args(self, samples: Sequence[Sample], aspect: str | None = None) -> dict[str, Any]:
        """The ``metric.update`` keyword arguments for a chunk of samples (paths as strings); for one column of
        a metric scored under several aspects, pass its ``aspect``.

        >>> from genmetrics.core.registry import get_card
        >>> s = [Sample("000", Path("gen/000.png"), Path("refs/000.png"))]
        >>> feeds(get_card("psnr")).update_args(s)
        {'reference': ['refs/000.png'], 'candidates': ['gen/000.png'], 'condition': None, 'ids': ['000']}
        """
        cands = [str(s.candidate) for s in samples]
        if self.level is Granularity.SET:
            return {"candidates": cands}
        ref: list[Any] | None = None
        if self.reference is ReferenceKind.MATCHED:
            ref = [str(s.reference) for s in samples]
        elif self.reference is ReferenceKind.IMAGE_LIST:
            ref = [[str(r) for r in s.reference] if isinstance(s.reference, list) else [] for s in samples]
        cond: list[Any] | None = None
        if aspect is not None:
            cond = [aspect] * len(samples)
        elif self.texts:
            cond = [s.condition for s in samples]
        return {"reference": ref, "candidates": cands, "condition": cond, "ids": [s.id for s in samples]}

    @staticmethod
    def real_args(real: Sequence[Path]) -> dict[str, Any]:
        """The ``metric.update`` keyword arguments for a chunk of the real set (fed before the candidates)."""
        return {"reference": [str(p) for p in real]}


@dataclass
class Sources:
    """Where the inputs come from, keyed by sample id (the candidate's file stem); ``None``: not given.

    ``references`` the reference of each id (matched); ``reference_lists`` the reference images of each id;
    ``real`` the real set; ``texts`` the condition text (prompt) of each id.

    >>> src = Sources(texts={"000": "a red car"})
    >>> src.texts["000"], src.references is None
    ('a red car', True)
    """

    references: Mapping[str, Path] | None = None
    reference_lists: Mapping[str, Sequence[Path]] | None = None
    real: Sequence[Path] | None = None
    texts: Mapping[str, str] | None = None


def feeds(
    card: MetricCard,
    options: Collection[str] = (),
    *,
    aspects: Sequence[str] | None = None,
    free_text: bool = False,
    given: Collection[str] | None = None,
) -> Feeds:
    """Which inputs ``card``'s metric gets when built with ``options`` (their names).

    ``aspects``: condition texts scored one column each (the leaderboard's ``aspects = [...]``);
    ``free_text``: the caller has a text per sample for any text condition, an aspect too (``--condition``);
    ``given``: the inputs the caller was given (``"reference"``, ``"condition"``): one the card does not take
    is refused, one it needs and that is not given too.

    >>> from genmetrics.core.registry import get_card
    >>> f = feeds(get_card("sad"), {"attributes"})
    >>> f.level.value, f.uses
    ('set', ('real',))
    >>> feeds(get_card("psnr"), given={"reference", "condition"})  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.core.wiring.WiringError: 'psnr' takes no condition...
    """
    name = card.name
    if card.level is Granularity.SET:
        if aspects:
            raise WiringError("no_aspects", f"{name!r} is a set-level metric; it takes no aspects")
        ref, cond = ReferenceKind.REAL_SET, NONE_COND
    else:
        ref = card.reference if card.feeds("reference", options) else NONE_REF
        cond = card.condition if card.feeds("condition", options) else NONE_COND
        if aspects and card.condition not in (ConditionKind.PROMPT, ConditionKind.ASPECTS):
            raise WiringError(
                "no_aspects", f"{name!r} takes no condition (text per sample), so it takes no aspects"
            )
        if cond is ConditionKind.ASPECTS and not aspects and not free_text:
            raise WiringError(
                "aspects",
                f"{name!r} compares images with respect to an aspect: add "
                'aspects = ["overall", ...] to this metric (one result column per aspect)',
            )
    if given is not None:
        if "reference" in given and card.reference is NONE_REF and card.level is Granularity.SAMPLE:
            raise WiringError("no_reference", f"{name!r} takes no reference images")
        if "condition" in given and card.condition in (NONE_COND, ConditionKind.ATTRIBUTES):
            attrs = card.condition is ConditionKind.ATTRIBUTES
            raise WiringError(
                "no_condition",
                f"{name!r} takes no condition" + (" (its attributes are an option)" if attrs else ""),
            )
        if ref is not NONE_REF and "reference" not in given:
            raise WiringError(REFERENCE_USE[ref], f"{name!r} needs its reference ({ref.value})")
        if cond is not NONE_COND and "condition" not in given:
            raise WiringError("condition", f"{name!r} needs a condition ({cond.value})")
    return Feeds(level=card.level, reference=ref, condition=cond, aspects=tuple(aspects or ()))


def wire(feed: Feeds, candidates: Sequence[Path], sources: Sources) -> tuple[list[Sample], list[Path] | None]:
    """The samples of ``candidates`` (ids: file stems) with the inputs ``feed`` asks for, and the real set
    (``None`` when it is not fed). An absent source or ids without an entry raise :class:`WiringError`.

    >>> from genmetrics.core.registry import get_card
    >>> refs = {"000": Path("refs/000.png")}
    >>> samples, real = wire(feeds(get_card("psnr")), [Path("gen/000.png")], Sources(references=refs))
    >>> samples[0].reference, real
    (PosixPath('refs/000.png'), None)
    """
    # the caller's Path objects, not copies: the metrics of a run share them (memory of a large run)
    paths = [f if isinstance(f, Path) else Path(f) for f in candidates]
    # ids interned: the metrics of a run share one string per stem
    samples = [Sample(id=sys.intern(p.stem), candidate=p) for p in paths]
    real: list[Path] | None = None
    if feed.reference is ReferenceKind.REAL_SET:
        if not sources.real:
            raise WiringError("real", "needs the real set (the real images, as a set)")
        real = list(sources.real)
    elif feed.reference is ReferenceKind.MATCHED:
        refs = _lookup(samples, sources.references, "reference", "a reference with the same file stem")
        for s in samples:
            s.reference = refs[s.id]
    elif feed.reference is ReferenceKind.IMAGE_LIST:
        lists = _lookup(samples, sources.reference_lists, "reference_sets", "reference images")
        for s in samples:
            s.reference = list(lists[s.id])
    if feed.texts:
        texts = _lookup(samples, sources.texts, "condition", "a condition text")
        for s in samples:
            s.condition = texts[s.id]
    return samples, real


def _lookup(
    samples: list[Sample], source: Mapping[str, Any] | None, need: str, what: str
) -> Mapping[str, Any]:
    if source is None:
        raise WiringError(need, f"needs {what} per sample")
    missing = [s.id for s in samples if not source.get(s.id)]
    if missing:
        raise WiringError(
            need, f"{len(missing)} sample(s) have no {what} (first ids: {', '.join(missing[:3])})", missing
        )
    return source
