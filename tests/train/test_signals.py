"""Faults during training: Ctrl-C while a checkpoint is written finishes the write, stops
(exit 130) and resumes to the uninterrupted result; a full disk gives one line naming the disk and the path
and loses nothing finished (on a real tmpfs when this machine lets the test mount one, and by a simulated
ENOSPC in every kind of write everywhere)."""

from __future__ import annotations

import errno
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from safetensors import SafetensorError

from genmetrics.train import TrainLoopConfig, fit
from genmetrics.train import checkpoint as ck
from genmetrics.train import run_dir as rd
from genmetrics.train.run_dir import DiskFullError

from .toy import Toy, make_data, params

ROOT = Path(__file__).resolve().parents[2]


def toy_run(out: Path, **options):
    """Task, data, config and validation data of the runs here: 4 steps per epoch, 3 epochs, dropout on,
    a checkpoint every 2 steps (and at epoch ends)."""
    base = dict(
        out_dir=out, lr=0.05, epochs=3, batch_size=2, grad_accum=2, warmup_ratio=0.1, seed=7, progress=False
    )
    cfg = TrainLoopConfig(**{**base, "save_every": 2, **options})
    return (
        Toy(dropout=0.3, init_seed=1 if not options.get("resume") else 42),
        make_data(16),
        cfg,
        make_data(6, 1),
    )


def _fit(out: Path, **options):
    task, data, cfg, val = toy_run(out, **options)
    return fit(task, data, cfg, val_examples=val)


def _same_run(res, full) -> None:
    assert res.history == full.history
    reference = params(full.module)
    assert all(torch.equal(v, reference[k]) for k, v in params(res.module).items())


def _wait(path: Path, proc: subprocess.Popen, limit: float = 600.0) -> None:
    """Until ``path`` exists or the process has ended (a safety limit only: the hand-shake is by files)."""
    end = time.monotonic() + limit
    while not path.exists() and proc.poll() is None and time.monotonic() < end:
        time.sleep(0.02)


def _interrupt_a_checkpoint_write(
    gate: Path, step: int, args: list[str], sig: int = signal.SIGINT, **env: str
) -> tuple[int, str]:
    """Run the driver (tests/train/interrupt_driver.py) with ``args``, send ``sig`` while the checkpoint of
    ``step`` is written, let the write go on once a handler has run; the exit code and stderr."""
    gate.mkdir()
    env = {**os.environ, **env, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    # the resumed run is compared bit for bit with one run here: the driver computes at this process's
    # intra-op thread count (a kernel may split a reduction differently at another), whatever the environment
    env["OMP_NUM_THREADS"] = str(torch.get_num_threads())
    command = [sys.executable, "-m", "tests.train.interrupt_driver", str(gate), "--block-step", str(step)]
    proc = subprocess.Popen(
        [*command, *args], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )
    try:
        _wait(gate / "saving", proc)  # the checkpoint is being written
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        proc.send_signal(sig)
        _wait(gate / "signalled", proc)  # a handler of the signal has run (it did not end the process)
        assert proc.poll() is None, proc.communicate()[1][-3000:]
        (gate / "go").touch()  # let the write go on
        _, err = proc.communicate(timeout=900)
    finally:
        if proc.poll() is None:
            proc.kill()
    return proc.returncode, err


@pytest.mark.slow
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_signal_during_a_checkpoint_write_finishes_it_then_stops(tmp_path, sig):
    """Ctrl-C: the run stops with KeyboardInterrupt (exit 130). SIGTERM (preemption, kill): held until the
    write is complete, then delivered to the default handler, so the process ends as SIGTERM ends it."""
    out = tmp_path / "run"
    rc, err = _interrupt_a_checkpoint_write(tmp_path / "gate", 6, ["--out", str(out)], sig)  # mid-epoch 2
    assert rc == (130 if sig == signal.SIGINT else -signal.SIGTERM), err[-3000:]
    step6 = out / "checkpoints" / "step-6"
    assert (step6 / "loop_state.json").is_file() and not step6.with_name("step-6.tmp").exists()
    assert sorted(ck.state_files(1, False)) == sorted(p.name for p in step6.iterdir())
    assert not (out / "train_result.json").exists()
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in rows) == 6  # it stopped right after the write, not at the end of the run

    res = _fit(out, resume=True)
    assert res.resumed_from == step6 and res.steps == 12
    _same_run(res, _fit(tmp_path / "full"))


# ----------------------------------------------------------------------------------------- full disk
DISK_FULL = SafetensorError("Error while serializing: I/O error: No space left on device (os error 28)")


def _fail_once(monkeypatch, module, name, when):
    """Make ``module.name`` raise a full disk the first time ``when(args)`` holds."""
    real = getattr(module, name)
    fired = []

    def failing(*args, **kwargs):
        if not fired and when(args):
            fired.append(args)
            if name == "save_file":
                raise DISK_FULL
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*args, **kwargs)

    monkeypatch.setattr(module, name, failing)
    return fired


WRITES = {
    # a checkpoint's safetensors file (safetensors wraps the OS error)
    "checkpoint-tensors": (ck, "save_file", lambda a: "step-6.tmp" in str(a[1]), "checkpoints/step-6.tmp"),
    # a checkpoint's JSON file (plain OSError)
    "checkpoint-json": (
        ck,
        "atomic_write_text",
        lambda a: "step-6.tmp" in str(a[0]),
        "checkpoints/step-6.tmp",
    ),
    # the metrics log
    "metrics": (rd, "append_metrics", lambda a: a[1]["step"] == 7, "metrics.jsonl"),
    # the best artifact (the task's own save)
    "artifact": (Toy, "save", lambda a: a[2].name == "best.tmp", "best.tmp"),
}


@pytest.mark.parametrize("kind", list(WRITES))
def test_a_full_disk_names_the_disk_and_loses_nothing(tmp_path, monkeypatch, kind):
    full = _fit(tmp_path / "full")
    module, name, when, written = WRITES[kind]
    fired = _fail_once(monkeypatch, module, name, when)
    out = tmp_path / "run"
    with pytest.raises(DiskFullError) as e:
        _fit(out)
    assert fired
    msg = str(e.value)
    assert "\n" not in msg and rd.describe_disk(out).split(" (")[0] in msg and str(out / written) in msg
    assert "resume=True" in msg and "is kept" in msg
    monkeypatch.undo()
    res = _fit(out, resume=True)
    assert res.resumed_from is not None
    _same_run(res, full)


def _mount_tmpfs(path: Path, size: int) -> bool:
    if not sys.platform.startswith("linux") or shutil.which("mount") is None:
        return False
    path.mkdir(parents=True, exist_ok=True)
    done = subprocess.run(
        ["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True, timeout=60
    )
    return done.returncode == 0


def _footprint(folder: Path, page: int) -> int:
    return sum(math.ceil(p.stat().st_size / page) * page for p in folder.rglob("*") if p.is_file())


def test_a_full_tmpfs_during_training(tmp_path):
    """A real full disk: a tmpfs of half the space the run needs fills during training."""
    page = os.sysconf("SC_PAGE_SIZE")
    keep_all = dict(keep_checkpoints=100, save_every=1)
    full = _fit(tmp_path / "full", **keep_all)
    need = _footprint(tmp_path / "full", page)
    mnt = tmp_path / "mnt"
    if not _mount_tmpfs(mnt, need // 2 // page * page):
        pytest.skip("cannot mount a tmpfs here (needs root on Linux); the simulated full disks above run")
    try:
        with pytest.raises(DiskFullError) as e:
            _fit(mnt / "run", **keep_all)
        msg = str(e.value)
        assert f"the disk {mnt} (tmpfs" in msg and f"while writing {mnt / 'run'}" in msg
        done = rd.checkpoints(mnt / "run")
        assert done and f"{done[-1]}, is kept" in msg
        subprocess.run(["mount", "-o", f"remount,size={4 * need}", str(mnt)], check=True, timeout=60)
        res = _fit(mnt / "run", resume=True, **keep_all)
        assert res.resumed_from == done[-1]
        _same_run(res, full)
    finally:
        subprocess.run(["umount", str(mnt)], capture_output=True, timeout=60)


@pytest.mark.slow
def test_ctrl_c_during_a_checkpoint_write_of_genmetrics_train_mie(tmp_path, monkeypatch, capsys):
    """The same through the real command line (`genmetrics train mie` on the tiny backbone): exit 130 with
    one `error:` line, a complete checkpoint, and `--resume` ends with the uninterrupted run's weights."""
    from safetensors.torch import load_file

    from genmetrics.cli.main import main
    from genmetrics.testing import toy_mib_pairs

    pairs = toy_mib_pairs(tmp_path / "data", 6)
    provider = "genmetrics.testing:tiny_backbones"
    args = [
        "train",
        "mie",
        "--data",
        str(pairs),
        "--subset",
        "0",
        "--val-fraction",
        "0",
        "--batch-pairs",
        "2",
    ]
    args += ["--grad-accum", "1", "--unfreeze-layers", "1", "--max-steps", "3", "--save-every", "1"]
    args += ["--image-size", "64"]
    out = tmp_path / "run"
    cli = ["--cli", *args, "--out", str(out)]
    rc, err = _interrupt_a_checkpoint_write(tmp_path / "gate", 2, cli, GENMETRICS_BACKBONE_PROVIDER=provider)
    assert rc == 130, err[-3000:]
    errors = [line for line in err.splitlines() if line.startswith("error:")]
    assert errors == ["error: interrupted; finished results were kept"] and "Traceback" not in err
    assert (out / "checkpoints" / "step-2" / "loop_state.json").is_file()
    assert not (out / "train_result.json").exists()

    monkeypatch.setenv("GENMETRICS_BACKBONE_PROVIDER", provider)
    assert main([*args, "--out", str(out), "--resume"]) == 0
    assert main([*args, "--out", str(tmp_path / "full")]) == 0
    capsys.readouterr()
    resumed = load_file(str(out / "final" / "mie_weights.safetensors"))
    full = load_file(str(tmp_path / "full" / "final" / "mie_weights.safetensors"))
    assert resumed.keys() == full.keys() and all(torch.equal(resumed[k], full[k]) for k in full)
    assert (out / "metrics.jsonl").read_text() == (tmp_path / "full" / "metrics.jsonl").read_text()
