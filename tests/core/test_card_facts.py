"""One declaration per card fact: a registered metric's name, direction and inputs are stated by its card
(``genmetrics/<family>/__init__.py``) and read by its class (``Metric.__init_subclass__`` /
``registry.metric_class``), never stated twice; the direction is what the metric does."""

from __future__ import annotations

import ast
import inspect
import sys
import textwrap
import types

import pytest
import torch

import genmetrics as gm
from genmetrics.core.metric import SampleMetric
from genmetrics.core.registry import (
    Granularity,
    MetricCard,
    ReferenceKind,
    alias_of,
    card_facts,
    get_card,
    metric_class,
    register_metric,
    unregister_metric,
)
from tests.contract import tester as T

NAMES = [n for n in gm.list_metrics() if alias_of(n) is None]
FACTS = ("name", "higher_is_better", "paired")


@pytest.mark.parametrize("name", NAMES)
def test_every_registered_class_agrees_with_its_card(name):
    card, cls = get_card(name), metric_class(name)
    assert {k: getattr(cls, k) for k in FACTS} == card_facts(card)
    # level: one score per candidate is a SampleMetric, a set-level value is not
    assert issubclass(cls, SampleMetric) == (card.level is Granularity.SAMPLE), name
    # inputs: every role the card describes is a parameter of update (candidates always)
    params = set(inspect.signature(cls.update).parameters)
    assert set(card.inputs) <= {"reference", "candidates", "condition"} and "candidates" in card.inputs
    assert set(card.inputs) <= params, (name, set(card.inputs) - params)
    # a paired metric also takes torchmetrics' preds= / target=
    assert cls.paired == ({"preds", "target"} <= params), name


def test_no_class_restates_a_card_fact():
    """The card is the one declaration: no class a registered metric is built from (its own or a base of
    the package) assigns name, higher_is_better or paired in its body (``Metric``'s defaults excepted)."""
    from genmetrics.core.metric_base import Metric

    offenders = set()
    for name in NAMES:
        for klass in metric_class(name).__mro__:
            if not klass.__module__.startswith("genmetrics.") or klass in (Metric, SampleMetric):
                continue
            node = ast.parse(textwrap.dedent(inspect.getsource(klass))).body[0]
            for stmt in getattr(node, "body", []):
                targets = (
                    stmt.targets
                    if isinstance(stmt, ast.Assign)
                    else [stmt.target]
                    if isinstance(stmt, ast.AnnAssign) and stmt.value is not None
                    else []
                )
                offenders |= {
                    f"{klass.__module__}.{klass.__qualname__}.{t.id}"
                    for t in targets
                    if isinstance(t, ast.Name) and t.id in FACTS
                }
    assert not offenders, f"state these on the metric card only: {sorted(offenders)}"


def _card(name: str, factory: str, higher_is_better: bool | None) -> MetricCard:
    return MetricCard(
        name=name,
        factory=factory,
        family="test",
        summary="a test metric",
        inputs={"reference": "images", "candidates": "images"},
        higher_is_better=higher_is_better,
        range=None,
        reference=ReferenceKind.MATCHED,
    )


class _Gap(SampleMetric):
    def prepare(self, reference, candidates, condition):
        return {"reference": list(reference), "candidates": list(candidates)}

    def score_batch(self, batch):
        return (torch.stack(batch["candidates"]) - torch.stack(batch["reference"])).abs().flatten(1).mean(1)


def test_a_class_defined_after_its_card_reads_it():
    card = register_metric(_card("_facts_read", f"{__name__}:_Read", False))
    try:
        module = sys.modules[__name__]
        module._Read = type("_Read", (_Gap,), {"__module__": __name__, "__qualname__": "_Read"})  # type: ignore[attr-defined]
        assert {k: getattr(module._Read, k) for k in FACTS} == card_facts(card)  # type: ignore[attr-defined]
        x = torch.rand(2, 3, 4, 4)
        assert float(gm.create_metric("_facts_read")(preds=x, target=x + 0.25)) == pytest.approx(0.25)
    finally:
        unregister_metric("_facts_read")
        del sys.modules[__name__]._Read  # type: ignore[attr-defined]


def test_a_class_that_contradicts_its_card_is_refused():
    """Both orders: a class stating the opposite direction of an already registered card is refused when it
    is defined; a class defined earlier is refused when the registry first hands it out."""
    register_metric(_card("_facts_early", f"{__name__}:_Early", False))
    try:
        with pytest.raises(
            TypeError, match="higher_is_better = True but its metric card '_facts_early' says False"
        ):
            type(
                "_Early",
                (_Gap,),
                {"__module__": __name__, "__qualname__": "_Early", "higher_is_better": True},
            )
    finally:
        unregister_metric("_facts_early")
    mod = types.ModuleType("_facts_late_mod")
    mod._Late = type(
        "_Late", (_Gap,), {"__module__": mod.__name__, "__qualname__": "_Late", "higher_is_better": True}
    )  # type: ignore[attr-defined]
    sys.modules[mod.__name__] = mod
    register_metric(_card("_facts_late", f"{mod.__name__}:_Late", False))
    try:
        with pytest.raises(TypeError, match="drop higher_is_better from the class"):
            metric_class("_facts_late")
    finally:
        unregister_metric("_facts_late")
        del sys.modules[mod.__name__]


def _scalar(v) -> float:
    v = v["mean"] if isinstance(v, dict) else v
    return float(torch.as_tensor(v, dtype=torch.float64).mean())


#: metrics whose best value is known without trained weights: a candidate equal to its own reference
#: (similarities, pixel fidelity), or a generated set equal to the real set (set divergences)
CHECKABLE = [
    n
    for n in NAMES
    if get_card(n).reference is ReferenceKind.MATCHED
    or (get_card(n).reference is ReferenceKind.REAL_SET and get_card(n).level is Granularity.SET)
]


@pytest.mark.parametrize("name", CHECKABLE)
def test_card_direction_is_what_the_metric_does(name):
    """The card's ``higher_is_better`` ranks identical inputs (the best a candidate can do) at least as well
    as the recipe's differing ones, and strictly better: flipping a card's direction turns this red."""
    card = get_card(name)
    whole = T.merged(T.batches(name))
    same_ref = whole["reference"]
    if card.level is Granularity.SET:
        identical = [{"reference": same_ref}, {"candidates": same_ref}]
        differing = [{"reference": same_ref}, {"candidates": whole["candidates"]}]
    else:
        identical = [{**whole, "candidates": same_ref}]
        differing = [whole]

    def value(updates):
        m = T.build(name)
        for u in updates:
            m.update(**u)
        return _scalar(m.compute())

    best, other = value(identical), value(differing)
    assert card.higher_is_better is not None, name
    sign = 1.0 if card.higher_is_better else -1.0
    assert sign * (best - other) > 0, (name, card.higher_is_better, best, other)


def test_a_card_naming_a_re_export_of_its_class_gives_it_its_facts():
    """``factory="pkg:Cls"`` where ``pkg/__init__.py`` re-exports ``pkg.metric.Cls``: the class used to keep
    ``name = ""`` and the direction it stated itself, contradicting its card, with no error."""
    pkg, impl = types.ModuleType("_facts_pkg"), types.ModuleType("_facts_pkg.metric")
    impl._Re = type("_Re", (_Gap,), {"__module__": impl.__name__, "__qualname__": "_Re"})  # type: ignore[attr-defined]
    pkg._Re = impl._Re  # type: ignore[attr-defined]
    impl._Contra = type(  # type: ignore[attr-defined]
        "_Contra", (_Gap,), {"__module__": impl.__name__, "__qualname__": "_Contra", "higher_is_better": True}
    )
    pkg._Contra = impl._Contra  # type: ignore[attr-defined]
    sys.modules.update({pkg.__name__: pkg, impl.__name__: impl})
    card = register_metric(_card("_facts_re", f"{pkg.__name__}:_Re", False))
    register_metric(_card("_facts_contra", f"{pkg.__name__}:_Contra", False))
    try:
        metric = gm.create_metric("_facts_re")
        assert {k: getattr(metric, k) for k in FACTS} == card_facts(card)
        with pytest.raises(TypeError, match="higher_is_better = True but its metric card '_facts_contra'"):
            metric_class("_facts_contra")
    finally:
        unregister_metric("_facts_re")
        unregister_metric("_facts_contra")
        del sys.modules[pkg.__name__], sys.modules[impl.__name__]
