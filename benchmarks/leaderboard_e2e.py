"""Leaderboard end to end against a minimal hand loop: G generators x N PNG images, psnr + ssim.

The leaderboard is ``genmetrics leaderboard CONFIG --out DIR --no-plots`` in a fresh process (start-up,
decoding, scoring, results and reports included); the hand loop, also in a fresh process, decodes the
same files with PIL and calls torchmetrics' functional PSNR and SSIM per batch of 32. Rounds alternate
the two; one JSON line with both medians and their ratio ``leaderboard / hand loop`` (goal <= 1.3;
below 1 the leaderboard is faster).

    python benchmarks/leaderboard_e2e.py                       # 3 generators x 300 images of 256x256
    python benchmarks/leaderboard_e2e.py --images 40 --rounds 1 # quick look
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

HAND = r"""
import sys, numpy as np, torch
from pathlib import Path
from PIL import Image
from torchmetrics.functional.image import peak_signal_noise_ratio, structural_similarity_index_measure
root = Path(sys.argv[1])
refs = sorted((root / "refs").glob("*.png"))
for gen in sorted((root / "gen").iterdir()):
    for i in range(0, len(refs), 32):
        chunk = refs[i:i + 32]
        load = lambda p: torch.from_numpy(np.asarray(Image.open(p).convert("RGB")).copy()).permute(2, 0, 1)
        r = torch.stack([load(p) for p in chunk]).float() / 255
        c = torch.stack([load(gen / p.name) for p in chunk]).float() / 255
        peak_signal_noise_ratio(c, r, data_range=1.0, reduction="none", dim=(1, 2, 3))
        structural_similarity_index_measure(c, r, data_range=1.0, reduction="none")
"""


def make_data(root: Path, generators: int, images: int, size: int) -> None:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    (root / "refs").mkdir(parents=True)
    refs = []
    for i in range(images):
        a = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
        Image.fromarray(a).save(root / "refs" / f"{i:04d}.png")
        refs.append(a)
    for g in range(generators):
        d = root / "gen" / f"g{g}"
        d.mkdir(parents=True)
        for i, a in enumerate(refs):
            noisy = np.clip(a.astype(np.int16) + rng.integers(-8 * (g + 1), 8 * (g + 1) + 1, a.shape), 0, 255)
            Image.fromarray(noisy.astype(np.uint8)).save(d / f"{i:04d}.png")
    gens = "\n".join(
        f'[[generators]]\nname = "g{g}"\nimages = "{root / "gen" / f"g{g}"}"\n' for g in range(generators)
    )
    (root / "config.toml").write_text(
        f'[data]\nreferences = "{root / "refs"}"\n\n[run]\ntitle = "e2e"\nn_boot = 200\n\n{gens}\n'
        '[[metrics]]\nname = "psnr"\n\n[[metrics]]\nname = "ssim"\n',
        encoding="utf-8",
    )


def _children_cpu() -> float:
    import resource

    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--generators", type=int, default=3)
    ap.add_argument("--images", type=int, default=300)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--rounds", type=int, default=3)
    args = ap.parse_args()
    env = {
        **os.environ,
        "OMP_NUM_THREADS": os.environ.get("OMP_NUM_THREADS", "1"),
        "GENMETRICS_PROGRESS": "0",
    }
    with tempfile.TemporaryDirectory(prefix="gm_e2e_") as tmp:
        root = Path(tmp)
        make_data(root, args.generators, args.images, args.size)
        times: dict[str, list[float]] = {"leaderboard": [], "hand_loop": []}
        cpus: dict[str, list[float]] = {"leaderboard": [], "hand_loop": []}
        for r in range(args.rounds):
            out = root / f"out{r}"
            cmds = {
                "leaderboard": [
                    sys.executable,
                    "-c",
                    "from genmetrics.cli.main import entry; entry()",
                    "leaderboard",
                    str(root / "config.toml"),
                    "--out",
                    str(out),
                    "--no-plots",
                ],
                "hand_loop": [sys.executable, "-c", HAND, str(root)],
            }
            for k in list(cmds) if r % 2 == 0 else list(cmds)[::-1]:
                t0, c0 = time.perf_counter(), _children_cpu()
                subprocess.run(cmds[k], check=True, env=env, capture_output=True)
                times[k].append(time.perf_counter() - t0)
                cpus[k].append(_children_cpu() - c0)
    med = {k: statistics.median(v) for k, v in times.items()}
    cpu = {k: statistics.median(v) for k, v in cpus.items()}
    print(
        json.dumps(
            {
                "benchmark": "leaderboard_e2e",
                "generators": args.generators,
                "images": args.images,
                "size": args.size,
                "metrics": ["psnr", "ssim"],
                "rounds": args.rounds,
                "leaderboard_s": round(med["leaderboard"], 2),
                "hand_loop_s": round(med["hand_loop"], 2),
                "ratio": round(med["leaderboard"] / med["hand_loop"], 3),
                "ratio_is": "leaderboard_s / hand_loop_s (below 1: the leaderboard is faster)",
                "goal": 1.3,
                "all_s": {k: [round(t, 2) for t in v] for k, v in times.items()},
                # CPU seconds (user + system) of each process: robust to a loaded machine
                "leaderboard_cpu_s": round(cpu["leaderboard"], 2),
                "hand_loop_cpu_s": round(cpu["hand_loop"], 2),
                "cpu_ratio": round(cpu["leaderboard"] / cpu["hand_loop"], 3),
            }
        )
    )


if __name__ == "__main__":
    main()
