"""RA-CLIPScore single-pass overhead over plain ``encode_image`` (the paper's "no extra cost" claim).

Random open_clip ViT-B/16 (no download), warm, same batch, interleaved rounds (every variant once per
round, order rotated), medians over rounds. Prints one JSON line with the CPU it ran on:

* ``ratio_single_pass``: scorer (masked single pass + Eq. 4/8/9 for ``--attributes`` attributes, text
  embeddings cached) / open_clip's ``encode_image`` -- goal <= 1.0; on the CPU at one thread
  the ratio is taken from CPU seconds of the process (``*_cpu_s``), which other work on a shared machine
  disturbs less than wall time (``*_s`` are wall);
* ``ratio_two_pass``: ``encode_image`` plus a second forward pass that recomputes the regional tokens and
  the attention weights (open_clip blocks with ``need_weights``, the Eq. 7 mask on the last block) /
  ``encode_image`` -- about 2.0, the cost the single pass saves;
* on the CPU: the scorer with the packed oneDNN products forced on and forced off, the choice the
  per-machine micro-benchmark made (``fast_path_choices``), the float32 matmul speed measured in the same
  run (``matmul_gflops``) and ``encode_image``'s fraction of it (FLOPs counted from the model).

Usage: python benchmarks/raclip_overhead.py [--model ViT-B-16-quickgelu] [--batch 8] [--rounds 5]
[--device cpu] [--threads 1]
"""

from __future__ import annotations

import argparse
import json
import statistics
import time
from collections.abc import Callable
from typing import Any

import torch


def _interleaved(
    tools: dict[str, Callable[[], Any]], rounds: int
) -> tuple[dict[str, float], dict[str, float]]:
    """Median wall and CPU seconds per tool over ``rounds`` interleaved rounds (order rotated per round)."""
    wall: dict[str, list[float]] = {k: [] for k in tools}
    cpu: dict[str, list[float]] = {k: [] for k in tools}
    names = list(tools)
    for r in range(rounds):
        for k in names[r % len(names) :] + names[: r % len(names)]:
            t0, c0 = time.perf_counter(), time.process_time()
            tools[k]()
            wall[k].append(time.perf_counter() - t0)
            cpu[k].append(time.process_time() - c0)
    return (
        {k: statistics.median(v) for k, v in wall.items()},
        {k: statistics.median(v) for k, v in cpu.items()},
    )


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--model", default="ViT-B-16-quickgelu")
    ap.add_argument("--batch", type=int, default=8)
    ap.add_argument("--attributes", type=int, default=20)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    import open_clip

    from genmetrics.accel import clip_packed, fastpath
    from genmetrics.backbones.clip_vision import encode_image, vision_tower_flops
    from genmetrics.raclip.model import RegionAttributeScorer, eq7_mask

    device = torch.device(args.device)
    torch.manual_seed(0)
    model = open_clip.create_model(args.model, pretrained=None).to(device).eval()
    tok = open_clip.get_tokenizer(args.model)
    size = model.visual.image_size
    size = size if isinstance(size, (tuple, list)) else (size, size)
    x = torch.randn(args.batch, 3, *size, device=device)
    attrs = [f"attribute number {i}" for i in range(args.attributes)]
    scorer = RegionAttributeScorer(model, tok)
    scorer.text_embeddings(attrs)  # cached, as in a real run
    sync = torch.cuda.synchronize if device.type == "cuda" else (lambda: None)

    def plain() -> None:
        with torch.no_grad():
            model.encode_image(x)
        sync()

    def fast_tower() -> None:
        with torch.no_grad():
            encode_image(model, x)
        sync()

    def single() -> None:
        scorer(x, attrs)
        sync()

    def second_pass() -> None:
        # what a two-pass method does: encode_image, then run the tower again for regional tokens + weights
        with torch.no_grad():
            model.encode_image(x)
            v = model.visual
            h = v._embeds(x)
            for blk in v.transformer.resblocks[:-1]:
                y = blk.ln_1(h)
                blk.attn(y, y, y, need_weights=True, average_attn_weights=True)
                h = blk(h)
            h = v.transformer.resblocks[-1](h, attn_mask=eq7_mask(h.shape[1], device=device))
            v.ln_post(h) @ v.proj
        sync()

    def forced(path: str) -> Callable[[], None]:
        def run() -> None:
            fastpath.force_path(clip_packed.PACKED_LINEAR, path)
            try:
                scorer(x, attrs)
            finally:
                fastpath.force_path(clip_packed.PACKED_LINEAR, None)

        return run

    tools: dict[str, Callable[[], None]] = {
        "encode_image": plain,
        "genmetrics_encode_image": fast_tower,
        "single_pass": single,
        "two_pass": second_pass,
    }
    on_cpu = device.type == "cpu"
    if on_cpu:
        tools["single_pass_plain_products"] = forced("plain")
        tools["single_pass_packed_products"] = forced("packed")
    t0 = time.process_time()
    single()  # first call: the per-machine micro-benchmark and packing (paid once per process)
    first_call_cpu_s = time.process_time() - t0
    for fn in tools.values():  # warm-up
        fn()
    peak_before = fastpath.matmul_gflops() if on_cpu else None
    wall, cpu = _interleaved(tools, args.rounds)
    peak = max(peak_before or 0.0, fastpath.matmul_gflops()) if on_cpu else None
    use_cpu = on_cpu and args.threads == 1
    t = cpu if use_cpu else wall
    flops = vision_tower_flops(model.visual) * args.batch
    line: dict[str, Any] = {
        "benchmark": "raclip_overhead",
        "model": args.model + " (random weights)",
        "device": str(device),
        "cpu": fastpath.cpu_description() if on_cpu else None,
        "torch": torch.__version__,
        "batch": args.batch,
        "attributes": args.attributes,
        "threads": torch.get_num_threads(),
        "rounds": args.rounds,
        "ratio_from": "cpu_s" if use_cpu else "wall_s",
        **{f"{k}_s": round(v, 4) for k, v in wall.items()},
        **({f"{k}_cpu_s": round(v, 4) for k, v in cpu.items()} if on_cpu else {}),
        "ratio_single_pass": round(t["single_pass"] / t["encode_image"], 3),
        "ratio_two_pass": round(t["two_pass"] / t["encode_image"], 3),
        "ratio_genmetrics_encode_image": round(t["genmetrics_encode_image"] / t["encode_image"], 3),
        "goal_single_pass": 1.0,
    }
    if on_cpu:
        line.update(
            {
                "packed_speedup_forced": round(
                    t["single_pass_plain_products"] / t["single_pass_packed_products"], 3
                ),
                "fast_path_choices": fastpath.fast_path_choices(),
                "first_call_cpu_s": round(first_call_cpu_s, 3),
                "matmul_gflops_fp32": round(peak or 0.0, 1),
                "encode_image_gflops": round(flops / t["encode_image"] / 1e9, 1),
                "encode_image_fraction_of_matmul_peak": round(
                    flops / t["encode_image"] / 1e9 / (peak or 1), 3
                ),
                "scorer_fraction_of_matmul_peak": round(flops / t["single_pass"] / 1e9 / (peak or 1), 3),
            }
        )
    print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
