"""The old public import paths of the contract's modules (``genmetrics.metric``, ``genmetrics.registry``,
``genmetrics.options``) still work: each is a thin module whose names are the same objects as at their home
in ``genmetrics.core``, and it defines nothing of its own."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

import genmetrics as gm

OLD_TO_NEW = {
    "genmetrics.metric": "genmetrics.core.metric",
    "genmetrics.registry": "genmetrics.core.registry",
    "genmetrics.options": "genmetrics.core.options",
}


@pytest.mark.parametrize("old", sorted(OLD_TO_NEW))
def test_old_path_reexports_the_same_objects(old):
    old_mod, new_mod = importlib.import_module(old), importlib.import_module(OLD_TO_NEW[old])
    names = old_mod.__all__
    assert names, old
    for name in names:
        assert getattr(old_mod, name) is getattr(new_mod, name), (
            f"{old}.{name} is not {new_mod.__name__}.{name}"
        )
    # thin: imports, __all__ and a docstring only
    tree = ast.parse(Path(old_mod.__file__).read_text(encoding="utf-8"))
    for node in tree.body:
        ok = isinstance(node, (ast.Import, ast.ImportFrom)) or (
            isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant)
        )
        ok = ok or (isinstance(node, ast.Assign) and [t.id for t in node.targets] == ["__all__"])  # type: ignore[attr-defined]
        assert ok, f"{old} defines something at line {node.lineno}; it should only re-export"


def test_package_root_names_are_the_core_ones():
    from genmetrics.core import metric, registry

    assert gm.Metric is metric.Metric
    assert (
        gm.registry.get_card is registry.get_card
    )  # reachable after a bare ``import genmetrics``, as before
    for name in ("create_metric", "register_metric", "list_metrics", "metric_info", "MetricCard"):
        assert getattr(gm, name) is getattr(registry, name)
