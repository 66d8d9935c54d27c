"""Bootstrap confidence intervals (percentile), seeded by default for reproducibility."""

from __future__ import annotations

import numpy as np

#: most bootstrap resamples accepted (1e5 already gives a percentile interval to ~0.1% of its width)
MAX_N_BOOT = 100_000


def check_n_boot(n_boot: object, name: str = "n_boot") -> int:
    """``n_boot`` as an int in ``[1, MAX_N_BOOT]`` (0 would give a zero-width interval), naming the option."""
    from genmetrics.options import integer

    return integer(name, n_boot, lo=1, hi=MAX_N_BOOT)


def bootstrap_ci(values, *, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0, stat=np.mean) -> tuple[float, float, float]:
    """``(estimate, low, high)``: the statistic of ``values`` and its percentile bootstrap interval."""
    n_boot = check_n_boot(n_boot)
    from genmetrics.options import number

    alpha = number("alpha", alpha, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1 or x.size == 0:
        raise ValueError(f"bootstrap_ci expects a non-empty 1-D array, got shape {x.shape}")
    est = float(stat(x))
    if x.size == 1:
        return est, est, est
    rng = np.random.default_rng(seed)
    idx = rng.integers(0, x.size, size=(n_boot, x.size))
    boots = np.apply_along_axis(stat, 1, x[idx]) if stat is not np.mean else x[idx].mean(1)
    lo, hi = np.quantile(boots, [alpha / 2, 1 - alpha / 2])
    return est, float(lo), float(hi)


def paired_bootstrap(a, b, *, n_boot: int = 1000, alpha: float = 0.05, seed: int = 0) -> dict[str, float]:
    """Paired bootstrap of ``mean(a - b)`` over shared samples: estimate, interval and the two-sided
    bootstrap p-value that the mean difference is zero."""
    n_boot = check_n_boot(n_boot)
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape or a.ndim != 1 or a.size == 0:
        raise ValueError(f"paired_bootstrap expects two non-empty 1-D arrays of one shape, got {a.shape} and {b.shape}")
    d = a - b
    est, lo, hi = bootstrap_ci(d, n_boot=n_boot, alpha=alpha, seed=seed)
    rng = np.random.default_rng(seed)
    boots = d[rng.integers(0, d.size, size=(n_boot, d.size))].mean(1)
    p = 2 * min(float((boots <= 0).mean()), float((boots >= 0).mean()))
    return {"diff": est, "low": lo, "high": hi, "p_value": min(1.0, p), "n": int(d.size)}
