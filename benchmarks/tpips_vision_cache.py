"""Vision-cache speedup for 8 aspects of one image (late fusion), on a random Qwen3-VL with Qwen3-VL-2B's
vision/language proportions (widths / SCALE, default 16; depths kept; 448x448 images: 784 patches, 196 image tokens).

Prints one JSON line: times with and without the cache, the speedup, and the 8-aspect cost relative to
one vision pass + 8 single language passes (goal: <= 1)."""

from __future__ import annotations

import json
import os
import sys

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # genmetrics from a source checkout


def scaled_2b(scale: int = 8, seed: int = 0):
    """A random Qwen3VLModel with Qwen3-VL-2B's proportions (vision: 24 blocks, width 1024, MLP 4096, DeepStack
    after blocks 5/11/17; language: 28 layers, width 2048, MLP 6144, head_dim 128), widths divided by ``scale``."""
    from transformers import Qwen3VLModel

    from genmetrics.testing.tiny_vlm import tiny_qwen3vl_config

    cfg = tiny_qwen3vl_config(
        text_config={
            "hidden_size": 2048 // scale,
            "intermediate_size": 6144 // scale,
            "num_hidden_layers": 28,
            "num_attention_heads": max(1, 16 // scale),
            "num_key_value_heads": max(1, 8 // scale),
            "head_dim": 128,
            "rope_parameters": {
                "rope_type": "default",
                "rope_theta": 5_000_000.0,
                "mrope_section": [24, 20, 20],
                "mrope_interleaved": True,
            },
        },
        vision_config={
            "depth": 24,
            "hidden_size": 1024 // scale,
            "intermediate_size": 4096 // scale,
            "num_heads": max(1, 16 // scale),
            "out_hidden_size": 2048 // scale,
            "deepstack_visual_indexes": [5, 11, 17],
            "num_position_embeddings": 2304,
        },
    )
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        model = Qwen3VLModel._from_config(cfg, attn_implementation="sdpa", dtype=torch.float32)
    return model.eval()


def timeit(fn, repeat: int = 3) -> float:
    """Best of ``repeat`` wall-clock runs (the first one doubles as warm-up)."""
    import time

    best = float("inf")
    for _ in range(repeat):
        t = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t)
    return best


def _count(model, x, aspects) -> int:
    before = model.vision_calls
    with torch.no_grad():
        model.embed([x[0]] * len(aspects), aspects)
    return model.vision_calls - before


def main() -> None:
    from genmetrics.testing import ASPECTS8, random_images, tiny_qwen3vl_processor
    from genmetrics.tpips.model import TPIPSModel

    scale = int(os.environ.get("SCALE", 16))
    torch.set_num_threads(int(os.environ.get("THREADS", 2)))
    size = 448
    backbone = scaled_2b(scale)
    proc = tiny_qwen3vl_processor(size)
    aspects = list(ASPECTS8)
    img = random_images(1, size, seed=0)
    cached = TPIPSModel(backbone, proc, "late", image_size=size, vision_cache_size=0, batch_size=8)
    plain = TPIPSModel(backbone, proc, "late", image_size=size, vision_cache_size=0, batch_size=8)
    warm = TPIPSModel(backbone, proc, "late", image_size=size, vision_cache_size=4, batch_size=8)
    x = cached.load_images(img)
    with torch.no_grad():
        # with the cache: one call (nothing kept between calls), the image's vision output reused for 8 aspects
        t_cache = timeit(lambda: cached.embed([x[0]] * 8, aspects))
        # without: one call per aspect (each recomputes the vision tower)
        t_plain = timeit(lambda: [plain.embed(x, [a]) for a in aspects])
        # one vision pass (preprocessing + tower) and one language pass (a whole embed() call for one aspect
        # with the vision features already cached: prompt, sequence, language tower, read-out)
        t_vision = timeit(lambda: cached.vision.encode(x))
        warm.embed(x, ["warm-up"])
        t_lang = timeit(lambda: warm.embed(x, ["lighting"]))
        a = cached.embed([x[0]] * 8, aspects)
        b = torch.cat([plain.embed(x, [asp]) for asp in aspects])
    print(
        json.dumps(
            {
                "benchmark": "tpips_vision_cache",
                "aspects": 8,
                "image_size": size,
                "scaled_down": True,
                "config": f"Qwen3-VL-2B proportions, widths/{scale} (vision 24x{1024 // scale}, language 28x{2048 // scale}), "
                "random weights, CPU fp32",
                "threads": torch.get_num_threads(),
                "t_no_cache_s": round(t_plain, 4),
                "t_cache_s": round(t_cache, 4),
                "speedup": round(t_plain / t_cache, 3),
                "t_vision_pass_s": round(t_vision, 4),
                "t_language_pass_s": round(t_lang, 4),
                "vision_calls_8_aspects": _count(cached, x, aspects),
                "cost_vs_1_vision_plus_8_language": round(t_cache / (t_vision + 8 * t_lang), 3),
                "max_abs_diff_cache_vs_no_cache": float((a - b).abs().max()),
            }
        )
    )


if __name__ == "__main__":
    main()
