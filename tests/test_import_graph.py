"""Test scaffolding stays out of the product: no module of ``genmetrics`` other than the testing ones
imports ``genmetrics.testing`` (or the tiny-VLM builders), checked statically over every source file."""

from __future__ import annotations

import ast
import sys
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "genmetrics"
#: modules that are test scaffolding themselves (tiny random backbones, recipes of test inputs)
TESTING = ("genmetrics.testing", "genmetrics._tiny_vlm")


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _is_testing(module: str) -> bool:
    return any(module == t or module.startswith(t + ".") for t in TESTING)


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere (top level or inside functions), resolved to absolute names;
    ``from pkg import name`` counts both ``pkg`` and ``pkg.name`` (``name`` may be a submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                parent = package.split(".")
                parent = parent[: len(parent) - (node.level - 1)]
                base = ".".join([*parent, base] if base else parent)
            out.add(base)
            out |= {f"{base}.{a.name}" for a in node.names}
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
        ):
            if node.args and isinstance(node.args[0], ast.Constant) and isinstance(node.args[0].value, str):
                out.add(node.args[0].value)
    return out


def product_modules() -> list[Path]:
    return sorted(p for p in PACKAGE.rglob("*.py") if not _is_testing(_module_name(p)))


def test_no_product_module_imports_the_testing_scaffolding():
    offenders = {}
    for path in product_modules():
        bad = sorted(m for m in imported_modules(path) if _is_testing(m))
        if bad:
            offenders[str(path.relative_to(PACKAGE.parent))] = bad
    assert not offenders, (
        f"product modules import test scaffolding: {offenders}; take tiny backbones through "
        "genmetrics.backbones.provider (see docs/contributing.md)"
    )


def test_the_scan_sees_every_form_of_import(tmp_path, monkeypatch):
    """The checker itself: each way of importing the testing package is caught (a checker that only saw
    top-level ``import x`` would pass a product that imports it inside a function)."""
    pkg = tmp_path / "genmetrics" / "fam"
    pkg.mkdir(parents=True)
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "genmetrics")
    forms = {
        "a.py": "import genmetrics.testing\n",
        "b.py": "def f():\n    from genmetrics import testing\n",
        "c.py": "from genmetrics.testing import tiny_clip\n",
        "d.py": "from .. import testing\n",
        "e.py": "import importlib\nimportlib.import_module('genmetrics.testing')\n",
        "f.py": "from genmetrics._tiny_vlm import tiny_qwen3vl\n",
        "g.py": "from genmetrics.testing.recipes import mie\n",
    }
    for name, src in forms.items():
        (pkg / name).write_text(src)
        assert any(_is_testing(m) for m in imported_modules(pkg / name)), name
    (pkg / "ok.py").write_text(
        "from genmetrics.backbones.provider import provide\nimport genmetrics.testingx\n"
    )
    assert not any(_is_testing(m) for m in imported_modules(pkg / "ok.py"))


@pytest.mark.parametrize(
    "module", ["genmetrics.testing", "genmetrics.testing.recipes.mie", "genmetrics._tiny_vlm"]
)
def test_testing_modules_are_exempt(module):
    assert _is_testing(module)
