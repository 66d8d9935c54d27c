"""The layers of the package (docs/contributing.md), checked statically over every source file of ``genmetrics``, with the
imports inside functions counted like the ones at the top (a function-level import is still a dependency:
it only hides a loop from readers and linters):

* test scaffolding stays out of the product (no module outside ``genmetrics.testing`` imports it);
* ``genmetrics.functional`` is pure math: it imports only torch, numpy, scipy and the standard library;
* the families (raclip, tpips, mie) never import each other;
* the library never imports the command line (``genmetrics.cli``, a family's ``cli.py``, ``__main__``);
* ``genmetrics.core`` (the contract: metric base, registry, options, wiring) imports no family, runner or
  command line: none of ``CORE_MAY_NOT_IMPORT``;
* ``genmetrics.accel`` (the fast paths) sits under every user of a fast path: it imports torch and other
  third-party packages, ``genmetrics.functional`` and the shared plumbing (``data``, ``errors``, ``options``,
  ``core``), never a family, a backbone loader, a baseline or a runner;
* no import loops between modules.

``KNOWN_VIOLATIONS`` lists the violations that exist today, each with the area that removes it; it may only
shrink: a listed violation that no longer exists fails too, so its entry is deleted when the fix lands.
"""

from __future__ import annotations

import ast
import sys
from collections import defaultdict
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "genmetrics"
#: test scaffolding (tiny random backbones, recipes of test inputs)
TESTING = ("genmetrics.testing",)
FAMILIES = ("genmetrics.raclip", "genmetrics.tpips", "genmetrics.mie")
#: what genmetrics.core may never import (families, baselines, runners, the command line, backbones)
CORE_MAY_NOT_IMPORT = (
    *FAMILIES,
    "genmetrics.baselines",
    "genmetrics.leaderboard",
    "genmetrics.cli",
    "genmetrics.train",
    "genmetrics.backbones",
    "genmetrics.wrappers",
    "genmetrics.__main__",
)
#: what genmetrics.functional may import besides the standard library and itself
FUNCTIONAL_MAY_IMPORT = ("torch", "numpy", "scipy")

#: the genmetrics packages the fast paths may import (besides torch, third-party packages and the stdlib)
ACCEL_MAY_IMPORT = (
    "genmetrics.accel",
    "genmetrics.functional",
    "genmetrics.data",
    "genmetrics.errors",
    "genmetrics.options",
    "genmetrics.core",
)

#: known violations; each entry is deleted when the fix of its area lands
KNOWN_VIOLATIONS: dict[str, set] = {
    # an import that closes a loop between modules: (importer, imported)
    "loops": set(),  # mie model <-> checkpoint and the tpips model/loading/triplet/baselines loop: fixed
    # imports between layers of one loop of layers: none left (openclip -> metric and data.cache ->
    # backbones, the two upward imports, were fixed; the rest left with them)
    "layer_loops": set(),
    "cli": set(),  # leaderboard.runner -> cli.common (progress moved to data/progress.py): fixed
    "families": set(),
    "functional": set(),
    "accel": set(),
    "testing": set(),
    "core": set(),
}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _within(module: str, prefixes: tuple[str, ...] | str) -> bool:
    prefixes = (prefixes,) if isinstance(prefixes, str) else prefixes
    return any(module == p or module.startswith(p + ".") for p in prefixes)


def _is_testing(module: str) -> bool:
    return _within(module, TESTING)


def _is_cli(module: str) -> bool:
    return (
        _within(module, "genmetrics.cli")
        or module == "genmetrics.__main__"
        or (module.startswith("genmetrics.") and module.rsplit(".", 1)[-1] == "cli")
    )


def _type_checking_only(node: ast.AST) -> bool:
    test = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(test, ast.Name) and test.id == "TYPE_CHECKING")
        or (isinstance(test, ast.Attribute) and test.attr == "TYPE_CHECKING")
    )


def _walk(tree: ast.AST):
    """``ast.walk`` without the bodies of ``if TYPE_CHECKING:`` (annotations only, never executed)."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        for child in ast.iter_child_nodes(node):
            if _type_checking_only(child):
                stack.extend(getattr(child, "orelse", []))
            else:
                stack.append(child)


def imported_modules(path: Path) -> set[str]:
    """Every module ``path`` imports, anywhere (top level or inside functions), resolved to absolute names;
    ``from pkg import name`` counts both ``pkg`` and ``pkg.name`` (``name`` may be a submodule)."""
    tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
    here = _module_name(path)
    package = here if path.name == "__init__.py" else here.rpartition(".")[0]
    out: set[str] = set()
    for node in _walk(tree):
        if isinstance(node, ast.Import):
            out |= {a.name for a in node.names}
        elif isinstance(node, ast.ImportFrom):
            if node.module == "__future__":
                continue
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


def source_modules() -> dict[str, Path]:
    return {_module_name(p): p for p in sorted(PACKAGE.rglob("*.py"))}


def product_modules() -> list[Path]:
    return [p for m, p in source_modules().items() if not _is_testing(m)]


def module_graph() -> dict[str, set[str]]:
    """``module -> the genmetrics modules it imports`` (only names that are modules of the package; an
    import of a package's submodule is not also an edge to the package's ``__init__``)."""
    mods = source_modules()
    graph: dict[str, set[str]] = {}
    for name, path in mods.items():
        targets = set()
        for imported in imported_modules(path):
            if imported in mods and imported != name:
                targets.add(imported)
        # `from pkg import sub` adds both pkg and pkg.sub: keep only the submodule
        graph[name] = {
            t for t in targets if not any(o.startswith(t + ".") for o in targets) or t == "genmetrics"
        }
    return graph


def import_loops(graph: dict[str, set[str]]) -> set[frozenset[str]]:
    """Strongly connected components of more than one module (Tarjan), ignoring the edges between a
    package's ``__init__`` and its own submodules (executing a submodule runs its package first anyway)."""

    def related(a: str, b: str) -> bool:
        return b.startswith(a + ".") or a.startswith(b + ".")

    edges = {a: {b for b in bs if not related(a, b)} for a, bs in graph.items()}
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    out: set[frozenset[str]] = set()
    counter = [0]
    sys.setrecursionlimit(max(sys.getrecursionlimit(), 10_000))

    def strong(v: str) -> None:
        index[v] = low[v] = counter[0]
        counter[0] += 1
        stack.append(v)
        on_stack.add(v)
        for w in edges.get(v, ()):
            if w not in index:
                strong(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = set()
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.add(w)
                if w == v:
                    break
            if len(comp) > 1:
                out.add(frozenset(comp))

    for v in edges:
        if v not in index:
            strong(v)
    return out


def loop_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """The imports that close a loop: edges between two modules of one strongly connected component."""
    comps = import_loops(graph)
    return {(a, b) for a, bs in graph.items() for b in bs for c in comps if a in c and b in c}


def layer(module: str) -> str:
    """The layer a module belongs to: its top-level subpackage or module (``genmetrics.data``,
    ``genmetrics.errors``); the package root's ``__init__`` is a layer of its own. The modules of
    ``genmetrics.core`` are each a layer (``genmetrics.core.options``, ``genmetrics.core.metric_base``): the
    option checks sit below ``data``, the metric base above it."""
    parts = module.split(".")
    if len(parts) > 2 and parts[1] == "core":
        return ".".join(parts[:3])
    return ".".join(parts[:2]) if len(parts) > 1 else "genmetrics.__init__"


def layer_loop_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports that close a loop between layers (``data`` -> ``backbones`` -> ``metric`` -> ``data``),
    a loop that no single module shows."""
    layers: dict[str, set[str]] = defaultdict(set)
    for a, bs in graph.items():
        for b in bs:
            if layer(a) != layer(b):
                layers[layer(a)].add(layer(b))
    comps = import_loops(dict(layers))
    return {
        (a, b)
        for a, bs in graph.items()
        for b in bs
        if layer(a) != layer(b) and any(layer(a) in c and layer(b) in c for c in comps)
    }


def violations() -> dict[str, set]:
    """Every violation of the rules above in today's sources."""
    found: dict[str, set] = defaultdict(set)
    mods = source_modules()
    for name, path in mods.items():
        imported = imported_modules(path)
        for target in imported:
            if not _is_testing(name) and _is_testing(target):
                found["testing"].add((name, target))
            if not _is_cli(name) and _is_cli(target) and target in mods:
                found["cli"].add((name, target))
            here = next((f for f in FAMILIES if _within(name, f)), None)
            there = next((f for f in FAMILIES if _within(target, f)), None)
            if here and there and here != there:
                found["families"].add((name, target))
            if _within(name, "genmetrics.functional"):
                top = target.split(".")[0]
                allowed = top in FUNCTIONAL_MAY_IMPORT or top in sys.stdlib_module_names
                if not (allowed or _within(target, "genmetrics.functional")):
                    found["functional"].add((name, target))
            if _within(name, "genmetrics.core") and _within(target, CORE_MAY_NOT_IMPORT):
                found["core"].add((name, target))
            if _within(name, "genmetrics.accel") and target.split(".")[0] == "genmetrics":
                if not _within(target, ACCEL_MAY_IMPORT):
                    found["accel"].add((name, target))
    graph = module_graph()
    found["loops"] = loop_edges(graph)
    found["layer_loops"] = layer_loop_edges(graph)
    # a `from pkg import name` adds pkg.name for a name that is not a module: keep real modules only
    # and `from pkg import sub` names pkg and pkg.sub: report the submodule only
    for rule in ("testing", "families", "functional", "accel", "cli", "core"):
        pairs = {(a, b) for a, b in found[rule] if b in mods or not any(b.startswith(m + ".") for m in mods)}
        found[rule] = {
            (a, b) for a, b in pairs if not any(x == a and y.startswith(b + ".") for x, y in pairs)
        }
    return dict(found)


RULES = ("testing", "functional", "accel", "families", "cli", "core", "loops", "layer_loops")


@pytest.fixture(scope="module")
def today() -> dict[str, set]:
    return violations()


@pytest.mark.parametrize("rule", RULES)
def test_no_new_violation(rule, today):
    new = today.get(rule, set()) - KNOWN_VIOLATIONS[rule]
    hints = {
        "testing": "take tiny backbones through genmetrics.backbones.provider (docs/contributing.md)",
        "functional": "functional/ is pure math: validate in the caller, raise ValueError, import only "
        + "/".join(FUNCTIONAL_MAY_IMPORT),
        "accel": "the fast paths import only "
        + ", ".join(ACCEL_MAY_IMPORT)
        + " of genmetrics: pass what they "
        "need in from the caller",
        "families": "families never import each other: move the shared code to backbones/ or data/",
        "cli": "the library never imports the command line: move the helper out of cli/",
        "core": "core/ is the contract: it reaches families only through the registry's cards (import "
        "paths as strings); move the shared piece into core/ or below it",
        "loops": "break the loop (a function-level import still counts): move the shared piece down a layer",
        "layer_loops": "a lower layer imports a higher one: move the shared piece down (docs/contributing.md, layers)",
    }
    assert not new, (
        f"new {rule} violation(s): {sorted(map(sorted, new) if rule == 'loops' else new)}; {hints[rule]}"
    )


@pytest.mark.parametrize("rule", RULES)
def test_known_violations_only_shrink(rule, today):
    gone = KNOWN_VIOLATIONS[rule] - today.get(rule, set())
    assert not gone, (
        f"fixed, so delete from KNOWN_VIOLATIONS[{rule!r}] in tests/test_import_graph.py: {sorted(gone)}"
    )


def _write(root: Path, files: dict[str, str]) -> None:
    for rel, src in files.items():
        f = root / "genmetrics" / rel
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text(src)


def test_the_scan_sees_every_form_of_import(tmp_path, monkeypatch):
    """The checker itself: each way of importing the testing package is caught (a checker that only saw
    top-level ``import x`` would pass a product that imports it inside a function)."""
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "genmetrics")
    forms = {
        "fam/a.py": "import genmetrics.testing\n",
        "fam/b.py": "def f():\n    from genmetrics import testing\n",
        "fam/c.py": "from genmetrics.testing import tiny_clip\n",
        "fam/d.py": "from .. import testing\n",
        "fam/e.py": "import importlib\nimportlib.import_module('genmetrics.testing')\n",
        "fam/g.py": "from genmetrics.testing.recipes import mie\n",
    }
    _write(tmp_path, forms)
    for name in forms:
        assert any(_is_testing(m) for m in imported_modules(tmp_path / "genmetrics" / name)), name
    _write(
        tmp_path,
        {"fam/ok.py": "from genmetrics.backbones.provider import provide\nimport genmetrics.testingx\n"},
    )
    assert not any(_is_testing(m) for m in imported_modules(tmp_path / "genmetrics" / "fam" / "ok.py"))
    _write(
        tmp_path,
        {"fam/t.py": "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    import genmetrics.testing\n"},
    )
    assert not any(_is_testing(m) for m in imported_modules(tmp_path / "genmetrics" / "fam" / "t.py"))


def test_each_rule_catches_its_violation(tmp_path, monkeypatch):
    """A planted package with one violation of each rule, function-level imports included."""
    monkeypatch.setattr(sys.modules[__name__], "PACKAGE", tmp_path / "genmetrics")
    _write(
        tmp_path,
        {
            "__init__.py": "",
            "errors.py": "",
            "testing/__init__.py": "",
            "functional/__init__.py": "",
            "functional/math.py": "import math\nimport torch\ndef f():\n    from genmetrics.errors import E\n",
            "raclip/__init__.py": "",
            "raclip/metric.py": "def f():\n    from genmetrics.tpips import model\n",
            "tpips/__init__.py": "",
            "tpips/model.py": "from genmetrics.tpips import loading\n",
            "tpips/loading.py": "def load():\n    from genmetrics.tpips.model import X\n",
            "cli/__init__.py": "",
            "cli/common.py": "",
            "leaderboard/__init__.py": "",
            "leaderboard/runner.py": "def run():\n    from genmetrics.cli.common import progress\n",
            "mie/__init__.py": "",
            "mie/cli.py": "from genmetrics.cli import common\n",
            "mie/model.py": "import genmetrics.testing\n",
            "core/__init__.py": "",
            "core/registry.py": "def load():\n    import genmetrics.raclip\n",
            "core/wiring.py": "from genmetrics.leaderboard import runner\n",
            "core/options.py": "from genmetrics import errors\n",
            "accel/__init__.py": "",
            "accel/fast.py": "import torch\nfrom genmetrics.functional import math\ndef f():\n    import genmetrics.raclip\n",
        },
    )
    found = violations()
    assert found["core"] == {
        ("genmetrics.core.registry", "genmetrics.raclip"),
        ("genmetrics.core.wiring", "genmetrics.leaderboard.runner"),
    }
    assert found["functional"] == {("genmetrics.functional.math", "genmetrics.errors")}
    assert found["families"] == {("genmetrics.raclip.metric", "genmetrics.tpips.model")}
    assert found["cli"] == {("genmetrics.leaderboard.runner", "genmetrics.cli.common")}  # mie/cli.py is CLI
    assert found["loops"] == {
        ("genmetrics.tpips.model", "genmetrics.tpips.loading"),
        ("genmetrics.tpips.loading", "genmetrics.tpips.model"),
    }
    # leaderboard -> cli and mie.cli -> cli, but nothing back: no loop of layers
    assert found["layer_loops"] == set()
    assert found["testing"] == {("genmetrics.mie.model", "genmetrics.testing")}
    assert found["accel"] == {("genmetrics.accel.fast", "genmetrics.raclip")}


def test_pixel_baselines_reach_their_fast_paths_without_the_backbones():
    """psnr's CPU timing and native kernel come from ``genmetrics.accel``; ``baselines.pixel`` loads no backbone
    code (weight-free metrics import no model loader)."""
    mods = source_modules()
    imported = imported_modules(mods["genmetrics.baselines.pixel"])
    assert not [m for m in imported if _within(m, "genmetrics.backbones")]
    assert "genmetrics.accel.pixel_native" in imported


@pytest.mark.parametrize(
    "module", ["genmetrics.testing", "genmetrics.testing.recipes", "genmetrics.testing.tiny_vlm"]
)
def test_testing_modules_are_exempt(module):
    assert _is_testing(module)


#: the concerns of genmetrics.data (data/__init__.py) and the other parts of data each may import: text is at the
#: bottom, result files use text and the JSONL reader, caches write through result files, image input is apart
DATA_CONCERNS: dict[str, tuple[str, ...]] = {
    "genmetrics.data.text": (),
    "genmetrics.data.output": ("genmetrics.data.text", "genmetrics.data.jsonl"),
    "genmetrics.data.caches": ("genmetrics.data.output", "genmetrics.data.text"),
    "genmetrics.data.io": ("genmetrics.data.text", "genmetrics.data.device", "genmetrics.data.progress"),
}


def data_concern_edges(graph: dict[str, set[str]]) -> set[tuple[str, str]]:
    """Imports from one concern of ``genmetrics.data`` into a part of data it may not use."""
    bad = set()
    for module, imports in graph.items():
        for concern, allowed in DATA_CONCERNS.items():
            if not _within(module, concern):
                continue
            for imp in imports:
                if _within(imp, "genmetrics.data") and imp != "genmetrics.data":
                    if not _within(imp, (concern, *allowed)):
                        bad.add((module, imp))
    return bad


def test_data_concerns_stay_apart():
    bad = data_concern_edges(module_graph())
    assert not bad, "imports across the concerns of genmetrics.data (see DATA_CONCERNS):\n" + "\n".join(
        f"  {a} -> {b}" for a, b in sorted(bad)
    )


def test_the_data_rule_sees_a_crossing():
    graph = {
        "genmetrics.data.text.escape": {"genmetrics.data.io.images", "genmetrics.errors"},
        "genmetrics.data.caches.features": {"genmetrics.data.output.atomic"},
        "genmetrics.data.images": {"genmetrics.data.io.images"},  # an old path re-exporting: no concern
    }
    assert data_concern_edges(graph) == {("genmetrics.data.text.escape", "genmetrics.data.io.images")}
