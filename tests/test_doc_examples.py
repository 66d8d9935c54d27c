"""Public classes and functions carry a short runnable example (a doctest; CI runs
``pytest --doctest-modules genmetrics``). Checked for the modules listed here; a module joins the list
once every public name in it has one (a name that cannot run in a doctest, e.g. one that spawns
processes, says why in its docstring and is listed in EXEMPT)."""

from __future__ import annotations

import enum
import importlib
import inspect

import pytest

MODULES = ["genmetrics.registry", "genmetrics.backbones.provider", "genmetrics.testing"]
#: module.name -> why it has no doctest
EXEMPT = {"genmetrics.testing.spawn_gloo": "starts processes",
          "genmetrics.testing.tiny_tokenizer": "re-exported from genmetrics._tiny_vlm"}
METRIC_METHODS = ["options", "has_data", "backbones"]


def _public(module) -> list[tuple[str, object]]:
    names = getattr(module, "__all__", None) or [n for n in vars(module) if not n.startswith("_")]
    out = []
    for n in names:
        obj = getattr(module, n)
        if (inspect.isfunction(obj) or inspect.isclass(obj)) and getattr(obj, "__module__", "") == module.__name__:
            out.append((n, obj))
    return out


def missing_examples(module_name: str) -> list[str]:
    module = importlib.import_module(module_name)
    missing = []
    for n, obj in _public(module):
        if f"{module_name}.{n}" in EXEMPT or (inspect.isclass(obj) and issubclass(obj, Exception)):
            continue
        doc = inspect.getdoc(obj) or ""
        if inspect.isclass(obj) and issubclass(obj, enum.Enum):  # enums: shown in MetricCard's example
            continue
        if ">>>" not in doc:
            missing.append(n)
    return missing


@pytest.mark.parametrize("module_name", MODULES)
def test_public_names_have_examples(module_name):
    assert not missing_examples(module_name), f"{module_name}: add a short doctest to {missing_examples(module_name)}"


def test_metric_public_api_has_examples():
    from genmetrics.metric import Metric

    assert all(">>>" in (inspect.getdoc(getattr(Metric, m)) or "") for m in METRIC_METHODS)


def test_checker_notices_a_missing_example(tmp_path, monkeypatch):
    (tmp_path / "gm_doc_probe.py").write_text('def f():\n    """No example."""\n\n\ndef g():\n    """>>> 1\n    1\n    """\n')
    monkeypatch.syspath_prepend(str(tmp_path))
    assert missing_examples("gm_doc_probe") == ["f"]
