"""psnr, ssim and ms_ssim are differentiable like torchmetrics' classes: ``forward`` and the
one-shot ``score`` keep the autograd graph of float images, with the gradient of torchmetrics' own
functional; the accumulated state never holds a graph. Every other metric says it is not differentiable and
returns values without a graph."""

from __future__ import annotations

import pytest
import torch
from torchmetrics.functional.image import (
    multiscale_structural_similarity_index_measure,
    peak_signal_noise_ratio,
    structural_similarity_index_measure,
)

import genmetrics as gm
from tests.contract import tester as T
from tests.contract.test_api import TM_SSIM_FIXED

DIFFERENTIABLE = {"psnr", "ssim", "ms_ssim"}


def _images(n=3, size=32, seed=0):
    g = torch.Generator().manual_seed(seed)
    ref = torch.rand(n, 3, size, size, generator=g, dtype=torch.float64)
    cand = (ref + 0.2 * torch.rand(n, 3, size, size, generator=g, dtype=torch.float64)).clamp(0.05, 0.95)
    return ref, cand


def _torchmetrics_value(name, cand, ref):
    """torchmetrics' functional of the same quantity: the mean over images of the per-image value."""
    if name == "psnr":
        return peak_signal_noise_ratio(cand, ref, data_range=1.0, reduction="elementwise_mean", dim=(1, 2, 3))
    if name == "ssim":
        return structural_similarity_index_measure(cand, ref, data_range=1.0)
    return multiscale_structural_similarity_index_measure(
        cand, ref, data_range=1.0, kernel_size=7, sigma=6 / 7, betas=(0.5, 0.5), normalize=None
    )


OPTIONS = {"psnr": {}, "ssim": {}, "ms_ssim": {"kernel_size": 7, "betas": (0.5, 0.5)}}


@pytest.mark.parametrize("name", sorted(DIFFERENTIABLE))
def test_gradient_is_torchmetrics_gradient(name):
    if name != "psnr" and not TM_SSIM_FIXED:  # the oldest admitted torchmetrics (.ci/versions)
        pytest.skip("torchmetrics < 1.4.2 pads SSIM's border wrongly (its PR 2721): nothing to compare with")
    ref, cand = _images()
    metric = gm.create_metric(name, **OPTIONS[name])
    assert metric.is_differentiable
    ours = cand.clone().requires_grad_()
    value = metric(preds=ours, target=ref)  # forward: the batch value, with its graph
    assert value.requires_grad
    value.backward()
    theirs = cand.clone().requires_grad_()
    expected = _torchmetrics_value(name, theirs, ref)
    expected.backward()
    # float64 images and arithmetic on both sides, except one constant: torchmetrics' PSNR scales by
    # 10 / ln(10) computed from a float32 tensor (its `tensor(base)`), a relative error up to float32's
    # eps 1.19e-7 on the value and on every gradient entry; SSIM / MS-SSIM have no such constant, and
    # the same sums in another order differ by ~1e-16 per term (1e-9 leaves room for 3*32*32 terms)
    rel = 2.4e-7 if name == "psnr" else 1e-9
    scale = float(theirs.grad.abs().max())
    assert float(value.detach()) == pytest.approx(float(expected.detach()), rel=rel)
    assert torch.allclose(ours.grad, theirs.grad, rtol=0, atol=rel * scale)
    # the accumulated state is out of the graph, and the one-shot score keeps it as a functional would
    assert not any(t.requires_grad for t in metric.scores)
    again = cand.clone().requires_grad_()
    assert metric.score(ref, again).requires_grad and not metric.scores[-1].requires_grad


@pytest.mark.parametrize("name", ["psnr", "ssim"])
def test_gradcheck(name):
    """Finite differences agree with the analytic gradient (torch.autograd.gradcheck, float64)."""
    g = torch.Generator().manual_seed(1)
    ref = torch.rand(1, 3, 9, 9, generator=g, dtype=torch.float64) * 0.8 + 0.1
    cand = (ref + 0.05 * torch.rand(1, 3, 9, 9, generator=g, dtype=torch.float64)).requires_grad_()
    metric = gm.create_metric(name, **({"kernel_size": 7} if name == "ssim" else {}))
    assert torch.autograd.gradcheck(lambda c: metric.score(ref, c), (cand,))


@pytest.mark.parametrize("name", [n for n in T.NAMES if n not in DIFFERENTIABLE])
def test_other_metrics_say_they_are_not_differentiable(name):
    metric = T.build(name)
    assert not metric.is_differentiable
    with torch.enable_grad():
        value = metric(**T.batches(name)[-1])
    leaves = value.values() if isinstance(value, dict) else [value]
    assert not any(v.requires_grad for v in leaves)
