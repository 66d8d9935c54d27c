"""genmetrics.functional.ranking against explicit computations on synthetic data."""

import math

import numpy as np
import pytest
import torch

from genmetrics.functional import bradley_terry, f1_per_class, macro_f1, pairwise_accuracy, win_rate_matrix
from genmetrics.functional.ranking import bradley_terry_batch, pairwise_correct, win_counts, win_rate_interval


def test_pairwise_accuracy_explicit():
    rng = np.random.default_rng(0)
    a = rng.integers(0, 5, 200).astype(float)  # many ties
    b = rng.integers(0, 5, 200).astype(float)
    h = rng.integers(0, 2, 200).astype(bool)
    right = 0.0
    for x, y, pa in zip(a, b, h):
        if x == y:
            right += 0.5
        elif (x > y) == pa:
            right += 1.0
    assert pairwise_accuracy(torch.tensor(a), torch.tensor(b), torch.tensor(h)) == pytest.approx(
        right / 200, abs=1e-12
    )
    assert pairwise_accuracy(a.tolist(), b.tolist(), h.tolist()) == pytest.approx(right / 200, abs=1e-12)
    assert pairwise_accuracy([1.0, 1.0], [1.0, 1.0], [1, 0]) == 0.5  # a constant metric is at chance
    assert pairwise_accuracy([2.0], [1.0], [1]) == 1.0 and pairwise_accuracy([2.0], [1.0], [0]) == 0.0
    assert pairwise_correct([2.0, float("nan")], [1.0, 0.0], [0.75, 1.0]).tolist() == [0.75, 0.5]
    with pytest.raises(ValueError):
        pairwise_accuracy([1.0], [1.0, 2.0], [1])
    with pytest.raises(ValueError):
        pairwise_accuracy([], [], [])


def test_f1_explicit():
    rng = np.random.default_rng(1)
    logits = rng.normal(size=(300, 3))
    labels = rng.random((300, 3))  # soft labels, thresholded at 0.5
    per = f1_per_class(torch.tensor(logits), torch.tensor(labels))
    for c in range(3):
        tp = fp = fn = 0
        for i in range(300):
            p, t = logits[i, c] > 0, labels[i, c] >= 0.5
            tp += p and t
            fp += p and not t
            fn += (not p) and t
        assert per[c].item() == pytest.approx(2 * tp / (2 * tp + fp + fn), abs=1e-12)
    assert macro_f1(torch.tensor(logits), torch.tensor(labels)) == pytest.approx(float(per.mean()), abs=1e-12)
    # a dimension with neither positive labels nor positive predictions: zero_division (sklearn's 0)
    assert f1_per_class(torch.tensor([[-1.0, 1.0]]), torch.tensor([[0.0, 1.0]])).tolist() == [0.0, 1.0]
    assert f1_per_class(torch.tensor([[-1.0]]), torch.tensor([[0.0]]), zero_division=1.0).tolist() == [1.0]
    with pytest.raises(ValueError):
        macro_f1(torch.zeros(4, 3), torch.zeros(4, 2))


def test_win_rate_matrix_explicit():
    ia = [0, 0, 1, 2, 2, 0]
    ib = [1, 1, 0, 0, 1, 2]
    out = [1, 0, 1, 0.5, 1, 1]
    w = win_counts(ia, ib, out, 4).numpy()
    expected = np.zeros((4, 4))
    for a, b, o in zip(ia, ib, out):
        expected[a, b] += o
        expected[b, a] += 1 - o
    np.testing.assert_allclose(w, expected)
    r = win_rate_matrix(ia, ib, out, 4).numpy()
    assert r[0, 1] == pytest.approx(1 / 3) and r[1, 0] == pytest.approx(2 / 3)
    assert r[0, 2] == pytest.approx(1.5 / 2) and r[2, 0] == pytest.approx(0.5 / 2)
    assert math.isnan(r[3, 0]) and math.isnan(r[0, 0])  # never met / diagonal
    with pytest.raises(ValueError):
        win_counts([0], [0], [1])


def _nll_fit(w):
    from scipy.optimize import minimize

    k = w.shape[0]

    def nll(x):
        t = np.concatenate([[0.0], x])
        d = t[:, None] - t[None, :]
        return float((w * np.logaddexp(0, -d)).sum())

    res = minimize(nll, np.zeros(k - 1), method="BFGS", options={"gtol": 1e-11, "maxiter": 10_000})
    t = np.concatenate([[0.0], res.x])
    return t - t.mean()


def test_bradley_terry_explicit():
    # two items: the MLE difference is log(wins_a / wins_b)
    th = bradley_terry([0] * 7 + [1] * 3, [1] * 7 + [0] * 3, [1] * 10)
    assert (th[0] - th[1]).item() == pytest.approx(math.log(7 / 3), abs=1e-9)
    assert th.sum().item() == pytest.approx(0.0, abs=1e-12)
    # five items from a known model: equals a direct maximisation of the log-likelihood
    rng = np.random.default_rng(0)
    true = rng.normal(size=5)
    a = rng.integers(0, 5, 500)
    b = (a + rng.integers(1, 5, 500)) % 5
    o = (rng.random(500) < 1 / (1 + np.exp(-(true[a] - true[b])))).astype(float)
    th = bradley_terry(a, b, o).numpy()
    np.testing.assert_allclose(th, _nll_fit(win_counts(a, b, o).numpy()), atol=1e-6)
    assert np.corrcoef(th, true)[0, 1] > 0.9
    # the prior adds `prior` virtual wins each way for every pair
    thp = bradley_terry(a, b, o, prior=2.0).numpy()
    w = win_counts(a, b, o).numpy() + 2.0 * (1 - np.eye(5))
    np.testing.assert_allclose(thp, _nll_fit(w), atol=1e-6)
    assert np.abs(thp).max() < np.abs(th).max()  # shrunk towards equal strength


def test_bradley_terry_needs_prior_when_unbeaten():
    with pytest.raises(ValueError, match="prior"):
        bradley_terry([0, 0, 1], [1, 2, 2], [1, 1, 1])
    th = bradley_terry([0, 0, 1], [1, 2, 2], [1, 1, 1], prior=0.5)
    assert th[0] > th[1] > th[2]


def _newton_reference(w, max_iter=100, tol=1e-10):
    """The hand-written Newton iteration (with step halving) that bradley_terry used before it moved to
    scipy.optimize: kept here as the second computation of the same maximum."""
    k = w.shape[0]
    n = w + w.T

    def loglik(t):
        d = t[:, None] - t[None, :]
        return float((w * -np.logaddexp(0.0, -d)).sum())

    theta = np.zeros(k)
    ll = loglik(theta)
    for _ in range(max_iter):
        p = 1.0 / (1.0 + np.exp(-(theta[:, None] - theta[None, :])))
        grad = (w * (1 - p)).sum(1) - (w.T * p).sum(1)
        h = n * p * (1 - p)
        step = np.linalg.lstsq(np.diag(h.sum(1)) - h + np.ones((k, k)) / k, grad, rcond=None)[0]
        step -= step.mean()
        t = 1.0
        while t > 1e-10:
            cand = theta + t * step
            new_ll = loglik(cand)
            if new_ll >= ll - 1e-15:
                break
            t *= 0.5
        theta, ll_old, ll = cand, ll, new_ll
        if np.abs(t * step).max() < tol or abs(ll - ll_old) < tol * 1e-3:
            break
    return theta - theta.mean()


@pytest.mark.parametrize("k,pairs,prior", [(2, 40, 0.0), (4, 300, 0.5), (8, 2000, 0.0), (8, 60, 2.0)])
def test_bradley_terry_scipy_equals_the_former_newton_iteration(k, pairs, prior):
    """Parity: scipy's trust-region fit and the former Newton iteration reach the same maximum. Both stop
    at a gradient ~1e-10 of a Hessian with eigenvalues >= ~games/k^2 * p(1-p), so theta agrees to ~1e-8."""
    rng = np.random.default_rng(k + pairs)
    true = rng.normal(size=k)
    a = rng.integers(0, k, pairs)
    b = (a + rng.integers(1, k, pairs)) % k
    o = (rng.random(pairs) < 1 / (1 + np.exp(-(true[a] - true[b])))).astype(float)
    o[::7] = 0.5  # ties
    th = bradley_terry(a, b, o, k, prior=prior).numpy()
    w = win_counts(a, b, o, k).numpy() + prior * (1 - np.eye(k))
    np.testing.assert_allclose(th, _newton_reference(w), atol=1e-8)
    assert abs(th.sum()) < 1e-9
    if k == 2:  # closed form: theta_0 - theta_1 = log(W01 / W10)
        assert th[0] - th[1] == pytest.approx(math.log(w[0, 1] / w[1, 0]), abs=1e-9)


def test_win_rate_interval_is_wilsons_and_covers_exactly():
    """Parity with scipy's Wilson interval (binomtest) for every integer count; a tie (half a win) lies
    between its neighbours; mirror symmetry; and the exact coverage (sum of binomial probabilities of the
    counts whose interval holds p) averaged over p in [0.1, 0.9] is within 1 point of nominal with 5 to 30
    games, where the normal-approximation interval (what a percentile bootstrap of the pairs approximates)
    undercovers."""
    from scipy.stats import binom, binomtest

    for g in (1, 2, 5, 8, 13):
        k = np.arange(g + 1)
        for alpha in (0.05, 0.1):
            lo, hi = win_rate_interval(k.astype(float), np.full(g + 1, float(g)), alpha)
            ref = [binomtest(int(i), g).proportion_ci(1 - alpha, method="wilson") for i in k]
            np.testing.assert_allclose(lo, [r.low for r in ref], atol=1e-12)
            np.testing.assert_allclose(hi, [r.high for r in ref], atol=1e-12)
            np.testing.assert_allclose(lo, 1.0 - hi[::-1], atol=1e-12)  # wins <-> losses
    lo, hi = win_rate_interval([3.0, 3.5, 4.0], [8.0, 8.0, 8.0])
    assert lo[0] < lo[1] < lo[2] and hi[0] < hi[1] < hi[2]
    lo, hi = win_rate_interval([0.0], [0.0])
    assert np.isnan(lo[0]) and np.isnan(hi[0])
    ps = np.linspace(0.1, 0.9, 81)
    for g in (5, 8, 15, 30):
        k = np.arange(g + 1)
        lo, hi = win_rate_interval(k.astype(float), np.full(g + 1, float(g)))
        cover = np.mean([(binom.pmf(k, g, p) * ((lo <= p) & (p <= hi))).sum() for p in ps])
        assert abs(cover - 0.95) <= 0.01, (g, cover)
        if g <= 15:
            ph = k / g
            half = 1.96 * np.sqrt(ph * (1 - ph) / g)
            wald = np.mean([(binom.pmf(k, g, p) * ((ph - half <= p) & (p <= ph + half))).sum() for p in ps])
            assert wald < 0.93, (g, wald)
    with pytest.raises(ValueError, match="alpha"):
        win_rate_interval([1.0], [2.0], alpha=0.0)


def test_bradley_terry_batch_equals_one_fit_per_matrix():
    """Each batched fit equals bradley_terry (scipy trust-exact) on the same pairs: resamples of 5 items'
    games with ties, one where an item never lost (the prior keeps its maximum finite) and one with no games.
    Both stop at a gradient below 1e-10; the Hessian's smallest eigenvalue on the mean-zero subspace is
    above ~0.1 here (prior 0.5 each way, win probabilities in (0.05, 0.95)), so the fits differ by at most
    ~1e-9: atol 1e-7 leaves a factor 100."""
    rng = np.random.default_rng(4)
    k, n = 5, 60
    ia = rng.integers(0, k, n)
    ib = (ia + rng.integers(1, k, n)) % k
    out = rng.choice([0.0, 0.5, 1.0], n, p=[0.4, 0.1, 0.5])
    sets = [rng.integers(0, n, n) for _ in range(6)]
    sets.append(np.flatnonzero(ia == 0))  # item 0 never lost in these (it only appears as a)
    out_sets = [out] * 6 + [np.ones(n)]
    mats, refs = [], []
    for idx, o in zip(sets, out_sets):
        mats.append(win_counts(ia[idx], ib[idx], o[idx], k).numpy())
        refs.append(bradley_terry(ia[idx], ib[idx], o[idx], k, prior=0.5).numpy())
    mats.append(np.zeros((k, k)))
    refs.append(np.zeros(k))
    theta = bradley_terry_batch(np.stack(mats), prior=0.5)
    np.testing.assert_allclose(theta, np.stack(refs), atol=1e-7, rtol=0)
    assert np.abs(theta.sum(1)).max() < 1e-12
    with pytest.raises(ValueError, match="prior must be > 0"):
        bradley_terry_batch(np.stack(mats), prior=0.0)
