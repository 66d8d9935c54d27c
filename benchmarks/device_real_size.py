"""Real-size device run: RA-CLIPScore, TPIPS and MIE on the real configs with random weights (bf16, one GPU).

    OUT=/some/dir python benchmarks/device_real_size.py            # all three families, cuda, bf16
    python benchmarks/device_real_size.py --only tpips
    python benchmarks/device_real_size.py --tiny --device cpu --dtype fp32   # reduced configs: CPU smoke run

The configurations are :mod:`genmetrics.backbones.real_configs`' (the ones ``benchmarks/real_size.py``
measures on the CPU): open_clip ViT-B-16-quickgelu and ViT-L-14-quickgelu (224 px, 20 attributes),
Qwen3-VL-Embedding-2B (TPIPS late / mid / early on 1024 x 768 images at the official pixel budget) and
Qwen3.5-0.8B (MIE, 3 references, 1024 x 1024 unresized). ``--tiny`` builds the structurally identical
reduced configs on small images. Nothing downloads; the Qwen processors are the offline ones with the real
image settings (tiny tokenizer, so prompts have other token counts than with the released tokenizer).

One JSON line per measurement (also appended to ``$OUT/device_real_size.jsonl`` when ``OUT`` is set): images
per second, the peak ``torch.cuda.max_memory_allocated`` (reset before each measurement) next to the memory
model's prediction, the largest safe batch it predicts for 24 / 80 / 141 GiB, and the float32 vs bfloat16
score difference on a few items. A family that fails prints a line with ``"error"``; the others still run.
Sized to finish in well under 8 minutes on one H200 (``--raclip-batch``, ``--tpips-pairs``, ``--mie-pairs``).
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import sys
import time
import traceback

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # genmetrics from a source checkout

DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}
GPUS_GIB = (24, 80, 141)

_OUT_FILE: str | None = None
_COMMON: dict = {}
_DEV: list[torch.device] = []


def emit(rec: dict) -> None:
    if "peak_mem_gib" not in rec:  # error lines: the peak since the last reset
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


def timed(dev: torch.device, fn, repeat: int = 1) -> tuple[float, object]:
    """Best wall time of ``repeat`` runs (synchronised) and the last result."""
    best, out = float("inf"), None
    for _ in range(repeat):
        sync(dev)
        t = time.perf_counter()
        out = fn()
        sync(dev)
        best = min(best, time.perf_counter() - t)
    return best, out


def gib(x: float) -> float:
    return round(x / 2**30, 3)


def safe_batches(predict) -> dict[str, int]:
    from genmetrics.data.io.batching import safe_batch_size

    return {f"{g}GiB": safe_batch_size(predict, memory=g * 2**30, max_batch_size=1024) for g in GPUS_GIB}


def max_diff(a, b) -> float:
    return float((a.double().cpu() - b.double().cpu()).abs().max())


def free(dev: torch.device) -> None:
    if dev.type == "cuda":
        torch.cuda.empty_cache()


def _error(family: str, e: BaseException, **extra) -> None:
    emit(
        {
            "benchmark": f"device_real_size_{family}",
            **extra,
            "error": f"{type(e).__name__}: {e}",
            "traceback": traceback.format_exc()[-2000:],
        }
    )


# ------------------------------------------------------------------------------------------------ RA-CLIPScore
def run_raclip(args, dev, dtype) -> None:
    from genmetrics.backbones.memory_model import predict_memory
    from genmetrics.backbones.openclip import clip_image_batch
    from genmetrics.raclip.attributes import load_attribute_set
    from genmetrics.raclip.model import RegionAttributeScorer
    from genmetrics.testing import random_images
    from genmetrics.testing.real_models import build_real_model, processor_for

    attrs = load_attribute_set("celeba-20")[: args.attributes]
    batch = 8 if args.tiny else args.raclip_batch
    nb = dtype.itemsize
    for name in ("ViT-B-16-quickgelu", "ViT-L-14-quickgelu"):
        try:
            tok = processor_for(name)
            model = build_real_model(
                name, reduced=args.tiny, device=dev
            )  # float32 first: the reference scores
            size = model.visual.image_size
            size = tuple(size) if isinstance(size, (tuple, list)) else (size, size)
            imgs = random_images(batch, int(size[1]), seed=0, height=int(size[0]))
            x = clip_image_batch(imgs, model)
            k = min(4, batch)
            s32 = RegionAttributeScorer(model, tok)(x[:k], attrs).score
            model = model.to(dtype)
            scorer = RegionAttributeScorer(model, tok)
            xb = clip_image_batch(imgs, model)  # resized, normalised, model dtype and device
            scorer(xb, attrs)  # warm-up: kernels, text cache

            def plain(model=model, xb=xb):
                with torch.no_grad():
                    return model.encode_image(xb)

            plain()
            reset_peak(dev)
            t, out = timed(dev, functools.partial(scorer, xb, attrs), args.repeats)
            pk = peak_gib(dev)
            t_plain, _ = timed(dev, plain, args.repeats)

            def pred(b: int, name=name, size=size) -> int:
                return predict_memory(
                    name, batch=b, image_size=size, dtype_bytes=nb, device=dev.type, reduced=args.tiny
                ).total

            emit(
                {
                    "benchmark": "device_real_size_raclip",
                    "model": f"{name} (random weights{', reduced' if args.tiny else ''})",
                    "batch": batch,
                    "attributes": len(attrs),
                    "image_size": list(size),
                    "images_per_s": round(batch / t, 2),
                    "seconds": round(t, 4),
                    "encode_image_s": round(t_plain, 4),
                    "ratio_scorer_over_encode_image": round(t / t_plain, 3),
                    "goal_ratio": 1.10,
                    "peak_mem_gib": pk,
                    "predicted_gib": gib(pred(batch)),
                    "safe_batch": safe_batches(pred),
                    "fp32_vs_dtype_max_abs": max_diff(out.score[:k].float(), s32),
                }
            )
            del model, scorer
        except Exception as e:  # noqa: BLE001 - one failure must not lose the other measurements
            _error("raclip", e, model=name)
        free(dev)


# ------------------------------------------------------------------------------------------------------ TPIPS
def run_tpips(args, dev, dtype) -> None:
    from genmetrics.backbones.memory_model import image_tokens, predict_memory
    from genmetrics.testing import random_images
    from genmetrics.testing.real_models import build_real_model, processor_for
    from genmetrics.tpips.model import TPIPSModel

    name = "Qwen3-VL-Embedding-2B"
    proc = processor_for(name)
    h, w = (192, 256) if args.tiny else (768, 1024)
    n = 4 if args.tiny else args.tpips_pairs
    imgs = random_images(2 * n, w, seed=1, height=h)
    a, b = list(imgs[:n]), list(imgs[n:])
    aspects = [f"aspect number {i}" for i in range(n)]
    backbone = [build_real_model(name, reduced=args.tiny, device=dev)]  # float32 first: the reference scores
    k = 2

    def model(variant: str) -> TPIPSModel:
        torch.manual_seed(0)  # the same mid-fusion head in float32 and in the benchmark dtype
        return TPIPSModel(
            backbone[0], proc, variant, batch_size=args.tpips_batch, vision_batch_size=args.tpips_batch
        )

    ref = {}
    for v in ("late", "mid", "early"):
        try:
            ref[v] = model(v).similarity(a[:k], b[:k], aspects[:k])
        except Exception as e:  # noqa: BLE001
            _error("tpips", e, variant=v, stage="float32 reference")
    backbone[0].to(dtype)
    free(dev)
    nb = dtype.itemsize
    merged = image_tokens(name, (h, w))[1]
    for v in ("late", "mid", "early"):
        try:
            m = model(v)
            m.similarity(a[:2], b[:2], ["warm-up"] * 2)

            def cold(m=m):
                m.vision_cache.clear()
                return m.similarity(a, b, aspects)

            reset_peak(dev)
            t, s = timed(dev, cold, args.repeats)
            pk = peak_gib(dev)
            t_warm, _ = timed(dev, lambda m=m: m.similarity(a, b, aspects[::-1]), 1)
            text = len(m._ids(f"Represent the similarity of the image based on {aspects[0]}.")) + 12

            def pred(bs: int, v=v, text=text) -> int:
                return predict_memory(
                    name,
                    batch=bs,
                    image_size=(h, w),
                    images_per_item=2 if v == "early" else 1,
                    text_tokens=text,
                    variant=v,
                    dtype_bytes=nb,
                    device=dev.type,
                    reduced=args.tiny,
                ).total

            emit(
                {
                    "benchmark": "device_real_size_tpips",
                    "variant": v,
                    "model": f"{name} config (random weights{', reduced' if args.tiny else ''}, sdpa)",
                    "pairs": n,
                    "image_size": [h, w],
                    "visual_tokens_per_image": merged,
                    "batch_size": args.tpips_batch,
                    "images_per_s": round(2 * n / t, 2),
                    "pairs_per_s": round(n / t, 2),
                    "pairs_per_s_cached_vision": round(n / t_warm, 2),
                    "seconds": round(t, 4),
                    "peak_mem_gib": pk,
                    "predicted_gib": gib(pred(args.tpips_batch)),
                    "safe_batch": safe_batches(pred),
                    "fp32_vs_dtype_max_abs": max_diff(s[:k].float(), ref[v]) if v in ref else None,
                }
            )
            del m
        except Exception as e:  # noqa: BLE001
            _error("tpips", e, variant=v)
        free(dev)
    try:  # 8 aspects of one image, late fusion: the vision cache against none
        asp8 = ["lighting", "color", "pose of the cat", "texture", "background", "overall", "camera", "style"]
        cached = TPIPSModel(backbone[0], proc, "late", vision_cache_size=0, batch_size=8)
        warm = TPIPSModel(backbone[0], proc, "late", vision_cache_size=4, batch_size=8)
        x = cached.load_images(a[:1])
        with torch.no_grad():
            cached.embed([x[0]] * 8, asp8)  # warm-up
            t_cache, ea = timed(dev, lambda: cached.embed([x[0]] * 8, asp8), args.repeats)
            t_none, eb = timed(dev, lambda: torch.cat([cached.embed(x, [s]) for s in asp8]), args.repeats)
            t_vision, _ = timed(dev, lambda: cached.vision.encode(cached.resized(x)), args.repeats)
            warm.embed(x, ["warm-up"])
            t_lang, _ = timed(dev, lambda: warm.embed(x, ["lighting"]), args.repeats)
        emit(
            {
                "benchmark": "device_real_size_tpips_vision_cache",
                "aspects": 8,
                "image_size": [h, w],
                "t_no_cache_s": round(t_none, 5),
                "t_cache_s": round(t_cache, 5),
                "speedup": round(t_none / t_cache, 3),
                "cost_vs_1_vision_plus_8_language": round(t_cache / (t_vision + 8 * t_lang), 3),
                "max_abs_diff_cache_vs_no_cache": max_diff(ea, eb),
                "peak_mem_gib": peak_gib(dev),
            }
        )
    except Exception as e:  # noqa: BLE001
        _error("tpips", e, stage="vision cache")
    backbone.clear()
    free(dev)


# -------------------------------------------------------------------------------------------------------- MIE
def run_mie(args, dev, dtype) -> None:
    import importlib.util

    from genmetrics.backbones.memory_model import image_tokens, predict_memory
    from genmetrics.mie.model import MIEModel
    from genmetrics.testing import random_images
    from genmetrics.testing.real_models import build_real_model, processor_for

    name = "Qwen3.5-0.8B"
    proc = processor_for(name)
    side = 256 if args.tiny else 1024
    n, k = (2 if args.tiny else args.mie_pairs), 3
    refs = [list(random_images(k, side, seed=10 + i)) for i in range(n)]
    cands = random_images(2 * n, side, seed=3)
    ca, cb = list(cands[:n]), list(cands[n:])
    prompts = ["a man, a dog and a bicycle in front of a red door"] * n
    vlm = build_real_model(name, reduced=args.tiny, device=dev)
    torch.manual_seed(0)
    model = MIEModel(vlm, proc, image_size=None, vision_cache_size=0).to(dev).eval()
    ref = model.score_pairs(refs[:1], prompts[:1], ca[:1], cb[:1])
    model.vlm.to(dtype)
    free(dev)
    try:
        model.score_pairs(refs[:1], prompts[:1], ca[:1], cb[:1])  # warm-up
        reset_peak(dev)
        model.stats.update(images_encoded=0, vision_calls=0, sequences=0, forward_batches=0)
        t, (oa, ob) = timed(dev, functools.partial(model.score_pairs, refs, prompts, ca, cb), 1)
        pk = peak_gib(dev)
        merged = image_tokens(name, (side, side))[1]
        seq = model.prepare([refs[0]], prompts[:1], [ca[0]]).sequences[0].cost

        def pred(bs: int) -> int:
            return predict_memory(
                name,
                batch=bs,
                image_size=(side, side),
                images_per_item=k + 1,
                text_tokens=seq - (k + 1) * merged,
                dtype_bytes=dtype.itemsize,
                device=dev.type,
                reduced=args.tiny,
            ).total

        emit(
            {
                "benchmark": "device_real_size_mie",
                "model": f"{name} config (random weights{', reduced' if args.tiny else ''}, sdpa)",
                "pairs": n,
                "references": k,
                "image_size": [side, side],
                "visual_tokens_per_image": merged,
                "sequence_tokens": seq,
                "images_per_s": round(n * (k + 2) / t, 2),
                "pairs_per_s": round(n / t, 3),
                "seconds": round(t, 4),
                "stats": dict(model.stats),
                "peak_mem_gib": pk,
                "predicted_gib": gib(pred(2)),
                "safe_batch": safe_batches(pred),
                "fp32_vs_dtype_max_abs": max(
                    max_diff(oa.score[:1], ref[0].score), max_diff(ob.score[:1], ref[1].score)
                ),
                "fla_fast_path": importlib.util.find_spec("fla") is not None,
                "causal_conv1d": importlib.util.find_spec("causal_conv1d") is not None,
            }
        )
    except Exception as e:  # noqa: BLE001
        _error("mie", e)
    free(dev)


SECTIONS = {"raclip": run_raclip, "tpips": run_tpips, "mie": run_mie}


def main() -> None:
    global _OUT_FILE
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", choices=sorted(DTYPES), default="bf16")
    ap.add_argument("--tiny", action="store_true", help="reduced configs and small images (CPU smoke test)")
    ap.add_argument("--only", choices=sorted(SECTIONS), action="append", help="repeatable; default: all")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--raclip-batch", type=int, default=64)
    ap.add_argument("--attributes", type=int, default=20)
    ap.add_argument("--tpips-pairs", type=int, default=16)
    ap.add_argument("--tpips-batch", type=int, default=16)
    ap.add_argument("--mie-pairs", type=int, default=8)
    args = ap.parse_args()
    if args.tiny:
        args.repeats = 1

    dev = torch.device(args.device)
    dtype = DTYPES[args.dtype]
    _DEV.append(dev)
    if dev.type == "cuda":
        if not torch.cuda.is_available():
            raise SystemExit(
                "--device cuda but torch.cuda.is_available() is False (use --tiny --device cpu here)"
            )
        torch.backends.cuda.matmul.allow_tf32 = False  # the float32 reference scores stay float32
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
        except Exception as e:  # noqa: BLE001 - a family's set-up failed: report, go on with the next
            _error(name, e)
            free(dev)
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
