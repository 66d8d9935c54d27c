"""Architecture measurements of a genmetrics source tree, printed as one JSON object.

    python benchmarks/architecture.py [--root PATH] [--markdown] [--before PATH]

``--root`` is the tree to measure (default: this repository); it must hold ``genmetrics/`` and ``tests/``.
``--markdown`` prints the rows of the table in docs/contributing.md ("Architecture measurements") instead of
JSON; with ``--before PATH`` (another tree, or a JSON file this script printed) the rows have a "before"
and an "after" column.

What is counted (Python files under ``genmetrics/`` unless said otherwise; parsed with ``ast``, never
imported):

- ``largest_file``: the file with the most lines, in the package and in ``tests/``;
- ``longest_function``: the function or method with the most lines (``end_lineno - lineno + 1``, decorators
  excluded), and ``functions_over_40_lines``;
- ``private_accesses``: attribute reads ``x._name`` where ``x`` is not ``self``/``cls``/``super()``,
  ``_name`` is not a dunder and no ``genmetrics`` file defines ``_name`` (as a function, class, argument,
  top-level or class-level name, or ``self._name = ...``): a private member of a dependency;
- ``names_defined_twice``: public top-level names (functions, classes, assigned names, outside function
  bodies) defined in more than one module; importing a name is not defining it;
- ``modules_with_behaviour``: modules that define at least one function or method; ``mirrored`` counts
  those with a test file ``tests/<package path>/test_<module>.py`` (a leading underscore of the module
  may be dropped; an ``__init__.py`` is mirrored by ``tests/<package path>/test_init.py``);
- ``issue_references``: ``issue NN``, ``issue-NN``, ``issue #NN`` (any case) or ``(#NN)`` in the package and
  in the tests;
- ``public_methods``: methods of public classes whose name has no leading underscore, and how many have
  no docstring (``@overload`` stubs and property setters/deleters excluded).
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from collections import defaultdict
from pathlib import Path
from typing import Any

LONG_FUNCTION = 40
ISSUE_RE = re.compile(r"\bissues?[\s_-]*#?\d+|\(#\d+\)", re.IGNORECASE)  # as tests/test_docs_words.py
REPO = Path(__file__).resolve().parents[1]


def _py_files(folder: Path) -> list[Path]:
    if not folder.is_dir():
        return []
    return sorted(p for p in folder.rglob("*.py") if "__pycache__" not in p.parts)


def _lines(text: str) -> int:
    return len(text.splitlines())


def _functions(tree: ast.AST) -> list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]]:
    """Every function and method with its qualified name (``Class.method``, ``outer.<locals>.inner``)."""
    out: list[tuple[ast.FunctionDef | ast.AsyncFunctionDef, str]] = []

    def walk(node: ast.AST, prefix: str) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)):
                name = prefix + child.name
                out.append((child, name))
                walk(child, name + ".<locals>.")
            elif isinstance(child, ast.ClassDef):
                walk(child, prefix + child.name + ".")
            else:
                walk(child, prefix)

    walk(tree, "")
    return out


def _top_level_names(tree: ast.Module) -> set[str]:
    """Names a module defines at its top level (inside ``if``/``try`` blocks too, not inside functions)."""
    names: set[str] = set()

    def targets(t: ast.AST) -> None:
        if isinstance(t, ast.Name):
            names.add(t.id)
        elif isinstance(t, (ast.Tuple, ast.List)):
            for e in t.elts:
                targets(e)

    def walk(body: list[ast.stmt]) -> None:
        for s in body:
            if isinstance(s, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                names.add(s.name)
            elif isinstance(s, ast.Assign):
                for t in s.targets:
                    targets(t)
            elif isinstance(s, (ast.AnnAssign, ast.AugAssign)):
                targets(s.target)
            elif isinstance(s, ast.If):
                walk(s.body)
                walk(s.orelse)
            elif isinstance(s, ast.Try):
                walk(s.body)
                walk(s.orelse)
                walk(s.finalbody)
                for h in s.handlers:
                    walk(h.body)

    walk(tree.body)
    return names


def _defined_identifiers(tree: ast.AST) -> set[str]:
    """Every identifier a file defines anywhere: functions, classes, arguments, assigned names and
    attributes assigned on any object (``self._x = ...``)."""
    out: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out.add(node.name)
        elif isinstance(node, ast.arg):
            out.add(node.arg)
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            out.add(node.id)
        elif isinstance(node, ast.Attribute) and isinstance(node.ctx, (ast.Store, ast.Del)):
            out.add(node.attr)
        elif isinstance(node, ast.keyword) and node.arg:
            out.add(node.arg)  # namedtuple/dataclass fields built by keyword, setattr-free factories
    return out


def _is_self_or_super(value: ast.expr) -> bool:
    if isinstance(value, ast.Name) and value.id in ("self", "cls"):
        return True
    return isinstance(value, ast.Call) and isinstance(value.func, ast.Name) and value.func.id == "super"


def _private_reads(tree: ast.AST) -> list[tuple[str, int]]:
    out = []
    for node in ast.walk(tree):
        if (
            isinstance(node, ast.Attribute)
            and isinstance(node.ctx, ast.Load)
            and node.attr.startswith("_")
            and not (node.attr.startswith("__") and node.attr.endswith("__"))
            and not _is_self_or_super(node.value)
        ):
            out.append((node.attr, node.lineno))
    return out


def _has_behaviour(tree: ast.AST) -> bool:
    return any(isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)) for n in ast.walk(tree))


def _mirror_candidates(rel: Path) -> list[Path]:
    """Test files that mirror the module at ``rel`` (a path below the package folder)."""
    folder = Path("tests", *rel.parts[:-1])
    stem = rel.stem
    if stem == "__init__":
        return [folder / "test_init.py"]
    names = [f"test_{stem}.py"]
    if stem.startswith("_"):
        names.append(f"test_{stem.lstrip('_')}.py")
    return [folder / n for n in names]


def _decorator_names(fn: ast.FunctionDef | ast.AsyncFunctionDef) -> set[str]:
    out = set()
    for d in fn.decorator_list:
        if isinstance(d, ast.Name):
            out.add(d.id)
        elif isinstance(d, ast.Attribute):
            out.add(d.attr)
    return out


def _public_methods(tree: ast.AST) -> tuple[int, list[str]]:
    total, missing = 0, []
    for cls in ast.walk(tree):
        if not isinstance(cls, ast.ClassDef) or cls.name.startswith("_"):
            continue
        for fn in cls.body:
            if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)) or fn.name.startswith("_"):
                continue
            if _decorator_names(fn) & {"overload", "setter", "deleter"}:
                continue
            total += 1
            if ast.get_docstring(fn) is None:
                missing.append(f"{cls.name}.{fn.name}")
    return total, missing


def measure(root: Path) -> dict[str, Any]:
    """The measurements of the tree at ``root`` (see the module docstring)."""
    root = root.resolve()
    pkg = root / "genmetrics"
    files = _py_files(pkg)
    if not files:
        raise SystemExit(f"error: --root {root} holds no genmetrics/*.py; pass the folder of a checkout")
    tests = _py_files(root / "tests")
    texts = {p: p.read_text(encoding="utf-8") for p in files}
    trees = {p: ast.parse(texts[p], filename=str(p)) for p in files}
    rel = {p: p.relative_to(root).as_posix() for p in files}

    def largest(paths: list[Path], text_of) -> dict[str, Any]:
        if not paths:
            return {"path": None, "lines": 0}
        sizes = {p: _lines(text_of(p)) for p in paths}
        top = max(paths, key=lambda p: (sizes[p], p.as_posix()))
        return {"path": top.relative_to(root).as_posix(), "lines": sizes[top]}

    functions = [
        ((fn.end_lineno or fn.lineno) - fn.lineno + 1, f"{rel[p]}:{name}")
        for p in files
        for fn, name in _functions(trees[p])
    ]
    longest = max(functions, default=(0, None))

    defined: set[str] = set()
    for t in trees.values():
        defined |= _defined_identifiers(t)
    private = sorted(
        f"{rel[p]}:{line}:{attr}"
        for p in files
        for attr, line in _private_reads(trees[p])
        if attr not in defined
    )

    where: dict[str, list[str]] = defaultdict(list)
    for p in files:
        for name in _top_level_names(trees[p]):
            if not name.startswith("_"):
                where[name].append(rel[p])
    twice = {n: sorted(ms) for n, ms in sorted(where.items()) if len(ms) > 1}

    behaviour = [p for p in files if _has_behaviour(trees[p])]
    unmirrored = [
        rel[p]
        for p in behaviour
        if not any((root / c).is_file() for c in _mirror_candidates(p.relative_to(pkg)))
    ]

    test_texts = {p: p.read_text(encoding="utf-8") for p in tests}
    methods = [_public_methods(t) for t in trees.values()]
    undocumented = sorted(m for _, ms in methods for m in ms)

    return {
        "root": str(root),
        "package_files": len(files),
        "package_lines": sum(_lines(t) for t in texts.values()),
        "test_files": len(tests),
        "largest_file": largest(files, texts.__getitem__),
        "largest_test_file": largest(tests, test_texts.__getitem__),
        "longest_function": {"name": longest[1], "lines": longest[0]},
        "functions": len(functions),
        f"functions_over_{LONG_FUNCTION}_lines": sum(1 for n, _ in functions if n > LONG_FUNCTION),
        "private_accesses": len(private),
        "private_access_sites": private,
        "names_defined_twice": len(twice),
        "names_defined_twice_where": twice,
        "modules_with_behaviour": len(behaviour),
        "modules_mirrored": len(behaviour) - len(unmirrored),
        "modules_not_mirrored": unmirrored,
        "issue_references_package": sum(len(ISSUE_RE.findall(t)) for t in texts.values()),
        "issue_references_tests": sum(len(ISSUE_RE.findall(t)) for t in test_texts.values()),
        "public_methods": sum(n for n, _ in methods),
        "public_methods_without_docstring": len(undocumented),
        "public_methods_without_docstring_names": undocumented,
    }


ROWS = [
    ("Package files / lines", lambda m: f"{m['package_files']} / {m['package_lines']:,}"),
    ("Largest file (lines)", lambda m: f"{m['largest_file']['lines']:,} (`{m['largest_file']['path']}`)"),
    (
        "Largest test file (lines)",
        lambda m: f"{m['largest_test_file']['lines']:,} (`{m['largest_test_file']['path']}`)",
    ),
    (
        "Longest function (lines)",
        lambda m: f"{m['longest_function']['lines']} (`{str(m['longest_function']['name']).split(':')[-1]}`)",
    ),
    (f"Functions over {LONG_FUNCTION} lines", lambda m: f"{m[f'functions_over_{LONG_FUNCTION}_lines']}"),
    ("Private members of dependencies read", lambda m: f"{m['private_accesses']}"),
    ("Public names defined in more than one module", lambda m: f"{m['names_defined_twice']}"),
    (
        "Modules with behaviour / with a mirrored test file",
        lambda m: f"{m['modules_with_behaviour']} / {m['modules_mirrored']}",
    ),
    (
        "`issue NN` references (package / tests)",
        lambda m: f"{m['issue_references_package']} / {m['issue_references_tests']}",
    ),
    (
        "Public methods / without a docstring",
        lambda m: f"{m['public_methods']} / {m['public_methods_without_docstring']}",
    ),
]


def markdown(after: dict[str, Any], before: dict[str, Any] | None = None) -> str:
    """The table rows (with a header) for docs/contributing.md."""
    if before is None:
        lines = ["| Measure | Value |", "|---|---|"]
        lines += [f"| {label} | {fmt(after)} |" for label, fmt in ROWS]
    else:
        lines = ["| Measure | Before | After |", "|---|---|---|"]
        lines += [f"| {label} | {fmt(before)} | {fmt(after)} |" for label, fmt in ROWS]
    return "\n".join(lines)


def _load(path: Path) -> dict[str, Any]:
    if path.is_file():
        return json.loads(path.read_text(encoding="utf-8"))
    return measure(path)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--root", type=Path, default=REPO, help="the tree to measure (default: this repository)")
    ap.add_argument("--markdown", action="store_true", help="print the table rows instead of JSON")
    ap.add_argument("--before", type=Path, help="a tree (or this script's JSON) for a 'before' column")
    args = ap.parse_args(argv)
    after = measure(args.root)
    before = _load(args.before) if args.before else None
    if args.markdown:
        print(markdown(after, before))
    else:
        print(json.dumps(after if before is None else {"before": before, "after": after}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
