"""PaD at scale and the HCS KDE mode's cost. Prints one JSON line.

* Gaussian PaD (closed form, float64) over ``--attributes`` (default 1000) attributes, i.e. C(C-1)/2
  pairs, from ``--rows`` (default 20000) real and as many generated score rows: wall time and peak
  resident memory (goal <= 10 s and <= 3 GB), plus the same through the streaming sufficient
  statistics (chunks of 1000 rows);
* the HCS-compatible KDE mode (scipy ``gaussian_kde`` on the 2024 code's grid) for SaD+PaD on
  ``--kde-attributes`` (20) x ``--kde-rows`` (5000), against the Gaussian mode on the same data.

Usage: python benchmarks/divergence_scale.py [--attributes 1000] [--rows 20000] [--kde-rows 5000]
"""

from __future__ import annotations

import argparse
import json
import resource
import time

import torch


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attributes", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--kde-attributes", type=int, default=20)
    ap.add_argument("--kde-rows", type=int, default=5000)
    ap.add_argument("--kde-points", type=int, default=10000)
    ap.add_argument("--skip-kde", action="store_true")
    args = ap.parse_args()

    from genmetrics.functional import divergence as D

    g = torch.Generator().manual_seed(0)
    c, n = args.attributes, args.rows
    base_mb = _rss_mb()
    real = torch.rand(n, c, generator=g)  # float32 score rows, as a scorer returns them
    gen = torch.rand(n, c, generator=g) * 0.9 + 0.05
    t = time.perf_counter()
    out = D.pad(real, gen)
    t_pad = time.perf_counter() - t
    peak_pad_mb = _rss_mb()
    assert out.numel() == c * (c - 1) // 2 and torch.isfinite(out).all()

    t = time.perf_counter()
    stats = []
    for x in (real, gen):
        s, cross = torch.zeros(c, dtype=torch.float64), torch.zeros(c, c, dtype=torch.float64)
        for i in range(0, n, 1000):
            xb = x[i : i + 1000].double()
            s += xb.sum(0)
            cross += xb.T @ xb
        stats.append((torch.tensor(float(n), dtype=torch.float64), s, cross))
    streamed = D.pad_from_stats(stats[0], stats[1])
    t_stream = time.perf_counter() - t
    max_dev = float((streamed - out).abs().max())

    result = {
        "benchmark": "divergence_scale",
        "threads": torch.get_num_threads(),
        "pad_attributes": c,
        "pad_pairs": c * (c - 1) // 2,
        "rows_per_set": n,
        "pad_gaussian_s": round(t_pad, 3),
        "pad_streaming_s": round(t_stream, 3),
        "streaming_max_abs_diff": max_dev,
        "peak_rss_mb": round(peak_pad_mb, 1),
        "rss_before_data_mb": round(base_mb, 1),
        "goal_s": 10.0,
        "goal_mb": 3072,
    }
    del real, gen, out, streamed, stats

    if not args.skip_kde:
        ck, nk = args.kde_attributes, args.kde_rows
        r = torch.rand(nk, ck, generator=g, dtype=torch.float64) * 40 - 20  # HCS-like scale
        q = torch.rand(nk, ck, generator=g, dtype=torch.float64) * 36 - 16
        t = time.perf_counter()
        D.sad(r, q)
        D.pad(r, q)
        t_gauss = time.perf_counter() - t
        t = time.perf_counter()
        D.kde_sad(r, q, n_points=args.kde_points)
        t_kde_sad = time.perf_counter() - t
        t = time.perf_counter()
        D.kde_pad(r, q, n_points=args.kde_points)
        t_kde_pad = time.perf_counter() - t
        result.update(
            {
                "kde_attributes": ck,
                "kde_rows_per_set": nk,
                "kde_points": args.kde_points,
                "gaussian_sad_pad_s": round(t_gauss, 4),
                "kde_sad_s": round(t_kde_sad, 2),
                "kde_pad_s": round(t_kde_pad, 2),
                "kde_over_gaussian": round((t_kde_sad + t_kde_pad) / max(t_gauss, 1e-9), 1),
            }
        )
    print(json.dumps(result))


if __name__ == "__main__":
    main()
