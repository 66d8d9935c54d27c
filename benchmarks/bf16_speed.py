"""bf16 against float32 on a random ViT-B/16 (open_clip): genmetrics' encode_image in float32 and under
CPU autocast bfloat16, open_clip's own encode_image under autocast, and the metrics clipscore, clip_i and
raclip (RA-CLIPScore) with ``precision="fp32"`` / ``"bf16"``, and dino on a random DINOv2-base
(transformers ``Dinov2Model``, 224 px); with ``--torchmetrics``, torchmetrics'
CLIPScore on a random transformers CLIPModel of ViT-B/16's sizes (other random weights: transformers cannot
load open_clip's) wrapped in ``torch.autocast``. One JSON line (CPU seconds, median of interleaved rounds);
the speed goal (bf16 >= 1.8x float32) applies to CPUs with bf16 units (``cpu_has_avx512_bf16``, or AMX).

Which fast paths run is ``GENMETRICS_FAST_PATHS``'s (the line's ``fast_paths``): measure the default and
``GENMETRICS_FAST_PATHS=all`` in two runs. Each metric also runs in bf16 with the kept bfloat16 weights
switched off (``<metric>_bf16_uncached``: autocast casts every weight at every call), interleaved with the rest.

Usage: python benchmarks/bf16_speed.py [--images 8] [--rounds 3] [--threads 1] [--torchmetrics]
       [--metrics clipscore,clip_i,raclip,dino]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from typing import Any

import torch


def median_cpu_s(tools: dict[str, Any], rounds: int) -> dict[str, float]:
    """Each tool called once (warm-up: packing, primitive creation), then ``rounds`` interleaved rounds: the
    median CPU seconds per tool."""
    for f in tools.values():
        f()
    cpu: dict[str, list[float]] = {k: [] for k in tools}
    for _ in range(rounds):
        for k, f in tools.items():
            c0 = time.process_time()
            f()
            cpu[k].append(time.process_time() - c0)
    return {k: statistics.median(v) for k, v in cpu.items()}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--torchmetrics", action="store_true", help="also torchmetrics' CLIPScore under autocast")
    ap.add_argument("--metrics", default="clipscore,clip_i,raclip,dino", help="the metrics timed")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import open_clip

    import genmetrics as gm
    from genmetrics.backbones.clip_vision import encode_image

    oc = open_clip.create_model("ViT-B-16-quickgelu", pretrained=None).eval()
    tok = open_clip.get_tokenizer("ViT-B-16-quickgelu")
    x = torch.randn(args.images, 3, 224, 224, generator=torch.Generator().manual_seed(0))
    imgs = (torch.rand(args.images, 3, 224, 224, generator=torch.Generator().manual_seed(1)) * 255).to(
        torch.uint8
    )
    refs = (torch.rand(args.images, 3, 224, 224, generator=torch.Generator().manual_seed(2)) * 255).to(
        torch.uint8
    )
    prompts = [f"a photo of a red dog number {i}" for i in range(args.images)]
    attributes = ["red", "dog", "snow"]

    names = [n for n in args.metrics.split(",") if n]
    dino = None
    if "dino" in names:
        from transformers import Dinov2Config, Dinov2Model

        torch.manual_seed(0)
        dino = Dinov2Model(Dinov2Config()).eval()  # DINOv2-base's sizes: width 768, 12 layers, patch 14

    def metric(name: str, precision: str) -> Any:
        kw: dict[str, Any] = {"backbone": oc, "precision": precision, "batch_size": args.images}
        if name == "dino":
            m = gm.create_metric(name, **{**kw, "backbone": dino})
            m.update(reference=refs, candidates=imgs)
        elif name == "clip_i":
            m = gm.create_metric(name, **kw)
            m.update(reference=refs, candidates=imgs)
        elif name == "clipscore":
            m = gm.create_metric(name, tokenizer=tok, **kw)
            m.update(candidates=imgs, condition=prompts)
        else:
            m = gm.create_metric(name, tokenizer=tok, attributes=attributes, **kw)
            m.update(candidates=imgs)
        return m.compute()

    def run(fn: Any, bf16: bool) -> Any:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            return fn(x)

    tools = {
        "fp32": lambda: run(lambda v: encode_image(oc, v), False),
        "bf16": lambda: run(lambda v: encode_image(oc, v), True),
        "open_clip_autocast_bf16": lambda: run(oc.encode_image, True),
    }
    from genmetrics.accel.cast_weights import set_cast_cache

    def uncached(name: str) -> Any:  # bf16 with autocast casting every weight at every call
        set_cast_cache(False)
        try:
            return metric(name, "bf16")
        finally:
            set_cast_cache(None)

    for name in names:
        for p in ("fp32", "bf16"):
            tools[f"{name}_{p}"] = lambda name=name, p=p: metric(name, p)
        tools[f"{name}_bf16_uncached"] = lambda name=name: uncached(name)
    if args.torchmetrics:
        import sys
        from pathlib import Path

        from torchmetrics.multimodal.clip_score import CLIPScore

        sys.path.insert(0, str(Path(__file__).parent))
        from peers import _hf_clip_b16

        tm = CLIPScore(model_name_or_path=_hf_clip_b16)

        def tmf(bf16: bool) -> Any:
            tm.reset()
            with torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
                tm.update(list(imgs), prompts)
            return tm.compute()

        tools["torchmetrics_clipscore_fp32"] = lambda: tmf(False)
        tools["torchmetrics_clipscore_autocast_bf16"] = lambda: tmf(True)
    med = median_cpu_s(tools, args.rounds)
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
        **{f"{n}_bf16_over_fp32": round(med[f"{n}_fp32"] / med[f"{n}_bf16"], 3) for n in names},
        # the weights cast once and kept (genmetrics.accel.cast_weights) against cast at every call
        **{
            f"{n}_bf16_kept_over_uncached": round(med[f"{n}_bf16_uncached"] / med[f"{n}_bf16"], 3)
            for n in names
        },
        **{
            f"{n}_bf16_uncached_over_fp32": round(med[f"{n}_fp32"] / med[f"{n}_bf16_uncached"], 3)
            for n in names
        },
        "goal_bf16_over_fp32": 1.8,
        **(
            {
                "clipscore_bf16_over_torchmetrics_autocast_bf16": round(
                    med["torchmetrics_clipscore_autocast_bf16"] / med["clipscore_bf16"], 3
                ),
                "torchmetrics_autocast_bf16_over_fp32": round(
                    med["torchmetrics_clipscore_fp32"] / med["torchmetrics_clipscore_autocast_bf16"], 3
                ),
            }
            if args.torchmetrics
            else {}
        ),
        "fast_paths": os.environ.get("GENMETRICS_FAST_PATHS", "exact (default)"),
        "cpu_has_avx512_bf16": "avx512_bf16" in flags,
        "cpu_has_amx_bf16": "amx_bf16" in flags,
    }
    print(json.dumps(line))


if __name__ == "__main__":
    main()
