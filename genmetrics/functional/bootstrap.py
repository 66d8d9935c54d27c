"""Bootstrap confidence intervals from :func:`scipy.stats.bootstrap`, seeded by default for reproducibility.

The default method is the studentized bootstrap (bootstrap-t) for a mean, which covers the mean of 50 skewed
draws within 1 point of nominal where BCa was 2.3 points under (docs/bootstrap.md), and BCa
(bias-corrected and accelerated) for other statistics: a percentile interval shifted for the bias and
skew of the statistic's bootstrap distribution.
On a simulated SaD between Gaussians (``tests/functional/test_bootstrap.py``) the percentile interval
covers the true value less often than its nominal level; BCa comes closer. Where BCa does not apply --
a degenerate bootstrap distribution (all resamples equal), or a jackknife too costly for the caller's
budget -- the percentile interval is used and the returned method says so.

* :func:`bootstrap_ci` -- one sample, any statistic (``np.mean`` is vectorised);
* :func:`two_sample_ci` -- two samples resampled independently (SaD / PaD between a real and a generated set);
* :func:`paired_bootstrap` -- ``mean(a - b)`` over shared samples with a bootstrap p-value;
* :func:`gaussian_kl_interval` -- mean SaD / PaD between a real and a generated set: a bias-corrected
  estimate and an interval from a bootstrap test inverted along a path of Gaussian fits (BCa on the
  plug-in misses a divergence near 0 almost always; docs/bootstrap.md has the coverage).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import numpy as np

# scipy.stats (1.5 s of import) is imported where an interval is drawn: checking an option (check_n_boot)
# comes before any weights load, and offline before torch is imported

#: most bootstrap resamples accepted (1e5 already gives a percentile interval to ~0.1% of its width)
MAX_N_BOOT = 100_000
METHODS = ("BCa", "percentile", "basic")
#: one-sample methods: ``METHODS``, ``"studentized"`` (bootstrap-t, the mean only) and ``"auto"`` (the default:
#: studentized for the mean, BCa for any other statistic)
ONE_SAMPLE_METHODS = ("auto", "studentized", *METHODS)


def check_n_boot(n_boot: object, name: str = "n_boot") -> int:
    """``n_boot`` as an int in ``[1, MAX_N_BOOT]`` (0 would give a zero-width interval), naming the option.

    >>> check_n_boot("200")
    200
    >>> check_n_boot(0, "--n-boot")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    ValueError: option --n-boot: expected an integer in [1, 100000], got 0
    """
    value = _as_number(name, n_boot, "an integer in [1, 100000]")
    if not (math.isfinite(value) and value.is_integer() and 1 <= value <= MAX_N_BOOT):
        raise ValueError(f"option {name}: expected an integer in [1, {MAX_N_BOOT}], got {n_boot!r}")
    return int(value)


def _as_number(name: str, value: object, what: str) -> float:
    """A number from a number or a numeric text (CLI values arrive as text); a ValueError naming ``name``
    (this module is pure math: the caller's option checks give the same words as genmetrics.core.options)."""
    try:
        if isinstance(value, bool) or value is None:
            raise TypeError
        return float(value.strip() if isinstance(value, str) else value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        shown = f"the text {value!r}" if isinstance(value, str) else repr(value)
        raise ValueError(f"option {name}: expected {what}, got {shown}") from None


def _check(
    n_boot: object, alpha: object, method: object, allowed: tuple[str, ...] = METHODS
) -> tuple[int, float, str]:
    a = _as_number("alpha", alpha, "a finite number in (0.0, 1.0)")
    if not 0.0 < a < 1.0:
        raise ValueError(f"option alpha: expected a finite number in (0.0, 1.0), got {alpha!r}")
    if not isinstance(method, str) or method not in allowed:
        raise ValueError(f"option method: expected one of {', '.join(map(repr, allowed))}, got {method!r}")
    return check_n_boot(n_boot), a, method


@dataclass
class Interval:
    """A bootstrap interval: ``estimate`` (the statistic on the data), ``low``/``high``, the ``method``
    actually used, and the bootstrap distribution (one value per resample).

    >>> r = Interval(estimate=0.5, low=0.4, high=0.6, method="BCa", distribution=np.array([0.45, 0.55]))
    >>> r.high - r.low > 0, r.method
    (True, 'BCa')
    """

    estimate: float
    low: float
    high: float
    method: str
    distribution: np.ndarray = field(repr=False)
    #: the plug-in value of the statistic where ``estimate`` is bias-corrected (else ``None``)
    plugin: float | None = None


def _scipy_interval(
    data: tuple,
    statistic: Callable,
    *,
    n_boot: int,
    alpha: float,
    seed: int,
    method: str,
    vectorized: bool,
    paired: bool = False,
    batch: int | None = None,
) -> Interval:
    from scipy.stats import bootstrap

    est = float(statistic(*data, axis=-1) if vectorized else statistic(*data))
    with warnings.catch_warnings():
        # scipy warns (DegenerateDataWarning) and returns nan when BCa cannot be computed: fall back below
        warnings.simplefilter("ignore", RuntimeWarning)
        res = bootstrap(
            data,
            statistic,
            method=method,
            rng=np.random.default_rng(seed),
            n_resamples=n_boot,
            confidence_level=1.0 - alpha,
            vectorized=vectorized,
            paired=paired,
            batch=batch,
        )
    dist = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    lo, hi = float(res.confidence_interval.low), float(res.confidence_interval.high)
    if not (np.isfinite(lo) and np.isfinite(hi)):
        method = "percentile"  # BCa is undefined for a degenerate distribution; the percentile one is not
        lo, hi = (float(v) for v in np.quantile(dist, [alpha / 2, 1 - alpha / 2]))
    return Interval(est, lo, hi, method, dist)


def _vector_1d(values, name: str) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"{name}: expected a non-empty 1-D array of numbers, got shape {x.shape}")
    return x


def _studentized(x: np.ndarray, *, n_boot: int, alpha: float, seed: int) -> Interval | None:
    """Bootstrap-t interval of the mean: ``t* = (mean* - mean) / se*`` over resamples (``se`` = sd / sqrt(n),
    each resample's own), ``[mean - q(1 - alpha/2) se, mean - q(alpha/2) se]``. ``None`` where a resample
    has no spread (``se* = 0``: t is infinite; binary data with a rare class at small n), so the caller
    falls back to BCa. The resamples are scipy's (the same draws as ``method="BCa"`` with this seed)."""
    from scipy.stats import bootstrap

    n = x.size
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        res = bootstrap(
            (x,),
            lambda s, axis=-1: np.stack([s.mean(axis), s.std(axis, ddof=1)]),
            method="percentile",
            rng=np.random.default_rng(seed),
            n_resamples=n_boot,
            vectorized=True,
        )
    means, sds = np.asarray(res.bootstrap_distribution, dtype=np.float64)
    # a resample of one repeated value has sd 0 up to rounding: |v - mean| <= eps |v| per row, so its sd is
    # at most eps max|x| sqrt(n / (n - 1)) <= 2 eps max|x|; 4 eps max|x| leaves a factor 2 of margin
    if (sds <= 4.0 * np.finfo(np.float64).eps * float(np.abs(x).max())).any():
        return None
    est, se = float(x.mean()), float(x.std(ddof=1)) / math.sqrt(n)
    q_lo, q_hi = np.quantile((means - est) / (sds / math.sqrt(n)), [alpha / 2, 1 - alpha / 2])
    # the estimate stays inside (t* straddles 0 except with a handful of resamples)
    lo, hi = min(est - float(q_hi) * se, est), max(est - float(q_lo) * se, est)
    return Interval(est, lo, hi, "studentized", means)


def bootstrap_interval(
    values,
    *,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    stat: Callable = np.mean,
    method: str = "auto",
) -> Interval:
    """:func:`bootstrap_ci` with the method used and the bootstrap distribution (the resampled statistic).

    ``method="auto"`` (the default) is ``"studentized"`` for the mean (``stat=np.mean``) and ``"BCa"`` for any
    other statistic; a studentized interval where a resample has no spread (sd 0) is BCa instead, and
    ``method`` says which was used (docs/bootstrap.md: BCa covered the mean of 50 skewed draws 2.3 points
    under nominal, the bootstrap-t within 1).

    >>> r = bootstrap_interval([0.1, 0.4, 0.35, 0.8, 0.5, 0.3, 0.62, 0.45], n_boot=500, seed=0)
    >>> r.method, r.distribution.shape, r.low < r.estimate < r.high
    ('studentized', (500,), True)
    >>> bootstrap_interval([0.1, 0.4, 0.35, 0.8], stat=np.median, n_boot=200).method
    'BCa'
    >>> bootstrap_interval([2.0, 2.0, 2.0]).method  # nothing to resample
    'none (one distinct value)'
    """
    n_boot, alpha, method = _check(n_boot, alpha, method, ONE_SAMPLE_METHODS)
    x = _vector_1d(values, "bootstrap_ci values")
    if method == "studentized" and stat is not np.mean:
        raise ValueError(
            "option method: 'studentized' is the bootstrap-t of the mean; got stat="
            f"{getattr(stat, '__name__', stat)!r} (use stat=np.mean, or method='BCa')"
        )
    if x.size == 1 or np.all(x == x[0]):
        est = float(stat(x))
        return Interval(est, est, est, "none (one distinct value)", np.full(n_boot, est))
    if method == "auto":
        method = "studentized" if stat is np.mean else "BCa"
    if method == "studentized":
        iv = _studentized(x, n_boot=n_boot, alpha=alpha, seed=seed)
        if iv is not None:
            return iv
        method = "BCa"
    if stat is np.mean:
        return _scipy_interval(
            (x,), np.mean, n_boot=n_boot, alpha=alpha, seed=seed, method=method, vectorized=True
        )
    return _scipy_interval(
        (x,), lambda s: float(stat(s)), n_boot=n_boot, alpha=alpha, seed=seed, method=method, vectorized=False
    )


def bootstrap_ci(
    values,
    *,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    stat: Callable = np.mean,
    method: str = "auto",
) -> tuple[float, float, float]:
    """``(estimate, low, high)``: the statistic of ``values`` and its ``1 - alpha`` bootstrap interval
    (:func:`scipy.stats.bootstrap`'s resamples; studentized for the mean, BCa for other statistics, see
    :func:`bootstrap_interval`).

    >>> est, lo, hi = bootstrap_ci([0.1, 0.4, 0.35, 0.8, 0.5, 0.3], n_boot=999, seed=0)
    >>> round(est, 4), lo < est < hi
    (0.4083, True)
    """
    r = bootstrap_interval(values, n_boot=n_boot, alpha=alpha, seed=seed, stat=stat, method=method)
    return r.estimate, r.low, r.high


def two_sample_ci(
    x: np.ndarray,
    y: np.ndarray,
    stat: Callable[[np.ndarray, np.ndarray], np.ndarray],
    *,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    method: str = "BCa",
    budget: float = 2e7,
) -> Interval:
    """Interval of ``stat`` between two samples ``x [N,...]`` and ``y [M,...]``, each resampled (rows, with
    replacement) independently of the other.

    ``stat(wx, wy)`` takes row *weights* ``wx [B,N]``, ``wy [B,M]`` (how often each row is in each of ``B``
    resamples; the data themselves are closed over by ``stat``) and returns ``[B]`` -- so sufficient
    statistics are ``w @ x``, never a copy of the resampled rows. ``budget`` bounds ``B * max(N, M)`` per
    call. BCa needs a jackknife (``N + M`` more evaluations); it is used when ``method="BCa"``, else the
    method given.

    The difference of two means, with the data closed over by ``stat``:

    >>> rng = np.random.default_rng(0)
    >>> x, y = rng.normal(1.0, 1.0, 200), rng.normal(0.0, 1.0, 300)
    >>> stat = lambda wx, wy: wx @ x / wx.sum(1) - wy @ y / wy.sum(1)
    >>> r = two_sample_ci(x, y, stat, n_boot=500, method="percentile")
    >>> abs(r.estimate - float(x.mean() - y.mean())) < 1e-12, r.low < 1.0 < r.high  # the true difference is 1
    (True, True)
    """
    n_boot, alpha, method = _check(n_boot, alpha, method)
    n, m = int(np.shape(x)[0]), int(np.shape(y)[0])
    batch = max(1, int(budget // max(n, m)))

    def weights(idx: np.ndarray, size: int) -> np.ndarray:
        idx = np.asarray(idx).astype(np.int64)
        flat = idx.reshape(-1, idx.shape[-1])
        offsets = (np.arange(flat.shape[0], dtype=np.int64) * size)[:, None]
        w = np.bincount((flat + offsets).ravel(), minlength=flat.shape[0] * size).astype(np.float64)
        return w.reshape(idx.shape[:-1] + (size,))

    def statistic(ix: np.ndarray, iy: np.ndarray, axis: int = -1) -> np.ndarray:
        wx, wy = weights(ix, n), weights(iy, m)
        shape = np.broadcast_shapes(wx.shape[:-1], wy.shape[:-1])
        wx = np.broadcast_to(wx, shape + (n,)).reshape(-1, n)
        wy = np.broadcast_to(wy, shape + (m,)).reshape(-1, m)
        return np.asarray(stat(wx, wy), dtype=np.float64).reshape(shape)

    data = (np.arange(n, dtype=np.float64), np.arange(m, dtype=np.float64))
    return _scipy_interval(
        data, statistic, n_boot=n_boot, alpha=alpha, seed=seed, method=method, vectorized=True, batch=batch
    )


def paired_bootstrap(
    a, b, *, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0, method: str = "auto"
) -> dict[str, Any]:
    """Paired bootstrap of ``mean(a - b)`` over shared samples: estimate, interval (studentized by default,
    as :func:`bootstrap_interval`) and the two-sided bootstrap p-value that the mean difference is zero
    (from the same resamples of the mean).

    >>> a = np.linspace(0.5, 0.9, 20)
    >>> r = paired_bootstrap(a, a - 0.1, n_boot=500)  # b is a shifted by exactly 0.1 everywhere
    >>> round(r["diff"], 6), r["n"], r["p_value"]
    (0.1, 20, 0.0)
    >>> paired_bootstrap(a, a[::-1], n_boot=500)["p_value"] > 0.5  # same values, reordered
    True
    """
    a = _vector_1d(a, "paired_bootstrap a")
    b = _vector_1d(b, "paired_bootstrap b")
    if a.shape != b.shape:
        raise ValueError(
            f"paired_bootstrap: a and b must pair up one to one, got {a.size} and {b.size} values"
        )
    r = bootstrap_interval(a - b, n_boot=n_boot, alpha=alpha, seed=seed, method=method)
    boots = r.distribution
    p = 2 * min(float((boots <= 0).mean()), float((boots >= 0).mean()))
    return {
        "diff": r.estimate,
        "low": r.low,
        "high": r.high,
        "p_value": min(1.0, p),
        "n": int(a.size),
        "method": r.method,
    }


# --------------------------------------------------------------- Gaussian KL between two fitted sets
def _resampled_moments(
    d: np.ndarray, n_boot: int, rng: np.random.Generator, *, cross: bool, budget: float
) -> tuple[np.ndarray, np.ndarray]:
    """Means ``[B,C]`` and unbiased variances ``[B,C]`` (or covariances ``[B,C,C]`` with ``cross``) of
    ``n_boot`` resamples (rows with replacement) of ``d [N,C]``, from row weights (no resampled copy)."""
    n, c = d.shape
    mu = d.mean(0)
    dc = d - mu  # centred rows: sums of squares stay well conditioned
    means = np.empty((n_boot, c))
    second = np.empty((n_boot, c, c) if cross else (n_boot, c))
    outer = (dc[:, :, None] * dc[:, None, :]).reshape(n, c * c) if cross else dc * dc
    step = max(1, int(budget // max(1, n * (c * c if cross else c))))
    for s in range(0, n_boot, step):
        b = min(step, n_boot - s)
        idx = rng.integers(0, n, (b, n))
        w = (
            np.bincount((idx + n * np.arange(b)[:, None]).ravel(), minlength=b * n)
            .reshape(b, n)
            .astype(np.float64)
        )
        m = w @ dc / n
        means[s : s + b] = mu + m
        if cross:
            cross_sums = (w @ outer).reshape(b, c, c)
            second[s : s + b] = (cross_sums - n * m[:, :, None] * m[:, None, :]) / (n - 1)
        else:
            second[s : s + b] = (w @ outer - n * m * m) / (n - 1)
    return means, second


def _pair_kl(mp: np.ndarray, cp: np.ndarray, mq: np.ndarray, cq: np.ndarray) -> np.ndarray:
    """Mean over attribute pairs of the bivariate Gaussian KL(p || q): means ``[B,C]``, covariances
    ``[B,C,C]`` -> ``[B]`` (PaD's mean, Eq. 13)."""
    from genmetrics.functional.divergence import gaussian_kl_2d

    c = mp.shape[-1]
    iu, ju = np.triu_indices(c, 1)

    def pairs(mu: np.ndarray, cov: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        m2 = np.stack([mu[:, iu], mu[:, ju]], -1)
        c2 = np.stack(
            [np.stack([cov[:, iu, iu], cov[:, iu, ju]], -1), np.stack([cov[:, ju, iu], cov[:, ju, ju]], -1)],
            -2,
        )
        return m2, c2

    kl = gaussian_kl_2d(*_definite(*pairs(mp, cp)), *_definite(*pairs(mq, cq))).clamp_min(0.0)
    return kl.mean(-1).numpy()


def _definite(mu: np.ndarray, cov: np.ndarray, floor: float = 1e-12) -> tuple[np.ndarray, np.ndarray]:
    """2x2 covariances made positive definite where rounding left them on or past the edge (a resample of a
    few rows that repeats one row has a zero or, after the path's matrix powers, a slightly negative
    determinant): variances at least ``floor``, correlation within +-(1 - 1e-9). Definite input is unchanged.

    >>> mu, cov = np.zeros((1, 2)), np.array([[[1.0, 1.0], [1.0, 1.0]]])  # singular: rows repeated
    >>> _, fixed = _definite(mu, cov)
    >>> bool(np.linalg.det(fixed[0]) > 0), float(fixed[0, 0, 0]), float(fixed[0, 1, 1])
    (True, 1.0, 1.0)
    """
    cov = cov.copy()
    a = np.maximum(cov[..., 0, 0], floor)
    d = np.maximum(cov[..., 1, 1], floor)
    lim = (1 - 1e-9) * np.sqrt(a * d)
    off = np.clip(0.5 * (cov[..., 0, 1] + cov[..., 1, 0]), -lim, lim)
    cov[..., 0, 0], cov[..., 1, 1], cov[..., 0, 1], cov[..., 1, 0] = a, d, off, off
    return mu, cov


def _sym_power(s: np.ndarray, p: float) -> np.ndarray:
    vals, vecs = np.linalg.eigh(s)
    return (vecs * np.clip(vals, 1e-300, None) ** p) @ vecs.T


def _invert(
    boot_at: Callable[[float], np.ndarray], value_at: Callable[[float], float], observed: float, alpha: float
) -> tuple[float, float, float]:
    """Test inversion along a path ``t >= 0`` of fitted parameters (``t = 0``: divergence 0, ``t = 1``: the
    data's own fit): ``(estimate, low, high)`` of the divergence ``value_at(t)``.

    ``G(t)`` = share of the resampled statistics at ``t`` (``boot_at(t)``) at least the ``observed`` one:
    under the truth it is uniform, so keeping every ``t`` with ``alpha (1 - lam(t)) <= G(t) <= 1 - alpha
    lam(t)`` covers with probability ``1 - alpha`` whatever ``lam(t)`` in ``[0, 1/2]`` is. ``lam`` moves the
    split of ``alpha`` from all-upper near the boundary (``t = 0``: ``[0, hi]``, so a divergence of 0 is
    covered ``1 - alpha`` of the time, not ``1 - alpha / 2``) to equal tails once the test of "divergence 0"
    at level ``alpha`` has power above 1/2 at ``t``: ``lam(t) = clip(power(t) - 1/2, 0, 1/2)``. The
    estimate is the median-unbiased one, ``G(t) = 1/2`` (0 when the statistic is below the null's median).
    """
    from scipy.optimize import brentq

    q0 = float(np.quantile(boot_at(0.0), 1.0 - alpha))

    def parts(t: float) -> tuple[float, float]:
        b = boot_at(t)
        g = float(np.mean(b >= observed))
        lam = min(max(float(np.mean(b > q0)) - 0.5, 0.0), 0.5)
        return g, lam

    def h_lo(t: float) -> float:
        g, lam = parts(t)
        return g - alpha * (1.0 - lam)

    def h_hi(t: float) -> float:
        g, lam = parts(t)
        return g - (1.0 - alpha * lam)

    def h_mid(t: float) -> float:
        return parts(t)[0] - 0.5

    top = 1.0
    for _ in range(60):  # the divergence grows without bound along the path: G -> 1 > 1 - alpha / 2
        if h_hi(top) > 0:
            break
        top *= 2.0
    else:
        return value_at(1.0), 0.0, float("inf")

    def root(h: Callable[[float], float]) -> float:
        return 0.0 if h(0.0) >= 0 else float(brentq(h, 0.0, top, xtol=1e-9 * top, rtol=1e-10))

    t_lo, t_hi, t_mid = root(h_lo), root(h_hi), root(h_mid)
    t_mid = min(max(t_mid, t_lo), t_hi)

    def at(t: float) -> float:  # D(0) = 0 exactly (the fitted covariances' roundoff would give ~1e-17)
        return 0.0 if t == 0.0 else max(value_at(t), 0.0)

    return at(t_mid), at(t_lo), at(t_hi)


def gaussian_kl_interval(
    real,
    gen,
    *,
    pairs: bool = False,
    direction: str = "gen||real",
    eps: float = 1e-6,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    budget: float = 2e7,
) -> Interval:
    """Bias-corrected estimate and confidence interval of mean SaD (``pairs=False``, Eq. 12) or mean PaD
    (``pairs=True``, Eq. 13) between a real ``[N,C]`` and a generated ``[M,C]`` score table, by inverting a
    bootstrap test along a path of Gaussian fits (docs/bootstrap.md has the reasons and the coverage).

    The plug-in KL of fitted Gaussians is biased upward (above 0 even between two samples of one
    distribution) and its bootstrap distribution is biased again, so a resampled interval around it misses
    the truth. Instead, for ``t >= 0`` the first set of the KL (``p``: the generated set for ``"gen||real"``)
    is moved affinely so that its fit is ``t`` of the way from the other set's fit to its own (means on the
    line, covariances on the geodesic ``Sq^1/2 (Sq^-1/2 Sp Sq^-1/2)^t Sq^1/2``): a divergence ``D(t)`` with
    ``D(0) = 0`` and ``D(1)`` = the plug-in. Both sets are resampled (``n_boot`` times, once; the moved set's
    resampled moments are the same affine map of its resampled moments) and every ``t`` whose resampled
    statistics make the observed plug-in unsurprising is kept (:func:`_invert`). Returns an
    :class:`Interval` whose ``estimate`` is the median-unbiased ``D(t)`` (inside ``[low, high]``; 0 when the
    two sets are no further apart than two samples of one distribution usually are), ``plugin`` the paper's
    number, ``distribution`` the resampled plug-ins and ``method`` ``"inversion"``.

    Two samples of one distribution: the interval starts at 0 and the estimate is inside it.

    >>> rng = np.random.default_rng(0)
    >>> real, gen = rng.normal(size=(200, 3)), rng.normal(size=(200, 3))
    >>> iv = gaussian_kl_interval(real, gen, n_boot=400)
    >>> iv.low, iv.low <= iv.estimate <= iv.high, iv.plugin > 0, iv.method
    (0.0, True, True, 'inversion')
    """
    from genmetrics.functional.divergence import check_direction, gaussian_kl

    n_boot, alpha, _ = _check(n_boot, alpha, "BCa")
    check_direction(direction)
    x, y = np.asarray(real, dtype=np.float64), np.asarray(gen, dtype=np.float64)
    if x.ndim != 2 or y.ndim != 2 or x.shape[1] != y.shape[1] or min(x.shape[0], y.shape[0]) < 2:
        raise ValueError(
            f"gaussian_kl_interval: expected real [N,C] and gen [M,C] score tables with the same C and at "
            f"least 2 rows each, got {x.shape} and {y.shape}"
        )
    c = x.shape[1]
    if pairs and c < 2:
        raise ValueError(f"gaussian_kl_interval: PaD needs at least 2 attributes, got {c}")
    p, q = (y, x) if direction == "gen||real" else (x, y)  # KL(p || q); the path moves p
    rng = np.random.default_rng(seed)
    mp_b, sp_b = _resampled_moments(p, n_boot, rng, cross=pairs, budget=budget)
    mq_b, sq_b = _resampled_moments(q, n_boot, rng, cross=pairs, budget=budget)
    mp, mq = p.mean(0), q.mean(0)
    if pairs:
        ridge = eps * np.eye(c)
        sp, sq = np.cov(p, rowvar=False) + ridge, np.cov(q, rowvar=False) + ridge
        sp_b, sq_b = sp_b + ridge, sq_b + ridge
        half, ihalf = _sym_power(sq, 0.5), _sym_power(sq, -0.5)
        lam, u = np.linalg.eigh(ihalf @ sp @ ihalf)
        lam = np.clip(lam, 1e-300, None)
        left, right = half @ u, u.T @ ihalf

        def moved(t: float, m: np.ndarray, s: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
            a = (left * lam ** ((t - 1.0) / 2.0)) @ right  # a sp a^T = the covariance at t
            return mq + t * (mp - mq) + (m - mp), a @ s @ a.T

        def boot_at(t: float) -> np.ndarray:
            m, s = moved(t, mp_b, sp_b)
            return _pair_kl(m, s, mq_b, sq_b)

        def value_at(t: float) -> float:
            m, s = moved(t, mp[None], sp[None])
            return float(_pair_kl(m, s, mq[None], sq[None])[0])

        moving = bool(np.any(mp != mq) or np.any(sp != sq))
    else:
        vp, vq = p.var(0, ddof=1) + eps, q.var(0, ddof=1) + eps
        # a resample of a few rows can repeat one row: variance 0 (or -1e-17 from rounding); floored at a
        # tiny fraction of the data's own so its divergence is large but finite (it sits in the tail)
        floor = max(eps, 1e-12 * float(max(vp.max(), vq.max(), 1e-300)))
        vp_b, vq_b = np.maximum(sp_b + eps, floor), np.maximum(sq_b + eps, floor)

        def kl(m: np.ndarray, v: np.ndarray, mq_: np.ndarray, vq_: np.ndarray) -> np.ndarray:
            # far along the path (t >> 1) a variance ratio ** t can underflow to 0: keep it a positive float
            tiny = np.finfo(np.float64).tiny
            return gaussian_kl(m, np.maximum(v, tiny), mq_, np.maximum(vq_, tiny)).mean(-1).numpy()

        def boot_at(t: float) -> np.ndarray:
            a2 = (vq / vp) ** (1.0 - t)  # variance at t over the data's own: vq (vp / vq)^t / vp
            return kl(mq + t * (mp - mq) + (mp_b - mp), a2 * vp_b, mq_b, vq_b)

        def value_at(t: float) -> float:
            return float(kl((mq + t * (mp - mq))[None], (vq * (vp / vq) ** t)[None], mq[None], vq[None])[0])

        moving = bool(np.any(mp != mq) or np.any(vp != vq))
    plugin = value_at(1.0)
    dist = boot_at(1.0)
    if not moving or plugin <= 0.0:
        return Interval(0.0, 0.0, 0.0, "none (identical fitted Gaussians)", dist, plugin)
    est, lo, hi = _invert(boot_at, value_at, plugin, alpha)
    return Interval(est, lo, hi, "inversion", dist, plugin)
