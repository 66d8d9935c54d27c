"""Throughput (image pairs per second) of each TPIPS variant on a random Qwen3-VL with Qwen3-VL-2B's
vision/language proportions (widths / SCALE, default 16; 448x448 images), CPU fp32. Each pass scores
16 pairs of distinct images with distinct aspects (cold vision cache), and again with the vision features
cached (the cost of a new aspect for images already seen). Prints one JSON line."""

from __future__ import annotations

import json
import os
import sys

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]


def _measure(m, a, b, aspects, timeit) -> tuple[float, float]:
    with torch.no_grad():
        m.pair_scores(a[:1], b[:1], ["warm-up"])  # one-time kernel set-up outside the timing

        def cold():
            m.vision_cache.clear()
            m.pair_scores(a, b, aspects)

        t_cold = timeit(cold, repeat=2)
        m.pair_scores(a, b, aspects)
        t_warm = timeit(lambda: m.pair_scores(a, b, aspects[::-1]), repeat=1)
    return t_cold, t_warm


def main() -> None:
    from tpips_vision_cache import scaled_2b, timeit

    from genmetrics.testing import random_images, tiny_qwen3vl_processor
    from genmetrics.tpips.model import TPIPSModel

    scale = int(os.environ.get("SCALE", 16))
    n = int(os.environ.get("PAIRS", 16))
    torch.set_num_threads(int(os.environ.get("THREADS", 2)))
    size = 448
    backbone = scaled_2b(scale)
    proc = tiny_qwen3vl_processor(size)
    imgs = random_images(2 * n, size, seed=1)
    aspects = [f"aspect number {i}" for i in range(n)]
    out: dict[str, dict[str, float]] = {}
    for variant in ("late", "mid", "early"):
        m = TPIPSModel(
            backbone, proc, variant, image_size=size, vision_cache_size=4 * n, batch_size=8, probe_layers=20
        )
        t_cold, t_warm = _measure(m, m.load_images(imgs[:n]), m.load_images(imgs[n:]), aspects, timeit)
        out[variant] = {
            "pairs_per_s": round(n / t_cold, 3),
            "pairs_per_s_cached_vision": round(n / t_warm, 3),
        }
    print(
        json.dumps(
            {
                "benchmark": "tpips_throughput",
                "pairs": n,
                "image_size": size,
                "scaled_down": True,
                "config": f"Qwen3-VL-2B proportions, widths/{scale}, random weights, CPU fp32",
                "threads": torch.get_num_threads(),
                "variants": out,
            }
        )
    )


if __name__ == "__main__":
    main()
