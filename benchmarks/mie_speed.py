"""MIE scoring with shared reference features vs a naive per-candidate transformers forward.

Naive: for every candidate, ``processor(text, images)`` and one forward of the VLM with ``pixel_values``
(the vision tower sees the references again for each candidate), head on the last token. genmetrics:
``MIEModel.score_pairs`` (each distinct image through the vision tower once per call, the two candidates
of a pair in one unpadded forward). Same model, same inputs, interleaved rounds, medians; the scores of
both paths are compared. A scaled-down random Qwen3.5 (the 0.8B-like config at 1/4 width, 1/3 depth: text 256 x 8 layers,
vision 192 x 8 blocks),
8 pairs with 2-8 references, 256 px images. Prints one JSON line.

    python benchmarks/mie_speed.py [--rounds 3 --pairs 8 --device cpu]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import time

#: benchmarks/mie_throughput.py's Qwen3.5-0.8B-like config (text hidden 1024 x 24 layers, vision 768 x 24 blocks)
#: scaled to 1/4 of the width and 1/3 of the depth in both towers, so their cost ratio stays the real one.
SCALED = {
    "text_config": {
        "hidden_size": 256,
        "intermediate_size": 896,
        "num_hidden_layers": 8,
        "num_attention_heads": 4,
        "num_key_value_heads": 2,
        "head_dim": 64,
        "linear_key_head_dim": 32,
        "linear_value_head_dim": 32,
        "linear_num_key_heads": 4,
        "linear_num_value_heads": 4,
        "layer_types": (["linear_attention"] * 3 + ["full_attention"]) * 2,
    },
    "vision_config": {
        "depth": 8,
        "hidden_size": 192,
        "intermediate_size": 768,
        "num_heads": 4,
        "out_hidden_size": 256,
        "num_position_embeddings": 256,
    },
}


def naive_scores(model, refs, prompts, cands):
    """One plain transformers forward per candidate (pixel values in, last-token read-out)."""
    import torch

    from genmetrics.data.io.images import to_pil

    scores = []
    proc = model.processor
    for r, p, c in zip(refs, prompts, cands):
        text = model.render_text(len(r) + 1, p)
        x = proc(text=[text], images=[to_pil(i) for i in [*r, c]], return_tensors="pt", padding=False)
        with torch.no_grad():
            h = model.vlm(
                input_ids=x["input_ids"],
                attention_mask=x["attention_mask"],
                pixel_values=x["pixel_values"],
                image_grid_thw=x["image_grid_thw"],
                mm_token_type_ids=x.get("mm_token_type_ids"),
                use_cache=False,
            ).last_hidden_state[0, -1]
            scores.append(model.score_head(h.float()))
    return torch.cat(scores)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--pairs", type=int, default=8)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--px", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    a = ap.parse_args()

    import torch

    from genmetrics.mie.model import MIEModel
    from genmetrics.testing import random_images, tiny_qwen35, tiny_qwen35_processor

    torch.set_num_threads(a.threads)
    vlm = tiny_qwen35(0, **SCALED)
    model = MIEModel(
        vlm, tiny_qwen35_processor(image_size=a.px), tuning="layer_only", max_length=32768
    ).eval()
    rng = random.Random(a.seed)
    pool = list(random_images(16, a.px, seed=1))
    ca, cb = list(random_images(a.pairs, a.px, seed=2)), list(random_images(a.pairs, a.px, seed=3))
    refs = [rng.sample(pool, rng.choice([2, 4, 6, 8])) for _ in range(a.pairs)]
    prompts = [f"subject {i} and a dog sitting next to a chair" for i in range(a.pairs)]

    def ours():
        sa, sb = model.score_pairs(refs, prompts, ca, cb)
        return torch.cat([sa.score, sb.score])

    def naive():
        return naive_scores(model, refs + refs, prompts + prompts, ca + cb)

    s_ours, s_naive = ours(), naive()  # warm-up, and the values compared
    t_ours, t_naive = [], []
    for _ in range(a.rounds):
        for fn, acc in ((ours, t_ours), (naive, t_naive)):
            t = time.perf_counter()
            fn()
            acc.append(time.perf_counter() - t)
    model.stats.update(images_encoded=0)
    ours()
    n_ours = model.stats["images_encoded"]
    n_naive = sum(len(r) + 1 for r in refs) * 2
    med_o, med_n = statistics.median(t_ours), statistics.median(t_naive)
    print(
        json.dumps(
            {
                "benchmark": "mie_speed",
                "model": "scaled-down Qwen3.5-0.8B-like (text 256 x 8 layers, vision 192 x 8 blocks, random)",
                "pairs": a.pairs,
                "references": "2-8",
                "px": a.px,
                "threads": a.threads,
                "rounds": a.rounds,
                "genmetrics_s": round(med_o, 3),
                "naive_s": round(med_n, 3),
                "speedup_vs_naive": round(med_n / med_o, 2),
                "images_through_vision": {"genmetrics": n_ours, "naive": n_naive},
                "max_abs_score_diff": float((s_ours - s_naive).abs().max()),
            }
        )
    )


if __name__ == "__main__":
    main()
