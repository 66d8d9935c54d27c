"""A run killed with SIGKILL and resumed equals an uninterrupted run; two processes (gloo) equal one."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time

import lb_fakes
import pytest
import torch.multiprocessing as mp
from lb_helpers import HERE, REPO, make_set, toml_config

from genmetrics.cli.main import main
from genmetrics.data.output.rows import read_results
from genmetrics.leaderboard import run_leaderboard

# The CLI in a subprocess, with the test metrics registered (the slow one sleeps per chunk).
CLI = (
    "import sys; sys.path.insert(0, {here!r}); import lb_fakes; lb_fakes.register(); "
    "from genmetrics.cli.main import main; sys.exit(main(sys.argv[1:]))"
)
REPORTS = ("results.jsonl", "summary.json", "leaderboard.md", "leaderboard.csv", "paired.csv")


def _cli(*args: str, **kw: object) -> subprocess.Popen:
    env = {
        **os.environ,
        "PYTHONPATH": str(REPO),
        "GENMETRICS_PROGRESS": "0",
        "LB_SLOW_S": "0.08",
        "OMP_NUM_THREADS": "1",
    }
    return subprocess.Popen(
        [sys.executable, "-c", CLI.format(here=str(HERE)), *args],
        env=env,
        cwd=str(REPO),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        **kw,
    )


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def _rows(path):
    return len(read_results(path)) if path.exists() else 0


def test_sigkill_then_resume_equals_uninterrupted(tmp_path, monkeypatch, capsys):
    root = make_set(tmp_path / "set", n=10, size=16)
    cfg = toml_config(root, '[[metrics]]\nname = "_lb_slow"\n\n[[metrics]]\nname = "_lb_set"\n')
    total = 3 * 10 + 3
    out = tmp_path / "killed"
    proc = _cli("leaderboard", str(cfg), "--out", str(out), "--batch-size", "2", "--no-plots")
    deadline = time.time() + 120
    while _rows(out / "results.jsonl") < 6:
        assert proc.poll() is None, proc.communicate()
        assert time.time() < deadline, "the run wrote no rows in time"
        time.sleep(0.02)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    assert proc.returncode == -signal.SIGKILL
    partial = read_results(out / "results.jsonl")
    assert 6 <= len(partial) < total
    assert not (out / "summary.json").exists()

    # resume with the same CLI (in this process: one interpreter start less), at full speed
    monkeypatch.setenv("LB_SLOW_S", "0")
    assert main(["leaderboard", str(cfg), "--out", str(out), "--resume", "--no-plots"]) == 0
    assert f"report: {out / 'leaderboard.md'}" in capsys.readouterr().out

    ref = run_leaderboard(cfg, tmp_path / "uninterrupted", plots=False)
    rows = read_results(out / "results.jsonl")
    keys = [(r["generator"], r["metric"], r["id"]) for r in rows]
    assert len(keys) == len(set(keys)) == total
    assert [r for r in rows if r in partial] == partial  # nothing finished before the kill was lost or redone
    for f in REPORTS:
        assert (out / f).read_bytes() == (ref.out / f).read_bytes(), f


@pytest.mark.distributed
def test_two_processes_equal_one(tmp_path):
    root = make_set(tmp_path / "set", n=7, size=16)  # odd count: uneven shards
    cfg = toml_config(
        root,
        '[[metrics]]\nname = "_lb_spy"\n\n[[metrics]]\nname = "_lb_set"\n\n'
        '[[metrics]]\nname = "_lb_set"\nlabel = "set_map"\ngrid = true\n',
        extra="[run]\nn_boot = 200\n",
    )
    one = run_leaderboard(cfg, tmp_path / "one", plots=False, batch_size=2)
    mp.spawn(
        lb_fakes.dist_worker,
        args=(2, _free_port(), str(cfg), str(tmp_path / "two"), {"plots": False, "batch_size": 2}),
        nprocs=2,
        join=True,
    )
    two = tmp_path / "two"
    for f in REPORTS:
        assert (two / f).read_bytes() == (one.out / f).read_bytes(), f
    assert not (two / "shards").exists()
    m = json.loads((two / "manifest.json").read_text())
    assert m["world_size"] == 2 and m["status"] == "complete"


@pytest.mark.distributed
def test_two_processes_with_skipped_images_equal_one(tmp_path):
    """--on-error skip on two processes: the ranks' skipped-images shards were read as results shards (rows
    without a score in results.jsonl, which a --resume then refused: 'no score') and skipped.jsonl was never
    written (red before). Now results.jsonl and the reports equal a one-process run's, skipped.jsonl holds
    the same rows, and a --resume scores nothing again."""
    root = make_set(tmp_path / "set", n=5, size=16)
    for stem in ("s01", "s04"):  # one bad image per rank
        (root / "gen" / "bad" / f"{stem}.png").write_bytes(b"not an image")
    cfg = toml_config(root, '[[metrics]]\nname = "psnr"\n', extra="[run]\nn_boot = 50\n")
    one = run_leaderboard(cfg, tmp_path / "one", plots=False, on_error="skip", workers=0)
    kwargs = {"plots": False, "on_error": "skip", "workers": 0}
    mp.spawn(lb_fakes.dist_worker, args=(2, _free_port(), str(cfg), str(tmp_path / "two"), kwargs), nprocs=2)
    two = tmp_path / "two"
    for f in REPORTS:
        assert (two / f).read_bytes() == (one.out / f).read_bytes(), f
    skipped = read_results(two / "skipped.jsonl")
    assert sorted(map(json.dumps, skipped)) == sorted(
        map(json.dumps, read_results(one.out / "skipped.jsonl"))
    )
    assert {(r["generator"], r["id"]) for r in skipped} == {("bad", "s01"), ("bad", "s04")}
    assert not (two / "shards").exists()
    again = run_leaderboard(cfg, two, plots=False, on_error="skip", workers=0, resume=True)
    assert (
        again.scored == 0 and (two / "results.jsonl").read_bytes() == (one.out / "results.jsonl").read_bytes()
    )
