"""psnr's one-pass squared errors: parity with an explicit float64 computation across block
boundaries, the fused range check, the fused path of the PSNR metric against its general path, gradients."""

from __future__ import annotations

import pytest
import torch

from genmetrics.baselines import pixel as pixel_metrics
from genmetrics.baselines.pixel import PSNR
from genmetrics.errors import InputError
from genmetrics.functional import pixel as P

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


def _scores(metric: PSNR, ref: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
    metric.update(reference=ref, candidates=cand)
    return metric.per_sample()["scores"]


def test_metric_fused_path_equals_the_general_path():
    """The one-pass path (float32 tensors in range) against precision='float64' (the general path: stack,
    validate, convert) and the per-image float64 formula."""
    p, t = _pair(7, 24, 24, seed=3)
    fast = _scores(PSNR(batch_size=4), t, p)
    slow = _scores(PSNR(batch_size=4, precision="float64"), t, p)
    mse = ((p.double() - t.double()) ** 2).mean((1, 2, 3))
    exact = 10 * torch.log10(1 / mse)
    # relative MSE error (24 + 2) eps -> 10/ln10 * 26 eps dB
    tol = 10 / 2.302585 * 26 * EPS32
    assert torch.allclose(fast.double(), exact, atol=tol, rtol=0)
    assert torch.allclose(slow.double(), exact, atol=1e-9, rtol=0)


def test_metric_data_range_and_tolerated_overshoot_fall_back_correctly():
    p, t = _pair(3, 16, 16, seed=1)
    base = _scores(PSNR(), t, p)
    scaled = _scores(PSNR(data_range=255.0), t * 255, p * 255)
    assert torch.allclose(scaled, base, atol=1e-4)
    over = p.clone()
    over[0, 0, 0, 0] = 1.0005  # inside the 1e-3 tolerance: clamped to 1, as the general path does
    clamped = p.clone()
    clamped[0, 0, 0, 0] = 1.0
    assert torch.equal(_scores(PSNR(), t, over), _scores(PSNR(), t, clamped))
    bad = p.clone()
    bad[2, 1, 2, 3] = float("nan")
    with pytest.raises(InputError, match=r"candidates\[2\]"):
        PSNR().score(t, bad)


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
    fast = _scores(PSNR(batch_size=4), t, p)
    assert calls and set(calls) == {torch.uint8}  # the raw uint8 batches, never a float copy
    mse = ((p.double() - t.double()) ** 2).mean((1, 2, 3))
    exact = 10 * torch.log10(255.0**2 / mse)
    # relative MSE error (24 + 2) eps -> 10/ln10 * 26 eps dB
    assert torch.allclose(fast, exact, atol=10 / 2.302585 * 26 * EPS32, rtol=0)
    assert torch.equal(_scores(PSNR(batch_size=1), t, p), fast)
    assert torch.equal(_scores(PSNR(batch_size=32), t, p), fast)
    calls.clear()
    slow = _scores(PSNR(batch_size=4, precision="float64"), t, p)
    assert torch.uint8 not in calls  # general path: converted to float64 [0,1] first
    assert torch.allclose(slow, exact, atol=1e-9, rtol=0)
    # identical images: max_db, and the one-pass uint8 path agrees with the float path on u8 / 255
    assert _scores(PSNR(), t, t).tolist() == [100.0] * 6
    as_float = _scores(PSNR(), t.float() / 255, p.float() / 255)
    # the float path rounds each u/255 (eps/2 relative) before subtracting: a difference of 1/255 between
    # values near 1 carries up to 2 * 255 eps relative error, so its MSE up to 4 * 255 eps (+ rows' 26 eps)
    assert torch.allclose(as_float, fast, atol=10 / 2.302585 * (4 * 255 + 26) * EPS32, rtol=0)


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
