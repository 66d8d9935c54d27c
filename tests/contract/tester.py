"""A contract tester for genmetrics metrics, modelled on what torchmetrics' own ``MetricTester`` checks
(``tests/unittests/_helpers/testers.py`` in the torchmetrics repository; this is our own code):

* constants (``higher_is_better``, ``is_differentiable``) cannot be set on an instance;
* ``clone()`` gives another object of the same type (here: sharing the frozen backbones);
* the metric works after a pickle round trip, and a deep copy updated once equals ``forward``'s batch value;
* ``forward`` returns the value of each batch alone (checked against a fresh metric on that batch) and
  accumulates every batch, so ``compute()`` equals the value of all batches at once;
* the metric is hashable, its ``state_dict()`` is empty by default and ``compute()`` returns tensors;
* the same in two gloo processes (each rank forwards its share of the batches) and with
  ``dist_sync_on_step``; half-precision states (``set_dtype``).

The reference value of a set of batches is an explicit second computation: a fresh metric given all
batches in one ``update`` call (no forward, no merge, no processes), whose per-sample path is in turn
pinned against hand computations in the family tests.
"""

from __future__ import annotations

import copy
import functools
import pickle
from typing import Any

import torch

import genmetrics as gm
from genmetrics.core.metric import SampleMetric
from genmetrics.errors import InputError
from tests.recipes import metric_recipe

NAMES: list[str] = [
    n for n in gm.list_metrics() if gm.core.registry.alias_of(n) is None
]  # an alias is the same metric


@functools.cache
def recipe(name: str) -> dict[str, Any]:
    """The family recipe (tiny backbones, a few small batches), built once per process."""
    return metric_recipe(name)


def build(name: str, **override: Any) -> gm.Metric:
    return gm.create_metric(name, **{**recipe(name)["kwargs"], **override})


def batches(name: str) -> list[dict[str, Any]]:
    return recipe(name)["updates"]


def merged(updates: list[dict[str, Any]]) -> dict[str, Any]:
    """All batches as one: tensors concatenated, lists joined (one entry per sample)."""
    out: dict[str, list[Any]] = {}
    for u in updates:
        for k, v in u.items():
            if v is not None:
                out.setdefault(k, []).append(v)
    return {
        k: torch.cat(v) if isinstance(v[0], torch.Tensor) else [x for part in v for x in part]
        for k, v in out.items()
    }


def value_of(name: str, updates: list[dict[str, Any]], **override: Any) -> Any:
    """Reference: a fresh metric, one ``update`` with every batch, ``compute()``; the NaN structure of
    ``forward`` when the batches alone do not define a value (one set of a set metric).

    A pure function of ``updates``, also inside a process group (DDP checks and torchmetrics' harness call
    it in each rank): a metric's ``compute()`` gathers every rank's state when a process group is
    initialised (torchmetrics' default ``sync_on_compute=True``), which would make the reference of one
    rank's batch the value of every rank's batches; the reference metric never syncs."""
    m = build(name, **{"sync_on_compute": False, **override})
    try:
        m.update(**merged(updates))
        return m.compute()
    except InputError:
        return m._undefined_value()


@functools.cache
def reference(name: str) -> Any:
    return value_of(name, batches(name))


def assert_close(
    actual: Any, expected: Any, *, rtol: float = 1e-5, atol: float = 1e-5, what: str = ""
) -> None:
    if isinstance(expected, dict):
        assert isinstance(actual, dict) and actual.keys() == expected.keys(), (what, actual, expected)
        for k in expected:
            assert_close(actual[k], expected[k], rtol=rtol, atol=atol, what=f"{what}[{k}]")
        return
    a = torch.as_tensor(actual).detach().double().cpu()
    e = torch.as_tensor(expected).detach().double().cpu()
    assert a.shape == e.shape, (what, a.shape, e.shape)
    assert torch.allclose(a, e, rtol=rtol, atol=atol, equal_nan=True), (what, a, e)


def assert_tensors(value: Any) -> None:
    if isinstance(value, dict):
        for v in value.values():
            assert_tensors(v)
    else:
        assert isinstance(value, torch.Tensor), type(value)


def scalar(value: Any) -> float:
    """The one number a logger records: the value, or its ``"mean"`` / mean over attributes."""
    if isinstance(value, dict):
        value = value["mean"]
    return float(torch.as_tensor(value).double().mean())


def class_test(name: str) -> None:
    """torchmetrics' ``_class_test`` in one process: constants, clone, pickle, forward per batch, hash,
    empty state dict, tensor results, accumulated value."""
    metric = build(name)
    for const in ("higher_is_better", "is_differentiable"):
        try:
            setattr(metric, const, not getattr(metric, const))
        except RuntimeError:
            pass
        else:
            raise AssertionError(f"{name}: {const} could be set on an instance")
    clone = metric.clone()
    assert clone is not metric and type(clone) is type(metric)
    for k, module in metric.backbones().items():
        assert clone.backbones()[k] is module, "a clone shares the frozen backbone instead of copying it"
    metric = pickle.loads(pickle.dumps(metric))
    twin = copy.deepcopy(metric)
    for i, batch in enumerate(batches(name)):
        value = metric(**batch)
        if i == 0:
            twin.update(**batch)
            try:
                assert_close(value, twin.compute(), what="forward vs update+compute")
            except InputError:
                assert_close(value, twin._undefined_value(), what="forward vs update+compute")
        assert_close(value, value_of(name, [batch]), what=f"forward batch {i}")
    assert hash(metric)
    assert metric.state_dict() == {}
    result = metric.compute()
    assert_tensors(result)
    assert_close(result, reference(name), what="accumulated over forward")


def padded_shards(n: int, world_size: int) -> list[list[int]]:
    """DistributedSampler's split: pad with the first samples so every rank has ceil(n / world)."""
    per = -(-n // world_size)
    order = list(range(n)) + list(range(per * world_size - n))
    return [order[r::world_size] for r in range(world_size)]


def take(batch: dict[str, Any], idx: list[int]) -> dict[str, Any]:
    return {k: v[idx] if isinstance(v, torch.Tensor) else [v[i] for i in idx] for k, v in batch.items()}


def per_candidate(name: str) -> bool:
    """Metrics whose inputs hold one entry per candidate (so samples can be sharded with ids)."""
    m = build(name)
    if not isinstance(m, SampleMetric) or name == "hcs":
        return False
    return len({len(v) for v in merged(batches(name)).values()}) == 1


def ddp_worker(rank: int, world_size: int, names: list[str]) -> dict[str, Any]:
    """Everything the two-process checks need, computed per rank (asserted in the parent process, so a
    failure on one rank never leaves the other waiting in a collective)."""
    out: dict[str, Any] = {}
    for name in names:
        ups = batches(name)
        res: dict[str, Any] = {}
        # class test through forward: rank r forwards batches r, r + W, ...
        m = pickle.loads(pickle.dumps(build(name)))
        res["forward"] = [m(**ups[i]) for i in range(rank, len(ups), world_size)]
        res["forward_idx"] = list(range(rank, len(ups), world_size))
        res["final"] = m.compute()
        # the reference of this rank's batch, computed while the other rank computes its own
        res["reference_in_group"] = value_of(name, [ups[rank]])
        if isinstance(m, SampleMetric):
            res["per_sample"] = m.per_sample()
        # dist_sync_on_step: each forward returns the value of every rank's batch of that step
        even = ups[: len(ups) // world_size * world_size]
        s = build(name, dist_sync_on_step=True)
        res["step"] = [s(**even[i]) for i in range(rank, len(even), world_size)]
        # a rank without any update
        e = build(name)
        if rank == 0:
            for u in ups:
                e.update(**u)
        res["empty_rank"] = e.compute()
        # sampler padding: named ids are counted once across ranks
        if per_candidate(name):
            whole = merged(ups)
            n = len(next(iter(whole.values())))
            idx = padded_shards(n, world_size)[rank]
            p = build(name)
            p.update(**take(whole, idx), ids=[f"s{i}" for i in idx])
            res["padded"] = p.compute()
        out[name] = res
    return out
