"""genmetrics.train.data_checks: training pairs whose candidates are one file or identical copies."""

from __future__ import annotations

import json
import warnings
from collections.abc import Callable
from pathlib import Path

from tests.reliability.hostile import Cases, Ctx

# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


def _pairs(ctx: Ctx, edit: Callable[[list[dict], Path], None]) -> Path:
    from genmetrics.testing import toy_mib_pairs

    path = Path(toy_mib_pairs(ctx.inp / "data", 4))
    rows = [json.loads(x) for x in path.read_text().splitlines() if x.strip()]
    edit(rows, path.parent)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def _check_pairs(path: Path):
    from genmetrics.mie.train import load_training_pairs
    from genmetrics.train.data_checks import check_pairs

    return check_pairs(load_training_pairs(path), str(path))


@case(
    "h-train-same-file-candidates", "silent", "MIE pairs whose two candidates are one file: refused with rows"
)
def _(ctx):
    def same(rows, folder):
        for r in rows:
            r["candidates"] = [r["candidates"][0], r["candidates"][0]]

    p = _pairs(ctx, same)
    ctx.freeze()
    ctx.refused(lambda: _check_pairs(p), str(p))


@case(
    "h-train-one-duplicate-pair", "silent", "one MIE pair of the same file among good ones: refused naming it"
)
def _(ctx):
    ids: list[str] = []

    def one(rows, folder):
        rows[1]["candidates"] = [rows[1]["candidates"][0]] * 2
        ids.append(str(rows[1]["id"]))

    p = _pairs(ctx, one)
    ctx.freeze()
    ctx.refused(lambda: _check_pairs(p), ids[0])


@case(
    "h-train-identical-copies-warn", "silent", "MIE pairs whose candidates are byte-identical copies: warned"
)
def _(ctx):
    import shutil

    def copies(rows, folder):
        for i, r in enumerate(rows[:2]):
            a = folder / str(r["candidates"][0])
            b = folder / f"copy{i}{a.suffix}"
            shutil.copy(a if a.exists() else Path(r["candidates"][0]), b)
            r["candidates"] = [r["candidates"][0], str(b) if not a.exists() else b.name]

    p = _pairs(ctx, copies)
    ctx.freeze()
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        _check_pairs(p)
    assert any("2" in str(w.message) for w in seen), [str(w.message) for w in seen]


test_hostile = HOSTILE.test()
