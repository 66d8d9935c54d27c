"""Every public top-level function or class of the package is defined in one module.

A name defined twice means two things to a reader (two ``content_hash`` that hashed different things) or one
thing kept twice. Modules that only re-export (old public paths) import names and define none, so they pass.
The one allowed repetition: the family packages (``raclip``, ``tpips``, ``mie``) never import each other, so
each states its own command or hook under the shared name (``tpips.train.TrainConfig``,
``mie.train.TrainConfig``); a name defined once in each of several families, and nowhere else, passes.
"""

from __future__ import annotations

import ast
from collections import defaultdict
from pathlib import Path

PKG = Path(__file__).resolve().parents[1] / "genmetrics"
FAMILIES = ("raclip", "tpips", "mie")


def definitions(sources: dict[str, str]) -> dict[str, list[str]]:
    """Public top-level function and class names -> the modules (relative paths) that define them."""
    found: dict[str, list[str]] = defaultdict(list)
    for rel, text in sources.items():
        for node in ast.parse(text).body:
            is_def = isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef))
            if is_def and not node.name.startswith("_"):
                found[node.name].append(rel)
    return found


def _family(rel: str) -> str | None:
    parts = rel.split("/")
    return parts[1] if len(parts) > 2 and parts[1] in FAMILIES else None


def defined_twice(sources: dict[str, str]) -> dict[str, list[str]]:
    """The names defined in more than one module, except one definition per family package."""
    out = {}
    for name, mods in definitions(sources).items():
        families = [_family(m) for m in mods]
        one_per_family = None not in families and len(set(families)) == len(families)
        if len(mods) > 1 and not one_per_family:
            out[name] = sorted(mods)
    return out


def _package_sources() -> dict[str, str]:
    return {
        f.relative_to(PKG.parent).as_posix(): f.read_text(encoding="utf-8") for f in sorted(PKG.rglob("*.py"))
    }


def test_no_public_name_is_defined_twice():
    twice = defined_twice(_package_sources())
    assert not twice, (
        "public names defined in more than one module (keep one definition, import it):\n"
        + "\n".join(f"  {name}: {', '.join(mods)}" for name, mods in sorted(twice.items()))
    )


def test_the_check_sees_a_second_definition_and_passes_a_re_export():
    """The checker itself, on sources whose answer is known: a second ``def`` is caught, an import is not, one
    definition per family passes, a family name also defined outside the families is caught."""
    sources = {
        "genmetrics/data/caches/features.py": "def content_hash(x):\n    return x\n",
        "genmetrics/data/results.py": "from genmetrics.data.output.hashes import file_hash\n__all__ = ['file_hash']\n",
        "genmetrics/data/output/hashes.py": "def file_hash(p):\n    return p\n",
        "genmetrics/tpips/train.py": "class TrainConfig:\n    pass\n",
        "genmetrics/mie/train.py": "class TrainConfig:\n    pass\n",
    }
    assert defined_twice(sources) == {}
    sources["genmetrics/data/output/hashes.py"] += "def content_hash(p):\n    return p\n"
    sources["genmetrics/testing/models.py"] = "class TrainConfig:\n    pass\n"
    sources["genmetrics/tpips/evaluate.py"] = "def _fmt(x):\n    return x\n"  # private: not counted
    assert defined_twice(sources) == {
        "content_hash": ["genmetrics/data/caches/features.py", "genmetrics/data/output/hashes.py"],
        "TrainConfig": [
            "genmetrics/mie/train.py",
            "genmetrics/testing/models.py",
            "genmetrics/tpips/train.py",
        ],
    }
