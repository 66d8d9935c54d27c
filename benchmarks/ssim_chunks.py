"""SSIM / MS-SSIM on the CPU: chunks of images sized to the cache (the default) against the whole batch at
once (one chunk), CPU time per image, rounds interleaved, same process. One JSON line per case.

    python benchmarks/ssim_chunks.py [--rounds 5] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from genmetrics.functional import pixel

CASES = [("ssim", 32, 64), ("ssim", 16, 128), ("ssim", 8, 256), ("ms_ssim", 8, 176), ("ms_ssim", 4, 512)]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    default = pixel.SSIM_CHUNK_BYTES
    for name, b, size in CASES:
        fn = getattr(pixel, name)
        g = torch.Generator().manual_seed(0)
        x, y = torch.rand(b, 3, size, size, generator=g), torch.rand(b, 3, size, size, generator=g)
        times: dict[str, list[float]] = {"chunked": [], "whole": []}
        same = True
        for _ in range(args.rounds):
            for label, budget in (("chunked", default), ("whole", 1 << 62)):
                pixel.SSIM_CHUNK_BYTES = budget
                t0 = time.process_time()
                out = fn(x, y)
                times[label].append(time.process_time() - t0)
                if label == "chunked":
                    first = out
                else:
                    same = same and torch.equal(first, out)
        pixel.SSIM_CHUNK_BYTES = default
        c, w = min(times["chunked"]), min(times["whole"])
        line = {
            "case": name,
            "batch": b,
            "size": size,
            "threads": args.threads,
            "chunked_ms_per_image": round(1000 * c / b, 3),
            "whole_ms_per_image": round(1000 * w / b, 3),
            "speedup": round(w / c, 2),
            "bitwise_equal": same,
        }
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
