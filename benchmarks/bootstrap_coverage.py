"""Coverage of the bootstrap intervals of mean SaD on simulated Gaussian score tables with a known KL.

Real scores ~ N(0, 1), generated ~ N(0.3, 1.2^2) in each of C attributes, so SaD = KL(gen || real) =
0.5 (log(1/1.44) + 1.44 + 0.09 - 1) nats per attribute. For each setting, ``reps`` independent data sets;
the interval of ``genmetrics.raclip.report.bootstrap_means`` (scipy.stats.bootstrap, 1000 resamples) is
computed with each method and we count how often it contains the truth. Prints one JSON line per setting.

    python benchmarks/bootstrap_coverage.py [--reps 300] [--level 0.9]
"""

from __future__ import annotations

import argparse
import json
import time

import numpy as np
import torch

from genmetrics.raclip.report import bootstrap_means

SETTINGS = ((100, 1), (30, 5), (100, 10), (400, 10))
METHODS = ("BCa", "percentile", "basic")


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--reps", type=int, default=300)
    ap.add_argument("--level", type=float, default=0.9)
    ap.add_argument("--n-boot", type=int, default=1000)
    a = ap.parse_args()
    (mr, sr), (mg, sg) = (0.0, 1.0), (0.3, 1.2)
    true = 0.5 * (np.log(sr**2 / sg**2) + (sg**2 + (mg - mr) ** 2) / sr**2 - 1)
    for n, c in SETTINGS:
        rng = np.random.default_rng(123)
        hits = dict.fromkeys(METHODS, 0)
        t0 = time.perf_counter()
        for r in range(a.reps):
            real = torch.from_numpy(rng.normal(mr, sr, (n, c)))
            gen = torch.from_numpy(rng.normal(mg, sg, (n, c)))
            for m in METHODS:
                lo, hi = bootstrap_means(
                    real, gen, n_boot=a.n_boot, seed=r, alpha=1 - a.level, pad_budget=0.0, method=m
                )["sad"]
                hits[m] += lo <= true <= hi
        print(
            json.dumps(
                {
                    "benchmark": "sad_bootstrap_coverage",
                    "n_per_set": n,
                    "attributes": c,
                    "reps": a.reps,
                    "nominal": a.level,
                    "true_sad": round(float(true), 6),
                    "coverage": {m: round(hits[m] / a.reps, 3) for m in METHODS},
                    "seconds": round(time.perf_counter() - t0, 1),
                }
            ),
            flush=True,
        )


if __name__ == "__main__":
    main()
