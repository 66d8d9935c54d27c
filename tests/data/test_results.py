"""genmetrics.data.results: locks, appends, atomic writes and folders never write through a link or outside the
chosen folder; results files holding pickles or NaN are refused."""

from __future__ import annotations

import json
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tests.reliability.hostile import Cases, Ctx, _plant_link


def test_a_result_row_with_a_score_too_large_for_a_float_is_named(tmp_path, capsys):
    """``leaderboard --resume`` on a results.jsonl whose score is a 400-digit integer: one error line naming
    the file and line (it was an OverflowError traceback, exit 1)."""
    from genmetrics.cli.main import main
    from genmetrics.data.results import check_result_row
    from genmetrics.testing import toy_leaderboard

    row = {"generator": "g", "metric": "psnr", "id": "0"}
    assert check_result_row({**row, "score": 10**300}) is None  # a float holds it
    assert "finite number" in check_result_row({**row, "score": 10**400})

    cfg = toy_leaderboard(tmp_path, n=2)
    board = tmp_path / "board.yaml"  # JSON is YAML
    board.write_text(json.dumps(cfg))
    out = tmp_path / "run"
    assert main(["leaderboard", str(board), "--out", str(out), "--no-plots"]) == 0
    results = out / "results.jsonl"
    lines = results.read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "score": 10**400})
    results.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["leaderboard", str(board), "--out", str(out), "--no-plots", "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "Traceback" not in err and f"{results}:1" in err


# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case("h-results-jsonl-pickle", "pickle", "read_results: results.jsonl holds pickle bytes")
def _(ctx):
    from genmetrics.data.results import read_results

    p = ctx.payload(ctx.inp / "results.jsonl")
    with open(p, "ab") as f:  # a good row after it: the pickle is not a torn last line
        f.write(b'\n{"generator": "g", "metric": "psnr", "id": "a", "value": 1.0}\n')
    ctx.freeze()
    ctx.refused(lambda: read_results(p), "results.jsonl")


# ================================================================ 2. links in output folders (link)
def _link_refused(ctx: Ctx, name: str, target: Path | str, write: Callable[[Path], Any]) -> None:
    ctx.out.mkdir(exist_ok=True)
    _plant_link(ctx.out / name, target)
    ctx.freeze()
    before = ctx.outside.read_bytes()
    ctx.refused(lambda: write(ctx.out / name), name)
    assert ctx.outside.read_bytes() == before
    assert sorted(os.listdir(ctx.outside_dir)) == ["precious.txt"]


def _lock(p: Path):
    from genmetrics.data.results import lock_output_folder

    return lock_output_folder(p.parent)


def _append(p: Path):
    from genmetrics.data.results import open_append

    with open_append(p, root=p.parent) as f:
        f.write("{}\n")


def _atomic(p: Path):
    from genmetrics.data.results import atomic_write_text

    atomic_write_text(p, "x", root=p.parent)


@case("h-link-lock-to-folder", "link", "the lock file is a link to a folder outside")
def _(ctx):
    from genmetrics.data.results import LOCK

    _link_refused(ctx, LOCK, ctx.outside_dir, _lock)


@case("h-link-lock-dangling", "link", "the lock file is a dangling link to a new file outside")
def _(ctx):
    from genmetrics.data.results import LOCK

    _link_refused(ctx, LOCK, ctx.outside_dir / "new.txt", _lock)


@case("h-link-lock-loop", "link", "the lock file is a link to itself")
def _(ctx):
    from genmetrics.data.results import LOCK

    _link_refused(ctx, LOCK, LOCK, _lock)


@case("h-link-append-file", "link", "results.jsonl (append) is a link to a file outside")
def _(ctx):
    _link_refused(ctx, "results.jsonl", ctx.outside, _append)


@case("h-link-append-dangling", "link", "results.jsonl (append) is a dangling link")
def _(ctx):
    _link_refused(ctx, "results.jsonl", ctx.outside_dir / "new.jsonl", _append)


@case("h-link-append-loop", "link", "metrics.jsonl (append) is a link loop")
def _(ctx):
    _link_refused(ctx, "metrics.jsonl", "metrics.jsonl", _append)


@case("h-link-atomic-to-folder", "link", "report.md (atomic write) is a link to a folder outside")
def _(ctx):
    _link_refused(ctx, "report.md", ctx.outside_dir, _atomic)


@case("h-link-atomic-dangling", "link", "summary.json (atomic write) is a dangling link")
def _(ctx):
    _link_refused(ctx, "summary.json", ctx.outside_dir / "summary.json", _atomic)


@case("h-link-atomic-file", "link", "leaderboard.csv (atomic write) is a link to a file outside")
def _(ctx):
    _link_refused(ctx, "leaderboard.csv", ctx.outside, _atomic)


@case("h-link-subfolder", "link", "plots/ is a link to a folder outside: a.png is never created there")
def _(ctx):
    from genmetrics.data.results import destination

    ctx.out.mkdir()
    _plant_link(ctx.out / "plots", ctx.outside_dir)
    ctx.freeze()
    ctx.refused(lambda: destination(ctx.out / "plots" / "a.png", root=ctx.out), "plots")
    assert sorted(os.listdir(ctx.outside_dir)) == ["precious.txt"]


@case("h-link-deep-subfolder", "link", "index/shards is a link: make_folder never creates through it")
def _(ctx):
    from genmetrics.data.results import make_folder

    (ctx.out / "index").mkdir(parents=True)
    _plant_link(ctx.out / "index" / "shards", ctx.outside_dir)
    ctx.freeze()
    ctx.refused(lambda: make_folder(ctx.out / "index" / "shards" / "x", root=ctx.out), "shards")


@case("h-link-dotdot", "link", "a destination ../escape.txt outside the chosen folder")
def _(ctx):
    from genmetrics.data.results import atomic_write_text

    ctx.out.mkdir()
    ctx.freeze()
    ctx.refused(lambda: atomic_write_text(ctx.out / ".." / "escape.txt", "x", root=ctx.out), "outside")
    assert not (ctx.root / "escape.txt").exists()


@case("h-results-nan-score", "poison", "read_results: a row whose score is NaN text")
def _(ctx):
    from genmetrics.data.results import check_result_row, read_results

    p = ctx.inp / "results.jsonl"
    rows = [
        {"generator": "g", "metric": "psnr", "id": "a", "value": 1.0},
        {"generator": "g", "metric": "psnr", "id": "b", "value": "NaN!"},
    ]
    p.write_text("".join(json.dumps(r) + "\n" for r in rows))
    ctx.freeze()
    ctx.refused(lambda: read_results(p, check=check_result_row), "results.jsonl")


test_hostile = HOSTILE.test()
