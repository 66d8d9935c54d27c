"""psnr / ssim / ms_ssim: float32 compute against explicit float64 computations, options that
change the value, one vectorised validation per batch that still names the bad image."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torchmetrics.functional.image import (
    multiscale_structural_similarity_index_measure,
    peak_signal_noise_ratio,
    structural_similarity_index_measure,
)

import genmetrics as gm
from genmetrics.baselines import pixel as pixel_metrics
from genmetrics.baselines.pixel import PSNR
from genmetrics.errors import InputError
from tests.functional.test_pixel import EPS32, _pair, _u8_pair


def _pairs(n=4, size=48, seed=0, noise=0.08):
    g = torch.Generator().manual_seed(seed)
    ref = torch.rand(n, 3, size, size, generator=g)
    smooth = F.interpolate(
        torch.rand(n, 3, 6, 6, generator=g), size=size, mode="bicubic", align_corners=False
    )
    ref[: n // 2] = smooth[: n // 2].clamp(0, 1)  # half natural-ish (smooth), half noise
    cand = (ref + noise * torch.randn(ref.shape, generator=g)).clamp(0, 1)
    return ref, cand


def _scores(name, ref, cand, **opts):
    m = gm.create_metric(name, **opts)
    m.update(reference=ref, candidates=cand)
    return m.per_sample()["scores"]


def _naive_ssim64(pred, target, k, sigma):
    """A second SSIM: full 2-D k x k Gaussian window, float64, reflect padding, whole-image mean."""
    pred, target = pred.double(), target.double()
    x = torch.arange(k, dtype=torch.float64) - (k - 1) / 2
    g = torch.exp(-(x**2) / (2 * sigma**2))
    g = g / g.sum()
    w = torch.outer(g, g).expand(3, 1, k, k)
    p = (k - 1) // 2

    def blur(a):
        return F.conv2d(F.pad(a, (p, p, p, p), mode="reflect"), w, groups=3)

    mu_x, mu_y = blur(pred), blur(target)
    sxx = (blur(pred * pred) - mu_x**2).clamp(min=0)
    syy = (blur(target * target) - mu_y**2).clamp(min=0)
    sxy = blur(pred * target) - mu_x * mu_y
    c1, c2 = 0.01**2, 0.03**2
    s = ((2 * mu_x * mu_y + c1) * (2 * sxy + c2)) / ((mu_x**2 + mu_y**2 + c1) * (sxx + syy + c2))
    return s.flatten(1).mean(1)


def test_float32_within_documented_tolerance_of_float64_reference():
    ref, cand = _pairs(4, 48)
    psnr64 = peak_signal_noise_ratio(
        cand.double(), ref.double(), data_range=1.0, reduction="none", dim=(1, 2, 3)
    )
    assert (_scores("psnr", ref, cand) - psnr64).abs().max() < 1e-4
    ssim64 = structural_similarity_index_measure(
        cand.double(), ref.double(), data_range=1.0, reduction="none"
    )
    assert (_scores("ssim", ref, cand) - ssim64).abs().max() < 1e-5
    assert (_scores("ssim", ref, cand) - _naive_ssim64(cand, ref, 11, 1.5)).abs().max() < 1e-5
    big_ref, big_cand = _pairs(2, 176, seed=1)
    ms64 = multiscale_structural_similarity_index_measure(
        big_cand.double(), big_ref.double(), data_range=1.0, reduction="none", normalize="relu"
    )
    assert (_scores("ms_ssim", big_ref, big_cand) - ms64).abs().max() < 1e-5


def test_precision_float64_matches_the_float64_reference_closely():
    ref, cand = _pairs(3, 40)
    ssim64 = structural_similarity_index_measure(
        cand.double(), ref.double(), data_range=1.0, reduction="none"
    )
    assert (_scores("ssim", ref, cand, precision="float64") - ssim64).abs().max() < 1e-12
    ms = multiscale_structural_similarity_index_measure(
        cand.double(),
        ref.double(),
        data_range=1.0,
        reduction="none",
        normalize="relu",
        betas=(0.5, 0.5),
        sigma=(6 / 7, 6 / 7),
    )
    assert (
        _scores("ms_ssim", ref, cand, precision="float64", kernel_size=7, betas=(0.5, 0.5)) - ms
    ).abs().max() < 1e-12
    # "auto" keeps float64 inputs in float64
    assert (_scores("ssim", ref.double(), cand.double()) - ssim64).abs().max() < 1e-12
    f32, f64 = (
        _scores("ssim", ref, cand, precision="float32"),
        _scores("ssim", ref, cand, precision="float64"),
    )
    assert 0 < (f32 - f64).abs().max() < 1e-5  # the option changes the computation, not the meaning


def test_kernel_size_and_sigma_take_effect_and_match_a_naive_window():
    ref, cand = _pairs(3, 40)
    for k, sigma in ((7, 1.0), (5, 1.5), (11, 1.5), (11, 2.5)):
        ours = _scores("ssim", ref, cand, kernel_size=k, sigma=sigma)
        assert (ours - _naive_ssim64(cand, ref, k, sigma)).abs().max() < 1e-5
    values = {
        (k, s): float(_scores("ssim", ref, cand, kernel_size=k, sigma=s).mean())
        for k, s in ((7, 1.5), (11, 1.5), (11, 0.8))
    }
    assert len(set(values.values())) == 3
    with pytest.raises(InputError, match="odd"):
        gm.create_metric("ssim", kernel_size=6)


def test_ms_ssim_options_change_the_value():
    ref, cand = _pairs(2, 176, seed=2)
    base = _scores("ms_ssim", ref, cand)
    for opts in ({"kernel_size": 7}, {"sigma": 1.0}, {"betas": (0.0448, 0.2856, 0.3001)}):
        assert (_scores("ms_ssim", ref, cand, **opts) - base).abs().max() > 1e-4, opts


def test_ms_ssim_betas_as_quoted_text_names_the_unquoted_spelling():
    from genmetrics.cli.common import parse_options

    given = parse_options(["betas='[0.5,0.5]'"])["betas"]  # quotes make text, as for resize='to_first'
    with pytest.raises(
        InputError, match=r"got '\[0\.5,0\.5\]'; a list in quotes is text: .*betas=\[0\.5,0\.5\]"
    ):
        gm.create_metric("ms_ssim", betas=given)
    assert gm.create_metric("ms_ssim", **parse_options(["betas=[0.5,0.5]"])).betas == (0.5, 0.5)
    with pytest.raises(InputError) as e:  # other text: no such hint
        gm.create_metric("ms_ssim", betas="many")
    assert "in quotes" not in str(e.value)


def test_psnr_options_change_the_value():
    ref, cand = _pairs(3, 32)
    assert float(_scores("psnr", ref, ref, max_db=55.0).max()) == 55.0
    assert float(_scores("psnr", ref, ref).max()) == 100.0
    by_hand = 10 * torch.log10(1 / ((ref.double() - cand.double()) ** 2).flatten(1).mean(1))
    assert (_scores("psnr", ref * 255, cand * 255, data_range=255.0) - by_hand).abs().max() < 1e-4


def test_results_do_not_depend_on_input_form_or_batch_size():
    ref, cand = _pairs(5, 32)
    base = _scores("ssim", ref, cand, batch_size=32)
    assert torch.equal(_scores("ssim", ref, cand, batch_size=2), base)
    assert torch.equal(_scores("ssim", list(ref), list(cand)), base)
    u8r, u8c = (ref * 255).round().to(torch.uint8), (cand * 255).round().to(torch.uint8)
    from_u8 = _scores("ssim", u8r, u8c)
    assert torch.allclose(from_u8, _scores("ssim", u8r.float() / 255, u8c.float() / 255), atol=0, rtol=0)
    # mixed forms (a PIL image among tensors) take the one-by-one path and agree
    from genmetrics.data.io.images import to_pil

    mixed = [to_pil(u8c[0])] + list(u8c[1:])
    assert torch.allclose(_scores("ssim", u8r, mixed), from_u8, atol=1e-12)
    # data_range=255 scales a copy, never the caller's tensors
    r255 = ref * 255
    keep = r255.clone()
    _scores("psnr", r255, cand * 255, data_range=255.0)
    assert torch.equal(r255, keep)


@pytest.mark.parametrize(
    "bad,match",
    [
        (float("nan"), "candidates\\[3\\]: tensor contains NaN"),
        (float("inf"), "candidates\\[3\\]: tensor contains NaN"),
        (1.5, "candidates\\[3\\]: float values in"),
    ],
)
def test_one_bad_image_in_a_batch_is_named(bad, match):
    ref, cand = _pairs(6, 16)
    cand = cand.clone()
    cand[3, 1, 2, 2] = bad
    with pytest.raises(InputError, match=match):
        _scores("psnr", ref, cand)


def test_size_mismatch_is_named_and_to_first_resizes():
    ref, _ = _pairs(2, 32)
    cand = torch.rand(2, 3, 24, 24)
    with pytest.raises(InputError, match="candidates\\[0\\]: size"):
        _scores("psnr", ref, cand)
    v = _scores("psnr", ref, cand, resize="to_first")
    assert v.shape == (2,) and torch.isfinite(v).all()


@pytest.mark.parametrize("name", ["ssim", "ms_ssim"])
def test_windowed_metrics_work_in_bounded_chunks_with_the_same_scores(name, monkeypatch):
    """SSIM / MS-SSIM hold ~10 input-sized maps per call: a batch is split so that no call sees more than
    WINDOWED_CHUNK_ELEMENTS input elements, and the scores equal one call over the batch."""
    import genmetrics as gm
    from genmetrics.baselines import pixel
    from genmetrics.functional import pixel as P

    g = torch.Generator().manual_seed(0)
    ref = torch.rand(7, 3, 64, 64, generator=g)
    cand = (ref + 0.1 * torch.rand(7, 3, 64, 64, generator=g)).clamp(0, 1)
    metric = gm.create_metric(name, **({"kernel_size": 3} if name == "ms_ssim" else {}))
    whole = metric.score(ref, cand).clone()
    seen = []
    real = getattr(P, name)

    def spy(p, t, **kw):
        seen.append(p.numel())
        return real(p, t, **kw)

    monkeypatch.setattr(P, name, spy)
    monkeypatch.setattr(pixel, "WINDOWED_CHUNK_ELEMENTS", 2 * 3 * 64 * 64)  # two images per call
    chunked = metric.score(ref, cand)
    assert seen == [2 * 3 * 64 * 64] * 3 + [3 * 64 * 64]
    # per-image statistics: a row's value does not depend on the rows around it (same kernels, same order
    # of additions within an image), so the chunked scores equal the whole-batch ones to float32 rounding
    # of one image's mean (64*64*3 terms): bound 4 eps * sqrt(12288) ~ 5e-5, far above the 0 measured
    torch.testing.assert_close(chunked, whole, rtol=0, atol=5e-5)


@pytest.mark.parametrize("name", ["psnr", "ssim"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_batch_tensors_score_as_their_images_do_in_every_slicing(name, dtype):
    """Batch tensors go through the metric as row sequences (no per-image views): the same per-image
    scores as the images given as a list, with batch sizes that cut the batch unevenly, ids that drop
    repeats across updates, and a batch tensor that is itself a strided view."""
    g = torch.Generator().manual_seed(11)
    ref = torch.rand(7, 3, 16, 16, generator=g)
    cand = (ref + 0.1 * torch.randn(ref.shape, generator=g)).clamp(0, 1)
    if dtype == torch.uint8:
        ref, cand = (ref * 255).round().to(dtype), (cand * 255).round().to(dtype)
    expected = gm.create_metric(name, batch_size=7)
    expected.update(reference=list(ref), candidates=list(cand))
    want = expected.per_sample()["scores"]
    for bs in (1, 3, 7):
        m = gm.create_metric(name, batch_size=bs)
        m.update(reference=ref, candidates=cand, ids=list(range(7)))
        m.update(reference=ref[2:5], candidates=cand[2:5], ids=[2, 3, 4])  # repeats: dropped with a warning
        assert torch.equal(m.per_sample()["scores"], want), bs
    wide_r, wide_c = torch.cat([ref, ref], 1), torch.cat([cand, cand], 1)  # [7,6,H,W]: rows are strided views
    m = gm.create_metric(name, batch_size=3)
    m.update(reference=wide_r[:, 3:], candidates=wide_c[:, 3:])
    assert torch.equal(m.per_sample()["scores"], want)
    m = gm.create_metric(name, batch_size=3)
    m.update(reference=ref[1::2], candidates=cand[1::2])  # every other image
    assert torch.equal(m.per_sample()["scores"], want[1::2])


# ------------------------------------------------------------------------------ PSNR's one-pass path
def _psnr_scores(metric: PSNR, ref: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
    metric.update(reference=ref, candidates=cand)
    return metric.per_sample()["scores"]


def test_metric_fused_path_equals_the_general_path():
    """The one-pass path (float32 tensors in range) against precision='float64' (the general path: stack,
    validate, convert) and the per-image float64 formula."""
    p, t = _pair(7, 24, 24, seed=3)
    fast = _psnr_scores(PSNR(batch_size=4), t, p)
    slow = _psnr_scores(PSNR(batch_size=4, precision="float64"), t, p)
    mse = ((p.double() - t.double()) ** 2).mean((1, 2, 3))
    exact = 10 * torch.log10(1 / mse)
    # relative MSE error (24 + 2) eps -> 10/ln10 * 26 eps dB
    tol = 10 / 2.302585 * 26 * EPS32
    assert torch.allclose(fast.double(), exact, atol=tol, rtol=0)
    assert torch.allclose(slow.double(), exact, atol=1e-9, rtol=0)


def test_metric_data_range_and_tolerated_overshoot_fall_back_correctly():
    p, t = _pair(3, 16, 16, seed=1)
    base = _psnr_scores(PSNR(), t, p)
    scaled = _psnr_scores(PSNR(data_range=255.0), t * 255, p * 255)
    assert torch.allclose(scaled, base, atol=1e-4)
    over = p.clone()
    over[0, 0, 0, 0] = 1.0005  # inside the 1e-3 tolerance: clamped to 1, as the general path does
    clamped = p.clone()
    clamped[0, 0, 0, 0] = 1.0
    assert torch.equal(_psnr_scores(PSNR(), t, over), _psnr_scores(PSNR(), t, clamped))
    bad = p.clone()
    bad[2, 1, 2, 3] = float("nan")
    with pytest.raises(InputError, match=r"candidates\[2\]"):
        PSNR().score(t, bad)


def test_uint8_psnr_takes_the_one_pass_path_and_is_batch_invariant(monkeypatch):
    """PSNR on uint8 batches: the squared errors of the raw 8-bit values in one pass (no float copy of
    the batch), 10 log10(255^2 / MSE); the same scores for any batch size (rows are summed per image in
    the same order whatever the block); precision='float64' takes the general path and agrees."""
    p, t = _u8_pair(6, 24, 24, seed=5)
    calls: list[torch.dtype] = []
    real = pixel_metrics.squared_error_sums_by  # the sums psnr calls (the native kernel or the torch path)

    def spy(a, b, **kw):
        calls.append(a.dtype)
        return real(a, b, **kw)

    monkeypatch.setattr(pixel_metrics, "squared_error_sums_by", spy)
    fast = _psnr_scores(PSNR(batch_size=4), t, p)
    assert calls and set(calls) == {torch.uint8}  # the raw uint8 batches, never a float copy
    mse = ((p.double() - t.double()) ** 2).mean((1, 2, 3))
    exact = 10 * torch.log10(255.0**2 / mse)
    # relative MSE error (24 + 2) eps -> 10/ln10 * 26 eps dB
    assert torch.allclose(fast, exact, atol=10 / 2.302585 * 26 * EPS32, rtol=0)
    assert torch.equal(_psnr_scores(PSNR(batch_size=1), t, p), fast)
    assert torch.equal(_psnr_scores(PSNR(batch_size=32), t, p), fast)
    calls.clear()
    slow = _psnr_scores(PSNR(batch_size=4, precision="float64"), t, p)
    assert torch.uint8 not in calls  # general path: converted to float64 [0,1] first
    assert torch.allclose(slow, exact, atol=1e-9, rtol=0)
    # identical images: max_db, and the one-pass uint8 path agrees with the float path on u8 / 255
    assert _psnr_scores(PSNR(), t, t).tolist() == [100.0] * 6
    as_float = _psnr_scores(PSNR(), t.float() / 255, p.float() / 255)
    # the float path rounds each u/255 (eps/2 relative) before subtracting: a difference of 1/255 between
    # values near 1 carries up to 2 * 255 eps relative error, so its MSE up to 4 * 255 eps (+ rows' 26 eps)
    assert torch.allclose(as_float, fast, atol=10 / 2.302585 * (4 * 255 + 26) * EPS32, rtol=0)


@pytest.mark.parametrize("side, fix", [(8, "kernel_size=7"), (9, "kernel_size=9"), (2, "use larger images")])
def test_ssim_on_images_smaller_than_the_window_names_a_window_that_fits(side, fix):
    x = torch.rand(1, 3, side, side, generator=torch.Generator().manual_seed(0))
    with pytest.raises(InputError, match=f"smaller than the 11px window; .*{fix}") as e:
        gm.create_metric("ssim").score(x, x)
    if side > 2:  # the value named is accepted and scores these images
        k = int(fix.split("=")[1])
        assert float(gm.create_metric("ssim", kernel_size=k).score(x, x)) == pytest.approx(1.0, abs=1e-6)
    assert "kernel_size=..." not in str(e.value)
