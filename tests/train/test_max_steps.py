"""``TrainLoopConfig.max_steps`` is a cap that combines with ``epochs``: the run ends after ``epochs`` passes
or ``max_steps`` optimizer steps, whichever comes first, and the schedule is laid out over that total. The
expected step counts are written here from the definition (ceil divisions of the example count), not read
from the loop."""

from __future__ import annotations

import math

import pytest
import torch
from transformers import get_scheduler

from genmetrics.errors import InputError
from genmetrics.train import TrainLoopConfig, fit

from .toy import Toy, make_data, params, tiny_mie


def _cfg(out, **kw):
    base = dict(out_dir=out, lr=0.05, epochs=3, batch_size=2, grad_accum=2, warmup_ratio=0.2, seed=7)
    return TrainLoopConfig(**{**base, "progress": False, **kw})


def _train_rows(history):
    return [r for r in history if r["kind"] == "train"]


def _steps_per_epoch(n, batch, accum):
    return math.ceil(
        math.ceil(n / batch) / accum
    )  # micro-batches, then groups of accum (a short group steps)


def _lrs(total, warmup_ratio=0.2, lr=0.05):
    """The lr of each step of transformers' cosine schedule laid out over ``total`` steps."""
    opt = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=lr)
    sched = get_scheduler(
        "cosine", opt, num_warmup_steps=math.ceil(warmup_ratio * total), num_training_steps=total
    )
    out = []
    for _ in range(total):
        out.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    return out


def test_the_cap_ends_the_run_inside_an_epoch(tmp_path):
    train = make_data(14)  # 7 micro-batches of 2, groups of 2: 4 steps per epoch (the last one short)
    per_epoch = _steps_per_epoch(14, 2, 2)
    assert per_epoch == 4
    res = fit(Toy(), train, _cfg(tmp_path / "run", max_steps=6))  # 3 epochs would be 12 steps
    rows = _train_rows(res.history)
    assert res.steps == 6 == len(rows) and [r["step"] for r in rows] == list(range(1, 7))
    assert res.config["derived"]["total_steps"] == 6 and res.config["derived"]["steps_per_epoch"] == per_epoch
    assert rows[-1]["epoch"] == pytest.approx(1 + 4 / 7)  # 2 steps = 4 of the second epoch's 7 micro-batches
    assert [r["lr"] for r in rows] == pytest.approx(_lrs(6), rel=1e-6)  # the schedule ends at the cap
    uncapped = fit(Toy(), train, _cfg(tmp_path / "full", max_steps=None))
    assert uncapped.steps == 3 * per_epoch


def test_epochs_end_before_the_cap(tmp_path):
    train = make_data(14)
    capped = fit(Toy(), train, _cfg(tmp_path / "capped", epochs=2, max_steps=100))
    plain = fit(Toy(), train, _cfg(tmp_path / "plain", epochs=2))
    assert capped.steps == plain.steps == 2 * _steps_per_epoch(14, 2, 2)
    assert capped.history == plain.history  # the same schedule (laid out over 8 steps, not 100)
    for k, v in params(plain.module).items():
        assert torch.equal(params(capped.module)[k], v), k


def test_steps_only_without_epochs(tmp_path):
    """``epochs=None``: ``max_steps`` steps, as many passes as that takes (TPIPS's ``max_steps``)."""
    res = fit(Toy(), make_data(6), _cfg(tmp_path / "run", epochs=None, max_steps=7))  # 2 steps per epoch
    assert res.steps == 7 and _train_rows(res.history)[-1]["epoch"] == pytest.approx(
        3 + 2 / 3
    )  # by micro-batch
    with pytest.raises(InputError, match="epochs and max_steps are both None"):
        fit(Toy(), make_data(6), _cfg(tmp_path / "never", epochs=None, max_steps=None))


def test_resume_across_the_cap(tmp_path):
    """Killed before the cap (after the epoch-1 checkpoint), resumed: it stops at the cap, exactly as the
    uninterrupted run; resuming the finished run trains nothing; another cap is refused."""
    train = make_data(14)
    kw = dict(max_steps=6)  # 4 steps per epoch: the cap is in the middle of the second
    full = fit(Toy(dropout=0.2), train, _cfg(tmp_path / "a", **kw))
    with pytest.raises(
        KeyboardInterrupt
    ):  # loss call 11: step 6 (epoch 2's micro-batches 10-11 of 14 in all)
        fit(Toy(dropout=0.2, kill_at=11), train, _cfg(tmp_path / "b", **kw))
    res = fit(Toy(dropout=0.2, init_seed=5), train, _cfg(tmp_path / "b", resume=True, **kw))
    assert res.resumed_from.name == "step-4" and res.steps == 6
    assert res.history == full.history
    for k, v in params(full.module).items():
        assert torch.equal(params(res.module)[k], v), k
    again = fit(Toy(dropout=0.2), train, _cfg(tmp_path / "b", resume=True, **kw))
    assert again.steps == 6 and again.history == full.history
    with pytest.raises(InputError, match=r"max_steps: 6 -> 8"):
        fit(Toy(dropout=0.2), train, _cfg(tmp_path / "b", resume=True, max_steps=8))


@pytest.mark.parametrize("cap", [4, 10, None])
def test_mie_runs_the_steps_it_ran_before(tmp_path, cap):
    """``train_mie`` hands its cap to the loop instead of computing ``min(cap, epochs x steps per epoch)``
    itself (a copy of accelerate's sharding): the same number of steps as that formula, with the cap binding
    (4 < 2 x 3), not binding (10) and absent."""
    n, batch, accum, epochs = 6, 2, 1, 2
    before = epochs * _steps_per_epoch(n, batch, accum)  # mie/train.py's old formula, one process
    if cap is not None:
        before = min(cap, before)
    res = tiny_mie(
        tmp_path / "data",
        tmp_path / "run",
        n_pairs=n,
        subset=0,
        grad_accum=accum,
        epochs=epochs,
        max_steps=cap,
    )
    assert res["steps"] == before == len(_train_rows(res["history"]))
