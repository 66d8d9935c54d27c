"""What re-casting float32 weights to bfloat16 at every forward costs under CPU autocast, and what keeping the
cast copies (genmetrics.accel.cast_weights) saves: per model and batch, the share of a bf16 forward's CPU
time in casts (``aten::_to_copy``, inclusive, from ``torch.profiler``) without and with the kept copies,
and the CPU seconds of both (median of interleaved rounds), with the bitwise check of the two outputs.

Models (random weights): open_clip ViT-B/16 through ``encode_image`` (clipscore / clip_i / raclip's tower),
DINOv2-base (transformers), and the vision towers of Qwen3-VL-Embedding-2B (TPIPS) and Qwen3.5-0.8B (MIE) on
``--qwen-size`` px images. One JSON line per model and batch.

Usage: python benchmarks/bf16_weight_casts.py [--batches 1,8] [--rounds 3] [--qwen-size 224]
       [--models clip,dino,tpips,mie]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path
from typing import Any

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]


def cast_share(fn: Any) -> float:
    """Share of ``fn()``'s CPU time (sum of self times) spent in ``aten::_to_copy`` (inclusive)."""
    from torch.profiler import ProfilerActivity, profile

    with profile(activities=[ProfilerActivity.CPU]) as prof:
        fn()
    ev = prof.key_averages()
    total = sum(e.self_cpu_time_total for e in ev)
    cast = sum(e.cpu_time_total for e in ev if e.key == "aten::_to_copy")
    return cast / total if total else 0.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batches", default="1,8")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--qwen-size", type=int, default=224)
    ap.add_argument("--models", default="clip,dino,tpips,mie")
    args = ap.parse_args()
    torch.set_num_threads(1)

    from bf16_speed import median_cpu_s
    from bf16_towers import _vision_tower

    from genmetrics.accel.cast_weights import (
        cached_weight_scope,
        cast_weights_kept,
        release_cast_weights,
        set_cast_cache,
    )
    from genmetrics.backbones.clip_vision import encode_image

    names = args.models.split(",")
    builders: dict[str, Any] = {}
    if "clip" in names:
        import open_clip

        oc = open_clip.create_model("ViT-B-16-quickgelu", pretrained=None).eval()

        def clip(b: int) -> Any:
            x = torch.randn(b, 3, 224, 224, generator=torch.Generator().manual_seed(0))
            return oc, lambda: encode_image(oc, x)

        builders["clip"] = clip
    if "dino" in names:
        from transformers import Dinov2Config, Dinov2Model

        torch.manual_seed(0)
        dino = Dinov2Model(Dinov2Config()).eval()

        def dino_call(b: int) -> Any:
            x = torch.randn(b, 3, 224, 224, generator=torch.Generator().manual_seed(0))
            return dino, lambda: dino(pixel_values=x).pooler_output

        builders["dino"] = dino_call
    for family, real in (("tpips", "Qwen3-VL-Embedding-2B"), ("mie", "Qwen3.5-0.8B")):
        if family in names:
            visual, vcfg = _vision_tower(real)

            def qwen(b: int, visual: Any = visual, vcfg: dict[str, Any] = vcfg) -> Any:
                p, t = int(vcfg["patch_size"]), int(vcfg["temporal_patch_size"])
                g = args.qwen_size // p
                px = torch.randn(b * g * g, int(vcfg["in_channels"]) * t * p * p)
                grid = torch.tensor([[1, g, g]] * b)
                return visual, lambda: visual(px, grid_thw=grid)

            builders[family] = qwen

    for name, build in builders.items():
        for b in (int(s) for s in args.batches.split(",")):
            model, call = build(b)
            release_cast_weights()  # kept_mb: this model's copies only

            def run(cached: bool, model: Any = model, call: Any = call) -> Any:
                set_cast_cache(cached)
                with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16):
                    with cached_weight_scope(model):
                        out = call()
                return out if isinstance(out, torch.Tensor) else out[0]

            plain, kept = run(False), run(True)
            share = {c: cast_share(lambda c=c: run(c)) for c in (False, True)}
            med = median_cpu_s({"uncached": lambda: run(False), "cached": lambda: run(True)}, args.rounds)
            print(
                json.dumps(
                    {
                        "benchmark": "bf16_weight_casts",
                        "model": name,
                        "batch": b,
                        "threads": torch.get_num_threads(),
                        "rounds": args.rounds,
                        **({"image_px": args.qwen_size} if name in ("tpips", "mie") else {}),
                        "cast_share_uncached": round(share[False], 4),
                        "cast_share_cached": round(share[True], 4),
                        "uncached_cpu_s": round(med["uncached"], 4),
                        "cached_cpu_s": round(med["cached"], 4),
                        "speedup": round(med["uncached"] / med["cached"], 3),
                        "kept_mb": round(cast_weights_kept() / 2**20, 1),
                        "bitwise_equal": bool(torch.equal(plain, kept)),
                    }
                ),
                flush=True,
            )
            set_cast_cache(None)


if __name__ == "__main__":
    main()
