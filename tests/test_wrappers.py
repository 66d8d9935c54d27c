"""torchmetrics' wrappers (BootStrapper, MetricTracker, ClasswiseWrapper) on genmetrics metrics, and the
adapted ones in genmetrics.wrappers for list inputs and dict results."""

from __future__ import annotations

import pytest
import torch
from torchmetrics import wrappers as tw

from genmetrics import wrappers as gw
from tests.contract import tester as T


def _feed(wrapper, name):
    for u in T.batches(name):
        wrapper.update(**u)


def test_stock_bootstrapper_shares_the_backbone_and_keeps_tensor_pairs():
    base = T.build("clip_i")
    boot = tw.BootStrapper(base, num_bootstraps=3, raw=True)
    assert all(m.backbones()["backbone"] is base.backbones()["backbone"] for m in boot.metrics)
    x = T.merged(T.batches("clip_i"))["reference"]
    boot.update(reference=x, candidates=x)  # identical pairs: cosine 1 in every resample iff pairs stay pairs
    assert torch.allclose(boot.compute()["raw"], torch.ones(3, dtype=torch.float64), atol=1e-5)


def test_bootstrapper_resamples_prompts_with_their_images():
    # each image is scored against its own prompt: a resample that kept the prompts in place would pair an
    # image with another image's prompt; identical (image, prompt) rows make every resample's mean exact
    imgs = T.merged(T.batches("clip_t"))["candidates"][:1].repeat(5, 1, 1, 1)
    prompts = ["a red car"] * 5
    expected = T.build("clip_t", attributes=None).compute(candidates=imgs[:1], condition=prompts[:1])
    other = T.build("clip_t", attributes=None).compute(candidates=imgs[:1], condition=["a bowl of fruit"])
    imgs = torch.cat([imgs, T.merged(T.batches("clip_t"))["candidates"][1:2].repeat(5, 1, 1, 1)])
    prompts = prompts + ["a bowl of fruit"] * 5
    second = T.build("clip_t", attributes=None).compute(candidates=imgs[5:6], condition=["a bowl of fruit"])
    boot = gw.BootStrapper(T.build("clip_t", attributes=None), num_bootstraps=4, raw=True)
    boot.update(candidates=imgs, condition=prompts)
    raw = boot.compute()["raw"]
    lo, hi = sorted([float(expected), float(second)])
    assert torch.all(raw >= lo - 1e-4) and torch.all(
        raw <= hi + 1e-4
    )  # every value a mix of the two true pairs
    assert float(other) < lo - 1e-3 or float(other) > hi + 1e-3  # a broken pairing would leave that range


def test_bootstrapper_dict_results_and_independent_sets():
    torch.manual_seed(0)
    boot = gw.BootStrapper(T.build("sad"), num_bootstraps=3, sampling_strategy="multinomial")
    whole = T.merged(T.batches("sad"))
    boot.update(reference=whole["reference"], candidates=whole["candidates"])
    out = boot.compute()
    assert set(out) == {"mean", "per_attribute"} and set(out["mean"]) == {"mean", "std"}
    assert out["per_attribute"]["mean"].shape == (3,)


def test_metric_tracker_copies_share_backbone_and_rank_dict_results():
    tracker = gw.MetricTracker(T.build("sad"))
    for _ in range(2):
        tracker.increment()
        _feed(tracker, "sad")
    best, step = tracker.best_metric(return_step=True)
    assert best == pytest.approx(float(T.reference("sad")["mean"])) and step == 0  # equal epochs: the first
    base = T.build("clip_i")
    stock = tw.MetricTracker(base)
    stock.increment()
    assert stock[-1].backbones()["backbone"] is base.backbones()["backbone"]
    _feed(stock, "clip_i")
    assert float(stock.best_metric()) == pytest.approx(float(T.reference("clip_i")))


def test_classwise_wrapper_labels_per_attribute_results():
    stock = tw.ClasswiseWrapper(T.build("raclip"), labels=T.recipe("raclip")["kwargs"]["attributes"])
    _feed(stock, "raclip")
    ref = T.reference("raclip")
    assert [float(v) for v in stock.compute().values()] == pytest.approx(ref.tolist())
    ours = gw.ClasswiseWrapper(T.build("sad"))  # dict result, labels from the attributes
    _feed(ours, "sad")
    got = ours.compute()
    assert list(got) == [f"sad_{a}" for a in T.recipe("sad")["kwargs"]["attributes"]]
    assert [float(v) for v in got.values()] == pytest.approx(T.reference("sad")["per_attribute"].tolist())


@pytest.mark.parametrize("name", T.NAMES)
def test_stock_running_window_over_every_metric(name):
    """torchmetrics' own ``Running`` keeps the states of the last ``window`` batches: its value is that of a
    fresh metric given those batches (``reset`` used to empty the lists Running had kept, so
    compute() raised after updates and forward() gave the last batch only)."""
    ups = T.batches(name)
    for feed in ("update", "forward"):
        running = tw.Running(T.build(name), window=2)
        for u in ups:
            running.update(**u) if feed == "update" else running(**u)
        T.assert_close(running.compute(), T.value_of(name, ups[-2:]), what=f"Running via {feed}")
