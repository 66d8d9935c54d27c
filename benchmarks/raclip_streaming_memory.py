"""Peak memory of streaming SaD + PaD + R-SaD over a small vs a large number of images (should be flat).

Each size runs in a fresh subprocess (so peak RSS is its own): the three metrics are fed
``--batch``-sized batches of random images, real and generated alternately, and computed at the end.
The backbone is the tiny random CLIP of ``genmetrics.testing`` (the metric state, not the model, is
what is measured). Prints one JSON line with peak RSS per size, the metric state size and the growth.

Usage: python benchmarks/raclip_streaming_memory.py [--sizes 10000 40000] [--attributes celeba-20] [--batch 500]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time


def _child(n: int, attributes: str, batch: int) -> dict:
    import torch

    import genmetrics as gm
    from genmetrics.testing import tiny_clip

    torch.set_num_threads(1)
    model, tok = tiny_clip()
    metrics = [
        gm.create_metric(name, backbone=model, tokenizer=tok, attributes=attributes, batch_size=batch)
        for name in ("sad", "pad", "rsad")
    ]
    g = torch.Generator().manual_seed(0)
    t = time.perf_counter()
    rss_after_first = None
    for start in range(0, n, batch):
        b = min(batch, n - start)
        imgs = torch.randint(0, 256, (b, 3, 32, 32), generator=g, dtype=torch.uint8)
        role = "reference" if (start // batch) % 2 == 0 else "candidates"
        for m in metrics:
            m.update(**{role: imgs})
        if rss_after_first is None:
            rss_after_first = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0
    values = [float(m.compute()["mean"]) for m in metrics]
    state_bytes = sum(
        getattr(m, k).numel() * getattr(m, k).element_size() for m in metrics for k in m._defaults
    )
    return {
        "n_images": n,
        "seconds": round(time.perf_counter() - t, 1),
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0, 1),
        "rss_after_first_batch_mb": round(rss_after_first, 1),
        "state_bytes": state_bytes,
        "sad_pad_rsad_mean": values,
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--sizes", type=int, nargs="+", default=[10000, 40000])
    ap.add_argument("--attributes", default="celeba-20")
    ap.add_argument("--batch", type=int, default=500)
    ap.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child is not None:
        print(json.dumps(_child(args.child, args.attributes, args.batch)))
        return
    runs = []
    for n in args.sizes:
        out = subprocess.run(
            [
                sys.executable,
                __file__,
                "--child",
                str(n),
                "--attributes",
                args.attributes,
                "--batch",
                str(args.batch),
            ],
            capture_output=True,
            text=True,
            check=True,
            env={**os.environ},
        )
        runs.append(json.loads(out.stdout.strip().splitlines()[-1]))
    first, last = runs[0], runs[-1]
    print(
        json.dumps(
            {
                "benchmark": "raclip_streaming_memory",
                "attributes": args.attributes,
                "batch": args.batch,
                "runs": runs,
                "peak_growth_mb": round(last["peak_rss_mb"] - first["peak_rss_mb"], 1),
                "state_bytes_equal": first["state_bytes"] == last["state_bytes"],
            }
        )
    )


if __name__ == "__main__":
    main()
