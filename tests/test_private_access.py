"""Private members of dependencies (``x._name`` where ``_name`` belongs to torch, open_clip, transformers,
torchmetrics, accelerate, ...) are used only inside the compatibility modules named in
:data:`COMPAT_MODULES`, each of which lists what it uses, says why, and has a test that fails naming the
member and the installed version when a release drops it. Everywhere else the package uses public API.

The scan is static, over every source file of ``genmetrics``. An access counts as private when the
attribute starts with one underscore (dunders are public protocol) and

* it is read on anything but the method's own ``self`` / ``cls`` (the first parameter of the enclosing
  function), or named as a string in ``getattr`` / ``hasattr`` / ``setattr`` / ``delattr``, or imported
  (``from torch.x import _y``, ``import torch._dynamo``);
* the name is not one genmetrics defines itself (a function, class, module-level or class-level name, an
  attribute it assigns anywhere), since then it is the package's own private member.

Limits: a private member of a dependency base class read through ``self`` (``torchmetrics.Metric``'s) is
not seen here; those live in ``_torchmetrics_compat.py`` by review and ``tests/core/test_torchmetrics_compat.py``.
"""

from __future__ import annotations

import ast
import functools
from pathlib import Path

PACKAGE = Path(__file__).resolve().parents[1] / "genmetrics"

#: compatibility modules, by file name (so they may move between packages): the only places a private
#: member of a dependency may be touched
COMPAT_MODULES = {
    "_openclip_compat.py": "open_clip's VisionTransformer/TextTransformer._embeds, _get_safe_alternatives",
    "_transformers_compat.py": "PretrainedConfig._attn_implementation",
    "_torch_internals.py": "oneDNN packed linear ops, Tensor._version",
    "_torchmetrics_compat.py": "torchmetrics.Metric's update counter, cached value, sync flag, forward cache",
    "_accelerate_state.py": "AcceleratorState._reset_state",
    "_torch_loader.py": "the DataLoader iterator's _shutdown_workers (stop decoding workers now)",
}
#: names with a leading underscore that are documented public API of the standard library
PUBLIC_UNDERSCORE = {"_asdict", "_replace", "_fields", "_make", "_field_defaults"}  # namedtuple
#: (file name, member) -> the area that removes it; may only shrink (an entry no longer found fails)
PENDING_PRIVATE: dict[tuple[str, str], str] = {}


def _own_names(trees: dict[Path, ast.Module]) -> set[str]:
    """Every name genmetrics defines: functions, classes, module/class-level names, assigned attributes."""
    names: set[str] = set()
    for tree in trees.values():
        bodies = [tree.body] + [n.body for n in ast.walk(tree) if isinstance(n, ast.ClassDef)]
        for body in bodies:
            for stmt in body:
                targets = (
                    stmt.targets
                    if isinstance(stmt, ast.Assign)
                    else [stmt.target]
                    if isinstance(stmt, ast.AnnAssign)
                    else []
                )
                names |= {t.id for t in targets if isinstance(t, ast.Name)}
        for node in ast.walk(tree):
            if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(node.name)
            elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
                names.add(node.attr)
            elif _string_attr_call(node, ("setattr",)):
                names.add(node.args[1].value)  # type: ignore[attr-defined]
    return names


def _string_attr_call(node: ast.AST, funcs: tuple[str, ...]) -> bool:
    return (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in funcs
        and len(node.args) >= 2
        and isinstance(node.args[1], ast.Constant)
        and isinstance(node.args[1].value, str)
    )


def _is_private(name: str) -> bool:
    return name.startswith("_") and not (name.startswith("__") and name.endswith("__"))


class _Scan(ast.NodeVisitor):
    def __init__(self, own: set[str]):
        self.own = own
        self.found: list[tuple[int, str]] = []
        self.receivers: list[str | None] = [None]

    def _hit(self, node: ast.expr | ast.stmt, name: str) -> None:
        if _is_private(name) and name not in self.own and name not in PUBLIC_UNDERSCORE:
            self.found.append((node.lineno, name))

    def _function(self, node: ast.FunctionDef | ast.AsyncFunctionDef) -> None:
        args = node.args.posonlyargs + node.args.args
        self.receivers.append(args[0].arg if args else None)
        self.generic_visit(node)
        self.receivers.pop()

    visit_FunctionDef = visit_AsyncFunctionDef = _function

    def visit_Attribute(self, node: ast.Attribute) -> None:
        receiver = self.receivers[-1]
        if not (
            isinstance(node.value, ast.Name) and receiver in ("self", "cls") and node.value.id == receiver
        ):
            self._hit(node, node.attr)
        self.generic_visit(node)

    def visit_Call(self, node: ast.Call) -> None:
        if _string_attr_call(node, ("getattr", "hasattr", "setattr", "delattr")):
            self._hit(node, node.args[1].value)  # type: ignore[attr-defined]
        self.generic_visit(node)

    def visit_ImportFrom(self, node: ast.ImportFrom) -> None:
        if node.level == 0 and node.module and not node.module.startswith("genmetrics"):
            for part in node.module.split("."):
                self._hit(node, part)
            for alias in node.names:
                self._hit(node, alias.name)

    def visit_Import(self, node: ast.Import) -> None:
        for alias in node.names:
            if not alias.name.startswith("genmetrics"):
                for part in alias.name.split("."):
                    self._hit(node, part)


@functools.lru_cache
def private_accesses(root: Path = PACKAGE) -> list[tuple[Path, int, str]]:
    """``(file, line, member)`` for every access to a private member of a dependency under ``root``."""
    trees = {p: ast.parse(p.read_text(encoding="utf-8"), str(p)) for p in sorted(root.rglob("*.py"))}
    own = _own_names(trees)
    out = []
    for path, tree in trees.items():
        scan = _Scan(own)
        scan.visit(tree)
        out += [(path, line, name) for line, name in sorted(scan.found)]
    return out


def _outside_compat(found: list[tuple[Path, int, str]]) -> list[tuple[Path, int, str]]:
    return [(p, n, name) for p, n, name in found if p.name not in COMPAT_MODULES]


def test_no_private_member_of_a_dependency_outside_the_compat_modules():
    found = _outside_compat(private_accesses())
    new = [
        f"{p.relative_to(PACKAGE.parent)}:{n}: {name}"
        for p, n, name in found
        if (p.name, name) not in PENDING_PRIVATE
    ]
    assert not new, (
        "private members of dependencies used outside the compatibility modules "
        f"({', '.join(COMPAT_MODULES)}): use public API, or move the access into one of them with a test:\n"
        + "\n".join(new)
    )


def test_pending_list_only_shrinks():
    still = {(p.name, name) for p, _, name in _outside_compat(private_accesses())}
    gone = sorted(set(PENDING_PRIVATE) - still)
    assert not gone, f"no longer used: remove from PENDING_PRIVATE in {__file__}: {gone}"


def test_compat_modules_declare_what_they_use():
    """A compatibility module with a ``PRIVATE_APIS`` list names in it every private member it touches."""
    by_file: dict[Path, set[str]] = {}
    for p, _, name in private_accesses():
        if p.name in COMPAT_MODULES:
            by_file.setdefault(p, set()).add(name)
    checked = 0
    for path, names in by_file.items():
        tree = ast.parse(path.read_text(encoding="utf-8"))
        declared = [
            node.value
            for stmt in tree.body
            if isinstance(stmt, ast.Assign)
            and any(isinstance(t, ast.Name) and t.id == "PRIVATE_APIS" for t in stmt.targets)
            for node in ast.walk(stmt.value)
            if isinstance(node, ast.Constant) and isinstance(node.value, str)
        ]
        if declared:
            checked += 1
            tails = {d.rsplit(".", 1)[-1] for d in declared}
            assert names <= tails, f"{path.name}: PRIVATE_APIS does not name {sorted(names - tails)}"
    assert checked >= 5  # open_clip, transformers, torch internals, accelerate, the DataLoader iterator


def test_the_scan_catches_each_kind_of_access(tmp_path):
    """Planted accesses of every kind are found; the package's own privates, ``self._x`` and namedtuple's
    ``_asdict`` are not."""
    (tmp_path / "mine.py").write_text(
        "class Own:\n"
        "    _table = {}\n"
        "    def __init__(self):\n"
        "        self._cache = 1\n"
        "    def get(self, other):\n"
        "        return self._cache + other._cache + len(Own._table)\n"
        "    @classmethod\n"
        "    def make(cls, row):\n"
        "        return cls._table, row._asdict(), self_like._cache\n"
    )
    (tmp_path / "bad.py").write_text(
        "from open_clip.pretrained import _get_safe_alternatives\n"
        "import torch._dynamo\n"
        "def f(attn, v, model_cls):\n"
        "    cls = model_cls\n"
        "    return attn._qkv_same_embed_dim, getattr(v, '_embeds'), cls._from_config(None)\n"
        "def g(self):\n"
        "    return self._own_private_of_a_dependency_base\n"
    )
    found = {(p.name, name) for p, _, name in private_accesses(tmp_path)}
    assert found == {
        ("bad.py", "_get_safe_alternatives"),
        ("bad.py", "_dynamo"),
        ("bad.py", "_qkv_same_embed_dim"),
        ("bad.py", "_embeds"),
        ("bad.py", "_from_config"),
    }
