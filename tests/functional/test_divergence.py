"""genmetrics.functional divergence: closed forms, SaD/PaD/R-SaD, the HCS KDE mode, separation statistics."""

import itertools
import math

import numpy as np
import pytest
import torch

from genmetrics.functional import (
    cohens_d,
    gaussian_kl,
    gaussian_kl_2d,
    hellinger_gaussian,
    kde_pad,
    kde_sad,
    one_minus_ovl,
    pad,
    rsad,
    rsad_ranking,
    sad,
)
from genmetrics.functional.divergence import gaussian_stats, pad_from_stats, sad_from_stats


def _rows(seed, n=300, c=4, shift=0.0, scale=1.0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(n, c, generator=g, dtype=torch.float64) * scale + shift


def test_gaussian_kl_closed_form_against_integration():
    mu_p, var_p, mu_q, var_q = 0.3, 0.5, -0.2, 1.7
    x = np.linspace(-15, 15, 200001)
    p = np.exp(-((x - mu_p) ** 2) / (2 * var_p)) / math.sqrt(2 * math.pi * var_p)
    q = np.exp(-((x - mu_q) ** 2) / (2 * var_q)) / math.sqrt(2 * math.pi * var_q)
    numeric = np.trapezoid(p * np.log(p / q), x)
    got = float(gaussian_kl(mu_p, var_p, mu_q, var_q))
    assert abs(got - numeric) < 1e-6
    assert float(gaussian_kl(1.0, 2.0, 1.0, 2.0)) == 0.0
    # elementwise / broadcasting, float64
    out = gaussian_kl(torch.zeros(3), torch.ones(3), torch.tensor([0.0, 1.0, 2.0]), 1.0)
    assert out.dtype == torch.float64
    torch.testing.assert_close(out, torch.tensor([0.0, 0.5, 2.0], dtype=torch.float64))


def test_gaussian_kl_2d_closed_form():
    mu_p, mu_q = torch.tensor([0.1, -0.3]), torch.tensor([0.4, 0.2])
    cp = torch.tensor([[1.0, 0.3], [0.3, 0.5]])
    cq = torch.tensor([[0.8, -0.2], [-0.2, 1.2]])
    mp, mq = mu_p.double(), mu_q.double()
    cpd, cqd = cp.double(), cq.double()
    inv = torch.linalg.inv(cqd)
    d = mq - mp
    expected = 0.5 * (torch.trace(inv @ cpd) + d @ inv @ d - 2 + torch.logdet(cqd) - torch.logdet(cpd))
    torch.testing.assert_close(gaussian_kl_2d(mu_p, cp, mu_q, cq), expected)
    # independent coordinates: the 2-D KL is the sum of the 1-D ones
    diag_p, diag_q = torch.diag(torch.tensor([0.5, 2.0])), torch.diag(torch.tensor([1.5, 0.7]))
    two = gaussian_kl_2d(mu_p, diag_p, mu_q, diag_q)
    one = gaussian_kl(mu_p, torch.tensor([0.5, 2.0]), mu_q, torch.tensor([1.5, 0.7])).sum()
    torch.testing.assert_close(two, one)
    # batched [...,2]
    batch = gaussian_kl_2d(mu_p.expand(3, 2), cp.expand(3, 2, 2), mu_q.expand(3, 2), cq.expand(3, 2, 2))
    assert batch.shape == (3,)
    with pytest.raises(ValueError, match="positive definite"):
        gaussian_kl_2d(mu_p, torch.ones(2, 2), mu_q, cq)


def test_sad_pad_against_definitions_and_identity():
    real, gen = _rows(0), _rows(1, n=200, scale=0.7, shift=0.1)
    eps = 1e-6
    s = sad(real, gen)
    exp = gaussian_kl(gen.mean(0), gen.var(0) + eps, real.mean(0), real.var(0) + eps)
    torch.testing.assert_close(s, exp)
    s2 = sad(real, gen, direction="real||gen")
    torch.testing.assert_close(
        s2, gaussian_kl(real.mean(0), real.var(0) + eps, gen.mean(0), gen.var(0) + eps)
    )
    p = pad(real, gen)
    loop = []
    for i, j in itertools.combinations(range(4), 2):
        cr = torch.cov(real[:, [i, j]].T) + eps * torch.eye(2, dtype=torch.float64)
        cg = torch.cov(gen[:, [i, j]].T) + eps * torch.eye(2, dtype=torch.float64)
        loop.append(gaussian_kl_2d(gen[:, [i, j]].mean(0), cg, real[:, [i, j]].mean(0), cr))
    torch.testing.assert_close(p, torch.stack(loop))
    assert p.shape == (6,)
    torch.testing.assert_close(sad(real, real), torch.zeros(4, dtype=torch.float64))
    assert float(pad(real, real).abs().max()) < 1e-12
    maps = torch.rand(5, 16, 4)
    torch.testing.assert_close(rsad(maps, maps), torch.zeros(16, 4, dtype=torch.float64))


def test_variance_ridge_for_saturated_scores():
    const = torch.ones(10, 3)
    assert float(sad(const, const).abs().max()) == 0.0
    out = sad(_rows(0, c=3), const)
    assert torch.isfinite(out).all()
    assert torch.isfinite(pad(const, _rows(1, c=3))).all()
    with pytest.raises(ValueError, match="at least 2"):
        sad(torch.rand(1, 3), torch.rand(5, 3))
    with pytest.raises(ValueError, match="same attribute list"):
        sad(torch.rand(4, 3), torch.rand(5, 2))
    with pytest.raises(ValueError, match="at least 2 attributes"):
        pad(torch.rand(4, 1), torch.rand(5, 1))
    with pytest.raises(ValueError, match="kl_direction"):
        sad(torch.rand(4, 3), torch.rand(5, 3), direction="p||q")


def test_from_stats_equals_tables():
    real, gen = _rows(2), _rows(3, n=150)
    nr, sr, cr = gaussian_stats(real)
    ng, sg, cg = gaussian_stats(gen)
    torch.testing.assert_close(pad_from_stats((nr, sr, cr), (ng, sg, cg)), pad(real, gen))
    torch.testing.assert_close(
        sad_from_stats((nr, sr, torch.diagonal(cr)), (ng, sg, torch.diagonal(cg))), sad(real, gen)
    )
    torch.testing.assert_close(sad_from_stats((nr, sr, cr), (ng, sg, cg)), sad(real, gen))


def test_rsad_sign_and_ranking():
    a, b = torch.rand(6, 9, 3), torch.rand(4, 9, 3)
    r = rsad(a, b)
    # the reference in float64 too: a float32 mean is off by up to ~N eps, beyond float64's tolerance
    torch.testing.assert_close(r, a.double().mean(0) - b.double().mean(0))
    torch.testing.assert_close(rsad(b, a), -r)
    torch.testing.assert_close(rsad_ranking(r), r.abs().mean(0))
    with pytest.raises(ValueError, match="maps"):
        rsad(torch.rand(3, 9, 3), torch.rand(3, 4, 3))


def _hcs_code_sad(real, gen, n_points):
    """The 2024 HCS code's get_SaD loop (core/sad.py), written out with scipy."""
    from scipy.stats import gaussian_kde

    xs = np.linspace(-35, 35, n_points)
    out = []
    for c in range(real.shape[1]):
        p = gaussian_kde(real[:, c])(xs) * (70 / n_points) + 1e-10
        q = gaussian_kde(gen[:, c])(xs) * (70 / n_points) + 1e-10
        kl = np.mean(-p * np.log(q) + p * np.log(p))
        out.append(max(kl, 0.0))
    return np.array(out)


def _hcs_code_pad(real, gen, n_points):
    from scipy.stats import gaussian_kde

    nb = int(np.sqrt(n_points))
    ax = np.linspace(-35, 35, nb + 1)
    gx, gy = np.meshgrid(ax, ax)
    pts = np.array([gx.flatten(), gy.flatten()])
    pool = torch.nn.AvgPool2d(kernel_size=2, stride=1)
    out = []
    for i, j in itertools.combinations(range(real.shape[1]), 2):
        pr = gaussian_kde(np.vstack((real[:, i], real[:, j])))(pts).reshape(nb + 1, nb + 1)
        pg = gaussian_kde(np.vstack((gen[:, i], gen[:, j])))(pts).reshape(nb + 1, nb + 1)
        p = pool(torch.tensor(pr)[None]).squeeze().numpy() * (70 / nb) ** 2 + 1e-10
        q = pool(torch.tensor(pg)[None]).squeeze().numpy() * (70 / nb) ** 2 + 1e-10
        out.append(max(float(np.mean(p * np.log(p / q))), 0.0))
    return np.array(out)


def test_kde_mode_matches_hcs_code():
    real = (_rows(4, n=120, c=3) * 30 - 10).numpy()
    gen = (_rows(5, n=100, c=3) * 25 - 5).numpy()
    torch.testing.assert_close(
        kde_sad(real, gen, n_points=2000), torch.from_numpy(_hcs_code_sad(real, gen, 2000))
    )
    torch.testing.assert_close(
        kde_pad(real, gen, n_points=900),
        torch.from_numpy(_hcs_code_pad(real, gen, 900)),
        rtol=1e-4,
        atol=1e-9,
    )
    assert float(kde_sad(real, real, n_points=500).max()) == 0.0
    # the other direction swaps the roles
    torch.testing.assert_close(
        kde_sad(real, gen, n_points=500, direction="gen||real"),
        torch.from_numpy(_hcs_code_sad(gen, real, 500)),
    )


def test_separation_statistics():
    g = torch.Generator().manual_seed(0)
    pos = torch.randn(4000, generator=g, dtype=torch.float64) + 2.0
    neg = torch.randn(4000, generator=g, dtype=torch.float64)
    assert abs(cohens_d(pos, neg) - 2.0) < 0.1
    # two unit Gaussians 2 apart: H^2 = 1 - exp(-d^2/8), OVL = 2 Phi(-d/2)
    h_true = math.sqrt(1 - math.exp(-4 / 8))
    ovl_true = 2 * 0.5 * math.erfc(1 / math.sqrt(2))
    assert abs(hellinger_gaussian(pos, neg, method="gaussian") - h_true) < 0.02
    assert abs(hellinger_gaussian(pos, neg) - h_true) < 0.03
    assert abs(one_minus_ovl(pos, neg) - (1 - ovl_true)) < 0.03
    assert abs(one_minus_ovl(pos, neg, method="gaussian") - (1 - ovl_true)) < 0.02
    assert one_minus_ovl(neg, neg) < 1e-6 and hellinger_gaussian(neg, neg) < 1e-3
    assert cohens_d(neg, pos) == cohens_d(pos, neg) > 0  # Eq. 17 takes |mu_p - mu_n|


def test_cohens_d_is_eq17_with_unequal_groups():
    # CelebA-like imbalance: few positives, many negatives, different spreads
    pos = [0.9, 0.4, 0.8, 0.99, 0.5]
    neg = [0.1, 0.3, 0.2, 0.15, 0.4, 0.05, 0.35, 0.25, 0.3, 0.2, 0.1, 0.45]
    mp, mn = sum(pos) / len(pos), sum(neg) / len(neg)
    vp = sum((x - mp) ** 2 for x in pos) / (len(pos) - 1)
    vn = sum((x - mn) ** 2 for x in neg) / (len(neg) - 1)
    by_hand = abs(mp - mn) / math.sqrt((vp + vn) / 2)
    assert cohens_d(pos, neg) == pytest.approx(by_hand, rel=1e-12)
    assert cohens_d(neg, pos) == pytest.approx(by_hand, rel=1e-12)
    # the size-weighted pooled variance (the textbook d) differs for unequal groups
    pooled = ((len(pos) - 1) * vp + (len(neg) - 1) * vn) / (len(pos) + len(neg) - 2)
    assert abs(abs(mp - mn) / math.sqrt(pooled) - by_hand) > 0.05 * by_hand
    assert cohens_d([1.0, 1.0], [0.0, 0.0]) == math.inf and cohens_d([1.0, 1.0], [1.0, 1.0]) == 0.0


def test_kde_mode_unit_is_nats_per_grid_cell():
    """The KDE (2024 code) numbers are a mean over grid cells: times the number of cells they are the KL
    in nats (so the code's printed x1e7 at 10 000 points is about 1000 x nats). Gaussian data, closed form."""
    rng = np.random.default_rng(0)
    real, gen = rng.normal(0.0, 5.0, (4000, 2)), rng.normal(3.0, 6.0, (4000, 2))
    kl = float(gaussian_kl(0.0, 25.0, 3.0, 36.0))  # KL(real || gen), the code's direction
    assert float(kde_sad(real, gen, n_points=2000).mean()) * 2000 == pytest.approx(kl, rel=0.08)
    assert float(kde_pad(real, gen, n_points=2500)[0]) * 50 * 50 == pytest.approx(
        2 * kl, rel=0.08
    )  # independent


# ------------------------------------------------------------------ PaD's symmetric product (gram)
def test_gram_matches_full_product_within_summation_bound():
    from genmetrics.functional.divergence import _SYRK_MIN_COLUMNS, gram

    g = torch.Generator().manual_seed(5)
    n, c = 700, _SYRK_MIN_COLUMNS + 17  # wide enough for the BLAS syrk path
    x = torch.randn(n, c, generator=g, dtype=torch.float64) * 3 + 1
    got, full = gram(x), x.T @ x
    assert torch.equal(got, got.T)  # mirrored, not two separate dot products
    # each entry is one float64 dot product of length n: |error| <= gamma_n * (|x|^T |x|) for either order
    u = 2.0**-53
    gamma = n * u / (1 - n * u)
    bound = 2 * gamma * (x.abs().T @ x.abs())
    assert bool(((got - full).abs() <= bound).all())
    # narrow tables and empty tables: the full product / zeros
    torch.testing.assert_close(gram(x[:, :3]), x[:, :3].T @ x[:, :3], rtol=0, atol=0)
    assert torch.equal(gram(x[:0]), torch.zeros(c, c, dtype=torch.float64))


def test_pad_equals_full_product_pad_exactly_on_exact_data():
    """Centred integer data (each column sums to 0): every product and sum is exact in float64, so PaD from
    the symmetric product equals PaD from the full product bit for bit."""
    g = torch.Generator().manual_seed(6)
    c = 70
    half_r = torch.randint(-50, 50, (150, c), generator=g).double()
    half_g = torch.randint(-40, 60, (120, c), generator=g).double()
    half_g -= half_g.mean(0).round()
    real, gen = torch.cat([half_r, -half_r]), torch.cat([half_g, -half_g])

    def full_stats(x):
        n = x.shape[0]
        m = x.mean(0)
        xc = x - m
        return torch.tensor(float(n), dtype=torch.float64), x.sum(0), xc.T @ xc + n * torch.outer(m, m)

    expected = pad_from_stats(full_stats(real), full_stats(gen))
    for r, q in ((real, gen), (real.float(), gen.float()), (real.numpy(), gen.numpy())):
        assert torch.equal(pad(r, q), expected)


def test_pad_leaves_caller_tables_untouched():
    g = torch.Generator().manual_seed(7)
    real = torch.rand(90, 66, generator=g, dtype=torch.float64) + 2.0
    gen32 = torch.rand(80, 66, generator=g) + 1.0
    real_np = real.numpy().copy()
    before = (real.clone(), gen32.clone(), real_np.copy())
    pad(real, gen32)
    pad(real_np, gen32)
    assert torch.equal(real, before[0]) and torch.equal(gen32, before[1])
    assert np.array_equal(real_np, before[2])


def test_non_finite_scores_refused_but_large_finite_ones_accepted():
    x = torch.rand(10, 3, dtype=torch.float64)
    for bad in (float("nan"), float("inf"), -float("inf")):
        y = x.clone()
        y[4, 1] = bad
        with pytest.raises(ValueError, match="NaN or infinite"):
            sad(y, x)
    # finite values whose total overflows: the fast check's fallback must still accept them
    big = torch.full((10, 3), 1e308, dtype=torch.float64)
    big[::2] = -1e308
    big[1] = 1e308
    assert not bool(torch.isfinite(big.sum()))
    n, _, _ = gaussian_stats(big)  # validation passes (no ValueError)
    assert float(n) == 10.0
