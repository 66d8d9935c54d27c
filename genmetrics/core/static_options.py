"""A metric's constructor options read from its source with :mod:`ast`, without importing it.

``genmetrics info NAME`` shows the options ``create_metric(NAME, ...)`` accepts. Importing the metric
class to inspect its signature would import torch and torchmetrics (seconds of start-up); reading the
source gives the same names and defaults (``ast.unparse`` of the default expression, which equals its
``repr`` for the literals used as defaults). The walk follows ``__init__`` up the base classes while an
``__init__`` passes ``**kwargs`` on, as :func:`genmetrics.core.registry.metric_options` does; a base class it
cannot find in genmetrics' own source (or any other surprise) returns None and the caller imports.
"""

from __future__ import annotations

import ast
import importlib.util
from functools import lru_cache
from typing import Any


@lru_cache(maxsize=64)
def _module_tree(module: str) -> ast.Module | None:
    if not module.startswith("genmetrics"):
        return None
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin or not spec.origin.endswith(".py"):
        return None
    with open(spec.origin, encoding="utf-8") as f:
        return ast.parse(f.read())


def _find_class(module: str, name: str, depth: int = 0) -> tuple[ast.ClassDef, str] | None:
    tree = _module_tree(module)
    if tree is None or depth > 8:
        return None
    for node in tree.body:
        if isinstance(node, ast.ClassDef) and node.name == name:
            return node, module
    for node in tree.body:  # imported name: follow it
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _find_class(node.module, alias.name, depth + 1)
    return None


def _constant(module: str, name: str, depth: int = 0) -> Any:
    tree = _module_tree(module)
    if tree is None or depth > 8:
        raise ValueError(name)
    for node in tree.body:
        if isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            if any(isinstance(t, ast.Name) and t.id == name for t in targets) and node.value is not None:
                return ast.literal_eval(node.value)
        if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            for alias in node.names:
                if (alias.asname or alias.name) == name:
                    return _constant(node.module, alias.name, depth + 1)
    raise ValueError(name)


def _default_repr(node: ast.expr, module: str) -> str:
    """``repr`` of a default: a literal, or a module-level constant (ValueError when neither)."""
    if isinstance(node, ast.Name) and node.id not in ("None", "True", "False"):
        return repr(_constant(module, node.id))
    return repr(ast.literal_eval(node))


def _mro(cls: ast.ClassDef, mod: str, depth: int = 0) -> list[tuple[ast.ClassDef, str]] | None:
    """Depth-first, left to right, keeping each class's last occurrence (C3 for these hierarchies);
    stops at bases outside genmetrics' source (torchmetrics.Metric: it adds no options)."""
    if depth > 12:
        return None
    out = [(cls, mod)]
    for b in cls.bases:
        if isinstance(b, ast.Attribute):
            continue  # e.g. torchmetrics.Metric
        if not isinstance(b, ast.Name):
            return None
        found = _find_class(mod, b.id)
        if found is None:
            if b.id in ("object", "Generic", "Protocol"):
                continue
            return None
        sub = _mro(found[0], found[1], depth + 1)
        if sub is None:
            return None
        out.extend(sub)
    keep, seen = [], set()
    for c, m in reversed(out):
        if (m, c.name) not in seen:
            seen.add((m, c.name))
            keep.append((c, m))
    return keep[::-1]


def static_options(factory: str) -> dict[str, Any] | None:
    """``{option: repr(default) or None}`` for ``"module:Class"``, or None when it cannot be read statically.

    >>> opts = static_options("genmetrics.baselines.pixel:PSNR")  # without importing torch for it
    >>> opts["max_db"], opts["reduction"], opts["batch_size"]
    ('100.0', "'mean'", '32')
    """
    module, _, name = factory.partition(":")
    try:
        found = _find_class(module, name)
        mro = _mro(*found) if found else None
        if mro is None:
            return None
        out: dict[str, Any] = {}
        for cls, mod in mro:
            init = next(
                (n for n in cls.body if isinstance(n, ast.FunctionDef) and n.name == "__init__"), None
            )
            if init is None:
                continue
            a = init.args
            pos = a.posonlyargs + a.args
            defaults: list[Any] = [None] * (len(pos) - len(a.defaults)) + list(a.defaults)
            for arg, default in list(zip(pos, defaults)) + list(zip(a.kwonlyargs, a.kw_defaults)):
                if arg.arg != "self" and arg.arg not in out:
                    out[arg.arg] = None if default is None else _default_repr(default, mod)
            if a.kwarg is None:
                break
        return out
    except (OSError, SyntaxError, ValueError, ImportError):
        return None
