"""Bootstrap intervals come from scipy.stats.bootstrap (BCa by default): parity with scipy called directly,
the weighted two-sample resampling equals resampling the values, and coverage on simulated cases with a
known true value (a mean; SaD between Gaussians with a closed-form KL)."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from scipy.stats import bootstrap

from genmetrics.errors import InputError
from genmetrics.functional import divergence as D
from genmetrics.functional.bootstrap import (
    bootstrap_ci,
    bootstrap_interval,
    gaussian_kl_interval,
    paired_bootstrap,
    two_sample_ci,
)
from tests.reliability.hostile import Cases


@pytest.mark.parametrize("method", ["BCa", "percentile", "basic"])
def test_one_sample_matches_scipy(method):
    x = np.random.default_rng(0).exponential(size=37)
    est, lo, hi = bootstrap_ci(x, n_boot=800, alpha=0.1, seed=4, method=method)
    ref = bootstrap(
        (x,), np.mean, n_resamples=800, confidence_level=0.9, method=method, rng=np.random.default_rng(4)
    )
    assert est == pytest.approx(x.mean(), rel=1e-12)
    assert (lo, hi) == pytest.approx(tuple(ref.confidence_interval), rel=1e-12)
    # a non-vectorised statistic goes the same way
    est, lo, hi = bootstrap_ci(x, n_boot=300, seed=2, stat=np.median, method=method)
    ref = bootstrap(
        (x,), np.median, n_resamples=300, method=method, rng=np.random.default_rng(2), vectorized=False
    )
    assert est == np.median(x) and (lo, hi) == pytest.approx(tuple(ref.confidence_interval), rel=1e-12)


def test_default_is_studentized_for_the_mean_and_bca_otherwise():
    x = np.random.default_rng(3).exponential(size=25)
    assert bootstrap_ci(x, n_boot=500, seed=1) == bootstrap_ci(x, n_boot=500, seed=1, method="studentized")
    assert bootstrap_ci(x, n_boot=500, seed=1) != bootstrap_ci(x, n_boot=500, seed=1, method="BCa")
    assert bootstrap_interval(x, n_boot=300, stat=np.median).method == "BCa"
    assert paired_bootstrap(x, x[::-1], n_boot=300)["method"] == "studentized"
    # binary data with a rare class: some resample has no spread (t infinite), so BCa, and it says so
    assert bootstrap_interval([1.0] * 9 + [0.0], n_boot=500).method == "BCa"
    with pytest.raises(ValueError, match="'studentized' is the bootstrap-t of the mean"):
        bootstrap_interval(x, stat=np.median, method="studentized")


def test_studentized_is_the_bootstrap_t_of_scipys_resamples():
    """Parity with an explicit bootstrap-t: the resampled means and sds from two scipy calls with the same
    seed (the same draws), t* = (mean* - mean) / (sd* / sqrt(n)), interval mean - q(1-a/2) se,
    mean - q(a/2) se. Right-skewed data: the interval reaches further above the mean than below."""
    x = np.random.default_rng(11).exponential(size=30)
    n, seed, alpha = x.size, 5, 0.1

    def dist(f):
        r = bootstrap((x,), f, n_resamples=700, method="percentile", rng=np.random.default_rng(seed))
        return r.bootstrap_distribution

    means, sds = dist(np.mean), dist(lambda s, axis=-1: np.std(s, axis=axis, ddof=1))
    se = x.std(ddof=1) / np.sqrt(n)
    q_lo, q_hi = np.quantile((means - x.mean()) / (sds / np.sqrt(n)), [alpha / 2, 1 - alpha / 2])
    iv = bootstrap_interval(x, n_boot=700, alpha=alpha, seed=seed)
    assert iv.method == "studentized"
    # the same float64 operations in another order: a few ulps of the values (|x| < 10, n = 30)
    assert iv.estimate == pytest.approx(x.mean(), rel=1e-12)
    assert (iv.low, iv.high) == pytest.approx((x.mean() - q_hi * se, x.mean() - q_lo * se), rel=1e-9)
    np.testing.assert_allclose(iv.distribution, means, rtol=1e-12)
    assert iv.high - iv.estimate > iv.estimate - iv.low


def _kl_fitted(a, b, axis=-1):
    """KL(N(b) || N(a)) of Gaussians fitted to two 1-D samples (what SaD computes per attribute)."""
    mr, vr = a.mean(axis), a.var(axis, ddof=1) + 1e-6
    mg, vg = b.mean(axis), b.var(axis, ddof=1) + 1e-6
    return 0.5 * (np.log(vr / vg) + (vg + (mg - mr) ** 2) / vr - 1)


@pytest.mark.parametrize("method", ["BCa", "percentile"])
def test_two_sample_weights_equal_resampling_the_values(method):
    rng = np.random.default_rng(5)
    x, y = rng.normal(0, 1, 50), rng.normal(0.3, 1.2, 41)

    def stat(wx, wy):  # the same statistic from row weights
        out = []
        for w, d in ((wx, x), (wy, y)):
            k = w.sum(1)
            mu = w @ d / k
            out.append((mu, (w @ (d * d) - k * mu * mu) / (k - 1) + 1e-6))
        (mr, vr), (mg, vg) = out
        return 0.5 * (np.log(vr / vg) + (vg + (mg - mr) ** 2) / vr - 1)

    iv = two_sample_ci(
        x, y, stat, n_boot=700, alpha=0.1, seed=1, method=method, budget=3000
    )  # several batches
    ref = bootstrap(
        (x, y),
        _kl_fitted,
        n_resamples=700,
        confidence_level=0.9,
        method=method,
        rng=np.random.default_rng(1),
        batch=3000 // 50,
    )
    assert iv.estimate == pytest.approx(_kl_fitted(x, y), rel=1e-10)
    assert (iv.low, iv.high) == pytest.approx(tuple(ref.confidence_interval), rel=1e-9)
    assert iv.method == method and iv.distribution.shape == (700,)


def test_report_bootstrap_estimates_are_sad_and_pad():
    from genmetrics.raclip.report import bootstrap_means

    g = torch.Generator().manual_seed(0)
    real = torch.randn(40, 4, generator=g, dtype=torch.float64) + 5
    gen = torch.randn(30, 4, generator=g, dtype=torch.float64) * 1.3 + 5.2
    for direction in ("gen||real", "real||gen"):
        out = bootstrap_means(
            real, gen, n_boot=200, seed=1, direction=direction, pad_budget=float("inf"), method="BCa"
        )
        sad = float(D.sad(real, gen, direction=direction).mean())
        pad = float(D.pad(real, gen, direction=direction).mean())
        assert out["sad_estimate"] == pytest.approx(sad, rel=1e-10) and out["pad_estimate"] == pytest.approx(
            pad, rel=1e-10
        )
        assert out["sad"][0] < sad < out["sad"][1] and out["pad"][0] < pad < out["pad"][1]
        assert out["sad_method"] == out["pad_method"] == "BCa"
    out = bootstrap_means(real, gen, n_boot=200, pad_budget=0.0, bca_budget=0.0, method="BCa")
    assert out["pad"] is None and out["sad_method"] == "percentile"  # over budget: no jackknife
    # two rows in a set: a leave-one-out sample has no variance, so no BCa; the percentile interval is finite
    out = bootstrap_means(real[:2], gen, n_boot=100, pad_budget=float("inf"), method="BCa")
    assert out["sad_method"] == out["pad_method"] == "percentile"
    assert all(np.isfinite(out["sad"])) and all(np.isfinite(out["pad"]))


def _sad_coverage(method: str, reps: int, n: int, c: int, level: float) -> float:
    from genmetrics.raclip.report import bootstrap_means

    (mr, sr), (mg, sg) = (0.0, 1.0), (0.3, 1.2)
    true = 0.5 * (np.log(sr**2 / sg**2) + (sg**2 + (mg - mr) ** 2) / sr**2 - 1)  # KL(gen || real), nats
    rng = np.random.default_rng(123)
    hits = 0
    for r in range(reps):
        real = torch.from_numpy(rng.normal(mr, sr, (n, c)))
        gen = torch.from_numpy(rng.normal(mg, sg, (n, c)))
        lo, hi = bootstrap_means(
            real, gen, n_boot=1000, seed=r, alpha=1 - level, pad_budget=0.0, method=method
        )["sad"]
        hits += lo <= true <= hi
    return hits / reps


@pytest.mark.slow
def test_sad_interval_coverage_on_gaussians_with_known_kl(record_property):
    """SaD over 10 attributes of 100 images per set, nominal 90%: the plug-in KL is biased upward and
    the percentile interval (the old hand-written one) misses the truth most of the time; BCa corrects
    much of it. (Measured at 300 repetitions by benchmarks/bootstrap_coverage.py: BCa 0.80, percentile 0.26.)"""
    bca = _sad_coverage("BCa", 120, 100, 10, 0.9)
    pct = _sad_coverage("percentile", 120, 100, 10, 0.9)
    record_property("coverage", {"BCa": bca, "percentile": pct})
    print(f"SaD coverage at nominal 0.90 (120 reps, n=100, C=10): BCa {bca:.3f}, percentile {pct:.3f}")
    assert bca >= 0.70 and pct <= 0.5 and bca > pct + 0.3


def test_mean_interval_coverage_on_a_skewed_sample():
    """Mean of 40 draws of Exp(1) (true mean 1), nominal 90%: the default (studentized) interval covers
    close to 90% (300 data sets: binomial sd 1.7 points; the bound is 3 sd)."""
    rng = np.random.default_rng(7)
    hits = 0
    reps = 300
    for r in range(reps):
        _, lo, hi = bootstrap_ci(rng.exponential(size=40), n_boot=999, alpha=0.1, seed=r)
        hits += lo <= 1.0 <= hi
    assert abs(hits / reps - 0.9) <= 0.05, hits / reps


def test_paired_bootstrap_p_value_and_degenerate_cases():
    a = np.random.default_rng(1).normal(size=60)
    b = a - 0.5 + np.random.default_rng(2).normal(scale=0.3, size=60)
    out = paired_bootstrap(a, b, n_boot=2000, seed=3)
    iv = bootstrap_interval(a - b, n_boot=2000, seed=3)
    assert out["diff"] == pytest.approx((a - b).mean()) and (out["low"], out["high"]) == (iv.low, iv.high)
    assert out["p_value"] == 2 * min((iv.distribution <= 0).mean(), (iv.distribution >= 0).mean())
    assert out["low"] > 0 and out["p_value"] < 0.01
    same = paired_bootstrap(a, a, n_boot=100)
    assert (same["diff"], same["low"], same["high"]) == (0.0, 0.0, 0.0) and same["p_value"] == 1.0
    assert bootstrap_ci([2.5], n_boot=10) == (2.5, 2.5, 2.5)


@pytest.mark.parametrize(
    "kw,match",
    [
        ({"n_boot": 0}, "option n_boot: expected an integer in \\[1"),
        ({"n_boot": 1e8}, "option n_boot"),
        ({"method": "bca"}, "option method: expected one of 'auto', 'studentized', 'BCa'"),
        ({"alpha": 1.5}, "option alpha"),
    ],
)
def test_bad_options(kw, match):
    with pytest.raises(ValueError, match=match):
        bootstrap_ci([1.0, 2.0, 3.0], **kw)


def test_bad_values():
    with pytest.raises(ValueError, match="non-empty 1-D"):
        bootstrap_ci([], n_boot=10)
    with pytest.raises(ValueError, match="pair up one to one, got 3 and 2"):
        paired_bootstrap([1, 2, 3], [1, 2])


# ------------------------------------------------------------------ bias-corrected SaD / PaD intervals
@pytest.mark.parametrize("direction", ["gen||real", "real||gen"])
def test_kl_interval_plugin_is_the_metric_and_estimate_is_inside(direction):
    """``plugin`` (the path's end, t = 1) equals SaD / PaD of genmetrics.functional.divergence; the
    bias-corrected estimate lies inside the interval and below the upward-biased plug-in."""
    rng = np.random.default_rng(4)
    real = rng.normal(size=(80, 4))
    gen = rng.normal(0.4, 1.3, size=(70, 4)) + 0.3 * rng.normal(size=(70, 1))  # correlated attributes
    for pairs, fn in ((False, D.sad), (True, D.pad)):
        iv = gaussian_kl_interval(real, gen, pairs=pairs, direction=direction, n_boot=300, seed=2)
        ref = float(fn(torch.from_numpy(real), torch.from_numpy(gen), direction=direction).mean())
        assert iv.plugin == pytest.approx(
            ref, rel=1e-9
        )  # float64 throughout; 1e-9 leaves room for BLAS order
        assert iv.method == "inversion" and 0.0 < iv.low <= iv.estimate <= iv.high
        assert iv.estimate < iv.plugin and iv.distribution.shape == (300,)


def test_kl_interval_same_distribution_starts_at_zero():
    rng = np.random.default_rng(0)
    real, gen = rng.normal(size=(100, 5)), rng.normal(size=(100, 5))
    iv = gaussian_kl_interval(real, gen, n_boot=400)
    # a plug-in of two samples of one distribution is > 0, the old percentile / BCa intervals exclude 0
    assert iv.plugin > 0 and iv.low == 0.0 and iv.low <= iv.estimate <= iv.high
    bca = two_sample_ci(real, gen, lambda wx, wy: _kl_weighted(wx, wy, real, gen), n_boot=400, seed=0)
    assert bca.low > 0.0
    same = gaussian_kl_interval(real, real, n_boot=50)  # identical fits: nothing to resample away
    assert (same.estimate, same.low, same.high) == (0.0, 0.0, 0.0)


def _kl_weighted(wx, wy, x, y):
    out = []
    for w, d in ((wx, x), (wy, y)):
        k = w.sum(1)[:, None]
        mu = w @ d / k
        out.append((mu, (w @ (d * d) - k * mu * mu) / (k - 1) + 1e-6))
    (mr, vr), (mg, vg) = out
    return (0.5 * (np.log(vr / vg) + (vg + (mg - mr) ** 2) / vr - 1)).mean(-1)


def _kl_coverage(case: str, reps: int, n: int, pairs: bool = False, method: str = "inversion") -> tuple:
    """Share of ``reps`` data sets whose 90% interval holds the true mean SaD (PaD), and whose estimate is
    inside its interval: real N(0, I_4) (PaD: unit variances, correlation 0.5), generated the same
    (``same``: truth 0) or means 0.3 and sd 1.2 (``shifted``: the closed-form Gaussian KL)."""
    from genmetrics.raclip.report import bootstrap_means

    c = 4
    cov_r = np.full((c, c), 0.5 if pairs else 0.0) + (0.5 if pairs else 1.0) * np.eye(c)
    mu_g, sd_g = (0.0, 1.0) if case == "same" else (0.3, 1.2)
    cov_g = sd_g**2 * cov_r
    mr, mg = torch.zeros(c, dtype=torch.float64), torch.full((c,), mu_g, dtype=torch.float64)
    if pairs:  # bivariate KL of every attribute pair, from divergence.gaussian_kl_2d
        iu, ju = np.triu_indices(c, 1)

        def two(mu, cov):
            m = torch.stack([mu[iu], mu[ju]], -1)
            s = torch.from_numpy(
                np.array([[[cov[i, i], cov[i, j]], [cov[j, i], cov[j, j]]] for i, j in zip(iu, ju)])
            )
            return m, s

        truth = float(D.gaussian_kl_2d(*two(mg, cov_g), *two(mr, cov_r)).mean())
    else:
        truth = float(D.gaussian_kl(mu_g, sd_g**2, 0.0, 1.0))
    rng = np.random.default_rng(11)
    hits = inside = 0
    key = "pad" if pairs else "sad"
    for r in range(reps):
        real = torch.from_numpy(rng.multivariate_normal(np.zeros(c), cov_r, n))
        gen = torch.from_numpy(rng.multivariate_normal(mg.numpy(), cov_g, n))
        b = bootstrap_means(
            real, gen, n_boot=200, seed=r, alpha=0.1, method=method, pad_budget=1e12 if pairs else 0
        )
        lo, hi = b[key]
        hits += lo <= truth <= hi
        inside += lo <= b[f"{key}_estimate"] <= hi
    return hits / reps, inside / reps


@pytest.mark.parametrize("case", ["same", "shifted"])
def test_sad_inversion_interval_covers_at_nominal(case):
    """Fast version of benchmarks/bootstrap_coverage.py (docs/bootstrap.md has the 1000-set figures):
    120 data sets of 50 images, nominal 90%: binomial sd sqrt(.9 * .1 / 120) = 2.7 points, so the
    coverage is asserted within 3 sd (8.2 points); the estimate is inside its interval every time. The
    resampled plug-in (BCa) misses the divergence 0 of the same distribution almost always."""
    cov, inside = _kl_coverage(case, 120, 50)
    assert abs(cov - 0.9) <= 0.082 and inside == 1.0, cov
    if case == "same":
        bca, _ = _kl_coverage(case, 40, 50, method="BCa")
        assert bca <= 0.1, bca


@pytest.mark.slow
@pytest.mark.parametrize("case", ["same", "shifted"])
def test_pad_inversion_interval_covers_at_nominal(case):
    cov, inside = _kl_coverage(case, 120, 50, pairs=True)
    assert abs(cov - 0.9) <= 0.082 and inside == 1.0, cov


def test_kl_interval_refuses_bad_input():
    x = np.zeros((10, 3))
    with pytest.raises(ValueError, match="same C"):
        gaussian_kl_interval(x, np.zeros((10, 2)))
    with pytest.raises(ValueError, match="at least 2 attributes"):
        gaussian_kl_interval(x[:, :1], x[:, :1], pairs=True)
    with pytest.raises(ValueError, match="n_boot"):
        gaussian_kl_interval(x, x, n_boot=0)


def test_n_boot_zero_is_refused_with_the_range_by_every_caller(tmp_path, capsys):
    """One check (check_n_boot) behind every interval; the CLI exits 2 with one error line."""
    from genmetrics.cli.main import main
    from genmetrics.mie.ranking import rank_generators
    from genmetrics.raclip.report import bootstrap_means

    x = np.random.default_rng(0).normal(size=(20, 3))
    rng_msg = r"expected an integer in \[1, 100000\], got 0"
    calls = [
        lambda: bootstrap_ci(x[:, 0], n_boot=0),
        lambda: paired_bootstrap(x[:, 0], x[:, 1], n_boot=0),
        lambda: two_sample_ci(x, x, lambda wx, wy: wx.sum(1), n_boot=0),
        lambda: gaussian_kl_interval(x, x + 1, n_boot=0),
        lambda: bootstrap_means(torch.from_numpy(x), torch.from_numpy(x + 1), n_boot=0),
        lambda: rank_generators(["a", "b"], ["b", "a"], outcome=[1, 0], n_boot=0),
    ]
    for call in calls:
        with pytest.raises(ValueError, match=rng_msg):
            call()
    scores = tmp_path / "s.jsonl"
    scores.write_text('{"generators": ["a", "b"], "preference": 0}\n')
    for argv in (
        ["rank-generators", "--scores", str(scores), "--human", "--n-boot", "0"],
        [
            "compare",
            "--real",
            str(tmp_path),
            "--generated",
            str(tmp_path),
            "--attributes",
            "a",
            "--n-boot",
            "0",
        ],
    ):
        assert main(argv) == 2
        err = capsys.readouterr().err.strip().splitlines()
        assert (
            len(err) == 1 and err[0].startswith("error:") and "--n-boot" in err[0] and "[1, 100000]" in err[0]
        )


def test_set_level_intervals_on_tiny_sets_never_fail():
    """Found by the link tests after the interval change: with 2-6 images per set a resample often repeats one
    row (zero variance, a singular covariance) and the path's powers can leave a determinant of -1e-17; the
    interval must still come out (the degenerate resamples sit in the tail), with the estimate inside."""
    from genmetrics.raclip.report import bootstrap_means

    for n in (2, 3, 4, 6):
        for seed in range(8):
            rng = np.random.default_rng(seed)
            real = torch.from_numpy(rng.normal(size=(n, 3)))
            gen = torch.from_numpy(rng.normal(size=(n + 1, 3)))
            out = bootstrap_means(real, gen, n_boot=40, seed=seed)
            for key in ("sad", "pad"):
                lo, hi = out[key]
                assert 0.0 <= lo <= out[key + "_estimate"] <= hi < float("inf"), (n, seed, key, out)


# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case(
    "h-nboot-zero-api",
    "silent",
    "bootstrap_ci(n_boot=0) refused with the range",
)
def _(ctx):
    from genmetrics.functional import bootstrap_ci

    ctx.freeze()
    ctx.refused(lambda: bootstrap_ci(torch.rand(10), n_boot=0), "100000", exc=(InputError, ValueError))


test_hostile = HOSTILE.test()
