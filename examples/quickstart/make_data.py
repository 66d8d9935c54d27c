"""Generate the quick-start demo set: procedural reference images and three "generators" that degrade
them by known, increasing amounts, so every full-reference metric ranks them in the same order:

    slight-noise  (Gaussian noise, sigma 2/255)            best
    blur          (Gaussian blur, radius 1.5 px)
    heavy-jpeg    (noise sigma 14/255, then JPEG quality 12) worst

Also writes prompts.jsonl ({"id", "prompt", "references"}) describing each image, for the
model-based metrics of config_models.toml (clip_t and mie use the prompts, mie the references).

    python examples/quickstart/make_data.py            # rewrites examples/quickstart/data
    python examples/quickstart/make_data.py --out /tmp/qs --n 40 --size 128

Only numpy and Pillow are needed; the output depends only on --seed, --n and --size (and on the
JPEG library for heavy-jpeg; the committed PNGs are the reference copy).
"""

from __future__ import annotations

import argparse
import io
import json
from pathlib import Path

import numpy as np
from PIL import Image, ImageDraw, ImageFilter

COLORS = {
    "red": (220, 40, 40),
    "green": (40, 170, 70),
    "blue": (40, 80, 220),
    "yellow": (240, 210, 40),
    "purple": (140, 60, 180),
    "orange": (245, 140, 30),
    "white": (245, 245, 245),
    "black": (20, 20, 20),
    "teal": (30, 160, 160),
    "pink": (240, 120, 170),
}
SHAPES = ("circle", "square", "triangle", "ring")
GENERATORS = ("slight-noise", "blur", "heavy-jpeg")


def reference_image(rng: np.random.Generator, size: int) -> tuple[Image.Image, str]:
    names = list(COLORS)
    c0, c1 = rng.choice(len(names), 2, replace=False)
    angle = rng.uniform(0, 2 * np.pi)
    yy, xx = np.mgrid[0:size, 0:size] / (size - 1)
    t = np.clip(0.5 + (xx - 0.5) * np.cos(angle) + (yy - 0.5) * np.sin(angle), 0, 1)[..., None]
    bg = (1 - t) * np.array(COLORS[names[c0]]) + t * np.array(COLORS[names[c1]])
    # soft texture so blur and noise change the image measurably
    bg += 12 * np.sin(xx[..., None] * rng.uniform(8, 20)) * np.cos(yy[..., None] * rng.uniform(8, 20))
    img = Image.fromarray(np.clip(bg, 0, 255).astype(np.uint8), "RGB")
    draw = ImageDraw.Draw(img)
    parts = []
    for _ in range(int(rng.integers(2, 4))):
        shape = SHAPES[int(rng.integers(len(SHAPES)))]
        color = names[int(rng.integers(len(names)))]
        r = float(rng.uniform(0.1, 0.22)) * size
        cx, cy = rng.uniform(r, size - r, 2)
        box = [cx - r, cy - r, cx + r, cy + r]
        fill = COLORS[color]
        if shape == "circle":
            draw.ellipse(box, fill=fill)
        elif shape == "square":
            draw.rectangle(box, fill=fill)
        elif shape == "triangle":
            draw.polygon([(cx, cy - r), (cx - r, cy + r), (cx + r, cy + r)], fill=fill)
        else:
            draw.ellipse(box, outline=fill, width=max(2, size // 24))
        parts.append(f"a {color} {shape}")
    prompt = ", ".join(parts[:-1]) + f" and {parts[-1]} on a {names[c0]} to {names[c1]} gradient"
    return img, prompt


def degrade(img: Image.Image, kind: str, rng: np.random.Generator) -> Image.Image:
    x = np.asarray(img, dtype=np.float64)
    if kind == "slight-noise":
        return Image.fromarray(np.clip(x + rng.normal(0, 2, x.shape) + 0.5, 0, 255).astype(np.uint8), "RGB")
    if kind == "blur":
        return img.filter(ImageFilter.GaussianBlur(radius=1.5))
    if kind == "heavy-jpeg":
        noisy = Image.fromarray(np.clip(x + rng.normal(0, 14, x.shape) + 0.5, 0, 255).astype(np.uint8), "RGB")
        buf = io.BytesIO()
        noisy.save(buf, format="JPEG", quality=12)
        return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")
    raise ValueError(kind)


def main(argv: list[str] | None = None) -> Path:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "data")
    ap.add_argument("--n", type=int, default=12, help="images per folder")
    ap.add_argument("--size", type=int, default=64, help="image side in pixels")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args(argv)
    rng = np.random.default_rng(args.seed)
    refs = args.out / "refs"
    refs.mkdir(parents=True, exist_ok=True)
    for g in GENERATORS:
        (args.out / "gen" / g).mkdir(parents=True, exist_ok=True)
    lines = []
    for i in range(args.n):
        stem = f"{i:03d}"
        img, prompt = reference_image(rng, args.size)
        img.save(refs / f"{stem}.png", optimize=True)
        for g in GENERATORS:
            degrade(img, g, rng).save(args.out / "gen" / g / f"{stem}.png", optimize=True)
        other = f"{(i + 1) % args.n:03d}"
        lines.append(
            json.dumps(
                {"id": stem, "prompt": prompt, "references": [f"refs/{stem}.png", f"refs/{other}.png"]}
            )
        )
    (args.out / "prompts.jsonl").write_text("\n".join(lines) + "\n", encoding="utf-8")
    print(f"wrote {args.n} references and {len(GENERATORS)} generators x {args.n} images to {args.out}")
    return args.out


if __name__ == "__main__":
    main()
