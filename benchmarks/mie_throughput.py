"""MIE scoring throughput (pairs per second) with token-budget batching.

    python benchmarks/mie_throughput.py                 # tiny random Qwen3.5 on CPU
    python benchmarks/mie_throughput.py --size 0.8b-like --device cuda --pairs 64

``0.8b-like`` is a random Qwen3.5 with a config of roughly Qwen3.5-0.8B's size (hidden 1024, 24 layers in
the 3:1 Gated-DeltaNet / full-attention pattern, a 24-block vision tower; approximate, not the released
config) with 512x512 references and 1024x1024 candidates; it needs a GPU. Prints one JSON line.
"""

from __future__ import annotations

import argparse
import json
import random
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

REAL_LIKE = {
    "text_config": {
        "hidden_size": 1024,
        "intermediate_size": 3584,
        "num_hidden_layers": 24,
        "num_attention_heads": 8,
        "num_key_value_heads": 2,
        "head_dim": 256,
        "linear_key_head_dim": 128,
        "linear_value_head_dim": 128,
        "linear_num_key_heads": 16,
        "linear_num_value_heads": 16,
        "vocab_size": 248320,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 6,
        "max_position_embeddings": 32768,
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 10_000_000.0,
            "partial_rotary_factor": 0.25,
            "mrope_section": [11, 11, 10],
            "mrope_interleaved": True,
        },
    },
    "vision_config": {
        "depth": 24,
        "hidden_size": 768,
        "intermediate_size": 3072,
        "num_heads": 12,
        "out_hidden_size": 1024,
        "num_position_embeddings": 2304,
    },
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--size", choices=["tiny", "0.8b-like"], default="tiny")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--pairs", type=int, default=16)
    ap.add_argument("--budget", type=int, default=16384, help="tokens per forward batch")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch

    from genmetrics.mie.model import MIEModel
    from genmetrics.testing import random_images, tiny_qwen35, tiny_qwen35_processor

    dev = torch.device(args.device)
    if args.size == "tiny":
        vlm, proc, ref_px, cand_px = tiny_qwen35(0), tiny_qwen35_processor(), 64, 64
    else:
        vlm = tiny_qwen35(0, **REAL_LIKE)
        proc = tiny_qwen35_processor(image_size=1024)
        ref_px, cand_px = 512, 1024
        if dev.type == "cuda":
            vlm = vlm.to(torch.bfloat16)
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
