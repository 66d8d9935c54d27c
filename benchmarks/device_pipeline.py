"""The input pipeline on a GPU: images/s with 0 and N decoding workers, and how long the GPU waits for input.

    python benchmarks/device_pipeline.py                      # cuda, random ViT-B/16, 512x512 PNG + JPEG
    python benchmarks/device_pipeline.py --workers 0 4 8 --images 2048
    python benchmarks/device_pipeline.py --dry-run            # CPU, tiny CLIP, a few 64 px files: it runs

Files are written to a temporary folder (smooth random content, 512x512, PNG and JPEG). Workers only
decode (:func:`genmetrics.data.io.batching.iter_decoded` with :func:`genmetrics.data.io.images.decode_uint8`);
the batch is pinned, copied with ``non_blocking`` and preprocessed on the GPU
(:func:`~genmetrics.backbones.clip_preprocess.clip_image_batch`: resize, crop, normalise there), then
embedded (:func:`~genmetrics.backbones.clip_vision.encode_image`). One JSON line per measurement:

* ``decode_per_core``: PIL decodes per second of one core, per format (the main process, no workers);
* ``compute_only``: the same compute on batches already on the GPU (the compute bound);
* ``pipeline``: per worker count, images/s end to end, the GPU busy time (CUDA events around each batch's
  compute) and ``gpu_wait_fraction = 1 - busy / wall``;
* ``workers_needed``: ``ceil(compute-bound images/s / decode_per_core)``, per format.

Nothing downloads (random weights). With ``OUT`` set the lines are also appended to ``$OUT/device_pipeline.jsonl``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import tempfile
import time

import torch

_HERE = os.path.dirname(os.path.abspath(__file__))
sys.path[:0] = [_HERE, os.path.dirname(_HERE)]  # genmetrics from a source checkout

from genmetrics.backbones.clip_preprocess import clip_image_batch  # noqa: E402
from genmetrics.backbones.clip_vision import encode_image  # noqa: E402
from genmetrics.data.io.batching import iter_decoded  # noqa: E402
from genmetrics.data.io.images import decode_uint8  # noqa: E402


def emit(row: dict) -> None:
    line = json.dumps(row)
    print(line, flush=True)
    if os.environ.get("OUT"):
        with open(os.path.join(os.environ["OUT"], "device_pipeline.jsonl"), "a") as f:
            f.write(line + "\n")


def decode(path: str) -> torch.Tensor:
    """What a worker does: decode one file to a uint8 ``[3,H,W]`` tensor (nothing else)."""
    return decode_uint8(path)


def write_files(folder: str, n: int, size: int, fmt: str) -> list[str]:
    from PIL import Image

    g = torch.Generator().manual_seed(0)
    paths = []
    for i in range(n):
        base = torch.rand(1, 3, 16, 16, generator=g)
        x = torch.nn.functional.interpolate(base, size=(size, size), mode="bicubic", align_corners=False)[0]
        x = (x + 0.05 * torch.rand(3, size, size, generator=g)).clamp(0, 1)
        arr = (x.permute(1, 2, 0) * 255).round().to(torch.uint8).numpy()
        p = os.path.join(folder, f"{i:05d}.{fmt}")
        Image.fromarray(arr).save(p, quality=90) if fmt == "jpg" else Image.fromarray(arr).save(p)
        paths.append(p)
    return paths


class Clock:
    """CUDA events around GPU work (their elapsed time is the GPU's), perf_counter on the CPU."""

    def __init__(self, device: torch.device):
        self.cuda = device.type == "cuda"
        self.busy = 0.0
        self._pairs: list = []

    def start(self):
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            return e
        return time.perf_counter()

    def stop(self, begin) -> None:
        if self.cuda:
            e = torch.cuda.Event(enable_timing=True)
            e.record()
            self._pairs.append((begin, e))  # read after the run: reading now would wait for the GPU
        else:
            self.busy += time.perf_counter() - begin

    def busy_s(self) -> float:
        if self.cuda:
            torch.cuda.synchronize()
            self.busy = sum(a.elapsed_time(b) for a, b in self._pairs) / 1000.0
            self._pairs = []
        return self.busy


def compute(model, batch: torch.Tensor, dtype: torch.dtype) -> torch.Tensor:
    with (
        torch.inference_mode(),
        torch.autocast(batch.device.type, dtype=dtype, enabled=dtype != torch.float32),
    ):
        return encode_image(model, clip_image_batch(batch, model, dtype=torch.float32))


def sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize()


def run_pipeline(model, paths, device, dtype, batch_size: int, workers: int) -> dict:
    clock = Clock(device)
    sync(device)
    t0 = time.perf_counter()
    n = 0
    for items in iter_decoded(paths, decode, batch_size=batch_size, num_workers=workers):
        x = torch.stack([t for _, t in items])
        if device.type == "cuda":
            x = x.pin_memory().to(device, non_blocking=True)
        begin = clock.start()
        compute(model, x, dtype)
        clock.stop(begin)
        n += len(items)
    sync(device)
    wall = time.perf_counter() - t0
    busy = clock.busy_s()
    return {
        "images_per_s": round(n / wall, 1),
        "wall_s": round(wall, 3),
        "gpu_busy_s": round(busy, 3),
        "gpu_wait_fraction": round(max(0.0, 1.0 - busy / wall), 3),
    }


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--dry-run", action="store_true", help="CPU, tiny CLIP, a few small files")
    ap.add_argument("--images", type=int, default=1024)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--workers", type=int, nargs="+", default=None, help="default: 0 and os.cpu_count()")
    ap.add_argument("--dtype", choices=("bf16", "fp32"), default="bf16")
    ap.add_argument("--model", default="ViT-B-16-quickgelu", help="open_clip architecture, random weights")
    a = ap.parse_args(argv)
    if a.dry_run:
        a.images, a.size, a.batch_size, a.dtype = 8, 64, 4, "fp32"
        a.workers = a.workers or [0, 1]
        device = torch.device("cpu")
        from genmetrics.testing import tiny_clip

        model, a.model = tiny_clip()[0].eval(), "tiny_clip"
    else:
        if not torch.cuda.is_available():
            sys.exit("device_pipeline.py: no CUDA device; use --dry-run to check that the script runs")
        import open_clip

        device = torch.device("cuda")
        a.workers = a.workers or [0, os.cpu_count() or 1]
        model = open_clip.create_model(a.model, pretrained=None).to(device).eval()
    dtype = {"bf16": torch.bfloat16, "fp32": torch.float32}[a.dtype]
    common = {
        "device": torch.cuda.get_device_name() if device.type == "cuda" else "cpu",
        "model": a.model,
        "dtype": a.dtype,
        "size": a.size,
        "batch_size": a.batch_size,
        "dry_run": a.dry_run,
    }
    with tempfile.TemporaryDirectory() as d:
        decode_rate = {}
        for fmt in ("png", "jpg"):
            paths = write_files(d, a.images, a.size, fmt)
            t0 = time.perf_counter()
            for p in paths[: max(4, len(paths) // 4)]:
                decode(p)
            k = max(4, len(paths) // 4)
            decode_rate[fmt] = k / (time.perf_counter() - t0)
            emit(
                {
                    **common,
                    "bench": "decode_per_core",
                    "format": fmt,
                    "images_per_s": round(decode_rate[fmt], 1),
                }
            )

            # compute bound: the same batches already decoded and on the device
            batches = [
                torch.stack([decode(p) for p in paths[i : i + a.batch_size]]).to(device)
                for i in range(0, min(len(paths), 4 * a.batch_size), a.batch_size)
            ]
            compute(model, batches[0], dtype)  # warm-up (kernels, allocator)
            clock = Clock(device)
            sync(device)
            t0 = time.perf_counter()
            for x in batches:
                begin = clock.start()
                compute(model, x, dtype)
                clock.stop(begin)
            sync(device)
            wall = time.perf_counter() - t0
            n = sum(len(x) for x in batches)
            compute_rate = n / wall
            emit(
                {
                    **common,
                    "bench": "compute_only",
                    "format": fmt,
                    "images_per_s": round(compute_rate, 1),
                    "gpu_busy_s": round(clock.busy_s(), 3),
                    "wall_s": round(wall, 3),
                }
            )
            for w in a.workers:
                emit(
                    {
                        **common,
                        "bench": "pipeline",
                        "format": fmt,
                        "workers": w,
                        **run_pipeline(model, paths, device, dtype, a.batch_size, w),
                    }
                )
            emit(
                {
                    **common,
                    "bench": "workers_needed",
                    "format": fmt,
                    "compute_images_per_s": round(compute_rate, 1),
                    "decode_per_core": round(decode_rate[fmt], 1),
                    "workers": math.ceil(compute_rate / decode_rate[fmt]),
                }
            )
            for p in paths:
                os.remove(p)


if __name__ == "__main__":
    main()
