"""A decoding worker that dies while handing a batch over is reported as a dead worker (exit 1, 'worker'),
never as a Ctrl-C (exit 130) or an end of input: the hand-over fetches shared-memory file descriptors from
the worker, so a worker killed at that moment surfaces as ``EOFError`` or a refused connection, and click
turns a bare ``EOFError`` into an abort."""

from __future__ import annotations

import json

import click
import pytest
import torch
from PIL import Image

from genmetrics.cli.main import main
from genmetrics.data.pipeline import decoded
from genmetrics.errors import WorkerDiedError
from genmetrics.testing import random_images


class _LoaderThatLosesAWorker:
    """A DataLoader stand-in: hands over the first batch, then fails the way a killed worker's transfer does."""

    def __init__(self, dataset, batch_sampler, error, **_):
        self.dataset, self.batches, self.error = dataset, list(batch_sampler), error

    def __iter__(self):
        yield [self.dataset[j] for j in self.batches[0]]
        raise self.error


def _images(root, n=4, size=16):
    root.mkdir()
    for i, x in enumerate(random_images(n, size)):
        Image.fromarray(x.permute(1, 2, 0).numpy()).save(root / f"{i:03d}.png")
    return sorted(root.iterdir())


ERRORS = [EOFError("received 0 items of ancdata"), ConnectionRefusedError(111, "Connection refused")]


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_decoded_names_the_dead_worker(tmp_path, monkeypatch, error):
    files = _images(tmp_path / "imgs")
    monkeypatch.setattr(
        torch.utils.data,
        "DataLoader",
        lambda ds, batch_sampler, **kw: _LoaderThatLosesAWorker(ds, batch_sampler, error),
    )
    got = []
    with pytest.raises(WorkerDiedError, match="worker") as info:
        for batch in decoded(files, batch_size=2, workers=2):
            got.append(batch)
    assert len(got) == 1, "the batch handed over before the worker died is still delivered"
    assert info.value.__cause__ is error and "--resume" in str(info.value)


@pytest.mark.parametrize("error", ERRORS, ids=lambda e: type(e).__name__)
def test_leaderboard_cli_exits_1_naming_the_worker_not_130(tmp_path, monkeypatch, capsys, error):
    _images(tmp_path / "refs")
    _images(tmp_path / "gen")
    cfg = tmp_path / "lb.yaml"
    cfg.write_text(
        json.dumps(
            {
                "data": {"references": "refs"},
                "generators": [{"name": "g", "images": "gen"}],
                "metrics": [{"name": "psnr"}],
            }
        )
    )
    monkeypatch.setattr(
        torch.utils.data,
        "DataLoader",
        lambda ds, batch_sampler, **kw: _LoaderThatLosesAWorker(ds, batch_sampler, error),
    )
    rc = main(
        ["leaderboard", str(cfg), "--out", str(tmp_path / "out"), "--workers", "2", "--batch-size", "2"]
    )
    err = capsys.readouterr().err
    assert rc == 1, err
    assert "worker" in err and "interrupted" not in err


def test_an_abort_from_end_of_input_is_not_called_a_ctrl_c(monkeypatch, capsys):
    """click maps ``EOFError`` (a closed stdin at a prompt, a truncated transfer) to ``Abort``: exit 1, named."""

    def eof(*a, **k):
        raise click.exceptions.Abort() from EOFError("stdin closed")

    monkeypatch.setattr("genmetrics.cli.main.check_environment", eof)
    assert main(["list"]) == 1
    err = capsys.readouterr().err
    assert "end of input" in err and "interrupted" not in err

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("genmetrics.cli.main.check_environment", ctrl_c)
    assert main(["list"]) == 130
    assert "interrupted" in capsys.readouterr().err


#: what torch raises for a worker killed while decoding: from the loader's wait, or from its SIGCHLD handler
#: wherever the main process is (then it reaches the CLI without passing through the loader)
TORCH_DEATH = RuntimeError("DataLoader worker (pid 4242) is killed by signal: Killed. ")


def test_torch_s_own_report_of_a_killed_worker_names_it_and_the_resume(tmp_path, monkeypatch, capsys):
    """A worker SIGKILLed while decoding (the common case) used to reach the user as torch's bare message,
    without saying that finished results were kept or how to continue."""
    files = _images(tmp_path / "imgs")
    monkeypatch.setattr(
        torch.utils.data,
        "DataLoader",
        lambda ds, batch_sampler, **kw: _LoaderThatLosesAWorker(ds, batch_sampler, TORCH_DEATH),
    )
    with pytest.raises(
        WorkerDiedError,
        match=r"\(pid 4242\) is killed by signal: Killed.\); run the command again \(`leaderboard --resume`",
    ) as info:
        list(decoded(files, batch_size=2, workers=2))
    assert info.value.__cause__ is TORCH_DEATH
    other = RuntimeError("DataLoader timed out")  # not a death: raised as it came
    monkeypatch.setattr(
        torch.utils.data,
        "DataLoader",
        lambda ds, batch_sampler, **kw: _LoaderThatLosesAWorker(ds, batch_sampler, other),
    )
    with pytest.raises(RuntimeError) as info2:
        list(decoded(files, batch_size=2, workers=2))
    assert info2.value is other

    def killed_anywhere(*a, **k):  # the signal handler's exception, raised outside the loader
        raise TORCH_DEATH

    monkeypatch.setattr("genmetrics.cli.main.check_environment", killed_anywhere)
    assert main(["list"]) == 1
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "(pid 4242)" in err and "leaderboard --resume" in err
