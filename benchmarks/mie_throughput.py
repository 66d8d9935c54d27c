"""MIE scoring throughput (pairs per second) with token-budget batching.

    python benchmarks/mie_throughput.py                 # tiny random Qwen3.5 on CPU
    python benchmarks/mie_throughput.py --size 0.8b --device cuda --pairs 64

``0.8b`` is Qwen3.5-0.8B's released architecture with random weights
(:mod:`genmetrics.backbones.real_configs`: hidden 1024, 24 layers in the 3:1 Gated-DeltaNet /
full-attention pattern, a 12-block vision tower; bf16 on CUDA) and its image preprocessing
(``processor_for``), with 512x512 references and 1024x1024 candidates; it needs a GPU. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=["tiny", "0.8b"], default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--budget", type=int, default=16384, help="tokens per forward batch")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch

    from genmetrics.mie.model import MIEModel
    from genmetrics.testing import random_images, tiny_qwen35, tiny_qwen35_processor
    from genmetrics.testing.real_models import build_real_model, processor_for

    dev = torch.device(args.device)
    if args.size == "tiny":
        vlm, proc, ref_px, cand_px = tiny_qwen35(0), tiny_qwen35_processor(), 64, 64
    else:  # the released architecture (typed config), random weights, built in place on the device
        dtype = torch.bfloat16 if dev.type == "cuda" else torch.float32
        vlm = build_real_model("Qwen3.5-0.8B", seed=0, dtype=dtype, device=dev)
        proc = processor_for("Qwen3.5-0.8B")
        ref_px, cand_px = 512, 1024
    model = (
        MIEModel(vlm, proc, tuning="lora_layer", token_budget=args.budget, max_length=32768).to(dev).eval()
    )
    rng = random.Random(args.seed)
    refs_pool = list(random_images(16, ref_px, seed=1))
    cands = random_images(2 * args.pairs, cand_px, seed=2)
    refs = [rng.sample(refs_pool, rng.choice([2, 4, 6, 8])) for _ in range(args.pairs)]
    prompts = ["a person and a dog sitting next to a chair with a lamp behind them"] * args.pairs
    model.score_pairs(refs[:2], prompts[:2], cands[:2], cands[2:4])  # warm-up
    if dev.type == "cuda":
        torch.cuda.synchronize()
    t = time.perf_counter()
    model.stats.update(images_encoded=0, sequences=0, forward_batches=0)
    model.score_pairs(refs, prompts, cands[: args.pairs], cands[args.pairs :])
    if dev.type == "cuda":
        torch.cuda.synchronize()
    dt = time.perf_counter() - t
    print(
        json.dumps(
            {
                "benchmark": "mie_throughput",
                "size": args.size,
                "device": str(dev),
                "pairs": args.pairs,
                "references": "2/4/6/8",
                "seconds": round(dt, 3),
                "pairs_per_s": round(args.pairs / dt, 3),
                "forward_batches": model.stats["forward_batches"],
                "images_encoded": model.stats["images_encoded"],
                "params_m": round(sum(p.numel() for p in vlm.parameters()) / 1e6, 2),
                "peak_mem_gib": round(torch.cuda.max_memory_allocated() / 2**30, 2)
                if dev.type == "cuda"
                else None,
            }
        )
    )


if __name__ == "__main__":
    main()
