"""The documented module paths of genmetrics.data keep working: each old path re-exports the same objects
as their new home (and defines nothing of its own)."""

from __future__ import annotations

import ast
import importlib
from pathlib import Path

import pytest

OLD = {
    "genmetrics.data.images": ["genmetrics.data.io.images"],
    "genmetrics.data.pipeline": ["genmetrics.data.io.pipeline"],
    "genmetrics.data.batching": ["genmetrics.data.io.batching"],
    "genmetrics.data.escape": ["genmetrics.data.text.escape"],
    "genmetrics.data.results": [
        f"genmetrics.data.output.{m}"
        for m in ("write_rule", "disk", "atomic", "rows", "hashes", "lock", "manifest", "merge")
    ]
    + ["genmetrics.data.text.jsonable"],
}


@pytest.mark.parametrize("old", sorted(OLD))
def test_old_path_re_exports_the_new_homes(old):
    module = importlib.import_module(old)
    homes = [importlib.import_module(m) for m in OLD[old]]
    assert module.__all__, old
    for name in module.__all__:
        home = [h for h in homes if name in vars(h)]
        assert home, f"{old}.{name}: no new home defines it"
        assert getattr(module, name) is getattr(home[0], name), (
            f"{old}.{name} is not {home[0].__name__}.{name}"
        )
    tree = ast.parse(Path(module.__file__).read_text(encoding="utf-8"))
    defined = [
        type(n).__name__
        for n in tree.body
        if not isinstance(n, (ast.Import, ast.ImportFrom, ast.Expr, ast.Assign))
    ]
    assigned = [
        t.id for n in tree.body if isinstance(n, ast.Assign) for t in n.targets if isinstance(t, ast.Name)
    ]
    assert defined == [] and assigned == ["__all__"], f"{old} should only import and list __all__"


def test_the_documented_names_are_there():
    """The names docs/ cite from the old paths."""
    from genmetrics.data.batching import safe_batch_size  # noqa: F401
    from genmetrics.data.escape import csv_cell, file_stem  # noqa: F401
    from genmetrics.data.images import DEEP_MODES, decode_uint8, list_images, stem_index  # noqa: F401
    from genmetrics.data.pipeline import decoded  # noqa: F401
    from genmetrics.data.results import (  # noqa: F401
        DiskFullError,
        OutputLock,
        atomic_output,
        atomic_write_bytes,
        atomic_write_json,
        atomic_write_text,
        destination,
        make_folder,
        open_append,
    )
