"""Helpers of the leaderboard tests: small image sets and configs (a module with a unique name, so
``from lb_helpers import ...`` never picks up another folder's conftest)."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from PIL import Image

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
QUICKSTART = REPO / "examples" / "quickstart"


def write_images(
    folder: Path,
    stems: list[str],
    *,
    size: int = 24,
    seed: int = 0,
    noise: float = 0.0,
    base: dict[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """PNG images named by ``stems``; with ``base``, each is that image plus Gaussian noise."""
    folder.mkdir(parents=True, exist_ok=True)
    rng = np.random.default_rng(seed)
    out = {}
    for s in stems:
        if base is None:
            yy, xx = np.mgrid[0:size, 0:size]
            a = (
                np.stack([xx * 5 + rng.integers(0, 60), yy * 4 + rng.integers(0, 60), (xx + yy) * 3 + 20], -1)
                + rng.integers(0, 40)
            ).astype(np.float64)
        else:
            a = base[s].astype(np.float64) + rng.normal(0, noise, base[s].shape)
        a = np.clip(a, 0, 255).astype(np.uint8)
        Image.fromarray(a, "RGB").save(folder / f"{s}.png")
        out[s] = a
    return out


def make_set(root: Path, *, n: int = 6, generators: dict[str, float] | None = None, size: int = 24) -> Path:
    """refs/ plus one folder per generator (noise sigma per generator) under ``root``."""
    generators = generators or {"good": 2.0, "mid": 8.0, "bad": 25.0}
    stems = [f"s{i:02d}" for i in range(n)]
    base = write_images(root / "refs", stems, size=size)
    for k, (g, sigma) in enumerate(generators.items()):
        write_images(root / "gen" / g, stems, seed=100 + k, noise=sigma, base=base)
    return root


def toml_config(
    root: Path,
    metrics: str,
    *,
    generators: list[str] | None = None,
    extra: str = "",
    name: str = "config.toml",
) -> Path:
    generators = generators or ["mid", "bad", "good"]
    text = '[data]\nreferences = "refs"\n' + extra + "\n"
    for g in generators:
        text += f'[[generators]]\nname = "{g}"\nimages = "gen/{g}"\n\n'
    text += metrics
    p = root / name
    p.write_text(text, encoding="utf-8")
    return p
