"""The common contract, run over every registered metric on tiny backbones."""

from __future__ import annotations

import copy

import pytest
import torch

import genmetrics as gm
from tests.recipes import metric_recipe

NAMES = [n for n in gm.list_metrics() if gm.registry.alias_of(n) is None]  # an alias is the same metric


def _close(a, b, tol=1e-5):
    if isinstance(a, dict):
        assert a.keys() == b.keys()
        for k in a:
            _close(a[k], b[k], tol)
    elif isinstance(a, torch.Tensor):
        assert torch.allclose(a.double(), torch.as_tensor(b).double(), atol=tol, rtol=tol, equal_nan=True), (
            a,
            b,
        )
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b)
        for x, y in zip(a, b):
            _close(x, y, tol)
    elif isinstance(a, float):
        assert abs(a - b) <= tol * max(1.0, abs(a)), (a, b)
    else:
        assert a == b


def _merged(updates):
    """All updates merged into one call (lists concatenated, tensors cat)."""
    out = {}
    for u in updates:
        for k, v in u.items():
            if v is None:
                continue
            if k not in out:
                out[k] = v if not isinstance(v, torch.Tensor) else [v]
            elif isinstance(v, torch.Tensor):
                out[k].append(v)
            else:
                out[k] = list(out[k]) + list(v)
    return {
        k: (
            torch.cat(v)
            if isinstance(v, list) and v and isinstance(v[0], torch.Tensor) and k != "reference_sets"
            else v
        )
        for k, v in out.items()
    }


def test_required_names_registered():
    for n in ["psnr", "ssim", "ms_ssim", "clip_i", "dino"]:
        assert n in NAMES
    # clip_t is registered as an alias of clipscore (identical scores): it resolves, and is listed as an alias
    assert "clipscore" in NAMES and gm.metric_info("clip_t")["name"] in ("clip_t", "clipscore")
    for n in NAMES:
        info = gm.metric_info(n)
        assert {"inputs", "higher_is_better", "range", "paper", "default_weights"} <= info.keys()


@pytest.mark.parametrize("name", NAMES)
def test_contract(name):
    recipe = metric_recipe(name)
    kwargs, updates = recipe["kwargs"], recipe["updates"]
    metric = gm.create_metric(name, **kwargs)
    assert isinstance(metric, gm.Metric)
    for u in updates:
        metric.update(**u)
    accumulated = metric.compute()

    # reset works and leaves an empty state that accumulates the same again
    metric.reset()
    for u in updates:
        metric.update(**u)
    _close(metric.compute(), accumulated)

    # one-shot compute equals reset+update+compute and leaves the state untouched
    merged = _merged(updates)
    fresh = gm.create_metric(name, **kwargs)
    fresh.update(**merged)
    expected = fresh.compute()
    one_shot = metric.compute(merged.get("reference"), merged.get("candidates"), merged.get("condition"))
    _close(one_shot, expected)
    _close(metric.compute(), accumulated)

    # batch-size invariance
    for bs in (1, 3):
        other = gm.create_metric(name, **{**kwargs, "batch_size": bs})
        for u in updates:
            other.update(**u)
        _close(other.compute(), accumulated)

    # no backbone weights in the state dict; backbones frozen
    sd = metric.state_dict()
    assert all(not torch.is_tensor(v) or v.numel() < 10_000 for v in sd.values())
    assert not any("backbone" in k or "visual" in k or "model." in k for k in sd)
    assert not any(p.requires_grad for p in metric.parameters())
    # a copy is independent
    twin = copy.deepcopy(metric)
    twin.reset()
    _close(metric.compute(), accumulated)
