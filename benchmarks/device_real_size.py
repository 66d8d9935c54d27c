"""Real-size device run: RA-CLIPScore, TPIPS and MIE with RANDOM weights of the real configs (bf16, one GPU).

    OUT=/some/dir python benchmarks/device_real_size.py            # all three sections, cuda, bf16
    python benchmarks/device_real_size.py --only tpips
    python benchmarks/device_real_size.py --tiny --device cpu --dtype fp32   # tiny builders: the CPU smoke test

Nothing downloads: open_clip towers come from ``create_model_and_transforms(name, pretrained=None)``, the
Qwen3-VL-2B and Qwen3.5-0.8B-like backbones from hand-written configs, the processors from
``genmetrics.testing`` (offline tiny tokenizer; its ids are < the real vocab). Prints one JSON line per
measurement (also appended to ``$OUT/device_real_size.jsonl`` when ``OUT`` is set); each carries the device
name, torch version, dtype and the peak ``torch.cuda.max_memory_allocated`` of that measurement (reset before
each). A section that fails prints a line with ``"error"`` and the others still run.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
import traceback

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # sibling benchmarks + genmetrics from a source checkout

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}

# Qwen3-VL-2B (Qwen/Qwen3-VL-2B-Instruct config.json), by hand. Token ids stay those of the tiny processor.
QWEN3VL_2B = {
    "text_config": {
        "vocab_size": 151936,
        "hidden_size": 2048,
        "intermediate_size": 6144,
        "num_hidden_layers": 28,
        "num_attention_heads": 16,
        "num_key_value_heads": 8,
        "head_dim": 128,
        "max_position_embeddings": 262144,
        "rms_norm_eps": 1e-6,
        "hidden_act": "silu",
        "rope_parameters": {
            "rope_type": "default",
            "rope_theta": 5_000_000.0,
            "mrope_section": [24, 20, 20],
            "mrope_interleaved": True,
        },
    },
    "vision_config": {
        "depth": 24,
        "hidden_size": 1024,
        "intermediate_size": 4096,
        "num_heads": 16,
        "patch_size": 16,
        "spatial_merge_size": 2,
        "temporal_patch_size": 2,
        "out_hidden_size": 2048,
        "deepstack_visual_indexes": [5, 11, 17],
        "num_position_embeddings": 2304,
        "hidden_act": "gelu_pytorch_tanh",
    },
}

_OUT_FILE: str | None = None
_COMMON: dict = {}
_DEV: list[torch.device] = []


def emit(rec: dict) -> None:
    if "peak_mem_gib" not in rec:  # error / summary lines: the peak since the last reset
        rec = {**rec, "peak_mem_gib": peak_gib(_DEV[0]) if _DEV else None}
    line = json.dumps({**rec, **_COMMON})
    print(line, flush=True)
    if _OUT_FILE:
        with open(_OUT_FILE, "a") as f:
            f.write(line + "\n")


def sync(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def reset_peak(dev: torch.device) -> None:
    if dev.type == "cuda":
        sync(dev)
        torch.cuda.reset_peak_memory_stats(dev)


def peak_gib(dev: torch.device) -> float | None:
    if dev.type != "cuda":
        return None
    sync(dev)
    return round(torch.cuda.max_memory_allocated(dev) / 2**30, 3)


def make_timeit(dev: torch.device):
    """Best-of-``repeat`` wall time with a synchronize around each run (signature of tpips_vision_cache.timeit)."""

    def timeit(fn, repeat: int = 3) -> float:
        best = float("inf")
        for _ in range(repeat):
            sync(dev)
            t = time.perf_counter()
            fn()
            sync(dev)
            best = min(best, time.perf_counter() - t)
        return best

    return timeit


def build_on(dev: torch.device, dtype: torch.dtype, model_cls, cfg, seed: int = 0):
    """Random weights created directly on ``dev`` in ``dtype`` (no fp32 CPU copy of a 2B model)."""
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)
        with torch.device(dev):
            model = model_cls._from_config(cfg, attn_implementation="sdpa", dtype=dtype)
    return model.eval()


def n_params_m(model) -> float:
    return round(sum(p.numel() for p in model.parameters()) / 1e6, 1)


# ------------------------------------------------------------------------------------------------ RA-CLIPScore
def run_raclip(args, dev, dtype) -> None:
    timeit = make_timeit(dev)
    names = ["tiny_clip"] if args.tiny else ["ViT-B-16-quickgelu", "ViT-L-14-quickgelu"]
    batch = 8 if args.tiny else args.raclip_batch
    attrs = [f"attribute number {i}" for i in range(args.attributes)]
    for name in names:
        try:
            _raclip_one(args, dev, dtype, name, batch, attrs, timeit)
        except Exception as e:  # noqa: BLE001 - one failure must not lose the other measurements
            emit(
                {
                    "benchmark": "device_raclip_overhead",
                    "model": name,
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc()[-2000:],
                }
            )
        finally:
            if dev.type == "cuda":
                torch.cuda.empty_cache()


def _raclip_one(args, dev, dtype, name, batch, attrs, timeit) -> None:
    import open_clip

    from genmetrics.backbones.openclip import clip_image_batch
    from genmetrics.raclip.model import RegionAttributeScorer
    from genmetrics.testing import random_images, tiny_clip

    reset_peak(dev)
    if args.tiny:
        model, tok = tiny_clip(0)
    else:
        torch.manual_seed(0)
        model, _, _ = open_clip.create_model_and_transforms(name, pretrained=None)
        tok = open_clip.get_tokenizer(name)
    model = model.to(device=dev, dtype=dtype).eval()
    size = model.visual.image_size
    size = size if isinstance(size, (tuple, list)) else (size, size)
    # the real preprocessing path: uint8 images -> resized, normalised, model dtype and device
    x = clip_image_batch(random_images(batch, int(size[1]), seed=0, height=int(size[0])), model)
    scorer = RegionAttributeScorer(model, tok)
    scorer.text_embeddings(attrs)  # cached, as in a real run

    def plain():
        with torch.no_grad():
            model.encode_image(x)

    def single():
        scorer(x, attrs)

    for fn in (plain, single, plain, single):  # warm-up (kernel selection, allocator)
        fn()
    reset_peak(dev)
    t_plain = timeit(plain, args.repeats)
    mem_plain = peak_gib(dev)
    reset_peak(dev)
    t_single = timeit(single, args.repeats)
    mem_single = peak_gib(dev)
    t_plain = min(t_plain, timeit(plain, args.repeats))  # again after: guards against clock ramp / drift
    emit(
        {
            "benchmark": "device_raclip_overhead",
            "model": f"{name} (random weights)",
            "batch": batch,
            "attributes": len(attrs),
            "image_size": list(size),
            "params_m": n_params_m(model),
            "encode_image_s": round(t_plain, 5),
            "scorer_s": round(t_single, 5),
            "ratio_scorer_over_encode_image": round(t_single / t_plain, 3),
            "goal_ratio": 1.10,
            "meets_goal": t_single / t_plain <= 1.10,
            "images_per_s_encode_image": round(batch / t_plain, 1),
            "images_per_s_scorer": round(batch / t_single, 1),
            "peak_mem_gib_encode_image": mem_plain,
            "peak_mem_gib": mem_single,
        }
    )


# ------------------------------------------------------------------------------------------------------ TPIPS
def build_tpips_backbone(args, dev, dtype):
    from transformers import Qwen3VLModel

    from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor
    from genmetrics.testing.tiny_vlm import tiny_qwen3vl_config

    if args.tiny:
        return tiny_qwen3vl(0).to(device=dev, dtype=dtype), tiny_qwen3vl_processor(64), 64, "tiny_qwen3vl"
    cfg = tiny_qwen3vl_config(**QWEN3VL_2B)
    return build_on(dev, dtype, Qwen3VLModel, cfg), tiny_qwen3vl_processor(448), 448, "Qwen3-VL-2B config"


def run_tpips(args, dev, dtype) -> None:
    from tpips_throughput import _measure

    from genmetrics.testing import random_images
    from genmetrics.tpips.model import TPIPSModel

    timeit = make_timeit(dev)
    reset_peak(dev)
    backbone, proc, size, label = build_tpips_backbone(args, dev, dtype)
    base = {
        "model": f"{label} (random weights, Qwen3VLModel, sdpa)",
        "image_size": size,
        "params_m": n_params_m(backbone),
        "weights_gib": peak_gib(dev),
    }
    n = 4 if args.tiny else args.tpips_pairs
    imgs = random_images(2 * n, size, seed=1)
    aspects = [f"aspect number {i}" for i in range(n)]
    for variant in ("late", "mid", "early"):
        try:
            m = TPIPSModel(
                backbone,
                proc,
                variant,
                image_size=size,
                vision_cache_size=4 * n,
                batch_size=8,
                probe_layers=20,
            )
            a, b = m.load_images(imgs[:n]), m.load_images(imgs[n:])
            reset_peak(dev)
            t_cold, t_warm = _measure(m, a, b, aspects, timeit)
            emit(
                {
                    "benchmark": "device_tpips_throughput",
                    "variant": variant,
                    "pairs": n,
                    **base,
                    "pairs_per_s": round(n / t_cold, 3),
                    "pairs_per_s_cached_vision": round(n / t_warm, 3),
                    "seconds_uncached": round(t_cold, 4),
                    "peak_mem_gib": peak_gib(dev),
                }
            )
            del m
        except Exception as e:  # noqa: BLE001
            emit(
                {
                    "benchmark": "device_tpips_throughput",
                    "variant": variant,
                    **base,
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc()[-2000:],
                }
            )
    try:  # 8 aspects of one image, late fusion: vision cache vs none (as benchmarks/tpips_vision_cache.py)
        asp8 = [
            "lighting",
            "color",
            "pose of the cat",
            "texture",
            "background",
            "overall",
            "camera angle",
            "style",
        ]
        cached = TPIPSModel(backbone, proc, "late", image_size=size, vision_cache_size=0, batch_size=8)
        plain = TPIPSModel(backbone, proc, "late", image_size=size, vision_cache_size=0, batch_size=8)
        warm = TPIPSModel(backbone, proc, "late", image_size=size, vision_cache_size=4, batch_size=8)
        x = cached.load_images(random_images(1, size, seed=0))
        with torch.no_grad():
            cached.embed([x[0]] * 8, asp8)  # warm-up
            reset_peak(dev)
            t_cache = timeit(lambda: cached.embed([x[0]] * 8, asp8))
            t_plain = timeit(lambda: [plain.embed(x, [s]) for s in asp8])
            t_vision = timeit(lambda: cached.vision.encode(x))
            warm.embed(x, ["warm-up"])
            t_lang = timeit(lambda: warm.embed(x, ["lighting"]))
            ea = cached.embed([x[0]] * 8, asp8)
            eb = torch.cat([plain.embed(x, [s]) for s in asp8])
            before = cached.vision_calls
            cached.embed([x[0]] * 8, asp8)
            calls = cached.vision_calls - before
        emit(
            {
                "benchmark": "device_tpips_vision_cache",
                "aspects": 8,
                **base,
                "t_no_cache_s": round(t_plain, 5),
                "t_cache_s": round(t_cache, 5),
                "speedup": round(t_plain / t_cache, 3),
                "t_vision_pass_s": round(t_vision, 5),
                "t_language_pass_s": round(t_lang, 5),
                "vision_calls_8_aspects": calls,
                "cost_vs_1_vision_plus_8_language": round(t_cache / (t_vision + 8 * t_lang), 3),
                "max_abs_diff_cache_vs_no_cache": float((ea - eb).abs().max()),
                "peak_mem_gib": peak_gib(dev),
            }
        )
    except Exception as e:  # noqa: BLE001
        emit(
            {
                "benchmark": "device_tpips_vision_cache",
                **base,
                "error": f"{type(e).__name__}: {e}",
                "traceback": traceback.format_exc()[-2000:],
            }
        )
    del backbone
    if dev.type == "cuda":
        torch.cuda.empty_cache()


# -------------------------------------------------------------------------------------------------------- MIE
def run_mie(args, dev, dtype) -> None:
    import importlib.util
    import random

    from mie_throughput import REAL_LIKE
    from transformers import Qwen3_5Model

    from genmetrics.mie.model import MIEModel
    from genmetrics.testing import random_images, tiny_qwen35, tiny_qwen35_processor
    from genmetrics.testing.tiny_vlm import tiny_qwen35_config

    reset_peak(dev)
    if args.tiny:
        vlm, proc, ref_px, cand_px, label = (
            tiny_qwen35(0).to(device=dev, dtype=dtype),
            tiny_qwen35_processor(),
            64,
            64,
            "tiny-qwen35",
        )
    else:
        vlm = build_on(dev, dtype, Qwen3_5Model, tiny_qwen35_config(**REAL_LIKE))
        proc, ref_px, cand_px, label = tiny_qwen35_processor(image_size=1024), 512, 1024, "0.8b-like"
    model = (
        MIEModel(vlm, proc, tuning="lora_layer", token_budget=args.mie_budget, max_length=32768)
        .to(dev)
        .eval()
    )
    base = {
        "model": f"Qwen3_5Model {label} (random weights{'' if args.tiny else '; mie_throughput.REAL_LIKE'})",
        "reference_px": ref_px,
        "candidate_px": cand_px,
        "token_budget": args.mie_budget,
        "params_m": n_params_m(vlm),
        "weights_gib": peak_gib(dev),
        "fla_fast_path": importlib.util.find_spec("fla") is not None,
        "causal_conv1d": importlib.util.find_spec("causal_conv1d") is not None,
    }
    n = 4 if args.tiny else args.mie_pairs
    rng = random.Random(0)
    refs_pool = list(random_images(16, ref_px, seed=1))
    cands = random_images(2 * n, cand_px, seed=2)
    prompts = ["a person and a dog sitting next to a chair with a lamp behind them"] * n
    model.score_pairs(
        [refs_pool[:2]] * 2, prompts[:2], cands[:2], cands[2:4] if n >= 4 else cands[:2]
    )  # warm-up
    for k in (2, 4, 6, 8):
        try:
            refs = [rng.sample(refs_pool, k) for _ in range(n)]
            model.score_pairs(refs[:1], prompts[:1], cands[:1], cands[n : n + 1])  # warm-up at this length
            reset_peak(dev)
            sync(dev)
            model.stats.update(images_encoded=0, sequences=0, forward_batches=0)
            t = time.perf_counter()
            model.score_pairs(refs, prompts, cands[:n], cands[n:])
            sync(dev)
            dt = time.perf_counter() - t
            emit(
                {
                    "benchmark": "device_mie_throughput",
                    "references": k,
                    "pairs": n,
                    **base,
                    "seconds": round(dt, 4),
                    "pairs_per_s": round(n / dt, 3),
                    "forward_batches": model.stats["forward_batches"],
                    "images_encoded": model.stats["images_encoded"],
                    "peak_mem_gib": peak_gib(dev),
                }
            )
        except Exception as e:  # noqa: BLE001
            emit(
                {
                    "benchmark": "device_mie_throughput",
                    "references": k,
                    **base,
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc()[-2000:],
                }
            )
            if dev.type == "cuda":
                torch.cuda.empty_cache()
    del model, vlm
    if dev.type == "cuda":
        torch.cuda.empty_cache()


SECTIONS = {"raclip": run_raclip, "tpips": run_tpips, "mie": run_mie}


def main() -> None:
    global _OUT_FILE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--tiny", action="store_true", help="tiny test builders and small sizes (CPU smoke test)")
    ap.add_argument(
        "--only",
        choices=sorted(SECTIONS),
        action="append",
        help="run only this section (repeatable; default: all)",
    )
    ap.add_argument("--repeats", type=int, default=5)
    ap.add_argument("--raclip-batch", type=int, default=64)
    ap.add_argument("--attributes", type=int, default=20)
    ap.add_argument("--tpips-pairs", type=int, default=32)
    ap.add_argument("--mie-pairs", type=int, default=16)
    ap.add_argument("--mie-budget", type=int, default=16384)
    args = ap.parse_args()

    dev = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    _DEV.append(dev)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(
                "--device cuda but torch.cuda.is_available() is False (use --tiny --device cpu here)"
            )
        torch.backends.cuda.matmul.allow_tf32 = True
        torch.backends.cudnn.allow_tf32 = True
    out = os.environ.get("OUT")
    if out:
        os.makedirs(out, exist_ok=True)
        _OUT_FILE = os.path.join(out, "device_real_size.jsonl")
    import transformers

    _COMMON.update(
        {
            "device": str(dev),
            "device_name": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
            "torch": torch.__version__,
            "transformers": transformers.__version__,
            "dtype": args.dtype,
            "tiny": bool(args.tiny),
        }
    )
    t0 = time.perf_counter()
    for name in args.only or list(SECTIONS):
        ts = time.perf_counter()
        try:
            SECTIONS[name](args, dev, dtype)
        except Exception as e:  # noqa: BLE001 - a section's set-up failed: report, go on with the next
            emit(
                {
                    "benchmark": f"device_{name}",
                    "error": f"{type(e).__name__}: {e}",
                    "traceback": traceback.format_exc()[-2000:],
                }
            )
            if dev.type == "cuda":
                torch.cuda.empty_cache()
        emit(
            {
                "benchmark": "device_section_done",
                "section": name,
                "section_s": round(time.perf_counter() - ts, 1),
                "elapsed_s": round(time.perf_counter() - t0, 1),
            }
        )


if __name__ == "__main__":
    main()
