"""Peak memory of a leaderboard run against the number of images: images stream from disk in chunks and
the metric state is reset after each chunk, so peak memory should not grow with the set size.

    python benchmarks/leaderboard_memory.py [--sizes 64 1024] [--side 96]

Each size runs in a fresh process (psnr, 2 generators, chunks of 16) and reports its peak RSS.
Prints one JSON line; goal: peak RSS at the largest size <= 1.10 x at the smallest.
"""

from __future__ import annotations

import argparse
import json
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path


def _make(root: Path, n: int, side: int) -> Path:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    for folder in ("refs", "gen/a", "gen/b"):
        (root / folder).mkdir(parents=True, exist_ok=True)
    for i in range(n):
        ref = rng.integers(0, 256, (side, side, 3), dtype=np.uint8)
        Image.fromarray(ref).save(root / "refs" / f"{i:05d}.png")
        for k, folder in enumerate(("gen/a", "gen/b")):
            noisy = np.clip(ref + rng.normal(0, 4 + 8 * k, ref.shape), 0, 255).astype(np.uint8)
            Image.fromarray(noisy).save(root / folder / f"{i:05d}.png")
    cfg = root / "config.toml"
    cfg.write_text(
        '[data]\nreferences = "refs"\n[[generators]]\nname = "a"\nimages = "gen/a"\n'
        '[[generators]]\nname = "b"\nimages = "gen/b"\n[[metrics]]\nname = "psnr"\n'
    )
    return cfg


def _child(n: int, side: int) -> None:
    from genmetrics.leaderboard import run_leaderboard

    with tempfile.TemporaryDirectory() as tmp:
        cfg = _make(Path(tmp), n, side)
        t = time.perf_counter()
        run_leaderboard(cfg, Path(tmp) / "out", batch_size=16, plots=False, device="cpu")
        elapsed = time.perf_counter() - t
    print(
        json.dumps(
            {
                "n": n,
                "peak_rss_mb": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
                "seconds": elapsed,
            }
        )
    )


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sizes", type=int, nargs="+", default=[64, 1024])
    ap.add_argument("--side", type=int, default=96)
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        _child(args.child, args.side)
        return
    runs = []
    for n in args.sizes:
        out = subprocess.run(
            [sys.executable, __file__, "--child", str(n), "--side", str(args.side)],
            capture_output=True,
            text=True,
            check=True,
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    ratio = runs[-1]["peak_rss_mb"] / runs[0]["peak_rss_mb"]
    print(
        json.dumps(
            {
                "benchmark": "leaderboard_memory",
                "images_per_generator": args.sizes,
                "peak_rss_mb": [round(r["peak_rss_mb"], 1) for r in runs],
                "seconds": [round(r["seconds"], 2) for r in runs],
                "ratio": round(ratio, 3),
                "goal": "ratio <= 1.10",
                "ok": ratio <= 1.10,
            }
        )
    )


if __name__ == "__main__":
    main()
