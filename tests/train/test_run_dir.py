"""genmetrics.train.run_dir: a run folder whose files are links, on a full disk or read-only is refused in one line,
and nothing outside it changes."""

from __future__ import annotations

import os
from pathlib import Path

import pytest
import torch

from genmetrics.errors import GenmetricsError
from tests.reliability.hostile import Cases, Ctx, _plant_link, _read_only, _tmpfs, _toy, _train_cfg, _umount

# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


def _fit_refused(ctx: Ctx, name: str, target: Path | str) -> None:
    from genmetrics.train import fit

    Toy, make_data = _toy()
    ctx.out.mkdir()
    _plant_link(ctx.out / name, target)
    ctx.freeze()
    before = ctx.outside.read_bytes()
    ctx.refused(lambda: fit(Toy(), make_data(8), _train_cfg(ctx.out)), name)
    assert ctx.outside.read_bytes() == before
    assert sorted(os.listdir(ctx.outside_dir)) == ["precious.txt"]


@case("h-link-train-metrics", "link", "training: metrics.jsonl is a link to a file outside")
def _(ctx):
    _fit_refused(ctx, "metrics.jsonl", ctx.outside)


@case("h-link-train-checkpoints-dir", "link", "training: checkpoints/ is a link to a folder outside")
def _(ctx):
    _fit_refused(ctx, "checkpoints", ctx.outside_dir)


@case("h-link-train-config-dangling", "link", "training: train_config.json is a dangling link")
def _(ctx):
    _fit_refused(ctx, "train_config.json", ctx.outside_dir / "train_config.json")


@case("h-link-train-lock-loop", "link", "training: the lock file is a link loop")
def _(ctx):
    from genmetrics.data.results import LOCK

    _fit_refused(ctx, LOCK, LOCK)


@case("h-tmpfs-full-train", "fault", "training on a full 64 kB tmpfs: one line naming the disk, step kept")
def _(ctx):
    from genmetrics.train import fit

    Toy, make_data = _toy()
    mnt = _tmpfs(ctx, "64k")
    try:
        ctx.freeze()
        run = mnt / "run"
        try:
            fit(Toy(), make_data(64), _train_cfg(run, epochs=200, batch_size=8, save_every=1))
            raise AssertionError("a full disk was not reported")
        except (GenmetricsError, OSError) as e:  # DiskFullError
            msg = str(e)
            assert "space" in msg and str(mnt) in msg and "\n" not in msg, msg
        done = [p for p in (run / "checkpoints").iterdir() if not p.name.endswith(".tmp")]
        assert done and all((p / "loop_state.json").exists() for p in done)
    finally:
        _umount(mnt)


@case(
    "h-tmpfs-full-train-resume",
    "fault",
    "full tmpfs mid-training, disk grown, --resume = the run never stopped",
)
def _(ctx):
    import subprocess

    from genmetrics.train import fit

    Toy, make_data = _toy()
    ref_dir = ctx.root / "ref_run"
    ctx.allow(ref_dir)
    t_ref = Toy()
    opts = dict(epochs=3, batch_size=8, save_every=1)
    fit(t_ref, make_data(64), _train_cfg(ref_dir, **opts))
    mnt = _tmpfs(ctx, "64k")
    try:
        ctx.freeze()
        with pytest.raises(OSError, match="space"):
            fit(Toy(), make_data(64), _train_cfg(mnt / "run", **opts))
        r = subprocess.run(["mount", "-o", "remount,size=8m", str(mnt)], capture_output=True)
        assert r.returncode == 0, r.stderr
        t2 = Toy()
        fit(t2, make_data(64), _train_cfg(mnt / "run", resume=True, **opts))
        for k, v in t_ref.net.state_dict().items():
            assert torch.equal(v, t2.net.state_dict()[k]), k
    finally:
        _umount(mnt)


@case("h-readonly-train-out", "fault", "training into a read-only folder: one error naming it, no traceback")
def _(ctx):
    from genmetrics.train import fit

    Toy, make_data = _toy()
    mnt = _read_only(ctx)
    try:
        ctx.freeze()
        with pytest.raises((GenmetricsError, OSError)) as e:
            fit(Toy(), make_data(8), _train_cfg(mnt / "run"))
        assert str(mnt) in str(e.value) and "\n" not in str(e.value), str(e.value)
    finally:
        _umount(mnt)


@case("h-link-train-final-dir", "link", "training: final/ is a link to a folder outside")
def _(ctx):
    _fit_refused(ctx, "final", ctx.outside_dir)


@case("h-link-train-best-dangling", "link", "training with validation: best/ is a dangling link")
def _(ctx):
    from genmetrics.train import fit

    Toy, make_data = _toy()
    ctx.out.mkdir()
    _plant_link(ctx.out / "best", ctx.outside_dir / "best")
    ctx.freeze()
    ctx.refused(
        lambda: fit(Toy(), make_data(8), _train_cfg(ctx.out), val_examples=make_data(4, seed=1)), "best"
    )
    assert sorted(os.listdir(ctx.outside_dir)) == ["precious.txt"]


test_hostile = HOSTILE.test()
