"""The registered ``tpips`` metric."""

from __future__ import annotations

import subprocess
import sys

import pytest
import torch

import genmetrics as gm
from genmetrics.errors import InputError, WeightsUnavailableError

from .conftest import SIZE


@pytest.fixture()
def metric(vlm, processor):
    return gm.create_metric("tpips", backbone=vlm, processor=processor, image_size=SIZE)


def test_card_and_lazy_exports():
    info = gm.metric_info("tpips")
    assert info["default_weights"] == "Qwen/Qwen3-VL-Embedding-2B"
    assert set(info["inputs"]) == {"reference", "candidates", "condition"}
    code = (
        "import sys, genmetrics as gm; gm.list_metrics(); import genmetrics.tpips as t; "
        "assert 'torch' not in sys.modules, 'torch imported'; assert 'TPIPSModel' in dir(t)"
    )
    subprocess.run([sys.executable, "-c", code], check=True)


def test_one_shot_and_accumulated(metric, models, images):
    ref, cand = images[:3], images[3:6]
    asp = ["lighting", "overall", "lighting"]
    expected = models["late"].similarity(ref, cand, asp).double()
    assert torch.allclose(metric.similarities(ref, cand, asp), expected, atol=1e-6)
    metric.update(ref, cand, asp, ids=["a", "b", "c"])
    assert torch.allclose(metric.compute(), expected.mean(), atol=1e-6)
    per = metric.per_aspect()
    assert set(per) == {"lighting", "overall"}
    assert torch.allclose(per["lighting"], expected[[0, 2]].mean(), atol=1e-6)
    assert metric.per_sample()["ids"] == ["a", "b", "c"]
    # duplicate ids (a DDP sampler's padding) count once, also per aspect
    metric.update(ref[:1], cand[:1], ["lighting"], ids=["a"])
    assert torch.allclose(metric.per_aspect()["lighting"], expected[[0, 2]].mean(), atol=1e-6)


def test_k_candidates_per_reference(metric, models, images):
    ref, asp = images[:2], "color"
    cand = [[images[2], images[3], images[4]], [images[5], images[0], images[1]]]
    s = metric.similarities(ref, cand, asp)
    assert s.shape == (2, 3)
    flat = models["late"].similarity([images[0]] * 3 + [images[1]] * 3, [c for row in cand for c in row], asp)
    assert torch.allclose(s.reshape(-1), flat.double(), atol=1e-6)
    metric.update(ref, torch.stack([torch.stack(r) for r in cand]), asp)  # tensor [B,K,3,H,W] works too
    assert metric.compute().shape == (3,)
    with pytest.raises(InputError, match="already holds scores"):
        metric.update(ref, images[2:4], asp)
    with pytest.raises(InputError, match="same number K"):
        metric.similarities(ref, [[images[2]], [images[3], images[4]]], asp)


def test_bad_inputs(metric, images, vlm, processor):
    with pytest.raises(InputError, match="condition"):
        metric.update(images[:2], images[2:4])
    with pytest.raises(InputError, match="empty"):
        metric.update(images[:2], images[2:4], ["lighting", ""])
    with pytest.raises(InputError, match="mismatched input lengths"):
        metric.update(images[:2], images[2:5], "lighting")
    with pytest.raises(InputError, match="2 image pairs"):
        metric.update(images[:2], images[2:4], ["a", "b", "c"])
    with pytest.raises(InputError, match="reference"):
        metric.update(None, images[2:4], "a")
    with pytest.raises(ValueError, match="unknown option"):
        gm.create_metric("tpips", backbone=vlm, processor=processor, varient="late")
    m = gm.create_metric("tpips", backbone=vlm, processor=processor, image_size=SIZE, aspect="overall")
    m.update(images[:2], images[2:4])  # the aspect option stands in for condition
    assert set(m.per_aspect()) == {"overall"}


def test_variants_and_qwen35_early_error(vlm, processor, images):
    from genmetrics.testing import tiny_qwen35

    m = gm.create_metric("tpips", backbone=vlm, processor=processor, variant="early", image_size=SIZE)
    s = m.similarities(images[:2], images[:2], "lighting")
    assert torch.allclose(s, torch.ones(2, dtype=torch.float64), atol=1e-6)
    with pytest.raises(InputError, match="linear-attention"):
        gm.create_metric(
            "tpips", backbone=tiny_qwen35(), processor=processor, variant="early", image_size=SIZE
        )


def test_default_weights_offline_raise_weights_unavailable(images):
    m = gm.create_metric("tpips")  # nothing loads at creation
    with pytest.raises(InputError):
        m.update(images[:1], images[1:2], [""])  # inputs are validated before weights load
    with pytest.raises(WeightsUnavailableError, match="Qwen3-VL-Embedding-2B"):
        m.update(images[:1], images[1:2], ["lighting"])


def _flags(module):
    return (
        {n: p.requires_grad for n, p in module.named_parameters()},
        {n: m.training for n, m in module.named_modules()},
    )


def test_callers_model_keeps_requires_grad_and_mode(processor, images):
    """A TPIPSModel the caller passes (maybe one under training) keeps every parameter's requires_grad and
    every submodule's train/eval mode through create_metric, scoring, the metric's train()/eval() and .to();
    it is scored in eval mode without gradients (the same scores as a frozen eval-mode copy of it)."""
    import copy

    from genmetrics.testing import tiny_qwen3vl
    from genmetrics.tpips.model import TPIPSModel

    model = TPIPSModel(tiny_qwen3vl(seed=0), processor, "mid", image_size=SIZE)  # mid: trainable head MLPs
    params = list(model.parameters())
    for p in params[::2]:
        p.requires_grad_(False)  # a mixed pattern: half trainable
    model.train()
    model.backbone.visual.eval()  # a mixed pattern of modes too
    before = _flags(model)
    assert any(before[0].values()) and not all(before[0].values())
    assert any(before[1].values()) and not all(before[1].values())
    frozen = copy.deepcopy(model).eval().requires_grad_(False)
    ref, cand, asp = images[:2], images[2:4], ["lighting", "pose"]

    metric = gm.create_metric("tpips", backbone=model)
    assert metric.model() is model and _flags(model) == before
    seen: list[bool] = []  # (training, grad enabled) of every submodule the scoring calls
    hooks = [
        m.register_forward_pre_hook(lambda mod, args: seen.append(mod.training or torch.is_grad_enabled()))
        for m in model.modules()
    ]
    s = metric.similarities(ref, cand, asp)
    for h in hooks:
        h.remove()
    assert seen and not any(seen)  # scored in eval mode, without gradients
    metric.update(ref, cand, asp)
    metric.compute()
    assert _flags(model) == before
    metric.eval()
    metric.train()
    metric.to("cpu")
    assert _flags(model) == before
    assert not s.requires_grad
    torch.testing.assert_close(s, frozen.similarity(ref, cand, asp).double(), rtol=0, atol=0)


def test_loaded_backbone_is_frozen_and_in_eval(vlm, processor):
    """Weights the metric wraps itself stay frozen and in eval mode, also after the metric's train()."""
    metric = gm.create_metric("tpips", backbone=vlm, processor=processor, image_size=SIZE)
    metric.train()
    model = metric.model()
    assert not any(p.requires_grad for p in model.parameters())
    assert not any(m.training for m in model.modules())
