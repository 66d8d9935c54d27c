"""Procedural odd-one-out triplets whose aspects disagree (a learnability check for TPIPS).

Each image is one object (a shape: circle, square or triangle; a colour: red, green or blue, with jittered
shade, size and position) on a grey background of random brightness. A triplet is three objects
``A = (c1, s1)``, ``B = (c1, s2)``, ``C = (c2, s2)`` in a random order: by **colour** the odd one is ``C``, by
**shape** it is ``A``. Each triplet gives two records (aspect ``"color"`` and aspect ``"shape"``, one vote on
the odd image), so a metric that ignores the aspect names the same image for both records and scores at most
50% mean agreement and 0% "both aspects right"; chance is 1/3 per record and 1/9 for both.
"""

from __future__ import annotations

import math

import torch

from genmetrics.data.jsonl import OddOneOutRecord

__all__ = ["ASPECTS", "COLORS", "SHAPES", "aspect_triplets", "draw_object"]

COLORS = {"red": (0.85, 0.15, 0.15), "green": (0.15, 0.75, 0.2), "blue": (0.15, 0.25, 0.85)}
SHAPES = ("circle", "square", "triangle")
ASPECTS = ("color", "shape")
JIT = 0.1


def draw_object(color: str, shape: str, size: int, g: torch.Generator) -> torch.Tensor:
    """One ``uint8 [3,size,size]`` image: the object on a grey background (shade, size, position jittered)."""
    bg = 0.35 + 0.3 * float(torch.rand((), generator=g))
    img = torch.full((3, size, size), bg)
    r = size * (0.22 + 0.12 * float(torch.rand((), generator=g)))
    cy = size / 2 + (float(torch.rand((), generator=g)) - 0.5) * (size - 2 * r) * JIT
    cx = size / 2 + (float(torch.rand((), generator=g)) - 0.5) * (size - 2 * r) * JIT
    yy, xx = torch.meshgrid(torch.arange(size) + 0.5, torch.arange(size) + 0.5, indexing="ij")
    dy, dx = yy - cy, xx - cx
    if shape == "circle":
        mask = dy ** 2 + dx ** 2 <= r ** 2
    elif shape == "square":
        h = r * math.sqrt(math.pi) / 2  # same area as the circle
        mask = (dy.abs() <= h) & (dx.abs() <= h)
    elif shape == "triangle":
        h = r * 1.35
        mask = (dy <= h / 2) & (dy >= -h) & (dx.abs() <= (dy + h) / (1.5 * h) * h * 1.1)
    else:
        raise ValueError(f"unknown shape {shape!r}; expected one of {SHAPES}")
    rgb = torch.tensor(COLORS[color]) + (torch.rand(3, generator=g) - 0.5) * 0.2
    img = torch.where(mask, rgb.clamp(0, 1)[:, None, None], img)
    img = img + (torch.rand(img.shape, generator=g) - 0.5) * 0.04
    return (img.clamp(0, 1) * 255).round().to(torch.uint8)


def aspect_triplets(n: int, *, seed: int = 0, size: int = 64) -> list[tuple[OddOneOutRecord, OddOneOutRecord]]:
    """``n`` triplets, each as ``(color record, shape record)`` over the same three images (uint8 tensors)."""
    g = torch.Generator().manual_seed(seed)
    out = []
    colors, shapes = list(COLORS), list(SHAPES)
    for i in range(n):
        c1, c2 = (colors[j] for j in torch.randperm(3, generator=g)[:2].tolist())
        s1, s2 = (shapes[j] for j in torch.randperm(3, generator=g)[:2].tolist())
        objs = [(c1, s1), (c1, s2), (c2, s2)]  # A, B, C: colour odd = C, shape odd = A
        order = torch.randperm(3, generator=g).tolist()
        images = tuple(draw_object(*objs[k], size, g) for k in order)
        odd_color, odd_shape = order.index(2), order.index(0)
        votes = [tuple(1.0 if k == odd else 0.0 for k in range(3)) for odd in (odd_color, odd_shape)]
        out.append((OddOneOutRecord(id=f"s{seed}-{i}-color", images=images, aspect="color", votes=votes[0]),  # type: ignore[arg-type]
                    OddOneOutRecord(id=f"s{seed}-{i}-shape", images=images, aspect="shape", votes=votes[1])))  # type: ignore[arg-type]
    return out
