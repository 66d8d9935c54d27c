"""PaD at scale and the HCS KDE mode's cost. Prints one JSON line.

* Gaussian PaD (closed form, float64) over ``--attributes`` (default 1000) attributes, i.e. C(C-1)/2
  pairs, from ``--rows`` (default 20000) real and as many generated score rows: wall time and peak
  resident memory (goal <= 10 s and <= 3 GB), plus the same through the streaming sufficient
  statistics (chunks of 1000 rows);
* the HCS-compatible KDE mode (scipy ``gaussian_kde`` on the 2024 code's grid) for SaD+PaD on
  ``--kde-attributes`` (20) x ``--kde-rows`` (5000), against the Gaussian mode on the same data.

* ``--symmetry-rounds R`` (default 3): PaD as shipped (each pair of attributes multiplied once, BLAS
  syrk) against the full C x C product (the earlier implementation, reproduced here), each in a fresh
  process, alternating, 1 BLAS thread on both sides: CPU seconds, peak resident memory, the median
  ratio and the largest difference between the two results.

Usage: python benchmarks/divergence_scale.py [--attributes 1000] [--rows 20000] [--kde-rows 5000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import statistics
import subprocess
import sys
import time

import torch


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: KiB


def _full_product_pad(real: torch.Tensor, gen: torch.Tensor) -> torch.Tensor:
    """PaD as computed before the symmetric product: float64 copy, elementwise finiteness mask, a second
    centred copy and the full ``xc.T @ xc``."""
    from genmetrics.functional import divergence as D

    real, gen = real.to(torch.float64), gen.to(torch.float64)  # both validated before any statistics
    assert bool(torch.isfinite(real).all()) and bool(torch.isfinite(gen).all())

    def stats(x: torch.Tensor):
        m = x.mean(0)
        xc = x - m
        n = x.shape[0]
        return torch.tensor(float(n), dtype=torch.float64), x.sum(0), xc.T @ xc + n * torch.outer(m, m)

    return D.pad_from_stats(stats(real), stats(gen))


def _symmetry_worker(mode: str, c: int, n: int) -> None:
    from genmetrics.functional import divergence as D

    g = torch.Generator().manual_seed(0)
    real = torch.rand(n, c, generator=g)
    gen = torch.rand(n, c, generator=g) * 0.9 + 0.05
    base = _rss_mb()
    t = time.process_time()
    out = D.pad(real, gen) if mode == "symmetric" else _full_product_pad(real, gen)
    cpu = time.process_time() - t
    torch.save(out, os.environ["DIVERGENCE_SCALE_OUT"])
    print(json.dumps({"cpu_s": cpu, "peak_rss_mb": _rss_mb(), "rss_before_mb": base}))


def _symmetry(c: int, n: int, rounds: int) -> dict:
    import tempfile

    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    runs: dict[str, list[dict]] = {"symmetric": [], "full": []}
    outs = {}
    with tempfile.TemporaryDirectory() as tmp:
        for _ in range(rounds):
            for mode in ("full", "symmetric"):
                env["DIVERGENCE_SCALE_OUT"] = path = os.path.join(tmp, mode + ".pt")
                cmd = [sys.executable, __file__, "--worker", mode, "--attributes", str(c), "--rows", str(n)]
                res = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True)
                runs[mode].append(json.loads(res.stdout.strip().splitlines()[-1]))
                outs[mode] = torch.load(path)
    full, sym = outs["full"], outs["symmetric"]
    ratios = [f["cpu_s"] / s["cpu_s"] for f, s in zip(runs["full"], runs["symmetric"])]
    return {
        "symmetry_rounds": rounds,
        "full_product_cpu_s": [round(r["cpu_s"], 3) for r in runs["full"]],
        "symmetric_cpu_s": [round(r["cpu_s"], 3) for r in runs["symmetric"]],
        "symmetric_speedup_median": round(statistics.median(ratios), 2),
        "symmetric_speedup_min": round(min(ratios), 2),
        "full_product_peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs["full"]), 1),
        "symmetric_peak_rss_mb": round(max(r["peak_rss_mb"] for r in runs["symmetric"]), 1),
        "symmetric_vs_full_max_abs_diff": float((full - sym).abs().max()),
        "symmetric_vs_full_max_rel_diff": float(((full - sym).abs() / full.abs().clamp_min(1e-300)).max()),
        "goal_speedup": 1.6,
    }


def main() -> None:
    if "--worker" in sys.argv:
        i = sys.argv.index("--worker")
        c = int(sys.argv[sys.argv.index("--attributes") + 1])
        n = int(sys.argv[sys.argv.index("--rows") + 1])
        torch.set_num_threads(1)
        _symmetry_worker(sys.argv[i + 1], c, n)
        return
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--attributes", type=int, default=1000)
    ap.add_argument("--rows", type=int, default=20000)
    ap.add_argument("--kde-attributes", type=int, default=20)
    ap.add_argument("--kde-rows", type=int, default=5000)
    ap.add_argument("--kde-points", type=int, default=10000)
    ap.add_argument("--skip-kde", action="store_true")
    ap.add_argument("--symmetry-rounds", type=int, default=3)
    ap.add_argument("--symmetry-only", action="store_true", help="only the symmetric-vs-full comparison")
    args = ap.parse_args()
    if args.symmetry_only:
        out = {"benchmark": "divergence_scale_symmetry", "pad_attributes": args.attributes}
        out.update({"rows_per_set": args.rows, "threads": 1})
        out.update(_symmetry(args.attributes, args.rows, args.symmetry_rounds))
        print(json.dumps(out))
        return

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
    if args.symmetry_rounds > 0:
        result.update(_symmetry(c, n, args.symmetry_rounds))
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
