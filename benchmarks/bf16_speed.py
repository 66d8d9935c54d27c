"""bf16 against float32 for one image tower: genmetrics' encode_image of a random ViT-B/16 (open_clip) in
float32 and under CPU autocast bfloat16, and open_clip's own encode_image under autocast. One JSON line
(CPU seconds, median of interleaved rounds); the speed goal (bf16 >= 1.8x float32) applies to CPUs with
bf16 units (``cpu_has_avx512_bf16``, or AMX).

Usage: python benchmarks/bf16_speed.py [--images 8] [--rounds 3] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from typing import Any

import torch


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import open_clip

    from genmetrics.backbones.clip_vision import encode_image

    oc = open_clip.create_model("ViT-B-16-quickgelu", pretrained=None).eval()
    x = torch.randn(args.images, 3, 224, 224, generator=torch.Generator().manual_seed(0))

    def run(fn: Any, bf16: bool) -> Any:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return fn(x)

    tools = {
        "fp32": lambda: run(lambda v: encode_image(oc, v), False),
        "bf16": lambda: run(lambda v: encode_image(oc, v), True),
        "open_clip_autocast_bf16": lambda: run(oc.encode_image, True),
    }
    for f in tools.values():
        f()  # warm-up: packing, primitive creation
    cpu: dict[str, list[float]] = {k: [] for k in tools}
    for _ in range(args.rounds):
        for k, f in tools.items():
            c0 = time.process_time()
            f()
            cpu[k].append(time.process_time() - c0)
    med = {k: statistics.median(v) for k, v in cpu.items()}
    try:
        flags = open("/proc/cpuinfo").read()
    except OSError:
        flags = ""
    line = {
        "benchmark": "bf16_speed",
        "model": "ViT-B/16 (random)",
        "images": args.images,
        "threads": torch.get_num_threads(),
        "rounds": args.rounds,
        **{f"{k}_cpu_s": round(v, 3) for k, v in med.items()},
        "bf16_over_fp32": round(med["fp32"] / med["bf16"], 3),
        "open_clip_autocast_bf16_over_fp32": round(med["fp32"] / med["open_clip_autocast_bf16"], 3),
        "goal_bf16_over_fp32": 1.8,
        "cpu_has_avx512_bf16": "avx512_bf16" in flags,
        "cpu_has_amx_bf16": "amx_bf16" in flags,
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
