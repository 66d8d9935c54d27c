"""Atomic writes (genmetrics.data.output.atomic): a file or folder is whole or not written at all, an error
leaves the old one and no temporary behind, a full disk is one named ``DiskFullError``, and appends, atomic
writes and folders never write through a link or outside the chosen folder."""

from __future__ import annotations

import errno
import json
import math
import os
import stat
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from genmetrics.data.output.atomic import (
    atomic_output,
    atomic_write_bytes,
    atomic_write_json,
    atomic_write_text,
    open_append,
)
from genmetrics.data.output.disk import DiskFullError
from genmetrics.errors import InputError
from tests.reliability.hostile import Cases, Ctx, _plant_link


def test_text_bytes_and_json_round_trip(tmp_path):
    text = "één\nline two\n\udcff"  # a lone surrogate: a non-UTF-8 file name kept by Python, written as bytes
    p = atomic_write_text(tmp_path / "a" / "b.txt", text)
    assert p == (tmp_path / "a" / "b.txt").absolute()
    assert p.read_bytes() == text.encode("utf-8", "surrogateescape")
    data = bytes(range(256))
    assert atomic_write_bytes(tmp_path / "c.bin", data).read_bytes() == data
    obj = {"p": Path("x.png"), "nan": math.nan, "v": (1, 2.5)}
    back = json.loads(atomic_write_json(tmp_path / "d.json", obj, indent=None).read_text())
    assert back == {"p": "x.png", "nan": None, "v": [1, 2.5]}
    assert sorted(q.name for q in tmp_path.iterdir()) == ["a", "c.bin", "d.json"]  # no temporary left


def test_an_error_inside_leaves_the_old_file_and_no_temporary(tmp_path):
    p = atomic_write_text(tmp_path / "report.md", "old")
    with pytest.raises(RuntimeError, match="writer failed"), atomic_output(p) as tmp:
        assert tmp.parent == tmp_path and tmp.suffix == ".md"  # the writer picks its format from the name
        tmp.write_text("half")
        raise RuntimeError("writer failed")
    assert p.read_text() == "old" and os.listdir(tmp_path) == ["report.md"]


def test_the_file_gets_the_usual_permissions(tmp_path):
    old = os.umask(0o027)
    try:
        p = atomic_write_text(tmp_path / "a.txt", "x")
    finally:
        os.umask(old)
    assert stat.S_IMODE(p.stat().st_mode) == 0o666 & ~0o027  # not mkstemp's 0600


def test_a_folder_is_swapped_whole_or_merged(tmp_path):
    dest = tmp_path / "model"
    dest.mkdir()
    (dest / "stale.bin").write_text("old")
    with atomic_output(dest, directory=True) as tmp:
        (tmp / "weights.bin").write_text("new")
    assert sorted(os.listdir(dest)) == ["weights.bin"]  # swapped: the old folder's files are gone
    with atomic_output(dest, directory=True, merge=True) as tmp:
        (tmp / "sub").mkdir()
        (tmp / "sub" / "extra.txt").write_text("more")
        (tmp / "weights.bin").write_text("newer")
    assert (dest / "weights.bin").read_text() == "newer" and (
        dest / "sub" / "extra.txt"
    ).read_text() == "more"
    assert sorted(os.listdir(tmp_path)) == ["model"]
    with pytest.raises(ValueError), atomic_output(dest, directory=True) as tmp:
        (tmp / "weights.bin").write_text("broken")
        raise ValueError
    assert (dest / "weights.bin").read_text() == "newer" and sorted(os.listdir(tmp_path)) == ["model"]


def test_a_full_disk_is_one_named_error(tmp_path):
    p = atomic_write_text(tmp_path / "a.json", "old")
    with pytest.raises(DiskFullError) as info, atomic_output(p):
        raise OSError(errno.ENOSPC, "No space left on device")
    msg = str(info.value)
    assert msg.startswith("no space left on the disk ") and f"while writing {p}" in msg
    assert info.value.path == p and p.read_text() == "old" and os.listdir(tmp_path) == ["a.json"]


def test_open_append_appends_and_creates(tmp_path):
    p = tmp_path / "log" / "rows.jsonl"
    for line in ("a", "b"):
        with open_append(p, root=tmp_path) as f:
            f.write(line + "\n")
    assert p.read_bytes() == b"a\nb\n"


def test_a_destination_outside_the_root_is_refused(tmp_path):
    with pytest.raises(InputError, match="outside"):
        atomic_write_text(tmp_path / "out" / ".." / "x.txt", "x", root=tmp_path / "out")
    assert not (tmp_path / "x.txt").exists()


# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


def _append(p: Path):
    from genmetrics.data.output.atomic import open_append

    with open_append(p, root=p.parent) as f:
        f.write("{}\n")


def _atomic(p: Path):
    from genmetrics.data.output.atomic import atomic_write_text

    atomic_write_text(p, "x", root=p.parent)


def _link_refused(
    name: str, target: Callable[[Ctx], Path | str], write: Callable[[Path], Any]
) -> Callable[[Ctx], None]:
    """The case: ``name`` in the output folder is a link to ``target(ctx)``; ``write`` on it is refused, naming
    it, and nothing outside changes."""

    def run(ctx: Ctx) -> None:
        ctx.out.mkdir(exist_ok=True)
        _plant_link(ctx.out / name, target(ctx))
        ctx.freeze()
        before = ctx.outside.read_bytes()
        ctx.refused(lambda: write(ctx.out / name), name)
        assert ctx.outside.read_bytes() == before
        assert sorted(os.listdir(ctx.outside_dir)) == ["precious.txt"]

    return run


#: (case id, what it is, the file in the output folder, where its link points, the writer)
_LINKS: list[tuple[str, str, str, Callable[[Ctx], Path | str], Callable[[Path], Any]]] = [
    (
        "h-link-append-file",
        "results.jsonl (append) is a link to a file outside",
        "results.jsonl",
        lambda ctx: ctx.outside,
        _append,
    ),
    (
        "h-link-append-dangling",
        "results.jsonl (append) is a dangling link",
        "results.jsonl",
        lambda ctx: ctx.outside_dir / "new.jsonl",
        _append,
    ),
    (
        "h-link-append-loop",
        "metrics.jsonl (append) is a link loop",
        "metrics.jsonl",
        lambda ctx: "metrics.jsonl",
        _append,
    ),
    (
        "h-link-atomic-to-folder",
        "report.md (atomic write) is a link to a folder outside",
        "report.md",
        lambda ctx: ctx.outside_dir,
        _atomic,
    ),
    (
        "h-link-atomic-dangling",
        "summary.json (atomic write) is a dangling link",
        "summary.json",
        lambda ctx: ctx.outside_dir / "summary.json",
        _atomic,
    ),
    (
        "h-link-atomic-file",
        "leaderboard.csv (atomic write) is a link to a file outside",
        "leaderboard.csv",
        lambda ctx: ctx.outside,
        _atomic,
    ),
]
for _id, _what, _name, _target, _write in _LINKS:
    case(_id, "link", _what)(_link_refused(_name, _target, _write))


@case("h-link-dotdot", "link", "a destination ../escape.txt outside the chosen folder")
def _(ctx):
    from genmetrics.data.output.atomic import atomic_write_text

    ctx.out.mkdir()
    ctx.freeze()
    ctx.refused(lambda: atomic_write_text(ctx.out / ".." / "escape.txt", "x", root=ctx.out), "outside")
    assert not (ctx.root / "escape.txt").exists()


test_hostile = HOSTILE.test()
