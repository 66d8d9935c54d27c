"""A full disk while a leaderboard writes its rows or reports is one line naming the disk, the file, what is
kept and how to continue (``--resume``), not a bare ``[Errno 28]``; the rows already written are kept and the
resumed run equals a run that never stopped. Injected (ENOSPC from the writers) and on a real 64 kB tmpfs."""

from __future__ import annotations

import errno
import json
import shutil
import subprocess
from pathlib import Path

import pytest

import genmetrics.data.output.atomic as A
from genmetrics.cli.main import main
from genmetrics.data.output.disk import DiskFullError
from genmetrics.data.output.rows import ResultsWriter, read_results
from genmetrics.leaderboard.runner import run_leaderboard
from genmetrics.testing import toy_leaderboard


def _config(root: Path) -> Path:
    cfg = toy_leaderboard(root, n=4)  # the images; the config is written as a TOML file
    lines = ['[run]\nn_boot = 50\n[data]\nreferences = "refs"\n']
    lines += [f'[[generators]]\nname = "{g["name"]}"\nimages = "{g["images"]}"\n' for g in cfg["generators"]]
    lines += ['[[metrics]]\nname = "psnr"\n', '[[metrics]]\nname = "ssim"\n']
    path = root / "config.toml"
    path.write_text("".join(lines))
    return path


def _rows(out: Path) -> list[tuple]:
    return sorted(
        (r["generator"], r["metric"], r["id"], r["score"]) for r in read_results(out / "results.jsonl")
    )


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    root = tmp_path_factory.mktemp("lb")
    cfg = _config(root)
    run_leaderboard(cfg, root / "clean", plots=False)
    return root, cfg, _rows(root / "clean")


def _one_line(e: BaseException, out: Path) -> str:
    msg = str(e)
    assert "\n" not in msg and "no space left on the disk" in msg and str(out) in msg, msg
    assert "--resume" in msg and "is kept" in msg, msg
    return msg


def test_full_disk_while_rows_are_appended(reference, tmp_path, monkeypatch):
    root, cfg, expected = reference
    out = tmp_path / "out"
    calls = {"n": 0}
    write = ResultsWriter.write

    def filling(self, rows):
        calls["n"] += 1
        if calls["n"] == 2:  # the first batch of rows fits, the second does not
            raise OSError(errno.ENOSPC, "No space left on device")
        return write(self, rows)

    monkeypatch.setattr(ResultsWriter, "write", filling)
    with pytest.raises(DiskFullError) as e:
        run_leaderboard(cfg, out, plots=False)
    _one_line(e.value, out)
    kept = _rows(out)
    assert kept and set(kept) < set(expected)  # the finished rows are there, as scored
    monkeypatch.setattr(ResultsWriter, "write", write)
    run_leaderboard(cfg, out, resume=True, plots=False)
    assert _rows(out) == expected


def test_full_disk_while_a_report_is_written(reference, tmp_path, monkeypatch):
    root, cfg, expected = reference
    out = tmp_path / "out"
    fsync = A._fsync

    def full_for_reports(path):
        if Path(path).name.startswith(".summary.json"):
            raise OSError(errno.ENOSPC, "No space left on device")
        return fsync(path)

    monkeypatch.setattr(A, "_fsync", full_for_reports)
    with pytest.raises(DiskFullError) as e:
        run_leaderboard(cfg, out, plots=False)
    msg = _one_line(e.value, out)
    assert "summary.json" in msg
    assert not list(out.glob(".summary.json*"))  # no temporary file left behind
    assert _rows(out) == expected  # every row was written before the reports
    monkeypatch.setattr(A, "_fsync", fsync)
    run_leaderboard(cfg, out, resume=True, plots=False)
    assert json.loads((out / "summary.json").read_text())


def test_the_command_line_prints_one_line_and_exits_1(reference, tmp_path, monkeypatch, capsys):
    root, cfg, _ = reference
    out = tmp_path / "out"

    def full(self, rows):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(ResultsWriter, "write", full)
    assert main(["leaderboard", str(cfg), "--out", str(out), "--no-plots"]) == 1
    err = capsys.readouterr().err.strip()
    assert err.startswith("error: no space left on the disk") and "\n" not in err and "--resume" in err
    assert "Errno" not in err


@pytest.fixture
def small_disk(tmp_path):
    """A real 64 kB tmpfs (root only; skipped where mounting is not permitted)."""
    mnt = tmp_path / "small"
    mnt.mkdir()
    if shutil.which("mount") is None:
        pytest.skip("no mount command")
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=64k", "tmpfs", str(mnt)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {r.stderr.decode(errors='replace').strip()[:200]}")
    try:
        yield mnt
    finally:
        subprocess.run(["umount", str(mnt)], check=False)


def test_a_real_full_disk(reference, small_disk, tmp_path):
    root, cfg, expected = reference
    out = small_disk / "out"
    (small_disk / "ballast").write_bytes(b"\0" * 40_000)  # leaves less room than the reports need
    with pytest.raises(DiskFullError) as e:
        run_leaderboard(cfg, out, plots=False)
    _one_line(e.value, out)
    (small_disk / "ballast").unlink()
    kept = _rows(out)
    assert set(kept) <= set(expected)
    run_leaderboard(cfg, out, resume=True, plots=False)
    assert _rows(out) == expected
