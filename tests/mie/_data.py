"""Synthetic MIB-style data for the MIE tests: tiny PNG images and JSONL pair files."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
from PIL import Image

GENERATORS = ("gen_a", "gen_b", "gen_c", "gen_d")


def _img(path: Path, rng: np.random.Generator, bright: bool | None = None, size: int = 64) -> str:
    arr = rng.integers(0, 256, (size, size, 3), dtype=np.uint8)
    if bright is True:
        arr = (arr // 4 + 190).astype(np.uint8)
    elif bright is False:
        arr = (arr // 4).astype(np.uint8)
    Image.fromarray(arr).save(path)
    return path.name


def write_pairs(
    folder: Path,
    n: int = 8,
    *,
    seed: int = 0,
    name: str = "pairs.jsonl",
    refs=(2, 3, 4),
    diagnostics: bool = True,
    generators=GENERATORS[:2],
    human_noise: float = 0.0,
) -> Path:
    """``n`` pairs; the winning candidate is bright, the loser dark (easy to learn); references are
    shared across pairs (a pool of 6 subjects)."""
    folder = Path(folder)
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    pool = [_img(folder / f"ref{seed}_{i}.png", rng) for i in range(6)]
    lines = []
    for i in range(n):
        k = refs[i % len(refs)]
        pref = int(rng.integers(0, 2))
        cands = [None, None]
        cands[pref] = _img(folder / f"p{seed}_{i}_w.png", rng, bright=True)
        cands[1 - pref] = _img(folder / f"p{seed}_{i}_l.png", rng, bright=False)
        ga, gb = generators[i % len(generators)], generators[(i + 1) % len(generators)]
        rec = {
            "id": f"pair{i}",
            "prompt": f"subject {i} and friends playing together",
            "references": pool[:k],
            "candidates": cands,
            "generators": [ga, gb],
            "preference": pref,
            "bucket": {
                "subjects": k,
                "ratio": ["balanced", "human_heavy"][i % 2],
                "relation": ["non_contact", "occlusion", "physical"][i % 3],
            },
        }
        if diagnostics:
            d = [[0.1, 0.2, 0.3], [0.1, 0.2, 0.3]]
            d[pref] = [0.9, 0.8, 0.7]
            rec["diagnostics"] = d
        lines.append(json.dumps(rec))
    path = folder / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def train_argv(data, out, *extra: str) -> list[str]:
    """``genmetrics train mie`` on the tiny test data: one epoch of 2-pair micro-batches, one trained layer,
    the result as JSON; ``extra`` flags are appended (a later flag wins)."""
    return ["train", "mie", "--data", str(data), "--out", str(out), "--epochs", "1", "--batch-pairs", "2"] + [
        "--grad-accum",
        "1",
        "--unfreeze-layers",
        "1",
        "--json",
        *extra,
    ]


def eval_argv(data, heads, out, *extra: str) -> list[str]:
    """``genmetrics evaluate-human mie --data DATA --heads HEADS --out OUT`` plus ``extra`` flags."""
    return ["evaluate-human", "mie", "--data", str(data), "--heads", str(heads), "--out", str(out), *extra]
