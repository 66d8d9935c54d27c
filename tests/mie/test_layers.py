"""The MIE modules import each other without loops and at their top: only ``mie/cli.py``,
which ``genmetrics --help`` imports to list ``rank-generators`` (it must not import torch), defers its imports
to the commands. Checked statically with ast over the package's source."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

MIE = Path(__file__).resolve().parents[2] / "genmetrics" / "mie"
#: modules at the CLI table's lazy boundary (their function-level imports are the point)
LAZY_BOUNDARY = {"cli"}


def _imports(tree: ast.Module) -> tuple[set[str], list[tuple[int, str]]]:
    """``(top-level mie modules imported, [(line, module) of every import inside a function or class])``."""
    top: set[str] = set()
    nested: list[tuple[int, str]] = []
    for node in tree.body:
        if isinstance(node, ast.ImportFrom) and (node.module or "").startswith("genmetrics.mie."):
            top.add(node.module.split(".")[2])
        elif isinstance(node, ast.ImportFrom) and node.module == "genmetrics.mie":
            top |= {a.name for a in node.names}
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            for inner in ast.walk(node):
                if isinstance(inner, (ast.Import, ast.ImportFrom)):
                    name = inner.module if isinstance(inner, ast.ImportFrom) else inner.names[0].name
                    nested.append((inner.lineno, name or "."))
    return top, nested


def _graph(folder: Path = MIE) -> dict[str, set[str]]:
    return {
        p.stem: _imports(ast.parse(p.read_text(encoding="utf-8")))[0] for p in sorted(folder.glob("*.py"))
    }


def _cycle(graph: dict[str, set[str]]) -> list[str] | None:
    """One import cycle as a list of modules, or None (depth-first search)."""
    state: dict[str, int] = {}
    stack: list[str] = []

    def visit(m: str) -> list[str] | None:
        state[m] = 1
        stack.append(m)
        for n in sorted(graph.get(m, ())):
            if state.get(n) == 1:
                return stack[stack.index(n) :] + [n]
            if n not in state and (found := visit(n)):
                return found
        stack.pop()
        state[m] = 2
        return None

    for m in sorted(graph):
        if m not in state and (found := visit(m)):
            return found
    return None


def test_no_import_loop_inside_mie():
    graph = _graph()
    assert "checkpoint" in graph.get("model", set()), "model saves and loads through checkpoint"
    assert _cycle(graph) is None, f"import loop in genmetrics.mie: {' -> '.join(_cycle(graph) or [])}"


@pytest.mark.parametrize("path", sorted(MIE.glob("*.py")), ids=lambda p: p.name)
def test_imports_are_at_the_top(path):
    _, nested = _imports(ast.parse(path.read_text(encoding="utf-8")))
    if path.stem in LAZY_BOUNDARY:
        return
    assert not nested, f"{path.name}: imports inside functions {nested}; import at the top"


def test_the_checks_see_a_loop_and_a_nested_import(tmp_path):
    """The checker itself: a planted loop and a planted function-level import are found."""
    (tmp_path / "a.py").write_text("from genmetrics.mie.b import x\n")
    (tmp_path / "b.py").write_text("from genmetrics.mie.c import y\n")
    (tmp_path / "c.py").write_text("from genmetrics.mie.a import z\n\ndef f():\n    import json\n")
    assert _cycle(_graph(tmp_path)) == ["a", "b", "c", "a"]
    assert _imports(ast.parse((tmp_path / "c.py").read_text()))[1] == [(4, "json")]
