"""The input pipeline end to end beside its two bounds, one JSON line per case.

For each case the run itself, *decode-only* (every file decoded once by the same pipeline and workers) and
*compute-only* (the same metrics on tensors decoded beforehand) run in fresh processes, rounds interleaved;
each line has images/s, CPU seconds (the process and its worker children:
``resource.getrusage(RUSAGE_CHILDREN)``) and peak RSS, and the two goals:
``cpu_ratio = cpu / (decode cpu + compute cpu)`` (goal <= 1.10) and
``wall_ratio = min(decode wall, compute wall) / wall`` read as images/s against the slower bound
(goal >= 0.85 of ``min`` of the two bounds' images/s).

Cases: ``leaderboard`` (psnr + ssim + ms_ssim over 3 generators x N PNG/JPEG files against N references),
``clip`` (``score clip_i`` and ``clipscore`` with a random open_clip ViT-B-16; weights are random, nothing
downloads), ``raclip`` (``compare``: SaD, PaD and R-SaD of N generated against N real images, the same random
ViT-B-16; compute-only is the same comparison, report and plots included, on images decoded beforehand).

    python benchmarks/pipeline.py --images 200 --size 512 --workers 1
    python benchmarks/pipeline.py --large --images 20000 --size 64   # kill at ~50%, resume, compare
    python benchmarks/pipeline.py --memory --images 2000 --case clip  # peak RSS of the run at N/10 and N
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
METRICS = ("psnr", "ssim", "ms_ssim")


def make_data(root: Path, n: int, size: int, generators: int = 3) -> list[Path]:
    import numpy as np
    from PIL import Image

    rng = np.random.default_rng(0)
    files = []
    for k, folder in enumerate(["refs", *[f"g{i}" for i in range(generators)]]):
        (root / folder).mkdir(parents=True, exist_ok=True)
        for i in range(n):
            a = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
            ext = "jpg" if k and i % 2 else "png"
            p = root / folder / f"{i:05d}.{ext}"
            Image.fromarray(a).save(p, quality=95) if ext == "jpg" else Image.fromarray(a).save(p)
            files.append(p)
    return files


def config(root: Path, metrics: tuple[str, ...], generators: int = 3) -> dict:
    return {
        "data": {"references": "refs"},
        "run": {"n_boot": 10},
        "generators": [{"name": f"g{i}", "images": f"g{i}"} for i in range(generators)],
        "metrics": [{"name": m} for m in metrics],
    }


def random_b16(kind: str, weights: str, **options):  # a backbone provider: random ViT-B-16 weights
    if kind != "open_clip":
        return None
    import open_clip
    import torch

    torch.manual_seed(0)
    return open_clip.create_model("ViT-B-16-quickgelu", pretrained=None).eval(), open_clip.get_tokenizer(
        "ViT-B-16-quickgelu"
    )


# ------------------------------------------------------------------------------ children (one measurement)
def child(args: argparse.Namespace) -> None:
    import torch

    torch.set_num_threads(max(1, args.threads))
    root = Path(args.root)
    files = sorted(p for p in root.rglob("*") if p.suffix in (".png", ".jpg"))
    # start-up (imports, building the metrics once) is not the pipeline's cost: done before the clock starts
    import genmetrics as gm
    import genmetrics.cli.main  # noqa: F401
    import genmetrics.data.io.pipeline  # noqa: F401
    import genmetrics.leaderboard  # noqa: F401

    for name in args.metrics.split(","):
        if name not in ("clip_i", "clipscore", "sad"):  # built later, with their backbone and attributes
            gm.create_metric(name)
        else:  # the model library's import is start-up too, on both sides
            import open_clip  # noqa: F401
    t0, c0 = time.perf_counter(), time.process_time()
    if args.child == "leaderboard":
        from genmetrics.leaderboard import run_leaderboard

        out = Path(args.out)
        run_leaderboard(
            config(root, tuple(args.metrics.split(","))),
            out,
            base_dir=root,
            plots=False,
            workers=args.workers,
        )
    elif args.child == "decode":
        from genmetrics.data.io.pipeline import decoded

        for _ in decoded(files, workers=args.workers, batch_size=32):
            pass
    elif args.child in ("compute", "compute_clip"):
        from genmetrics.data.io.pipeline import decoded

        data = {str(p): o[0] for b in decoded(files, workers=0) for p, o in b}
        t0, c0 = time.perf_counter(), time.process_time()  # compute only: decoding is not timed
        import genmetrics as gm

        if args.child == "compute":
            metrics = [gm.create_metric(m) for m in args.metrics.split(",")]
            refs = sorted((root / "refs").iterdir())
            for g in sorted(d for d in root.iterdir() if d.name.startswith("g")):
                cands = sorted(g.iterdir())
                for i in range(0, len(cands), 32):
                    r = [data[str(root / "refs" / p.name.replace(".jpg", ".png"))] for p in cands[i : i + 32]]
                    c = [data[str(p)] for p in cands[i : i + 32]]
                    for m in metrics:
                        m.reset()
                        m.update(reference=r, candidates=c)
            del refs
        else:
            from genmetrics.backbones.provider import use_provider

            cands = sorted((root / "g0").iterdir())
            with use_provider(random_b16), torch.inference_mode():
                m = gm.create_metric(args.metrics)
                for i in range(0, len(cands), 32):
                    c = [data[str(p)] for p in cands[i : i + 32]]
                    if args.metrics == "clip_i":
                        r = [
                            data[str(root / "refs" / p.name.replace(".jpg", ".png"))]
                            for p in cands[i : i + 32]
                        ]
                        m.update(reference=r, candidates=c)
                    else:
                        m.update(candidates=c, condition=["a photo"] * len(c))
    elif args.child == "compute_compare":
        # the same comparison (scores, SaD/PaD/R-SaD, bootstrap, plots, report) on images decoded beforehand
        from genmetrics.backbones.openclip import load_open_clip
        from genmetrics.backbones.provider import use_provider
        from genmetrics.data.io.pipeline import decoded
        from genmetrics.raclip.attributes import resolve_attributes
        from genmetrics.raclip.report import write_comparison

        data = {str(p): o[0] for b in decoded(files, workers=0) for p, o in b}
        real = [data[str(p)] for p in sorted((root / "refs").iterdir())]
        gen = [data[str(p)] for p in sorted((root / "g0").iterdir())]
        t0, c0 = time.perf_counter(), time.process_time()  # compute only: decoding is not timed
        with use_provider(random_b16):  # built inside the clock, as compare builds it
            model, _, tok = load_open_clip("ViT-B-32-quickgelu/openai", device="cpu")
        write_comparison(
            real,
            gen,
            resolve_attributes("celeba-20"),
            Path(args.out),
            backbone=model,
            tokenizer=tok,
            weights="random ViT-B-16",
            examples=2,  # compare's default
            workers=0,
        )
    elif args.child == "compare":
        from genmetrics.backbones.provider import use_provider
        from genmetrics.cli.main import cli

        with use_provider(random_b16):
            try:
                cli.main(
                    [
                        "compare",
                        "--real",
                        str(root / "refs"),
                        "--generated",
                        str(root / "g0"),
                        "--attributes",
                        "celeba-20",
                        "--out",
                        args.out,
                        "--workers",
                        str(args.workers),
                    ],
                    standalone_mode=False,
                )
            except SystemExit:
                pass
    elif args.child == "score":
        from genmetrics.backbones.provider import use_provider
        from genmetrics.cli.main import cli

        refs = ["-r", str(root / "refs")] if args.metrics == "clip_i" else ["-t", "a photo"]
        with use_provider(random_b16):
            try:
                cli.main(
                    ["score", args.metrics, *refs, "-c", str(root / "g0"), "--workers", str(args.workers)],
                    standalone_mode=False,
                )
            except SystemExit:
                pass
    wall = time.perf_counter() - t0
    me = time.process_time() - c0
    ch = resource.getrusage(resource.RUSAGE_CHILDREN)
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(
        "RESULT "
        + json.dumps(
            {"wall": wall, "cpu": me + ch.ru_utime + ch.ru_stime, "rss_mb": rss, "n_files": len(files)}
        )
    )


def measure(kind: str, root: Path, args: argparse.Namespace, metrics: str, **extra) -> dict:
    with tempfile.TemporaryDirectory() as out:
        cmd = [
            sys.executable,
            __file__,
            "--child",
            kind,
            "--root",
            str(root),
            "--out",
            str(Path(out) / "run"),
            "--workers",
            str(args.workers),
            "--metrics",
            metrics,
            "--threads",
            str(args.threads),
        ]
        env = {**os.environ, "PYTHONPATH": str(ROOT), "GENMETRICS_PROGRESS": "no"}
        res = subprocess.run(cmd, capture_output=True, text=True, env=env)
        line = next((x for x in res.stdout.splitlines() if x.startswith("RESULT ")), None)
        if line is None:
            raise SystemExit(f"{kind} failed:\n{res.stderr[-3000:]}")
        return json.loads(line[7:])


def bench(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as d:
        root = Path(d)
        make_data(root, args.images, args.size, generators=3 if args.case == "leaderboard" else 1)
        cases = {
            "leaderboard": [("leaderboard", ",".join(METRICS), "leaderboard", "compute")],
            "clip": [
                ("score clip_i", "clip_i", "score", "compute_clip"),
                ("clipscore", "clipscore", "score", "compute_clip"),
            ],
            # compare scores every real and generated image once (SaD, PaD and R-SaD from the same scores)
            "raclip": [("compare (SaD/PaD/R-SaD)", "sad", "compare", "compute_compare")],
        }[args.case]
        for name, metrics, run_kind, compute_kind in cases:
            runs: dict[str, list[dict]] = {"run": [], "decode": [], "compute": []}
            for _ in range(args.rounds):  # interleaved rounds
                runs["run"].append(measure(run_kind, root, args, metrics))
                runs["decode"].append(measure("decode", root, args, metrics))
                runs["compute"].append(measure(compute_kind, root, args, metrics))
            best = {k: min(v, key=lambda r: r["wall"]) for k, v in runs.items()}
            cpu = {k: min(r["cpu"] for r in v) for k, v in runs.items()}
            n_images = {"leaderboard": best["run"]["n_files"], "raclip": 2 * args.images}.get(
                args.case, args.images
            )
            decode_n = best["decode"]["n_files"]
            bound_ips = min(decode_n / best["decode"]["wall"], n_images / best["compute"]["wall"])
            line = {
                "case": name,
                "images": args.images,
                "size": args.size,
                "workers": args.workers,
                "files": best["run"]["n_files"],
                "images_per_s": round(n_images / best["run"]["wall"], 2),
                "wall_s": round(best["run"]["wall"], 2),
                "cpu_s": round(cpu["run"], 2),
                "decode_cpu_s": round(cpu["decode"], 2),
                "compute_cpu_s": round(cpu["compute"], 2),
                "cpu_ratio": round(cpu["run"] / (cpu["decode"] + cpu["compute"]), 3),
                "bound_images_per_s": round(bound_ips, 2),
                "wall_ratio": round((n_images / best["run"]["wall"]) / bound_ips, 3),
                "peak_rss_mb": round(best["run"]["rss_mb"], 1),
                "rounds": args.rounds,
            }
            print(json.dumps(line), flush=True)
            save(line, args)


def save(line: dict, args: argparse.Namespace) -> None:
    out = ROOT / "benchmarks" / "results" / "pipeline.jsonl"
    out.parent.mkdir(parents=True, exist_ok=True)
    with out.open("a") as f:
        f.write(json.dumps(line) + "\n")


# ------------------------------------------------------------------------------ --large
def large(args: argparse.Namespace) -> None:
    """3 generators x N (64x64) with psnr + ssim: time per image at N/10 and N, a run killed at ~50% and
    resumed, compared byte for byte with an uninterrupted run; peak RSS of each."""
    with tempfile.TemporaryDirectory() as d:
        root = Path(d) / "data"
        make_data(root, args.images, args.size)
        small = Path(d) / "small"
        make_data(small, max(1, args.images // 10), args.size)
        metrics = "psnr,ssim"
        lines = []
        a = measure("leaderboard", small, args, metrics)
        b = measure("leaderboard", root, args, metrics)
        for n, r in ((args.images // 10, a), (args.images, b)):
            lines.append(
                {
                    "large": "uninterrupted",
                    "images": n,
                    "s_per_image": r["wall"] / (3 * n),
                    "cpu_s_per_image": r["cpu"] / (3 * n),
                    "rss_mb": r["rss_mb"],
                }
            )
        full = Path(d) / "full"
        env = {**os.environ, "PYTHONPATH": str(ROOT), "GENMETRICS_PROGRESS": "no"}
        cfg = Path(d) / "cfg.toml"
        gens = "".join(f'[[generators]]\nname = "g{i}"\nimages = "{root}/g{i}"\n' for i in range(3))
        cfg.write_text(
            f'[data]\nreferences = "{root}/refs"\n[run]\nn_boot = 10\n{gens}'
            '[[metrics]]\nname = "psnr"\n[[metrics]]\nname = "ssim"\n'
        )
        cli = [
            sys.executable,
            "-m",
            "genmetrics",
            "leaderboard",
            str(cfg),
            "--no-plots",
            "--workers",
            str(args.workers),
        ]
        subprocess.run([*cli, "--out", str(full)], env=env, capture_output=True, check=True)
        killed = Path(d) / "killed"
        proc = subprocess.Popen(
            [*cli, "--out", str(killed)], env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL
        )
        target = 3 * args.images * 2 // 2  # rows: 3 generators x N x 2 metrics; kill at ~50%
        while proc.poll() is None:
            res = killed / "results.jsonl"
            if res.exists() and sum(1 for _ in res.open()) >= target:
                proc.send_signal(signal.SIGKILL)
                break
            time.sleep(0.2)
        proc.wait()
        n_before = (
            sum(1 for _ in (killed / "results.jsonl").open()) if (killed / "results.jsonl").exists() else 0
        )
        subprocess.run([*cli, "--out", str(killed), "--resume"], env=env, capture_output=True, check=True)
        same = (killed / "results.jsonl").read_bytes() == (full / "results.jsonl").read_bytes()
        lines.append(
            {
                "large": "killed_and_resumed",
                "rows_before_kill": n_before,
                "rows": 6 * args.images,
                "identical": same,
            }
        )
        ratio = lines[1]["s_per_image"] / lines[0]["s_per_image"]
        lines.append(
            {
                "large": "summary",
                "time_per_image_ratio": round(ratio, 3),
                "cpu_per_image_ratio": round(lines[1]["cpu_s_per_image"] / lines[0]["cpu_s_per_image"], 3),
                "rss_ratio": round(lines[1]["rss_mb"] / lines[0]["rss_mb"], 3),
            }
        )
        for line in lines:
            print(json.dumps(line), flush=True)
            save(line, args)


# ------------------------------------------------------------------------------ --memory
def memory(args: argparse.Namespace) -> None:
    """Peak RSS of the end-to-end run (no bounds) at N/10 and N images, the same case, size and workers: the
    goal is a ratio within 1.10 (memory set by batches and prefetch depth, not by the number of files). Peak
    RSS does not depend on the machine's load, so this mode can run beside other work."""
    kinds = {
        "leaderboard": [("leaderboard", ",".join(METRICS), "leaderboard")],
        "clip": [("score clip_i", "clip_i", "score"), ("clipscore", "clipscore", "score")],
        "raclip": [("compare (SaD/PaD/R-SaD)", "sad", "compare")],
    }[args.case]
    for name, metrics, run_kind in kinds:
        rss = {}
        for n in (max(1, args.images // 10), args.images):
            with tempfile.TemporaryDirectory() as d:
                make_data(Path(d), n, args.size, generators=3 if args.case == "leaderboard" else 1)
                rss[n] = measure(run_kind, Path(d), args, metrics)["rss_mb"]
        small, big = sorted(rss)
        line = {
            "memory": name,
            "size": args.size,
            "workers": args.workers,
            "images": [small, big],
            "peak_rss_mb": [round(rss[small], 1), round(rss[big], 1)],
            "rss_ratio": round(rss[big] / rss[small], 3),
            "goal_rss_ratio": 1.10,
        }
        print(json.dumps(line), flush=True)
        save(line, args)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--images", type=int, default=200)
    ap.add_argument("--size", type=int, default=512)
    ap.add_argument("--workers", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--rounds", type=int, default=1)
    ap.add_argument("--case", choices=["leaderboard", "clip", "raclip"], default="leaderboard")
    ap.add_argument("--large", action="store_true")
    ap.add_argument("--memory", action="store_true", help="peak RSS of the run at N/10 and N only")
    ap.add_argument("--child", help=argparse.SUPPRESS)
    ap.add_argument("--root", help=argparse.SUPPRESS)
    ap.add_argument("--out", help=argparse.SUPPRESS)
    ap.add_argument("--metrics", default=",".join(METRICS), help=argparse.SUPPRESS)
    args = ap.parse_args()
    if args.child:
        child(args)
    elif args.large:
        large(args)
    elif args.memory:
        memory(args)
    else:
        bench(args)


if __name__ == "__main__":
    main()
