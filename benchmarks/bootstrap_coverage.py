"""Coverage of genmetrics' confidence intervals on simulated data whose true value is known.

One JSON line per (statistic, case, n): the share of ``reps`` simulated data sets whose interval contains the
truth (``coverage``, against ``nominal``), the share whose reported estimate lies inside its own interval,
the mean interval width, and the CPU seconds spent. Statistics and the interval each one is given:

* ``mean`` -- mean of n Exp(1) draws (skewed; truth 1): ``bootstrap_ci`` (BCa);
* ``sad`` / ``pad`` -- mean SaD over 5 attributes / mean PaD over the 3 pairs of 3 correlated attributes
  between a real and a generated set of n images each, Gaussian scores, ``raclip.report.bootstrap_means``
  (what ``compare``, the leaderboard and ``metric.bootstrap_ci`` report); case ``same`` draws both sets from
  one distribution (true divergence 0, the hard case), ``shifted`` moves the generated means and spreads
  (the truth is the closed-form KL of the two Gaussians); ``--method`` picks the interval (``inversion``,
  the default, or the resampled plug-in: ``BCa``, ``percentile``, ``basic``);
* ``paired_difference`` -- mean of a - b over n shared samples (skewed; truth 0.2): ``paired_bootstrap``;
* ``win_rate`` / ``bradley_terry`` -- n pairs among 4 generators with Bradley-Terry strengths
  (-0.6, -0.2, 0.2, 0.6): the win rate of each pair of generators (truth ``sigmoid(theta_i - theta_j)``)
  and each rating (truth ``theta``, mean zero) with the intervals of ``mie.ranking.rank_generators``
  (counted over every cell / generator of every data set).

    python benchmarks/bootstrap_coverage.py [--stat sad pad] [--n 50 200 1000] [--reps 1000] [--level 0.95]

CPU only; the divergences take about 0.1 s per data set (n_boot 1000), the rankings about 0.1 s (one
ranking per data set serves both ``win_rate`` and ``bradley_terry``: they share the data sets).
"""

from __future__ import annotations

import argparse
import json
import signal
import time
from collections.abc import Callable

import numpy as np
import torch

from genmetrics.functional import divergence as D
from genmetrics.functional.bootstrap import bootstrap_ci, paired_bootstrap
from genmetrics.raclip.report import bootstrap_means

STATS = ("mean", "sad", "pad", "paired_difference", "win_rate", "bradley_terry")
THETA = np.array([-0.6, -0.2, 0.2, 0.6])

# SaD: 5 independent attributes, real N(0, 1); "shifted": generated N(0.3, 1.2^2) in each
SAD_CASES = {"same": (0.0, 1.0), "shifted": (0.3, 1.2)}
# PaD: 3 attributes; real unit variances, correlation 0.5; "shifted": generated means 0.3, sd 1.2, corr. 0.2
PAD_REAL = (np.zeros(3), np.full((3, 3), 0.5) + 0.5 * np.eye(3))
PAD_CASES = {"same": PAD_REAL, "shifted": (np.full(3, 0.3), 1.44 * (np.full((3, 3), 0.2) + 0.8 * np.eye(3)))}


def true_pad(mu_g: np.ndarray, cov_g: np.ndarray, mu_r: np.ndarray, cov_r: np.ndarray) -> float:
    """Mean over attribute pairs of KL(gen || real) of the bivariate marginals (closed form)."""
    iu, ju = np.triu_indices(len(mu_g), 1)

    def pairs(mu, cov):
        m = torch.from_numpy(np.stack([mu[iu], mu[ju]], -1))
        c = torch.from_numpy(
            np.stack([np.stack([cov[iu, iu], cov[iu, ju]], -1), np.stack([cov[ju, iu], cov[ju, ju]], -1)], -2)
        )
        return m, c

    return float(D.gaussian_kl_2d(*pairs(mu_g, cov_g), *pairs(mu_r, cov_r)).mean())


def divergence_case(stat: str, case: str, method: str) -> tuple[float, Callable]:
    """``(truth, one(rng, n, seed, alpha) -> [(estimate, low, high)])`` for SaD or PaD."""
    if stat == "sad":
        mg, sg = SAD_CASES[case]
        truth = float(D.gaussian_kl(mg, sg * sg, 0.0, 1.0))

        def draw(rng, n):
            return rng.normal(0.0, 1.0, (n, 5)), rng.normal(mg, sg, (n, 5))
    else:
        mu_g, cov_g = PAD_CASES[case]
        truth = true_pad(mu_g, cov_g, *PAD_REAL)

        def draw(rng, n):
            return rng.multivariate_normal(*PAD_REAL, n), rng.multivariate_normal(mu_g, cov_g, n)

    def one(rng, n, seed, alpha, n_boot):
        real, gen = (torch.from_numpy(a) for a in draw(rng, n))
        b = bootstrap_means(
            real,
            gen,
            n_boot=n_boot,
            seed=seed,
            alpha=alpha,
            method=method,
            pad_budget=0.0 if stat == "sad" else 1e12,
        )
        return [(b[f"{stat}_estimate"], *b[stat], b[f"{stat}_plugin"])]

    return truth, one


def simple_case(stat: str) -> tuple[float, Callable]:
    if stat == "mean":

        def one(rng, n, seed, alpha, n_boot):
            return [bootstrap_ci(rng.exponential(size=n), n_boot=n_boot, alpha=alpha, seed=seed)]

        return 1.0, one

    def paired(rng, n, seed, alpha, n_boot):
        a = rng.exponential(size=n)
        b = 0.8 * a + rng.normal(0.0, 0.3, n)  # E[a - b] = 0.2
        r = paired_bootstrap(a, b, n_boot=n_boot, alpha=alpha, seed=seed)
        return [(r["diff"], r["low"], r["high"])]

    return 0.2, paired


_RANKINGS: dict = {}


def ranking_case(stat: str) -> tuple[np.ndarray, Callable]:
    from genmetrics.mie.ranking import rank_generators

    k = len(THETA)
    names = [f"g{i}" for i in range(k)]
    iu, ju = np.triu_indices(k, 1)
    truth = THETA if stat == "bradley_terry" else 1.0 / (1.0 + np.exp(-(THETA[iu] - THETA[ju])))

    def one(rng, n, seed, alpha, n_boot):
        a = rng.integers(0, k, n)
        b = (a + rng.integers(1, k, n)) % k
        won = rng.random(n) < 1.0 / (1.0 + np.exp(-(THETA[a] - THETA[b])))
        key = (n, seed, alpha, n_boot, won.tobytes(), a.tobytes())
        if key not in _RANKINGS:  # win rates and ratings of one data set come from one ranking (kept: small)
            _RANKINGS[key] = rank_generators(
                [names[i] for i in a],
                [names[i] for i in b],
                outcome=won.astype(float),
                n_boot=n_boot,
                alpha=alpha,
                seed=seed,
            )
        res = _RANKINGS[key]
        if stat == "bradley_terry":
            bt = res["bradley_terry"]
            return [(bt[g]["theta"], bt[g]["low"], bt[g]["high"]) for g in names]
        wr = res["win_rate"]
        return [(wr["matrix"][i][j], wr["low"][i][j], wr["high"][i][j]) for i, j in zip(iu, ju)]

    return truth, one


def run(stat: str, case: str, n: int, a: argparse.Namespace) -> dict:
    if stat in ("sad", "pad"):
        truth, one = divergence_case(stat, case, a.method)
    elif stat in ("mean", "paired_difference"):
        truth, one = simple_case(stat)
    else:
        truth, one = ranking_case(stat)
    truths = np.atleast_1d(np.asarray(truth, dtype=np.float64))
    reps = a.reps if stat not in ("win_rate", "bradley_terry") else a.ranking_reps
    index = STATS.index("win_rate" if stat == "bradley_terry" else stat)  # the rankings share data sets
    rng = np.random.default_rng([a.seed, n, index, len(case)])
    hits = inside = cells = plugin_inside = 0
    width = 0.0
    t0 = time.process_time()
    done, stopped = 0, False
    try:  # a time limit (SIGTERM, Ctrl-C) ends the line with the data sets finished so far, marked partial
        for r in range(reps):
            rows = one(rng, n, a.seed + r, 1.0 - a.level, a.n_boot)
            for (est, lo, hi, *plugin), t in zip(rows, truths):
                if est is None or lo is None:  # a cell that never met in this data set
                    continue
                cells += 1
                plugin_inside += lo <= (plugin[0] if plugin else est) <= hi
                hits += lo <= t <= hi
                inside += lo <= est <= hi
                width += hi - lo
            done += 1
    except KeyboardInterrupt:
        stopped = True
    line = {
        "benchmark": "bootstrap_coverage",
        "statistic": stat,
        "case": case,
        "method": a.method if stat in ("sad", "pad") else "default",
        "n": n,
        "nominal": a.level,
        "coverage": round(hits / max(cells, 1), 4),
        "estimate_inside": round(inside / max(cells, 1), 4),
        "plugin_inside": round(plugin_inside / max(cells, 1), 4),
        "mean_width": float(f"{width / max(cells, 1):.4g}"),
        "truth": [round(float(v), 6) for v in truths] if truths.size > 1 else round(float(truths[0]), 6),
        "reps": done,
        "intervals": cells,
        "n_boot": a.n_boot,
        "seed": a.seed,
        "cpu_seconds": round(time.process_time() - t0, 1),
    }
    if stopped:
        line["partial"] = f"stopped after {done} of {reps} data sets"
    return line


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--stat", nargs="+", default=list(STATS), choices=STATS)
    ap.add_argument("--n", nargs="+", type=int, default=[50, 200, 1000])
    ap.add_argument("--case", nargs="+", default=["same", "shifted"], choices=["same", "shifted"])
    ap.add_argument("--reps", type=int, default=1000, help="simulated data sets per line")
    ap.add_argument(
        "--ranking-reps", type=int, default=200, help="data sets per win-rate / Bradley-Terry line"
    )
    ap.add_argument("--level", type=float, default=0.95)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--method", default="inversion", choices=["inversion", "BCa", "percentile", "basic"])
    a = ap.parse_args()
    signal.signal(signal.SIGTERM, signal.default_int_handler)  # `timeout` stops a line, keeping its data sets
    for stat in a.stat:
        for case in a.case if stat in ("sad", "pad") else ["-"]:
            for n in a.n:
                line = run(stat, case, n, a)
                print(json.dumps(line), flush=True)
                if "partial" in line:
                    return


if __name__ == "__main__":
    main()
