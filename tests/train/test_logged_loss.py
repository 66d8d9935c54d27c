"""The loss in metrics.jsonl (and the CLI's final_loss) is the loss that was optimised: for every
training task, each logged step's ``loss`` equals the weighted sum of its logged parts and the sum of the
values backward() saw in that step (accumulation > 1 and a short last group included)."""

from __future__ import annotations

import math
import sys

import pytest
import torch

import genmetrics.mie.train as mie_train
import genmetrics.tpips.train as tpips_train
from genmetrics.errors import InputError
from genmetrics.testing import (
    tiny_qwen3vl,
    tiny_qwen3vl_for_generation,
    tiny_qwen3vl_processor,
)
from genmetrics.tpips.synthetic import aspect_triplets
from genmetrics.train import TrainLoopConfig, TrainTask, fit

from .toy import Toy, make_data, tiny_mie

EPS32 = 1.19e-7
STEP = object()  # marks an optimizer step in the recorded sequence


@pytest.fixture
def backward_spy(monkeypatch):
    """The values every backward() call saw, with a marker at every optimizer step."""
    seen: list = []
    backward, step = torch.Tensor.backward, torch.optim.AdamW.step

    def spy_backward(self, *args, **kwargs):
        seen.append(float(self.detach()))
        return backward(self, *args, **kwargs)

    def spy_step(self, *args, **kwargs):
        seen.append(STEP)
        return step(self, *args, **kwargs)

    monkeypatch.setattr(torch.Tensor, "backward", spy_backward)
    monkeypatch.setattr(torch.optim.AdamW, "step", spy_step)
    return seen


def _per_step(seen: list) -> list[list[float]]:
    steps, current = [], []
    for x in seen:
        if x is STEP:
            steps.append(current)
            current = []
        else:
            current.append(x)
    assert not current, "backward values after the last optimizer step"
    return steps


def _check(history, seen, weights: dict[str, float] | None, groups: list[int]) -> None:
    """Each train row: loss == sum of that step's backward values (accelerate divides each micro-batch's loss
    by the group size, so they sum to the step's mean), and == sum_k w_k * part_k when the task's loss is a
    weighted sum. Tolerance: each backward value is float32 (two roundings: x * (accum / group), then
    / accum) and a weighted sum adds one rounding per term, so 4 float32 epsilons of the magnitudes summed;
    the sums themselves are float64."""
    rows = [r for r in history if r["kind"] == "train"]
    per_step = _per_step(seen)
    assert [len(s) for s in per_step] == groups and len(rows) == len(groups)
    for row, values in zip(rows, per_step):
        assert math.isclose(row["loss"], sum(values), rel_tol=0, abs_tol=4 * EPS32 * sum(map(abs, values)))
        if weights:
            terms = [w * row[k] for k, w in weights.items()]
            assert math.isclose(row["loss"], sum(terms), rel_tol=0, abs_tol=4 * EPS32 * sum(map(abs, terms)))


def test_toy_task(tmp_path, backward_spy):
    cfg = TrainLoopConfig(out_dir=tmp_path, lr=0.05, epochs=2, batch_size=2, grad_accum=2, progress=False)
    res = fit(Toy(), make_data(6), cfg)  # 3 micro-batches per epoch: steps of 2 and 1
    _check(res.history, backward_spy, None, [2, 1, 2, 1])
    assert all("mae" in r for r in res.history)


@pytest.mark.slow
def test_mie(tmp_path, backward_spy):
    """MIE's loss is alpha * rank + beta * diag; it was logged twice over (the task's "loss" part added on
    top of the total)."""
    res = tiny_mie(tmp_path / "data", tmp_path / "run", grad_accum=2, subset=0, epochs=1, alpha=0.7, beta=0.3)
    _check(res["history"], backward_spy, {"rank": 0.7, "diag": 0.3}, [2, 1])
    assert all(r["diag"] > 0 for r in res["history"])  # both terms are live


@pytest.mark.slow
@pytest.mark.parametrize("variant", ["late", "mid", "early", "triplet"])
def test_tpips(tmp_path, backward_spy, variant):
    """TPIPS logs no parts: its loss is the one term, Eq. 2's cross-entropy."""
    build = tiny_qwen3vl_for_generation if variant == "triplet" else tiny_qwen3vl
    records = [r for pair in aspect_triplets(3, size=64) for r in pair]
    cfg = tpips_train.TrainConfig(
        variant=variant, batch_size=4, micro_batch_size=2, image_size=64, save_every=0
    )
    res = tpips_train.train_tpips(
        records, tmp_path, config=cfg, backbone=build(), processor=tiny_qwen3vl_processor(64), progress=False
    )
    history = [{"kind": "train", "loss": x} for x in res.losses]
    _check(history, backward_spy, None, [2, 1])


def test_every_training_task_is_covered():
    """A new TrainTask in the package must be added to the tests above."""
    covered = {mie_train.MIETask, tpips_train.TPIPSTrainTask}
    # classes the package defines (a doctest's example class carries the module's name but is not in it)
    found = {
        c
        for c in TrainTask.__subclasses__()
        if c.__module__.startswith("genmetrics.")
        and getattr(sys.modules.get(c.__module__), c.__name__, None) is c
    }
    assert found <= covered, f"training tasks without a logged-loss test: {found - covered}"


class _Named(Toy):
    def __init__(self, part):
        super().__init__()
        self.part = part

    def loss(self, module, batch):
        loss, parts = super().loss(module, batch)
        return loss, {**parts, self.part: 1.0}


def test_a_part_named_loss_is_not_counted_twice_and_row_names_are_refused(tmp_path):
    cfg = TrainLoopConfig(out_dir=tmp_path / "a", lr=0.05, epochs=1, batch_size=2, progress=False)
    plain = fit(Toy(), make_data(4), cfg)
    named = fit(_Named("loss"), make_data(4), TrainLoopConfig(**{**cfg.__dict__, "out_dir": tmp_path / "b"}))
    assert [r["loss"] for r in named.history] == [r["loss"] for r in plain.history]
    with pytest.raises(InputError, match="part named 'lr', a name the loop logs itself"):
        fit(_Named("lr"), make_data(4), TrainLoopConfig(**{**cfg.__dict__, "out_dir": tmp_path / "c"}))
