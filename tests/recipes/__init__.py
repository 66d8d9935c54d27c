"""Test inputs per metric (``RECIPES = {metric: callable}`` per built-in family, in this folder), found by
:func:`metric_recipe`. They are test scaffolding only, so they live with the tests; a plugin keeps its own
``RECIPES`` in ``<its package>.recipes`` (the package of its card's factory) and is found the same way.

Each callable returns ``{"kwargs": {create_metric kwargs with tiny backbones}, "updates": [{reference=...,
candidates=..., condition=...}, ...]}``.
"""

from __future__ import annotations

import importlib
from typing import Any

from genmetrics.core.registry import get_card

_BUILTIN_RECIPES = {
    "genmetrics.baselines": "baselines",
    "genmetrics.raclip": "raclip",
    "genmetrics.tpips": "tpips",
    "genmetrics.mie": "mie",
}


def metric_recipe(name: str) -> dict[str, Any]:
    """``{"kwargs": ..., "updates": [...]}`` that builds metric ``name`` on tiny backbones and feeds it a few
    small batches. The built-in families keep theirs in ``tests/recipes/<family>.py``
    (``RECIPES``); a plugin keeps its own next to its metric (``<package of the card's factory>.recipes``).

    >>> r = metric_recipe("psnr")
    >>> sorted(r), len(r["updates"]) >= 2
    (['kwargs', 'updates'], True)
    """
    card = get_card(name)
    name = card.name  # an alias finds the recipe of the metric it names
    package = card.factory.split(":")[0].rsplit(".", 1)[0]
    top = ".".join(package.split(".")[:2])
    module = f"tests.recipes.{_BUILTIN_RECIPES[top]}" if top in _BUILTIN_RECIPES else f"{package}.recipes"
    try:
        recipes = importlib.import_module(module).RECIPES
    except (ImportError, AttributeError) as e:
        raise LookupError(f"metric {name!r} has no test recipe ({module}.RECIPES): {e}") from None
    if name not in recipes:
        raise LookupError(f"metric {name!r} has no entry in {module}.RECIPES")
    return recipes[name]()
