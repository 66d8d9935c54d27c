"""SSIM and MS-SSIM on the CPU run in chunks of images sized to the cache: the values do not depend on the
chunking, bit for bit, for any batch, size, dtype and chunk budget, and gradients flow through."""

from __future__ import annotations

import pytest
import torch

from genmetrics.functional import pixel
from genmetrics.functional.pixel import ms_ssim, ssim


def _pair(b, c, h, w, dtype, seed=0):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand(b, c, h, w, generator=g, dtype=dtype)
    y = (x + 0.1 * torch.rand(b, c, h, w, generator=g, dtype=dtype)).clamp(0, 1)
    return x, y


CASES = [
    (ssim, 13, 3, 64, 64),
    (ssim, 7, 1, 33, 47),  # odd sizes, one channel
    (ssim, 5, 3, 130, 96),
    (ms_ssim, 5, 3, 176, 176),
    (ms_ssim, 3, 1, 161, 200),
]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("fn,b,c,h,w", CASES, ids=lambda v: getattr(v, "__name__", str(v)))
def test_values_do_not_depend_on_the_chunking(monkeypatch, fn, b, c, h, w, dtype):
    x, y = _pair(b, c, h, w, dtype)
    opts = {"sigma": 1.3, "k1": 0.02, "k2": 0.04, "data_range": 1.5}  # every option reaches every chunk
    monkeypatch.setattr(pixel, "SSIM_CHUNK_BYTES", 1 << 62)  # one chunk: the batch at once
    whole = fn(x, y, **opts)
    assert not torch.equal(whole, fn(x, y))
    alone = torch.cat([fn(x[i : i + 1], y[i : i + 1], **opts) for i in range(b)])
    for budget in (1, 300_000, 1 << 20, 3 << 20):
        monkeypatch.setattr(pixel, "SSIM_CHUNK_BYTES", budget)
        got = fn(x, y, **opts)
        assert got.dtype == torch.float64 and got.shape == (b,)
        assert torch.equal(got, whole), (budget, (got - whole).abs().max())
    assert torch.equal(alone, whole)


def test_the_default_budget_splits_a_batch_of_small_images(monkeypatch):
    """A 32-image batch of 64x64 RGB is scored in chunks (the speed-up), each a slice of the batch."""
    x, y = _pair(32, 3, 64, 64, torch.float32)
    seen = []
    real = pixel._ssim_terms

    def spy(p, *a, **k):
        seen.append(p.shape[0])
        return real(p, *a, **k)

    monkeypatch.setattr(pixel, "_ssim_terms", spy)
    ssim(x, y)
    per_image = 5 * 3 * 74 * 74 * 4
    assert len(seen) > 1 and sum(seen) == 32 and max(seen) == max(1, pixel.SSIM_CHUNK_BYTES // per_image)


def test_gradients_flow_through_the_chunks(monkeypatch):
    x, y = _pair(6, 3, 40, 40, torch.float64)
    x.requires_grad_(True)
    monkeypatch.setattr(pixel, "SSIM_CHUNK_BYTES", 1)
    (g_chunked,) = torch.autograd.grad(ssim(x, y).sum(), x)
    monkeypatch.setattr(pixel, "SSIM_CHUNK_BYTES", 1 << 62)
    (g_whole,) = torch.autograd.grad(ssim(x, y).sum(), x)
    assert torch.equal(g_chunked, g_whole)


@pytest.mark.parametrize("fn", [ssim, ms_ssim])
@pytest.mark.parametrize(
    "pshape, tshape",
    [
        ((4, 1, 161, 161), (3, 1, 161, 161)),
        ((4, 1, 161, 161), (1, 1, 161, 161)),
        ((1, 161, 161), (1, 161, 161)),
    ],
)
def test_a_mismatched_pair_is_one_error_whatever_the_chunking(monkeypatch, fn, pshape, tshape):
    """Chunks of a pair with different batch sizes used to score only the images both had (4 predictions
    against 1 target: one score, no error), while one chunk raised a reshape error from inside."""
    x, y = torch.rand(pshape), torch.rand(tshape)
    for budget in (1, 1 << 62):  # one image per chunk; the batch at once
        monkeypatch.setattr(pixel, "SSIM_CHUNK_BYTES", budget)
        with pytest.raises(
            ValueError, match=rf"{fn.__name__}: expected preds and target of one shape \[B,C,H,W\]"
        ):
            fn(x, y)
