"""Preprocessing on the metric's device: the resize / crop / normalise of CLIP and DINO run where the model
is, on decoded images moved there as uint8; the difference from another device is bounded by float32 rounding.

* against an independent float64 evaluation (F.interpolate on float64 images, the crop and the statistics
  written out here), a float32 evaluation stays within half of ``device_difference_bound`` (the bound is
  two evaluations' worth of rounding), for every resize mode, up- and downscaling, odd sizes;
* on a GPU (skipped without one): the CUDA result against the CPU result within ``device_difference_bound``,
  uint8 batches and float batches;
* the DINO path equals its CPU arithmetic written out (resize, crop, ImageNet statistics).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from genmetrics.backbones.clip_preprocess import (
    clip_image_batch,
    clip_preprocess_cfg,
    device_difference_bound,
    load_on_device,
    normalisation,
    resize_taps,
)
from genmetrics.testing import tiny_clip

SIZES = [(512, 512), (300, 517), (97, 61), (20, 33), (224, 224)]


def _images(seed: int = 0) -> list[torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    return [torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=g) for h, w in SIZES]


def _reference(x: torch.Tensor, cfg: dict) -> torch.Tensor:
    """Float64: uint8 -> [0,1], resize (antialiased) by the config's mode, crop or pad, normalise."""
    mode = "bilinear" if cfg["interpolation"] == "bilinear" else "bicubic"
    th, tw = cfg["size"]
    v = x.double() / 255.0
    h, w = v.shape[-2:]

    def rs(t, hw):
        if tuple(t.shape[-2:]) == hw:
            return t
        return F.interpolate(t[None], size=hw, mode=mode, antialias=True, align_corners=False)[0].clamp(0, 1)

    if cfg["resize_mode"] == "squash":
        y = rs(v, (th, tw))
    elif cfg["resize_mode"] == "longest":
        s = min(th / h, tw / w)
        nh, nw = max(1, round(h * s)), max(1, round(w * s))
        y = torch.full((3, th, tw), cfg["fill_color"] / 255.0, dtype=torch.float64)
        y[:, (th - nh) // 2 : (th - nh) // 2 + nh, (tw - nw) // 2 : (tw - nw) // 2 + nw] = rs(v, (nh, nw))
    else:
        s = max(th / h, tw / w)
        nh, nw = max(th, round(h * s)), max(tw, round(w * s))
        y = rs(v, (nh, nw))[:, (nh - th) // 2 : (nh - th) // 2 + th, (nw - tw) // 2 : (nw - tw) // 2 + tw]
    m = torch.tensor(cfg["mean"], dtype=torch.float64).view(3, 1, 1)
    sd = torch.tensor(cfg["std"], dtype=torch.float64).view(3, 1, 1)
    return (y - m) / sd


class _Cfg(torch.nn.Module):
    """A model stand-in that carries only a preprocessing config (clip_image_batch reads nothing else)."""

    def __init__(self, **cfg):
        super().__init__()
        self.visual = torch.nn.Module()
        self.visual.preprocess_cfg = cfg
        self.w = torch.nn.Parameter(torch.zeros(1))


CONFIGS = [
    dict(size=224, resize_mode="shortest", interpolation="bicubic"),
    dict(size=(64, 48), resize_mode="shortest", interpolation="bicubic"),
    dict(size=224, resize_mode="squash", interpolation="bilinear"),
    dict(size=96, resize_mode="longest", interpolation="bicubic", fill_color=128),
]


@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c['resize_mode']}-{c['interpolation']}")
def test_float32_within_half_the_bound_of_float64(cfg):
    model = _Cfg(**cfg)
    full = clip_preprocess_cfg(model)
    worst = 0.0
    for x in _images(1):
        got = clip_image_batch([x], model)[0].double()
        ref = _reference(x, full)
        bound = device_difference_bound(tuple(x.shape[-2:]), full)
        err = float((got - ref).abs().max())
        assert err <= bound / 2, (tuple(x.shape), err, bound)
        worst = max(worst, err / bound)
    assert worst > 0  # the comparison is not trivially exact: float32 did round


def test_tiny_clip_batch_matches_reference():
    model = tiny_clip()[0]
    cfg = clip_preprocess_cfg(model)
    xs = _images(2)
    got = clip_image_batch(xs, model).double()
    for i, x in enumerate(xs):
        assert (
            float((got[i] - _reference(x, cfg)).abs().max()) <= device_difference_bound(x.shape[-2:], cfg) / 2
        )


def test_resize_taps_are_the_kernel_support():
    # the antialiased kernel stretched by the scale: bicubic support 4, bilinear 2 (each x scale when down)
    for n_in, n_out in [(512, 224), (1000, 224), (97, 32)]:
        scale = n_in / n_out
        taps, bicubic = resize_taps(n_in, n_out, "bicubic")
        assert abs(taps - 4 * scale) <= 2 and bicubic > 1.0  # negative lobes: the absolute sum exceeds 1
        taps, bilinear = resize_taps(n_in, n_out, "bilinear")
        assert abs(taps - 2 * scale) <= 2 and abs(bilinear - 1.0) < 1e-12  # non-negative weights sum to 1
    assert resize_taps(100, 224)[0] == 4  # upscaling: the plain 4-tap cubic


def test_uint8_moves_as_uint8(monkeypatch):
    """The copy to the device carries the decoded uint8, converted to float after it."""
    seen = []
    real_to = torch.Tensor.to

    def spy(self, *a, **k):
        seen.append(self.dtype)
        return real_to(self, *a, **k)

    monkeypatch.setattr(torch.Tensor, "to", spy)
    out = load_on_device(torch.zeros(2, 3, 4, 4, dtype=torch.uint8), "cpu")
    assert seen[0] == torch.uint8 and all(t.dtype == torch.float32 for t in out)


def test_normalisation_is_made_once_per_device():
    a = normalisation((0.5, 0.5, 0.5), (0.25, 0.25, 0.25), "cpu")
    assert a is normalisation([0.5, 0.5, 0.5], [0.25, 0.25, 0.25], torch.device("cpu"))


def test_dino_preprocessing_matches_written_out():
    from genmetrics.baselines.embedding import IMAGENET_MEAN, IMAGENET_STD, DINOSimilarity
    from genmetrics.data.io.images import ResizePolicy
    from genmetrics.testing import tiny_dino

    model = tiny_dino()
    metric = DINOSimilarity(backbone=model)
    seen = {}
    real = model.forward

    def spy(pixel_values=None, **k):
        seen["x"] = pixel_values
        return real(pixel_values=pixel_values, **k)

    model.forward = spy
    xs = _images(3)[2:]
    metric._embed_raw(xs)
    size = int(model.config.image_size)
    pol = ResizePolicy("shorter_side_center_crop", size)
    ref = torch.stack([pol.apply_one(x.float() / 255.0) for x in xs])
    ref = (ref - torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1)) / torch.tensor(IMAGENET_STD).view(1, 3, 1, 1)
    assert torch.equal(seen["x"], ref)


cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


@cuda
@pytest.mark.parametrize("cfg", CONFIGS, ids=lambda c: f"{c['resize_mode']}-{c['interpolation']}")
def test_cuda_against_cpu_within_bound(cfg):
    cpu_model = _Cfg(**cfg)
    gpu_model = _Cfg(**cfg).cuda()
    full = clip_preprocess_cfg(cpu_model)
    for x in _images(4):
        a = clip_image_batch([x], cpu_model)[0]
        for src in (x, x.cuda(), x.float().div(255.0).cuda()):
            b = clip_image_batch([src], gpu_model)[0]
            assert b.device.type == "cuda"
            err = float((b.cpu().double() - a.double()).abs().max())
            assert err <= device_difference_bound(tuple(x.shape[-2:]), full), (tuple(x.shape), err)


@pytest.mark.parametrize(
    "n_in,n_out,mode",
    [(512, 224, "bicubic"), (97, 32, "bicubic"), (100, 224, "bicubic"), (517, 224, "bilinear")],
)
def test_weight_model_is_torchs(n_in, n_out, mode):
    """The bound's weights (and so their derivative) are the ones torch applies: its float64 impulse response."""
    from genmetrics.backbones.clip_preprocess import resize_weights

    w, _ = resize_weights(n_in, n_out, mode)
    eye = torch.eye(n_in, dtype=torch.float64).view(1, n_in, 1, n_in)
    ref = F.interpolate(eye, size=(1, n_out), mode=mode, antialias=True, align_corners=False)[0, :, 0, :].T
    assert float((w - ref).abs().max()) <= 64 * n_in * torch.finfo(torch.float64).eps


def test_weight_derivative_is_the_centre_shift():
    """``dw`` is d w / d centre: a finite difference of the weights with the centre shifted."""
    from genmetrics.backbones import clip_preprocess as cp

    n_in, n_out = 300, 128
    w, dw = cp.resize_weights(n_in, n_out)
    h = 1e-6
    # shifting every centre by h is shifting the input grid by -h: evaluate the kernel at the shifted points
    support, k, _ = cp._FILTERS["bicubic"]
    scale = n_in / n_out
    for i in (0, 17, 127):
        c = scale * (i + 0.5) + h
        lo, hi = max(int(c - support * scale + 0.5), 0), min(int(c + support * scale + 0.5), n_in)
        kv = torch.tensor(
            [
                k(abs((j - c + 0.5) / scale)) if abs((j - c + 0.5) / scale) < support else 0.0
                for j in range(lo, hi)
            ],
            dtype=torch.float64,
        )
        shifted = kv / kv.sum()
        fd = (shifted - w[i, lo:hi]) / h
        assert float((fd - dw[i, lo:hi]).abs().max()) < 1e-4


# ------------------------------------------------------------------------------------- Qwen processor
def _qwen_reference(x: torch.Tensor, mean, std, ps: int, m: int, tp: int) -> torch.Tensor:
    """Qwen2-VL's patch layout written out: merge blocks row-major, inside each the m x m patches
    row-major, each patch flattened as (channel, temporal copy, row, column)."""
    y = (x - torch.tensor(mean).view(3, 1, 1)) / torch.tensor(std).view(3, 1, 1)
    gh, gw = x.shape[1] // ps, x.shape[2] // ps
    rows = []
    for bh in range(gh // m):
        for bw in range(gw // m):
            for mh in range(m):
                for mw in range(m):
                    r, c = (bh * m + mh) * ps, (bw * m + mw) * ps
                    patch = y[:, r : r + ps, c : c + ps]
                    rows.append(patch.unsqueeze(1).expand(3, tp, ps, ps).reshape(-1))
    return torch.stack(rows)


def _encoder():
    from genmetrics.backbones.qwen_vl import VisionEncoder
    from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor

    return VisionEncoder(tiny_qwen3vl().visual, tiny_qwen3vl_processor().image_processor)


def test_qwen_pixels_are_the_written_out_layout():
    enc = _encoder()
    ip = enc.image_processor
    g = torch.Generator().manual_seed(5)
    images = [torch.rand(3, 64, 96, generator=g), torch.rand(3, 32, 32, generator=g)]
    pix, grid = enc.pixels(images, device="cpu")
    ref = torch.cat(
        [
            _qwen_reference(
                x, ip.image_mean, ip.image_std, enc.patch_size, enc.merge_size, ip.temporal_patch_size
            )
            for x in images
        ]
    )
    assert torch.equal(pix, ref)
    assert grid.tolist() == [[1, 4, 6], [1, 2, 2]] and grid.device.type == "cpu"


@cuda
def test_qwen_pixels_on_cuda_are_bitwise_the_cpus():
    enc = _encoder()
    g = torch.Generator().manual_seed(6)
    images = [torch.rand(3, 64, 96, generator=g), torch.rand(3, 32, 64, generator=g)]
    a, ga = enc.pixels(images)
    b, gb = enc.pixels([x.cuda() for x in images], device="cuda")
    assert b.device.type == "cuda" and gb.device.type == "cpu"
    assert torch.equal(a, b.cpu()) and torch.equal(ga, gb)


def test_qwen_pixels_with_a_processor_that_takes_no_device():
    """transformers releases whose Qwen2VLImageProcessor is numpy-based take no ``device=`` (a TypeError in the
    oldest supported set): such a processor runs on the CPU and its pixel_values are moved after, with the
    same values as the torchvision-based processor's."""
    from genmetrics.backbones.qwen_vl import VisionEncoder
    from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor

    fast = tiny_qwen3vl_processor().image_processor

    class NoDevice:  # what a numpy-based processor accepts: no device keyword
        def __call__(self, *, images, do_resize, do_rescale, return_tensors):
            return fast(
                images=images, do_resize=do_resize, do_rescale=do_rescale, return_tensors=return_tensors
            )

    visual = tiny_qwen3vl().visual
    images = [torch.rand(3, 32, 32), torch.rand(3, 64, 32)]
    want_pv, want_grid = VisionEncoder(visual, fast).pixels(images, device="cpu")
    got_pv, got_grid = VisionEncoder(visual, NoDevice()).pixels(images, device="cpu")
    assert torch.equal(got_pv, want_pv) and torch.equal(got_grid, want_grid)
