"""Whole commands against an unreachable hub (a closed local port) with empty caches: every command that needs
weights, run as a user runs it (a new interpreter), against the start-up floor (`genmetrics score psnr` on the
same images, which loads no weights).

Prints one JSON object: per command its exit code, wall and CPU seconds (user + system of the child), the
first 120 characters of its error, and ``cpu_ratio`` = its CPU time over the floor's, rounds interleaved.

    python benchmarks/offline_commands.py [--rounds 2]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "examples" / "quickstart" / "data"


def _closed_port() -> int:
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def commands(board: Path, out: Path) -> dict[str, list[str]]:
    ref, gen = str(DATA / "refs"), str(DATA / "gen" / "blur")
    subjects = [f"--reference={p}" for p in sorted((DATA / "refs").iterdir())[:2]]  # MIE: subjects per image
    mie = ["score", "mie", "-c", gen, "--condition", "a photo", *subjects]
    tpips_adapter = [
        "score",
        "tpips",
        "-r",
        ref,
        "-c",
        gen,
        "--condition",
        "color",
        "--adapter",
        "org/missing",
    ]
    return {
        "floor: score psnr": ["score", "psnr", "-r", ref, "-c", gen, "--json"],
        "score clipscore": ["score", "clipscore", "-c", gen, "--condition", "a photo"],
        "score clip_i": ["score", "clip_i", "-r", ref, "-c", gen],
        "score dino": ["score", "dino", "-r", ref, "-c", gen],
        "score raclip": ["score", "raclip", "-c", gen, "--attributes", "celeba-20"],
        "score sad": ["score", "sad", "-r", ref, "-c", gen, "--attributes", "celeba-20"],
        "score tpips": ["score", "tpips", "-r", ref, "-c", gen, "--condition", "color"],
        "score tpips --adapter org/missing": tpips_adapter,
        "score mie (no heads)": mie,
        "score mie --heads org/missing": [*mie, "--heads", "org/missing"],
        "compare": [
            "compare",
            "--real",
            ref,
            "--generated",
            gen,
            "--attributes",
            "celeba-20",
            "--out",
            str(out),
        ],
        "leaderboard (dino, clip_i)": ["leaderboard", str(board), "--out", str(out / "board")],
        "weights download clipscore dino": ["weights", "download", "clipscore", "dino"],
    }


def run_once(argv: list[str], env: dict[str, str]) -> dict[str, object]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    t0 = time.perf_counter()
    p = subprocess.run([sys.executable, "-m", "genmetrics", *argv], env=env, capture_output=True, text=True)
    wall = time.perf_counter() - t0
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    cpu = (after.ru_utime - before.ru_utime) + (after.ru_stime - before.ru_stime)
    err = [ln for ln in p.stderr.splitlines() if ln.startswith("error:")]
    return {"rc": p.returncode, "wall_s": wall, "cpu_s": cpu, "error": (err[0] if err else "")[:120]}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=2)
    args = ap.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        t = Path(tmp)
        board = t / "board.toml"
        board.write_text(
            f'[data]\nreferences = "{DATA / "refs"}"\n[[generators]]\nname = "blur"\nimages = "{DATA / "gen" / "blur"}"\n'
            '[[metrics]]\nname = "dino"\n[[metrics]]\nname = "clip_i"\n',
            encoding="utf-8",
        )
        env = {
            k: v for k, v in os.environ.items() if not k.startswith(("GENMETRICS_", "HF_", "TRANSFORMERS_"))
        }
        env.update(
            GENMETRICS_HOME=str(t / "home"),
            HF_HOME=str(t / "hf"),
            HF_ENDPOINT=f"http://127.0.0.1:{_closed_port()}",
            OMP_NUM_THREADS="1",
        )
        cmds = commands(board, t / "out")
        runs: dict[str, list[dict[str, object]]] = {k: [] for k in cmds}
        for _ in range(args.rounds):  # interleaved: each round runs every command once
            for name, argv in cmds.items():
                runs[name].append(run_once(argv, env))
    floor = min(float(r["cpu_s"]) for r in runs["floor: score psnr"])  # type: ignore[arg-type]
    out = {}
    for name, rs in runs.items():
        best = min(rs, key=lambda r: float(r["cpu_s"]))  # type: ignore[arg-type]
        out[name] = {
            "rc": best["rc"],
            "wall_s": round(min(float(r["wall_s"]) for r in rs), 2),  # type: ignore[arg-type]
            "cpu_s": round(float(best["cpu_s"]), 2),  # type: ignore[arg-type]
            "cpu_ratio": round(float(best["cpu_s"]) / floor, 2),  # type: ignore[arg-type]
            "error": best["error"],
        }
    load = os.getloadavg()[0]
    print(json.dumps({"load_1min": round(load, 2), "cpus": os.cpu_count(), "commands": out}, indent=1))


if __name__ == "__main__":
    main()
