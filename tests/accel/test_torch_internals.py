"""The private torch APIs genmetrics uses live in one module; this test fails loudly, naming
the API and the file to update, when the installed torch drops or changes one of them."""

from __future__ import annotations

import ast
from pathlib import Path

import torch

from genmetrics.accel import _torch_internals as ti

PACKAGE = Path(__file__).resolve().parents[2] / "genmetrics"


def test_private_torch_apis_still_behave():
    problems = ti.check_torch_private_apis()
    assert not problems, (
        f"torch {torch.__version__} changed private APIs genmetrics relies on: {problems}. Update "
        "genmetrics/accel/_torch_internals.py (until then the packed oneDNN path falls back to F.linear, "
        "and packed weights are rebuilt on every call)"
    )
    if torch.backends.mkldnn.is_available():
        assert ti.onednn_linear_available(), "oneDNN is built in, but its packed linear is not usable"


def test_the_checker_sees_a_broken_op(monkeypatch):
    """The check is not vacuous: an op that returns a wrong product, or is gone, is reported by name."""
    if not torch.backends.mkldnn.is_available():
        return
    monkeypatch.setattr(ti, "linear_pointwise", lambda x, w, b, act="none": torch.zeros(2, 2))
    assert "torch.ops.mkldnn._linear_pointwise" in ti.check_torch_private_apis()

    def gone(*a, **k):
        raise AttributeError("_reorder_linear_weight")

    monkeypatch.setattr(ti, "reorder_linear_weight", gone)
    assert "torch.ops.mkldnn._reorder_linear_weight" in ti.check_torch_private_apis()


def test_no_other_module_touches_these_private_apis():
    """``torch.ops.mkldnn._*`` and ``._version`` appear only in _torch_internals.py (the one place to update)."""
    offenders = []
    for path in PACKAGE.rglob("*.py"):
        if path.name == "_torch_internals.py":
            continue
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Attribute) and (
                node.attr in ("_version", "_reorder_linear_weight", "_linear_pointwise")
            ):
                offenders.append(f"{path.relative_to(PACKAGE.parent)}:{node.lineno} .{node.attr}")
    assert not offenders, f"private torch APIs outside accel/_torch_internals.py: {offenders}"
