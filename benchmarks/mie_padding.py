"""Padding efficiency of MIE's token-budget batching vs fixed-size batches on a 2-8 reference mix.

Sequences are built by the real ``MIEModel.prepare`` (tokeniser, image processor, template), with the
image token counts of a real Qwen3.5 setup: 512x512 references (256 tokens each) and 1024x1024
candidates (1024 tokens). Prints one JSON line; goal: token-budget efficiency >= 0.9.

    python benchmarks/mie_padding.py [--samples 256] [--budget 16384] [--batch 8]
"""

from __future__ import annotations

import argparse
import json
import random
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--samples", type=int, default=256)
    ap.add_argument("--budget", type=int, default=16384, help="padded tokens per token-budget batch")
    ap.add_argument("--batch", type=int, default=8, help="sequences per fixed batch")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    import torch
    from PIL import Image

    from genmetrics.data.batching import fixed_batches, padding_efficiency, token_budget_batches
    from genmetrics.mie.model import MIEModel, tiny_backbone
    from genmetrics.testing import tiny_qwen35_processor

    rng = random.Random(args.seed)
    g = torch.Generator().manual_seed(args.seed)

    def image(size: int) -> Image.Image:
        arr = torch.randint(0, 256, (size, size, 3), generator=g, dtype=torch.uint8).numpy()
        return Image.fromarray(arr)

    model = MIEModel(tiny_backbone(0), tiny_qwen35_processor(image_size=1024), tuning=None, max_length=32768)
    refs_pool = [image(512) for _ in range(12)]
    cand_pool = [image(1024) for _ in range(4)]
    words = "a man a woman a dog a cat a chair a lamp holding sitting next to behind hugging on top of".split()
    refs, prompts, cands = [], [], []
    for i in range(args.samples):
        k = rng.choice([2, 3, 4, 5, 6, 7, 8])
        refs.append(rng.sample(refs_pool, k))
        prompts.append(" ".join(rng.choice(words) for _ in range(rng.randint(10, 10 * k))))
        cands.append(cand_pool[i % len(cand_pool)])
    batch = model.prepare(refs, prompts, cands, _encode=False)
    costs = [s.cost for s in batch.sequences]
    budget = token_budget_batches(costs, args.budget)
    fixed = list(fixed_batches(list(range(len(costs))), args.batch))
    eff_budget = padding_efficiency(costs, budget)
    print(json.dumps({
        "benchmark": "mie_padding_efficiency",
        "samples": len(costs), "references": "2-8 (uniform)", "tokens_min": min(costs), "tokens_max": max(costs),
        "token_budget": args.budget, "token_budget_batches": len(budget),
        "token_budget_efficiency": round(eff_budget, 4),
        "fixed_batch_size": args.batch, "fixed_batches": len(fixed),
        "fixed_efficiency": round(padding_efficiency(costs, fixed), 4),
        "goal": ">= 0.9", "meets_goal": eff_budget >= 0.9,
    }))


if __name__ == "__main__":
    main()
