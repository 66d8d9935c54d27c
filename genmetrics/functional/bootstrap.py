"""Bootstrap confidence intervals from :func:`scipy.stats.bootstrap`, seeded by default for reproducibility.

The default method is BCa (bias-corrected and accelerated): a percentile interval shifted for the bias and
skew of the statistic's bootstrap distribution, which a plug-in KL divergence (SaD / PaD) has plenty of.
On a simulated SaD between Gaussians (``tests/functional/test_bootstrap.py``) the percentile interval
covers the true value less often than its nominal level; BCa comes closer. Where BCa does not apply --
a degenerate bootstrap distribution (all resamples equal), or a jackknife too costly for the caller's
budget -- the percentile interval is used and the returned method says so.

* :func:`bootstrap_ci` -- one sample, any statistic (``np.mean`` is vectorised);
* :func:`two_sample_ci` -- two samples resampled independently (SaD / PaD between a real and a generated set);
* :func:`paired_bootstrap` -- ``mean(a - b)`` over shared samples with a bootstrap p-value.
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
from scipy.stats import bootstrap

#: most bootstrap resamples accepted (1e5 already gives a percentile interval to ~0.1% of its width)
MAX_N_BOOT = 100_000
METHODS = ("BCa", "percentile", "basic")


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
    (this module is pure math: the caller's option checks give the same words as genmetrics.options)."""
    try:
        if isinstance(value, bool) or value is None:
            raise TypeError
        return float(value.strip() if isinstance(value, str) else value)  # type: ignore[arg-type]
    except (TypeError, ValueError):
        shown = f"the text {value!r}" if isinstance(value, str) else repr(value)
        raise ValueError(f"option {name}: expected {what}, got {shown}") from None


def _check(n_boot: object, alpha: object, method: object) -> tuple[int, float, str]:
    a = _as_number("alpha", alpha, "a finite number in (0.0, 1.0)")
    if not 0.0 < a < 1.0:
        raise ValueError(f"option alpha: expected a finite number in (0.0, 1.0), got {alpha!r}")
    if not isinstance(method, str) or method not in METHODS:
        raise ValueError(f"option method: expected one of {', '.join(map(repr, METHODS))}, got {method!r}")
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
    distribution: np.ndarray


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


def bootstrap_interval(
    values,
    *,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    stat: Callable = np.mean,
    method: str = "BCa",
) -> Interval:
    """:func:`bootstrap_ci` with the method used and the bootstrap distribution.

    >>> r = bootstrap_interval([0.1, 0.4, 0.35, 0.8, 0.5, 0.3], n_boot=500, seed=0)
    >>> r.method, r.distribution.shape, r.low < r.estimate < r.high
    ('BCa', (500,), True)
    >>> bootstrap_interval([2.0, 2.0, 2.0]).method  # nothing to resample
    'none (one distinct value)'
    """
    n_boot, alpha, method = _check(n_boot, alpha, method)
    x = _vector_1d(values, "bootstrap_ci values")
    if x.size == 1 or np.all(x == x[0]):
        est = float(stat(x))
        return Interval(est, est, est, "none (one distinct value)", np.full(n_boot, est))
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
    method: str = "BCa",
) -> tuple[float, float, float]:
    """``(estimate, low, high)``: the statistic of ``values`` and its ``1 - alpha`` bootstrap interval
    (:func:`scipy.stats.bootstrap`, BCa by default; percentile where BCa is undefined).

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
    a, b, *, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0, method: str = "BCa"
) -> dict[str, Any]:
    """Paired bootstrap of ``mean(a - b)`` over shared samples: estimate, interval (BCa by default) and the
    two-sided bootstrap p-value that the mean difference is zero (from the same resamples).

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
