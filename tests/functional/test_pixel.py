"""Pixel math (genmetrics.functional.pixel): psnr's one-pass squared errors match an explicit float64 (or exact
integer) computation across block boundaries, the fused range check gives the float range, psnr's closed form
and gradient; SSIM and MS-SSIM on the CPU run in chunks of images sized to the cache, and the values do not
depend on the chunking, bit for bit, for any batch, size, dtype and chunk budget, with gradients flowing
through."""

from __future__ import annotations

import pytest
import torch

from genmetrics.functional import pixel as P
from genmetrics.functional.pixel import ms_ssim, ssim

EPS32 = 1.1920929e-07


def _pair(b: int, h: int, w: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(b, 3, h, w, generator=g)
    p = (t + 0.05 * torch.randn(t.shape, generator=g)).clamp(0, 1)
    return p, t


@pytest.mark.parametrize("block", [1, 7 * 20 * 4, 3 * 16 * 20 * 4, 2 * 3 * 16 * 20 * 4 + 7, 1 << 20])
def test_squared_error_sums_match_float64_across_blocks(monkeypatch, block):
    """Blocks of 1 row, 7 rows (blocks straddle images: 48 rows each), 1 image exactly, 2 images and a bit,
    all 5 images: every block size gives the float64 sums. Bound: each row of W terms is summed in float32 (relative error <= W eps, Higham's gamma_W),
    each difference and square rounds once more (2 eps); rows are added in float64 (negligible)."""
    monkeypatch.setattr(P, "BLOCK_BYTES", block)
    p, t = _pair(5, 16, 20)
    sse, rng = P.squared_error_sums(p, t, with_range=True)
    ref = ((p.double() - t.double()) ** 2).sum((1, 2, 3))
    assert torch.all((sse - ref).abs() <= (20 + 2) * EPS32 * ref)
    lo = min(float(p.min()), float(t.min()))
    hi = max(float(p.max()), float(t.max()))
    assert rng.tolist() == [lo, hi]
    sse_only, none = P.squared_error_sums(p, t)
    assert none is None and torch.equal(sse_only, sse)


def test_range_sees_the_one_value_outside_in_any_block(monkeypatch):
    monkeypatch.setattr(P, "BLOCK_BYTES", 3 * 8 * 8 * 4)  # one image per block
    p, t = _pair(4, 8, 8)
    t[2, 1, 3, 4] = 1.5
    p[3, 0, 0, 0] = -0.25
    _, rng = P.squared_error_sums(p, t, with_range=True)
    assert rng.tolist() == [-0.25, 1.5]


def range_cases(p: torch.Tensor, t: torch.Tensor) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """Pairs whose range a range check must get right (``[3,3,8,8]`` inputs; shared with the native kernel's
    test): all in [0, 1], a negative zero, negatives in two places, +inf and -inf, the smallest value in the
    target only, the largest in the preds only."""
    cases = {"in range": (p, t)}
    z = t.clone()
    z[1, 2, 3, 4] = -0.0
    cases["negative zero"] = (p, z)
    n = p.clone()
    n[2, 2, 7, 7] = -0.5
    n[0, 1, 0, 0] = -0.25  # as integers -0.25 sorts below -0.5: only the float order gives -0.5
    cases["negatives"] = (n, t)
    i = t.clone()
    i[0, 0, 0, 1] = float("inf")
    cases["inf"] = (p, i)
    m = p.clone()
    m[2, 0, 0, 0] = float("-inf")
    cases["-inf"] = (m, t)
    tn = t.clone()
    tn[1, 1, 5, 2] = -0.75
    cases["negative target"] = (p, tn)
    pi = p.clone()
    pi[0, 2, 6, 3] = float("inf")
    cases["inf preds"] = (pi, t)
    return cases


@pytest.mark.parametrize("dtype", [torch.float16, torch.float32, torch.float64])
def test_range_from_bit_patterns_is_the_float_range(monkeypatch, dtype):
    """The range check reads bit patterns as integers of the same width; it must report the float range
    whatever the values: all in [0, 1], a negative zero, negative values in two blocks, +inf, a NaN."""
    monkeypatch.setattr(P, "BLOCK_BYTES", 2 * 8 * torch.finfo(dtype).bits // 8)  # 2 rows per block
    p, t = _pair(3, 8, 8)
    p, t = p.to(dtype), t.to(dtype)

    def float_range(a, b):
        both = torch.cat((a.flatten(), b.flatten())).double()
        return [float(both.min()), float(both.max())] if not both.isnan().any() else None

    for name, (a, b) in range_cases(p, t).items():
        sse, rng = P.squared_error_sums(a, b, with_range=True)
        assert rng.dtype == dtype, name
        assert rng.double().tolist() == float_range(a, b), name
    q = p.clone()
    q[1, 0, 4, 4] = float("nan")
    _, rng = P.squared_error_sums(q, t, with_range=True)
    assert rng.isnan().any()


def test_psnr_closed_form_and_gradient():
    p, t = torch.zeros(2, 3, 8, 8), torch.zeros(2, 3, 8, 8)
    p[0] += 0.1  # MSE 0.01 -> 20 dB
    p[1] += 0.01  # MSE 1e-4 -> 40 dB
    assert P.psnr(p, t).tolist() == pytest.approx([20.0, 40.0], abs=1e-4)
    x = p.clone().requires_grad_(True)
    v = P.psnr(x, t).sum()
    v.backward()
    # d/dx 10 log10(1/mse) = -10/ln10 * 2 (x - t) / (n mse) per pixel; n = 192
    expect = -10 / torch.log(torch.tensor(10.0)) * 2 * 0.1 / (192 * 0.01)
    assert float(x.grad[0, 0, 0, 0]) == pytest.approx(float(expect), rel=1e-4)


def _u8_pair(b: int, h: int, w: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """uint8 images with every difference from -255 to 255 possible (independent values, plus the
    extremes 0 against 255 both ways, where uint8 arithmetic would wrap)."""
    g = torch.Generator().manual_seed(seed)
    p = torch.randint(0, 256, (b, 3, h, w), generator=g, dtype=torch.uint8)
    t = torch.randint(0, 256, (b, 3, h, w), generator=g, dtype=torch.uint8)
    p[0, 0, 0, :2], t[0, 0, 0, :2] = torch.tensor([0, 255]), torch.tensor([255, 0])
    return p, t


@pytest.mark.parametrize("block", [1, 7 * 20 * 4, 2 * 3 * 16 * 20 * 4 + 7, 1 << 20])
def test_uint8_squared_error_sums_are_the_integer_sums(monkeypatch, block):
    """uint8 inputs: each block converted into the float32 buffer, differences exact (not modulo 256).
    Against the exact integer sums: every difference and square is an integer below 2^24 (exact in float32),
    a row of W=20 squares sums to at most 20 * 255^2 < 2^24 (exact); the row norm's square root rounds
    (relative eps/2, doubled by squaring), so the bound is (W + 2) eps relative as for floats."""
    monkeypatch.setattr(P, "BLOCK_BYTES", block)
    p, t = _u8_pair(5, 16, 20)
    exact = ((p.long() - t.long()) ** 2).sum((1, 2, 3)).double()
    sse, rng = P.squared_error_sums(p, t, with_range=True)
    assert sse.dtype == torch.float64
    assert torch.all((sse - exact).abs() <= (20 + 2) * EPS32 * exact)
    assert rng.dtype == torch.uint8
    assert rng.tolist() == [min(int(p.min()), int(t.min())), max(int(p.max()), int(t.max()))]
    _, rng = P.squared_error_sums(p.clamp(10, 200), t.clamp(20, 250), with_range=True)
    assert rng.tolist() == [10, 250]  # the low end from preds, the high end from target
    sse_only, none = P.squared_error_sums(p, t)
    assert none is None and torch.equal(sse_only, sse)
    # the plain expression (a non-contiguous view is not blocked) promotes before subtracting
    pt, tt = p.transpose(2, 3), t.transpose(2, 3)
    plain, _ = P.squared_error_sums(pt, tt)
    assert torch.all((plain - exact).abs() <= (16 + 2) * EPS32 * exact)


@pytest.mark.parametrize("w", [1, 256, 257, 258, 3001])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_uint8_sums_are_exact_integers_at_the_float32_limit(w, layout):
    """The largest squares (255^2) in rows around 2^24 / 255^2 = 258 terms, where float32 row sums stop
    being exact: the sums equal an int64 recomputation on the blocked and the plain path."""
    g = torch.Generator().manual_seed(w)
    p = torch.randint(0, 2, (2, 3, 5, w), generator=g, dtype=torch.uint8) * 255
    t = 255 - p
    if layout == "channels_last":
        p, t = (
            p.contiguous(memory_format=torch.channels_last),
            t.contiguous(memory_format=torch.channels_last),
        )
    exact = (p.long() - t.long()).pow(2).flatten(1).sum(1).double()
    assert torch.equal(P.squared_error_sums(p, t)[0], exact)


# ------------------------------------------------------------------------------ SSIM / MS-SSIM chunks


def _chunk_pair(b, c, h, w, dtype, seed=0):
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
    x, y = _chunk_pair(b, c, h, w, dtype)
    opts = {"sigma": 1.3, "k1": 0.02, "k2": 0.04, "data_range": 1.5}  # every option reaches every chunk
    monkeypatch.setattr(P, "SSIM_CHUNK_BYTES", 1 << 62)  # one chunk: the batch at once
    whole = fn(x, y, **opts)
    assert not torch.equal(whole, fn(x, y))
    alone = torch.cat([fn(x[i : i + 1], y[i : i + 1], **opts) for i in range(b)])
    for budget in (1, 300_000, 1 << 20, 3 << 20):
        monkeypatch.setattr(P, "SSIM_CHUNK_BYTES", budget)
        got = fn(x, y, **opts)
        assert got.dtype == torch.float64 and got.shape == (b,)
        assert torch.equal(got, whole), (budget, (got - whole).abs().max())
    assert torch.equal(alone, whole)


def test_the_default_budget_splits_a_batch_of_small_images(monkeypatch):
    """A 32-image batch of 64x64 RGB is scored in chunks (the speed-up), each a slice of the batch."""
    x, y = _chunk_pair(32, 3, 64, 64, torch.float32)
    seen = []
    real = P._ssim_terms

    def spy(p, *a, **k):
        seen.append(p.shape[0])
        return real(p, *a, **k)

    monkeypatch.setattr(P, "_ssim_terms", spy)
    ssim(x, y)
    per_image = 5 * 3 * 74 * 74 * 4
    assert len(seen) > 1 and sum(seen) == 32 and max(seen) == max(1, P.SSIM_CHUNK_BYTES // per_image)


def test_gradients_flow_through_the_chunks(monkeypatch):
    x, y = _chunk_pair(6, 3, 40, 40, torch.float64)
    x.requires_grad_(True)
    monkeypatch.setattr(P, "SSIM_CHUNK_BYTES", 1)
    (g_chunked,) = torch.autograd.grad(ssim(x, y).sum(), x)
    monkeypatch.setattr(P, "SSIM_CHUNK_BYTES", 1 << 62)
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
        monkeypatch.setattr(P, "SSIM_CHUNK_BYTES", budget)
        with pytest.raises(
            ValueError, match=rf"{fn.__name__}: expected preds and target of one shape \[B,C,H,W\]"
        ):
            fn(x, y)
