"""Every family at its real configuration (random weights, nothing downloads), measured on the CPU.

    OMP_NUM_THREADS=2 python benchmarks/real_size.py                  # raclip, tpips, mie: one at a time
    python benchmarks/real_size.py --family tpips --threads 2         # one family
    python benchmarks/real_size.py --reduced                          # smoke run: reduced configs, small images

One JSON line per family (raclip: one per model), each family in its own process (its peak RSS is its own):

* raclip: RA-CLIPScore on open_clip ViT-B-16-quickgelu and ViT-L-14-quickgelu, 8 random images at 224 px,
  the 20 celeba-20 attributes;
* tpips: late / mid / early fusion on the Qwen3-VL-Embedding-2B config, 2 pairs of 1024 x 768 images at the
  official pixel budget (smart_resize: 768 merged tokens each), the vision tower shared by the three variants
  (it is frozen and aspect-independent); parity of late fusion with the official embedder's preprocessing
  and pooling (tests/backbones/_references.py) on 2 images of awkward sizes;
* mie: the Qwen3.5-0.8B config, 2 pairs with 3 references each, all images 1024 x 1024 unresized (the
  processor's own budget: 1024 merged tokens each); parity with the authors' forward on one sample of
  awkward sizes.

Each line: seconds per item (wall and CPU), peak RSS of the float32 pass and its increment over the RSS
before the model was built, the memory model's prediction (genmetrics.backbones.memory_model) and their
ratio, visual and text tokens, batch invariance (the first item scored alone vs in the batch of 2), the
float32 vs bfloat16 score difference where this CPU can afford it (bf16 products run without bf16 units
here: see ``bf16_gemm_slowdown``), the analytic parameter count against the built model, CPU model,
threads and load.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT)]

FAMILIES = ("raclip", "tpips", "mie")
CLIP_MODELS = ("ViT-B-16-quickgelu", "ViT-L-14-quickgelu")


# ------------------------------------------------------------------------------------------------ measuring
def _status(key: str) -> int:
    m = re.search(rf"{key}:\s+(\d+)\s+kB", Path("/proc/self/status").read_text())
    return int(m.group(1)) * 1024 if m else 0


def rss() -> int:
    return _status("VmRSS")


def reset_peak() -> None:
    """Reset the process's peak RSS (VmHWM) to the current RSS (Linux >= 4.0)."""
    try:
        Path("/proc/self/clear_refs").write_text("5")
    except OSError:
        pass


def peak() -> int:
    return _status("VmHWM")


def mb(x: float) -> float:
    return round(x / 2**20, 1)


class Clock:
    def __enter__(self) -> Clock:
        self.w, self.c = time.perf_counter(), time.process_time()
        return self

    def __exit__(self, *exc) -> None:
        self.wall = time.perf_counter() - self.w
        self.cpu = time.process_time() - self.c


def cpu_model() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    import platform

    return platform.processor() or "unknown"


def bf16_gemm_slowdown() -> float:
    """CPU seconds of a bfloat16 ``F.linear`` over the float32 one (same shapes, 256 x 1024 x 1024)."""
    import torch
    import torch.nn.functional as F

    out = {}
    for dt in (torch.float32, torch.bfloat16):
        a, b = torch.randn(256, 1024, dtype=dt), torch.randn(1024, 1024, dtype=dt)
        F.linear(a, b)
        t = time.process_time()
        for _ in range(3):
            F.linear(a, b)
        out[dt] = time.process_time() - t
    return round(out[torch.bfloat16] / out[torch.float32], 2)


def common(args) -> dict:
    import torch
    import transformers

    return {
        "cpu": cpu_model(),
        "threads": torch.get_num_threads(),
        "load_avg_1m": round(os.getloadavg()[0], 2),
        "torch": torch.__version__,
        "transformers": transformers.__version__,
        "reduced": bool(args.reduced),
    }


def max_diff(a, b) -> float:
    return float((a.double() - b.double()).abs().max())


def emit(rec: dict) -> None:
    print(json.dumps(rec), flush=True)


# ---------------------------------------------------------------------------------------------- RA-CLIPScore
def run_raclip(args) -> None:
    import torch

    from genmetrics.backbones.memory_model import image_tokens, predict_memory
    from genmetrics.backbones.openclip import clip_image_batch
    from genmetrics.backbones.real_configs import count_parameters
    from genmetrics.raclip.attributes import load_attribute_set
    from genmetrics.raclip.model import RegionAttributeScorer
    from genmetrics.testing import random_images
    from genmetrics.testing.real_models import build_real_model, processor_for

    attrs = load_attribute_set("celeba-20")
    n = args.clip_images
    for name in args.clip_model or CLIP_MODELS:
        tok = processor_for(name)  # imports open_clip and loads its tokenizer before the baseline
        base = rss()
        model = build_real_model(name, reduced=args.reduced)
        n_params = sum(p.numel() for p in model.parameters())
        size = model.visual.image_size
        size = tuple(size) if isinstance(size, (tuple, list)) else (size, size)
        x = clip_image_batch(random_images(n, int(size[1]), seed=0, height=int(size[0])), model)
        scorer = RegionAttributeScorer(model, tok)
        scorer(x[:1], attrs[:1])  # warm-up: packs the weights, as any first call does
        reset_peak()
        before = rss()
        with Clock() as c:
            out = scorer(x, attrs)
        peak_b = peak()
        # batch invariance: the first two images alone vs together
        one = torch.cat([scorer(x[i : i + 1], attrs).score for i in range(2)])
        two = scorer(x[:2], attrs).score
        # bfloat16: a bf16 copy of the same weights on the first k images
        k = min(args.bf16_items, n)
        bf = build_real_model(name, reduced=args.reduced, dtype=torch.bfloat16)
        with Clock() as cb:
            s_bf = RegionAttributeScorer(bf, tok)(x[:k].to(torch.bfloat16), attrs).score
        del bf
        texts = [scorer.positive_template.format(a) for a in attrs]
        text_tokens = [int((t != 0).sum()) for t in tok(texts)]
        pred = predict_memory(name, batch=n, image_size=size, reduced=args.reduced)
        inc = peak_b - base
        emit(
            {
                "benchmark": "real_size",
                "family": "raclip",
                "model": f"{name} (random weights)",
                "items": n,
                "item": "image",
                "attributes": len(attrs),
                "image_size": list(size),
                "params": n_params,
                "params_analytic": count_parameters(name, reduced=args.reduced),
                "s_per_item": round(c.wall / n, 3),
                "cpu_s_per_item": round(c.cpu / n, 3),
                "wall_s": round(c.wall, 2),
                "cpu_s": round(c.cpu, 2),
                "visual_tokens_per_image": image_tokens(name, size)[0],
                "text_tokens_per_prompt_max": max(text_tokens),
                "prompts": 2 * len(attrs),
                "peak_rss_mb": mb(peak_b),
                "rss_before_build_mb": mb(base),
                "peak_increment_mb": mb(inc),
                "rss_before_pass_mb": mb(before),
                "predicted_mb": mb(pred.total),
                "predicted": {k: mb(v) for k, v in pred.as_dict().items()},
                "predicted_over_measured": round(pred.total / inc, 3),
                "batch_invariance_max_abs": max_diff(one, two),
                "bf16_items": k,
                "bf16_max_abs_diff": max_diff(s_bf.float(), out.score[:k]),
                "bf16_s_per_item": round(cb.wall / k, 3),
                **common(args),
            }
        )
        del model, scorer, out


# ------------------------------------------------------------------------------------------------------ TPIPS
def _pil(h: int, w: int, seed: int):
    import torch
    from PIL import Image

    g = torch.Generator().manual_seed(seed)
    return Image.fromarray(torch.randint(0, 256, (h, w, 3), generator=g, dtype=torch.uint8).numpy(), "RGB")


def _tpips_passes(args, rec, stage, vlm, proc, name, a, b, aspects, variants, base, h, w, pairs, merged):
    """The timed passes of the tpips family: vision once, each variant, batch invariance of late fusion."""
    import torch

    from genmetrics.backbones.memory_model import predict_memory
    from genmetrics.tpips.common import prompt_for
    from genmetrics.tpips.model import TPIPSModel

    models = {
        v: TPIPSModel(vlm, proc, v, batch_size=2, vision_batch_size=2, vision_cache_size=16) for v in variants
    }
    shared = models[variants[0]].vision
    for m in models.values():
        m.vision = shared  # the frozen tower once per image for all three variants
    first = models[variants[0]]
    loaded_a, loaded_b = first.load_images(a), first.load_images(b)
    final = first.resized(loaded_a + loaded_b)
    reset_peak()
    with torch.no_grad(), Clock() as cv:
        shared.features(final)  # vision: 2 images per tower call
    n_img = len(final)
    stage(
        "vision",
        vision={"s_per_image": round(cv.wall / n_img, 2), "cpu_s_per_image": round(cv.cpu / n_img, 2)},
        peak_rss_mb=mb(peak()),
        peak_increment_mb=mb(peak() - base),
    )
    scores, text_tokens, preds = {}, {}, {}
    for v, m in models.items():
        with Clock() as c:
            if v == "late":  # the embeddings themselves (batch 2), kept for the batch-invariance check
                emb = m.embed(loaded_a + loaded_b, aspects * 2)
                scores[v] = (emb[:pairs] * emb[pairs:]).sum(-1)
            else:
                scores[v] = m.similarity(loaded_a, loaded_b, aspects)
        text_tokens[v] = len(m._ids(prompt_for(v, aspects[0]))) + 12  # + the chat / vision markers
        preds[v] = predict_memory(
            name,
            batch=2 if v != "early" else pairs,
            image_size=(h, w),
            images_per_item=2 if v == "early" else 1,
            text_tokens=text_tokens[v],
            variant=v,
            reduced=args.reduced,
        ).total
        pk = peak()
        stage(
            v,
            **{
                v: {
                    "language_s_per_pair": round(c.wall / pairs, 2),
                    "language_cpu_s_per_pair": round(c.cpu / pairs, 2),
                    "s_per_pair": round((c.wall + cv.wall) / pairs, 2),
                    "cpu_s_per_pair": round((c.cpu + cv.cpu) / pairs, 2),
                    "scores": [round(float(x), 6) for x in scores[v]],
                    "text_tokens_per_sequence": text_tokens[v],
                    "sequence_tokens": (2 if v == "early" else 1) * merged + text_tokens[v],
                }
            },
            peak_rss_mb=mb(pk),
            peak_increment_mb=mb(pk - base),
            predicted_mb={k: mb(x) for k, x in preds.items()},
            predicted_over_measured=round(max(preds.values()) / (pk - base), 3),
        )
    if "late" not in scores:
        return
    # batch invariance: image a_0 alone (vision batch 1 on a fresh cache, language batch 1) vs its embedding
    # in the late pass above (vision and language batches of 2)
    late = TPIPSModel(vlm, proc, "late", batch_size=1, vision_batch_size=1, vision_cache_size=0)
    with torch.no_grad(), Clock() as ci:
        alone = late.embed(loaded_a[:1], aspects[:1])
    stage(
        "batch_invariance",
        batch_invariance_max_abs={"late_embedding_1_vs_2": max_diff(alone[0], emb[0])},
        batch_invariance_s=round(ci.wall, 1),
        bf16_max_abs_diff=None,
        bf16_note="not run on this CPU: bfloat16 products have no hardware support here (see "
        "bf16_gemm_slowdown); benchmarks/device_real_size.py measures it on a GPU",
        bf16_gemm_slowdown=bf16_gemm_slowdown(),
    )


def run_tpips(args) -> None:

    from genmetrics.backbones.memory_model import image_tokens
    from genmetrics.backbones.qwen_vl import smart_resize
    from genmetrics.backbones.real_configs import count_parameters
    from genmetrics.testing import random_images
    from genmetrics.testing.real_models import build_real_model, processor_for
    from genmetrics.tpips.common import prompt_for
    from genmetrics.tpips.model import TPIPSModel
    from tests.backbones._references import official_embeddings

    name = "Qwen3-VL-Embedding-2B"
    proc = processor_for(name)  # imports transformers, trains the offline tokenizer: before the baseline
    build_real_model(name, device="meta")
    base = rss()
    with Clock() as cbuild:
        vlm = build_real_model(name, reduced=args.reduced)
    n_params = sum(p.numel() for p in vlm.parameters())
    h, w = (192, 256) if args.reduced else (768, 1024)
    pairs = args.pairs
    imgs = random_images(2 * pairs, w, seed=1, height=h)
    a, b = list(imgs[:pairs]), list(imgs[pairs:])
    aspects = ["lighting", "the pose of the cat and the dog", "color", "overall"][:pairs]
    patches, merged = image_tokens(name, (h, w))
    rec: dict = {
        "benchmark": "real_size",
        "family": "tpips",
        "model": f"{name} config (random weights, Qwen3VLModel, sdpa)",
        "items": pairs,
        "item": "pair",
        "image_size": [h, w],
        "params": n_params,
        "params_analytic": count_parameters(name, reduced=args.reduced),
        "build_s": round(cbuild.wall, 1),
        "visual_tokens_per_image": merged,
        "patches_per_image": patches,
        "rss_before_build_mb": mb(base),
        **common(args),
    }

    def stage(label: str, **fields) -> None:
        rec.update(fields)
        emit({**rec, "stage": label})

    if args.parity_only:
        variants = []
    else:
        variants = [v for v in ("late", "mid", "early") if v in args.variants]
    if variants:  # --parity-only: straight to the parity check
        _tpips_passes(args, rec, stage, vlm, proc, name, a, b, aspects, variants, base, h, w, pairs, merged)
    # parity: late fusion vs the official embedder on 2 images of awkward sizes (one padded batch)
    sizes = [(140, 100), (96, 250)] if args.reduced else [(389, 517), (777, 301)]
    ims = [_pil(hh, ww, 7 + i) for i, (hh, ww) in enumerate(sizes)]
    par_aspects = ["lighting", "the pose of the cat and the dog"]
    late = TPIPSModel(vlm, proc, "late", batch_size=2, vision_cache_size=0)
    with Clock() as cp:
        ours = late.embed(ims, par_aspects)
        ref = official_embeddings(vlm, proc, ims, [prompt_for("late", x) for x in par_aspects])
    rec.update(
        parity_official_late={
            "image_sizes": [list(x) for x in sizes],
            "smart_sizes": [list(smart_resize(*x)) for x in sizes],
            "embedding_max_abs_diff": max_diff(ours, ref),
            "cosine_diff": abs(float(ours[0] @ ours[1]) - float(ref[0] @ ref[1])),
            "s": round(cp.wall, 1),
        }
    )
    emit(rec)


# -------------------------------------------------------------------------------------------------------- MIE
def run_mie(args) -> None:
    import torch

    from genmetrics.backbones.memory_model import image_tokens, predict_memory
    from genmetrics.backbones.real_configs import count_parameters
    from genmetrics.mie.model import MIEModel
    from genmetrics.testing import random_images
    from genmetrics.testing.real_models import build_real_model, processor_for

    name = "Qwen3.5-0.8B"
    proc = processor_for(name)
    build_real_model(name, device="meta")
    base = rss()
    with Clock() as cbuild:
        vlm = build_real_model(name, reduced=args.reduced)
    n_params = sum(p.numel() for p in vlm.parameters())
    side = 256 if args.reduced else 1024
    pairs, k = args.pairs, 3
    refs = [list(random_images(k, side, seed=10 + i)) for i in range(pairs)]
    cands = random_images(2 * pairs, side, seed=3)
    ca, cb = list(cands[:pairs]), list(cands[pairs:])
    prompts = ["a man, a dog and a bicycle in front of a red door", "two women holding one umbrella"][:pairs]
    model = MIEModel(vlm, proc, image_size=None, vision_cache_size=0).eval()
    with torch.no_grad():  # heads away from their initialisation
        for p in (*model.score_head.parameters(), *model.classification_head.parameters()):
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
    if args.parity_only:
        _mie_parity(
            args, model, proc, {"benchmark": "real_size", "family": "mie", "params": n_params, **common(args)}
        )
        return
    batch = model.prepare_pairs(refs, prompts, ca, cb)
    seq = batch.sequences[0].cost
    patches, merged = image_tokens(name, (side, side))
    reset_peak()
    model.stats.update(images_encoded=0, vision_calls=0, sequences=0, forward_batches=0)
    with Clock() as c:
        out_a, out_b = model.score_pairs(refs, prompts, ca, cb)
    peak_b = peak()
    stats = dict(model.stats)
    pred = predict_memory(
        name,
        batch=2,
        image_size=(side, side),
        images_per_item=k + 1,
        text_tokens=seq - (k + 1) * merged,
        reduced=args.reduced,
    )
    rec = {
        "benchmark": "real_size",
        "family": "mie",
        "model": f"{name} config (random weights, Qwen3_5Model, sdpa, torch Gated-DeltaNet fallback)",
        "items": pairs,
        "item": "pair (2 candidates, 3 references)",
        "image_size": [side, side],
        "params": n_params,
        "params_analytic": count_parameters(name, reduced=args.reduced),
        "build_s": round(cbuild.wall, 1),
        "s_per_pair": round(c.wall / pairs, 2),
        "cpu_s_per_pair": round(c.cpu / pairs, 2),
        "wall_s": round(c.wall, 1),
        "cpu_s": round(c.cpu, 1),
        "stats": stats,
        "visual_tokens_per_image": merged,
        "patches_per_image": patches,
        "sequence_tokens": seq,
        "text_tokens_per_sequence": seq - (k + 1) * merged,
        "peak_rss_mb": mb(peak_b),
        "rss_before_build_mb": mb(base),
        "peak_increment_mb": mb(peak_b - base),
        "predicted_mb": mb(pred.total),
        "predicted": {kk: mb(v) for kk, v in pred.as_dict().items()},
        "predicted_over_measured": round(pred.total / (peak_b - base), 3),
        **common(args),
    }
    emit({**rec, "stage": "score_pairs"})
    # batch invariance: candidate a of pair 0 alone (vision: its 4 images; language: batch 1) vs in the
    # pair's batch of 2 (vision: all images of the call; language: a and b together)
    with Clock() as ci:
        a1 = model.score([refs[0]], prompts[:1], [ca[0]])
    rec.update(
        batch_invariance_max_abs=max(
            max_diff(a1.score, out_a.score[:1]), max_diff(a1.diagnostics, out_a.diagnostics[:1])
        ),
        batch_invariance_s=round(ci.wall, 1),
        bf16_max_abs_diff=None,
        bf16_note="not run on this CPU (see bf16_gemm_slowdown); benchmarks/device_real_size.py measures it",
        bf16_gemm_slowdown=bf16_gemm_slowdown(),
    )
    emit({**rec, "stage": "batch_invariance"})
    _mie_parity(args, model, proc, rec)


def _mie_parity(args, model, proc, rec: dict) -> None:
    """MIE against the authors' forward (tests/backbones/_references.py): one sample, awkward sizes."""
    from tests.backbones._references import authors_mie, copy_head

    sizes = [(120, 333), (301, 257), (64, 64), (290, 410)]
    if not args.reduced:
        sizes = [(389, 517), (777, 301), (250, 250), (600, 450)]
    ims = [_pil(hh, ww, 20 + i) for i, (hh, ww) in enumerate(sizes)]
    prompt = "a dog, a cat and a child on a sofa"
    with Clock() as cp:
        ours = model.score([ims[:3]], [prompt], [ims[3]])
        heads = copy_head(model.score_head), copy_head(model.classification_head)
        s, d = authors_mie(model.vlm, proc, *heads, ims[:3], prompt, ims[3])
    rec.update(
        parity_authors={
            "image_sizes": [list(x) for x in sizes],
            "score_diff": max_diff(ours.score, s),
            "diagnostics_max_abs_diff": max_diff(ours.diagnostics, d),
            "s": round(cp.wall, 1),
        }
    )
    emit(rec)


# ------------------------------------------------------------------------------ fp32 vs bf16 at real size
def run_precision(args, family: str) -> None:
    """fp32 vs bf16 (the metrics' ``precision`` option) on the real 2B / 0.8B configurations, on 1 item of
    small images (``--precision-side`` px, the processor's minimum budget at 256): the bf16 error comes from
    the depth and width of the model, which are the real ones; the image size only sets the token count.
    tpips also checks batch invariance in float32 (late-fusion embeddings, batch 1 vs 2) at the 2B size."""
    import warnings

    import torch

    import genmetrics as gm
    from genmetrics.mie.model import MIEModel
    from genmetrics.testing import random_images
    from genmetrics.testing.real_models import build_real_model, processor_for
    from genmetrics.tpips.model import TPIPSModel

    name = {"tpips": "Qwen3-VL-Embedding-2B", "mie": "Qwen3.5-0.8B"}[family]
    proc = processor_for(name)
    base = rss()
    with Clock() as cbuild:
        vlm = build_real_model(name, reduced=args.reduced).requires_grad_(False)
    side = 64 if args.reduced else args.precision_side
    rec: dict = {
        "benchmark": "real_size_precision",
        "family": family,
        "model": f"{name} config (random weights)",
        "params": sum(p.numel() for p in vlm.parameters()),
        "image_size": [side, side],
        "build_s": round(cbuild.wall, 1),
        **common(args),
    }
    if family == "tpips":
        model = TPIPSModel(vlm, proc, "late", batch_size=2, vision_batch_size=2, vision_cache_size=0)
        imgs = random_images(4, side, seed=1)
        update = {"reference": imgs[:1], "candidates": imgs[1:2], "condition": ["lighting"]}
        rec.update(item="pair (late fusion)", items=1)

        def metric(p: str):
            return gm.create_metric("tpips", backbone=model, precision=p)
    else:
        model = MIEModel(vlm, proc, image_size=None, vision_cache_size=0).eval()
        with torch.no_grad():  # heads away from their initialisation (as run_mie)
            for p in (*model.score_head.parameters(), *model.classification_head.parameters()):
                p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
        imgs = random_images(4, side, seed=10)
        update = {
            "reference": [list(imgs[:3])],
            "candidates": imgs[3:4],
            "condition": ["a man, a dog and a bicycle in front of a red door"],
        }
        rec.update(item="candidate with 3 references", items=1)

        def metric(p: str):
            return gm.create_metric("mie", model=model, precision=p)

    values, times = {}, {}
    for p in ("fp32", "bf16"):
        reset_peak()
        with warnings.catch_warnings(), Clock() as c:
            warnings.simplefilter("ignore")  # the 'no bf16 units here' warning: recorded as bf16_units below
            values[p] = metric(p).score(**update)
        times[p] = {"s": round(c.wall, 1), "cpu_s": round(c.cpu, 1), "peak_rss_mb": mb(peak())}
    from genmetrics.data.device import bf16_units

    diff = max_diff(values["fp32"], values["bf16"])
    rec.update(
        fp32_score=[round(float(x), 7) for x in values["fp32"].reshape(-1)],
        bf16_score=[round(float(x), 7) for x in values["bf16"].reshape(-1)],
        bf16_max_abs_diff=diff,
        bf16_rel_diff=diff / max(float(values["fp32"].abs().max()), 1e-30),
        fp32=times["fp32"],
        bf16=times["bf16"],
        bf16_over_fp32_cpu=round(times["bf16"]["cpu_s"] / max(times["fp32"]["cpu_s"], 1e-9), 2),
        bf16_units=bf16_units("cpu")[1],
        rss_before_build_mb=mb(base),
    )
    emit({**rec, "stage": "precision"})
    if family == "tpips" and args.batch_invariance:
        aspects = ["lighting", "the pose of the cat and the dog"]
        two = TPIPSModel(vlm, proc, "late", batch_size=2, vision_batch_size=2, vision_cache_size=0)
        one = TPIPSModel(vlm, proc, "late", batch_size=1, vision_batch_size=1, vision_cache_size=0)
        with torch.no_grad(), Clock() as ci:
            emb2 = two.embed(list(imgs[:2]), aspects)
            emb1 = one.embed(list(imgs[:1]), aspects[:1])
        rec.update(
            batch_invariance_max_abs={"late_embedding_1_vs_2": max_diff(emb1[0], emb2[0])},
            batch_invariance_s=round(ci.wall, 1),
            batch_invariance_cpu_s=round(ci.cpu, 1),
        )
        emit({**rec, "stage": "batch_invariance"})


RUN = {"raclip": run_raclip, "tpips": run_tpips, "mie": run_mie}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--family", choices=FAMILIES, action="append", help="repeatable; default: all, in turn")
    ap.add_argument("--threads", type=int, default=int(os.environ.get("OMP_NUM_THREADS", "2")))
    ap.add_argument("--reduced", action="store_true", help="reduced configs and small images (smoke run)")
    ap.add_argument("--pairs", type=int, default=2)
    ap.add_argument("--variants", default="late,mid,early", help="tpips variants, comma-separated")
    ap.add_argument("--clip-images", type=int, default=8)
    ap.add_argument("--bf16-items", type=int, default=2, help="raclip images scored again in bfloat16")
    ap.add_argument("--parity-only", action="store_true", help="tpips, mie: only the parity check")
    ap.add_argument("--clip-model", choices=CLIP_MODELS, action="append", help="raclip: one model")
    ap.add_argument(
        "--precision", action="store_true", help="tpips, mie: fp32 vs bf16 (precision option) on 1 small item"
    )
    ap.add_argument("--precision-side", type=int, default=256, help="--precision: image side in px")
    ap.add_argument(
        "--batch-invariance", action="store_true", help="--precision, tpips: also batch 1 vs 2 in float32"
    )
    ap.add_argument("--in-process", action="store_true", help=argparse.SUPPRESS)
    args = ap.parse_args()
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
    os.environ.setdefault("GENMETRICS_OFFLINE", "1")
    if args.in_process:
        import torch

        torch.set_num_threads(args.threads)
        for f in args.family:
            if args.precision:
                run_precision(args, f)
            else:
                RUN[f](args)
        return
    units = []  # one process per model: its own peak RSS, one at a time
    for f in args.family or (["tpips", "mie"] if args.precision else list(FAMILIES)):
        if f == "raclip":
            units += [["--family", f, "--clip-model", m] for m in (args.clip_model or CLIP_MODELS)]
        else:
            units.append(["--family", f])
    for unit in units:
        cmd = [sys.executable, __file__, *unit, "--in-process", "--threads", str(args.threads)]
        cmd += [
            "--pairs",
            str(args.pairs),
            "--clip-images",
            str(args.clip_images),
            "--variants",
            args.variants,
        ]
        cmd += ["--bf16-items", str(args.bf16_items)] + (["--reduced"] if args.reduced else [])
        cmd += ["--parity-only"] if args.parity_only else []
        cmd += ["--precision", "--precision-side", str(args.precision_side)] if args.precision else []
        cmd += ["--batch-invariance"] if args.batch_invariance else []
        env = {**os.environ, "OMP_NUM_THREADS": str(args.threads)}
        t = time.perf_counter()
        r = subprocess.run(cmd, env=env)
        if r.returncode:
            emit({"benchmark": "real_size", "unit": unit, "error": f"exit {r.returncode}"})
        print(f"# {' '.join(unit)}: {time.perf_counter() - t:.0f} s", file=sys.stderr, flush=True)


if __name__ == "__main__":
    main()
