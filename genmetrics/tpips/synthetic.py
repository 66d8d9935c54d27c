"""Procedural odd-one-out triplets whose aspects disagree (a learnability check for TPIPS).

Each image is one object (a colour: red, green or blue; a position: one of the four quadrants; a random
shape -- circle, square or triangle -- and jittered shade, size and offset as nuisances) on a grey background
of random brightness. A triplet is three objects ``A = (c1, p1)``, ``B = (c1, p2)``, ``C = (c2, p2)`` in a
random order: by **colour** the odd one is ``C``, by **position** it is ``A``. Each triplet gives two records
(aspect ``"color"`` and aspect ``"position"``, one vote on the odd image), so a metric that ignores the aspect names the same image for both records and scores at most
50% mean agreement and 0% "both aspects right"; chance is 1/3 per record and 1/9 for both.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from genmetrics.data.jsonl import OddOneOutRecord

__all__ = ["ASPECTS", "COLORS", "POSITIONS", "SHAPES", "aspect_triplets", "draw_object"]

COLORS = {"red": (0.85, 0.15, 0.15), "green": (0.15, 0.75, 0.2), "blue": (0.15, 0.25, 0.85)}
SHAPES = ("circle", "square", "triangle")
POSITIONS = ("top left", "top right", "bottom left", "bottom right")
ASPECTS = ("color", "position")


def draw_object(
    color: str, position: str, size: int, g: torch.Generator, shape: str | None = None
) -> torch.Tensor:
    """One ``uint8 [3,size,size]`` image: the object in its quadrant on a grey background (shape random unless
    given; shade, size, offset and background jittered).

    >>> img = draw_object("red", "top left", 32, torch.Generator().manual_seed(0), shape="circle")
    >>> tuple(img.shape), img.dtype
    ((3, 32, 32), torch.uint8)
    >>> r, g, b = img[:, 8, 8].tolist()  # the centre of the top-left quadrant is red
    >>> r > g and r > b
    True
    """
    if shape is None:
        shape = SHAPES[int(torch.randint(len(SHAPES), (1,), generator=g))]
    bg = 0.35 + 0.3 * float(torch.rand((), generator=g))
    img = torch.full((3, size, size), bg)
    r = size * (0.12 + 0.06 * float(torch.rand((), generator=g)))
    row, col = divmod(POSITIONS.index(position), 2)
    cy = size * (0.25 + 0.5 * row) + (float(torch.rand((), generator=g)) - 0.5) * size * 0.08
    cx = size * (0.25 + 0.5 * col) + (float(torch.rand((), generator=g)) - 0.5) * size * 0.08
    yy, xx = torch.meshgrid(torch.arange(size) + 0.5, torch.arange(size) + 0.5, indexing="ij")
    dy, dx = yy - cy, xx - cx
    if shape == "circle":
        mask = dy**2 + dx**2 <= r**2
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


def aspect_triplets(
    n: int, *, seed: int = 0, size: int = 64
) -> list[tuple[OddOneOutRecord, OddOneOutRecord]]:
    """``n`` triplets, each as ``(color record, position record)`` over the same three images (uint8 tensors).

    The two records of a triplet share the images but name different odd ones (votes are one-hot):

    >>> color, position = aspect_triplets(1, size=32)[0]
    >>> color.aspect, position.aspect, color.images is position.images, color.votes != position.votes
    ('color', 'position', True, True)
    """
    g = torch.Generator().manual_seed(seed)
    out = []
    colors = list(COLORS)
    for i in range(n):
        c1, c2 = (colors[j] for j in torch.randperm(3, generator=g)[:2].tolist())
        p1, p2 = (POSITIONS[j] for j in torch.randperm(4, generator=g)[:2].tolist())
        objs = [(c1, p1), (c1, p2), (c2, p2)]  # A, B, C: colour odd = C, position odd = A
        order = torch.randperm(3, generator=g).tolist()
        images = tuple(draw_object(objs[k][0], objs[k][1], size, g) for k in order)
        odd_color, odd_position = order.index(2), order.index(0)
        votes = [tuple(1.0 if k == odd else 0.0 for k in range(3)) for odd in (odd_color, odd_position)]
        # OddOneOutRecord is typed for the JSONL format (three paths, three votes); tensors work the same
        shown: Any = images
        color: Any = votes[0]
        position: Any = votes[1]
        out.append(
            (
                OddOneOutRecord(id=f"s{seed}-{i}-color", images=shown, aspect="color", votes=color),
                OddOneOutRecord(id=f"s{seed}-{i}-position", images=shown, aspect="position", votes=position),
            )
        )
    return out
