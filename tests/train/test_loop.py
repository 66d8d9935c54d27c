"""The training loop: exact resume after a kill, accumulation and process-count invariance, the schedule
against transformers' own, early stopping, checkpoints holding trained weights only."""

from __future__ import annotations

import json
import math

import pytest
import torch

from genmetrics.train import TrainLoopConfig, fit

from .toy import Toy, make_data, params


def _cfg(out, **kw):
    base = dict(
        out_dir=out,
        lr=0.05,
        epochs=3,
        batch_size=2,
        grad_accum=2,
        warmup_ratio=0.1,
        max_grad_norm=1.0,
        seed=7,
        progress=False,
    )
    base.update(kw)
    return TrainLoopConfig(**base)


def _train_rows(history):
    return [r for r in history if r["kind"] == "train"]


def _assert_same_params(a, b, atol=0.0):
    assert a.keys() == b.keys()
    for k in a:
        if atol:
            torch.testing.assert_close(a[k], b[k], atol=atol, rtol=0)
        else:
            assert torch.equal(a[k], b[k]), k


def test_exact_resume_after_kill(tmp_path):
    """A run killed mid-epoch and resumed from its last checkpoint ends with the very same weights, losses,
    learning rates and evaluations as a run never stopped (dropout on: the RNG state is restored too)."""
    train, val = make_data(16), make_data(6, seed=1)
    cfg = dict(
        save_every=3, epochs=3
    )  # 4 steps/epoch, 12 steps; checkpoints at 3, 4, 6, 8, 9 (newest 2 kept)
    full = fit(Toy(dropout=0.3), train, _cfg(tmp_path / "full", **cfg), val_examples=val)
    assert full.steps == 12 and len(_train_rows(full.history)) == 12

    with pytest.raises(KeyboardInterrupt):  # killed in the 2nd micro-batch of step 11 (call 22 of 24)
        fit(Toy(dropout=0.3, kill_at=22), train, _cfg(tmp_path / "cut", **cfg), val_examples=val)
    cut = tmp_path / "cut"
    assert sorted(p.name for p in (cut / "checkpoints").iterdir()) == ["step-8", "step-9"]
    assert not (cut / "train_result.json").exists() and (cut / "best").is_dir()
    logged = [json.loads(x) for x in (cut / "metrics.jsonl").read_text().splitlines()]
    assert max(r["step"] for r in logged) == 10  # work after the last checkpoint, redone on resume

    # the resumed task builds a fresh (differently initialised) module: everything comes from the checkpoint
    res = fit(Toy(dropout=0.3, init_seed=99), train, _cfg(cut, resume=True, **cfg), val_examples=val)
    assert res.resumed_from.name == "step-9" and res.steps == 12
    assert res.history == full.history
    _assert_same_params(params(res.module), params(full.module))
    logged = [json.loads(x) for x in (cut / "metrics.jsonl").read_text().splitlines()]
    assert logged == full.history
    from safetensors.torch import load_file

    _assert_same_params(
        load_file(str(res.best_dir / "trainable.safetensors")),
        load_file(str(full.best_dir / "trainable.safetensors")),
    )


def test_resume_at_an_epoch_boundary(tmp_path):
    train = make_data(12)
    full = fit(Toy(dropout=0.2), train, _cfg(tmp_path / "a", grad_accum=1, batch_size=4, epochs=3))
    with pytest.raises(KeyboardInterrupt):  # checkpoint at the end of epoch 1 (step 3), killed in step 5
        fit(Toy(dropout=0.2, kill_at=5), train, _cfg(tmp_path / "b", grad_accum=1, batch_size=4, epochs=3))
    res = fit(
        Toy(dropout=0.2, init_seed=5),
        train,
        _cfg(tmp_path / "b", grad_accum=1, batch_size=4, epochs=3, resume=True),
    )
    assert res.resumed_from.name == "step-3"
    assert res.history == full.history
    _assert_same_params(params(res.module), params(full.module))


def test_accumulation_equals_bigger_batch(tmp_path):
    """grad_accum 2 x batch 2 == grad_accum 1 x batch 4 (same examples per optimizer step, same order)."""
    train = make_data(16)
    a = fit(Toy(), train, _cfg(tmp_path / "a", batch_size=2, grad_accum=2))
    b = fit(Toy(), train, _cfg(tmp_path / "b", batch_size=4, grad_accum=1))
    assert [r["step"] for r in _train_rows(a.history)] == list(range(1, 13))
    for ra, rb in zip(_train_rows(a.history), _train_rows(b.history)):
        assert ra["lr"] == rb["lr"]
        assert ra["loss"] == pytest.approx(rb["loss"], rel=1e-5) and ra["grad_norm"] == pytest.approx(
            rb["grad_norm"], rel=1e-5
        )
    _assert_same_params(params(a.module), params(b.module), atol=1e-6)
    # and it is not vacuous: a different batch composition gives other numbers
    c = fit(Toy(), train, _cfg(tmp_path / "c", batch_size=2, grad_accum=1, max_steps=12))
    assert not torch.allclose(params(c.module)["3.weight"], params(a.module)["3.weight"], atol=1e-4)


def test_short_last_group_is_a_mean(tmp_path):
    """An epoch of 3 micro-batches with grad_accum 2 ends with a 1-micro-batch step whose gradient is that
    batch's mean (not half of it): the same as grad_accum 1 for that step."""
    train = make_data(6)
    a = fit(
        Toy(),
        train,
        _cfg(
            tmp_path / "a",
            batch_size=2,
            grad_accum=2,
            epochs=1,
            lr=0.1,
            warmup_ratio=0.0,
            scheduler="constant",
            max_grad_norm=None,
        ),
    )
    assert a.steps == 2
    # the reference: the same two steps done by hand
    ref = Toy()
    opt = torch.optim.AdamW(ref.net.parameters(), lr=0.1, weight_decay=0.01)
    from genmetrics.train.loop import _EpochPermutation

    order = list(_EpochPermutation(6, 7))
    for group in (order[:4], order[4:]):
        opt.zero_grad()
        x, y = ref.collate([train[i] for i in group])
        ((ref.net(x).squeeze(-1) - y) ** 2).mean().backward()
        opt.step()
    _assert_same_params(params(a.module), params(ref.net), atol=1e-6)


@pytest.mark.parametrize("scheduler", ["cosine", "linear"])
def test_lr_curve_is_transformers_schedule(tmp_path, scheduler):
    from transformers import get_scheduler

    res = fit(
        Toy(),
        make_data(20),
        _cfg(tmp_path / "o", scheduler=scheduler, warmup_ratio=0.13, epochs=4, batch_size=2, grad_accum=2),
    )
    total = 4 * math.ceil(10 / 2)  # 10 micro-batches per epoch, 2 per step
    lrs = [r["lr"] for r in _train_rows(res.history)]
    assert len(lrs) == total == res.steps
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.SGD([p], lr=0.05)
    sched = get_scheduler(scheduler, opt, num_warmup_steps=math.ceil(0.13 * total), num_training_steps=total)
    expected = []
    for _ in range(total):
        expected.append(opt.param_groups[0]["lr"])
        opt.step()
        sched.step()
    assert lrs == pytest.approx(expected, rel=1e-12, abs=1e-15)
    assert (
        lrs[0] == 0.0 and max(lrs) == pytest.approx(0.05) and lrs.index(max(lrs)) == math.ceil(0.13 * total)
    )
    cfg_json = json.loads((tmp_path / "o" / "train_config.json").read_text())
    assert cfg_json["derived"]["total_steps"] == total and cfg_json["derived"]["warmup_steps"] == math.ceil(
        0.13 * total
    )
    assert cfg_json["settings"]["lr"] == 0.05 and cfg_json["settings"]["scheduler"] == scheduler


def test_early_stopping_stops_at_the_right_epoch_and_keeps_the_best(tmp_path):
    from safetensors.torch import load_file

    script = [1.0, 0.5, 0.52, 0.45, 0.6, 0.46, 0.9, 0.1]  # lower is better; min_delta 0.06
    task = Toy(script=script)
    res = fit(
        task,
        make_data(8),
        _cfg(
            tmp_path / "o",
            epochs=8,
            batch_size=4,
            grad_accum=1,
            early_stopping_patience=2,
            early_stopping_min_delta=0.06,
        ),
        val_examples=make_data(4, seed=3),
    )
    # 0.5 improves (by 0.5); 0.52, 0.45 do not beat 0.5 - 0.06 -> 2 bad evaluations -> stop after epoch 4
    steps_per_epoch = 2
    assert res.stopped_early and res.steps == 4 * steps_per_epoch
    assert [r["loss"] for r in res.history if r["kind"] == "eval"] == script[:4]
    assert res.best_metric == 0.5 and res.best_step == 2 * steps_per_epoch
    best = load_file(str(res.best_dir / "trainable.safetensors"))
    _assert_same_params(best, task.seen[1])  # the weights evaluated at epoch 2
    final = load_file(str(res.final_dir / "trainable.safetensors"))
    _assert_same_params(final, params(res.module))
    assert not torch.equal(final["0.weight"], best["0.weight"])

    # greater is better, evaluated every 3 steps: the best is the highest
    task = Toy(script=[0.1, 0.3, 0.2, 0.25, 0.9])
    res = fit(
        task,
        make_data(8),
        _cfg(
            tmp_path / "g",
            epochs=4,
            batch_size=4,
            grad_accum=1,
            eval_every=3,
            early_stopping_patience=2,
            greater_is_better=True,
        ),
        val_examples=make_data(4, seed=3),
    )
    assert [r["step"] for r in res.history if r["kind"] == "eval"] == [3, 6, 8]  # every 3 steps, and the end
    assert res.best_metric == 0.3 and res.best_step == 6 and not res.stopped_early


def test_checkpoint_holds_trained_weights_only(tmp_path):
    from safetensors.torch import load_file

    task = Toy()
    task.net[0].requires_grad_(False)  # a frozen "backbone"
    res = fit(task, make_data(8), _cfg(tmp_path / "o", epochs=2, batch_size=4, grad_accum=1))
    ck = sorted((tmp_path / "o" / "checkpoints").iterdir())[-1]
    assert set(load_file(str(ck / "trainable.safetensors"))) == {"3.weight", "3.bias"}
    assert not list(ck.glob("model*.safetensors"))
    assert torch.equal(res.module[0].weight.cpu(), Toy().net[0].weight)  # frozen weights untouched


def test_time_based_checkpoints(tmp_path):
    """save_every_minutes: a checkpoint whenever that much time passed (0: after every step); None: only at
    epoch ends and evaluations."""
    fit(Toy(), make_data(16), _cfg(tmp_path / "a", epochs=1, save_every_minutes=0, keep_checkpoints=100))
    assert sorted(p.name for p in (tmp_path / "a" / "checkpoints").iterdir()) == [
        "step-1",
        "step-2",
        "step-3",
    ]
    fit(Toy(), make_data(16), _cfg(tmp_path / "b", epochs=2, save_every_minutes=None, keep_checkpoints=100))
    assert sorted(p.name for p in (tmp_path / "b" / "checkpoints").iterdir()) == ["step-4"]  # the epoch end


def test_bf16_autocast_resumes_exactly(tmp_path):
    """Mixed precision (bf16 autocast on CPU or CUDA): the kill-and-resume run still equals the straight one."""
    train = make_data(16)
    cfg = dict(mixed_precision="bf16", save_every=2, epochs=2)
    full = fit(Toy(dropout=0.2), train, _cfg(tmp_path / "full", **cfg))
    assert (
        json.loads((tmp_path / "full" / "train_config.json").read_text())["derived"]["mixed_precision"]
        == "bf16"
    )
    with pytest.raises(KeyboardInterrupt):
        fit(Toy(dropout=0.2, kill_at=11), train, _cfg(tmp_path / "cut", **cfg))
    res = fit(Toy(dropout=0.2, init_seed=3), train, _cfg(tmp_path / "cut", resume=True, **cfg))
    assert res.resumed_from is not None and res.history == full.history
    _assert_same_params(params(res.module), params(full.module))


# ------------------------------------------------------------------------------------ progress and metrics log
# The progress bar follows GENMETRICS_PROGRESS; the metrics log is one row per optimizer step and evaluation.
def test_progress_bar_follows_the_environment(tmp_path, monkeypatch, capsys):
    cfg = dict(lr=0.01, epochs=1, batch_size=4, progress=True)
    monkeypatch.setenv("GENMETRICS_PROGRESS", "1")
    fit(Toy(), make_data(8), TrainLoopConfig(out_dir=tmp_path / "a", **cfg))
    assert "train" in capsys.readouterr().err
    monkeypatch.setenv("GENMETRICS_PROGRESS", "0")
    fit(Toy(), make_data(8), TrainLoopConfig(out_dir=tmp_path / "b", **cfg))
    assert "train" not in capsys.readouterr().err
    monkeypatch.setenv("GENMETRICS_PROGRESS", "1")
    fit(Toy(), make_data(8), TrainLoopConfig(out_dir=tmp_path / "c", **{**cfg, "progress": False}))
    assert "train" not in capsys.readouterr().err


def test_metrics_log_rows(tmp_path):
    res = fit(
        Toy(),
        make_data(12),
        TrainLoopConfig(
            out_dir=tmp_path / "o", lr=0.01, epochs=2, batch_size=2, grad_accum=3, progress=False
        ),
        val_examples=make_data(3),
    )
    rows = [json.loads(x) for x in (tmp_path / "o" / "metrics.jsonl").read_text().splitlines()]
    assert rows == res.history
    assert [(r["kind"], r["step"], r["epoch"]) for r in rows] == [
        ("train", 1, 0.5),
        ("train", 2, 1.0),
        ("eval", 2, 1.0),
        ("train", 3, 1.5),
        ("train", 4, 2.0),
        ("eval", 4, 2.0),
    ]
    assert all({"loss", "mae", "lr", "grad_norm"} <= r.keys() for r in rows if r["kind"] == "train")
