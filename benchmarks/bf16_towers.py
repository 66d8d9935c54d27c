"""bf16 against float32 for the TPIPS and MIE backbones: the ``tpips`` and ``mie`` metrics on their tiny
random test backbones (``precision="fp32"`` / ``"bf16"``, whole metric), and the vision towers of the real
architectures (Qwen3-VL-Embedding-2B for TPIPS, Qwen3.5-0.8B for MIE; random weights, only the vision tower
is materialised, so the 2B model never needs its 8.5 GB) on one ``--size`` px image, float32 and under CPU
bfloat16 autocast. One JSON line: CPU seconds (median of interleaved rounds) and bf16 / fp32 ratios; each bf16
pass also runs with the kept bfloat16 weights switched off (``*_bf16_uncached``, autocast casting every weight
at every call).

Usage: python benchmarks/bf16_towers.py [--rounds 3] [--size 448] [--threads 1] [--skip-real]
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path
from typing import Any

import torch

sys.path[:0] = [str(Path(__file__).resolve().parent), str(Path(__file__).resolve().parents[1])]


def _vision_tower(name: str) -> tuple[Any, dict[str, Any]]:
    """The vision tower of real config ``name``, built on the meta device and materialised alone on the CPU
    with seeded random weights (normal, std 0.02; norms' weights 1)."""
    from genmetrics.backbones.real_configs import real_config
    from genmetrics.testing.real_models import build_real_model

    model = build_real_model(name, device="meta")
    visual = model.visual.to_empty(device="cpu")
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for pname, p in visual.named_parameters():
            if "norm" in pname and pname.endswith("weight"):
                p.fill_(1.0)
            elif pname.endswith("bias") or "norm" in pname:
                p.zero_()
            else:
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
        for _, b in visual.named_buffers():
            if b.is_floating_point() and not torch.isfinite(b).all():
                b.zero_()
    # buffers computed at construction (rotary inverse frequencies) were lost on the meta device: rebuild
    for mod in visual.modules():
        if hasattr(mod, "inv_freq") and hasattr(mod, "dim") and hasattr(mod, "theta"):
            mod.inv_freq = 1.0 / (mod.theta ** (torch.arange(0, mod.dim, 2, dtype=torch.float) / mod.dim))
    return visual.eval(), real_config(name).config["vision_config"]


def _tower_call(visual: Any, vcfg: dict[str, Any], size: int) -> Any:
    p, t = int(vcfg["patch_size"]), int(vcfg["temporal_patch_size"])
    gh = gw = size // p
    pixels = torch.randn(
        gh * gw, int(vcfg["in_channels"]) * t * p * p, generator=torch.Generator().manual_seed(1)
    )
    grid = torch.tensor([[1, gh, gw]])
    return lambda: visual(pixels, grid_thw=grid)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--size", type=int, default=448)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--skip-real", action="store_true")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    from bf16_speed import median_cpu_s

    import genmetrics as gm
    from tests.recipes import metric_recipe

    def metric(name: str, precision: str) -> Any:
        r = metric_recipe(name)
        m = gm.create_metric(name, **{**r["kwargs"], "precision": precision})
        for u in r["updates"]:
            m.update(**u)
        return m.compute()

    from genmetrics.accel.cast_weights import cached_weight_scope, set_cast_cache

    def autocast(fn: Any, bf16: bool, module: Any = None) -> Any:
        with torch.inference_mode(), torch.autocast("cpu", dtype=torch.bfloat16, enabled=bf16):
            with cached_weight_scope(module):  # the kept bfloat16 weights, as the metrics run their models
                return fn()

    def uncached(fn: Any) -> Any:  # bf16 with autocast casting every weight at every call
        set_cast_cache(False)
        try:
            return fn()
        finally:
            set_cast_cache(None)

    tools: dict[str, Any] = {}
    for name in ("tpips", "mie"):
        for p in ("fp32", "bf16"):
            tools[f"{name}_tiny_{p}"] = lambda name=name, p=p: metric(name, p)
        tools[f"{name}_tiny_bf16_uncached"] = lambda name=name: uncached(lambda: metric(name, "bf16"))
    towers: dict[str, str] = {}
    if not args.skip_real:
        for family, real in (("tpips", "Qwen3-VL-Embedding-2B"), ("mie", "Qwen3.5-0.8B")):
            visual, vcfg = _vision_tower(real)
            call = _tower_call(visual, vcfg, args.size)
            towers[family] = real
            for p in ("fp32", "bf16"):
                tools[f"{family}_real_vision_{p}"] = lambda call=call, p=p, v=visual: autocast(
                    call, p == "bf16", v
                )
            tools[f"{family}_real_vision_bf16_uncached"] = lambda call=call, v=visual: uncached(
                lambda: autocast(call, True, v)
            )
    med = median_cpu_s(tools, args.rounds)
    pairs = sorted({k.rsplit("_", 1)[0] for k in med if not k.endswith("_uncached")})
    print(
        json.dumps(
            {
                "benchmark": "bf16_towers",
                "threads": torch.get_num_threads(),
                "rounds": args.rounds,
                "image_px": args.size,
                "real_towers": towers,
                "fast_paths": os.environ.get("GENMETRICS_FAST_PATHS", "exact (default)"),
                **{f"{k}_cpu_s": round(v, 4) for k, v in med.items()},
                **{f"{k}_bf16_over_fp32": round(med[f"{k}_fp32"] / med[f"{k}_bf16"], 3) for k in pairs},
                # the kept bfloat16 weights against autocast casting them at every call
                **{
                    f"{k}_bf16_kept_over_uncached": round(med[f"{k}_bf16_uncached"] / med[f"{k}_bf16"], 3)
                    for k in pairs
                },
            }
        )
    )


if __name__ == "__main__":
    main()
