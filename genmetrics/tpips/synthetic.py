"""Procedural odd-one-out triplets whose aspects disagree (a learnability check for TPIPS).

Each image is one object (a colour: red, green or blue; a position: one of the four quadrants; a random
shape -- circle, square or triangle -- and jittered shade, size and offset as nuisances) on a grey background
of random brightness. A triplet is three objects ``A = (c1, p1)``, ``B = (c1, p2)``, ``C = (c2, p2)`` in a
random order: by **colour** the odd one is ``C``, by **position** it is ``A``. Each triplet gives two records
(aspect ``"color"`` and aspect ``"position"``, one vote on the odd image), so a metric that ignores the aspect names the same image for both records and scores at most
50% mean agreement and 0% "both aspects right"; chance is 1/3 per record and 1/9 for both.

**Held-out values** (:func:`value_triplets`, the generalisation check): scenes whose aspects are continuous
values in ``[0, 1)`` (:data:`SCENE_ASPECTS`: the object's hue, size, rotation and horizontal position, the
background stripes' frequency and orientation, the background brightness). ``[0, 1)`` is cut into ``bins``
equal intervals; the training split draws values from the even intervals, the test split from the odd ones,
so no value of a tested aspect is shared between the splits. A triplet varies two aspects ``x`` and ``y``:
``A = (x1, y1)``, ``B = (x1', y2)``, ``C = (x2, y2')`` (``x1'`` within ``jitter`` of ``x1`` in the same
interval, ``x2`` in another interval: farther than one interval width); by ``x`` the odd one is ``C``, by
``y`` it is ``A``. The 2AFC form takes ``B`` as the reference: by ``x`` the candidate ``A`` is the more
similar, by ``y`` the candidate ``C``.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any

import torch

from genmetrics.data.jsonl import OddOneOutRecord, TwoAFCRecord

__all__ = [
    "ASPECTS",
    "COLORS",
    "POSITIONS",
    "SCENE_ASPECTS",
    "SHAPES",
    "ValueTriplet",
    "aspect_triplets",
    "draw_object",
    "draw_scene",
    "split_intervals",
    "value_triplets",
]

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


# -- held-out values ----------------------------------------------------------------------------------------

#: the continuous aspects of :func:`draw_scene` (the text given to the model), each a value in ``[0, 1)``
SCENE_ASPECTS = (
    "color",  # hue of the object (HSV hue, saturation 0.8, value 0.9); circular
    "size",  # the object's radius: 12% to 28% of the image side
    "rotation",  # the object (an isosceles triangle) turned by 360 * v degrees; circular
    "position",  # the object's centre from 30% to 70% of the width
    "stripe frequency",  # the background grating: 1.5 to 6 cycles per image
    "stripe orientation",  # the grating turned by 180 * v degrees; circular (period 180)
    "brightness",  # the background's mean grey: 0.3 to 0.7
)
#: aspects whose values wrap around (0 and 1 are the same value)
CIRCULAR = frozenset({"color", "rotation", "stripe orientation"})


def _hsv(h: float, s: float, v: float) -> torch.Tensor:
    k = (torch.tensor([5.0, 3.0, 1.0]) + h * 6) % 6
    return v - v * s * torch.clamp(torch.minimum(k, 4 - k), 0, 1)


def draw_scene(values: dict[str, float], size: int, g: torch.Generator) -> torch.Tensor:
    """One ``uint8 [3,size,size]`` scene: a coloured triangle on a grey grating, every aspect of
    :data:`SCENE_ASPECTS` set from ``values`` (missing ones: 0.5). Drawn at random per image: the grating's phase,
    a small vertical offset of the object and pixel noise.

    >>> g = torch.Generator().manual_seed(0)
    >>> img = draw_scene({"color": 0.0, "position": 0.5, "size": 1.0}, 64, g)  # a large red triangle, centred
    >>> tuple(img.shape), img.dtype
    ((3, 64, 64), torch.uint8)
    >>> r, gr, b = img[:, 32, 32].tolist()
    >>> r > 180 and gr < 100 and b < 100
    True
    >>> draw_scene({"shape": 0.5}, 64, g)
    Traceback (most recent call last):
    ...
    ValueError: unknown aspects ['shape']; expected some of ('color', 'size', 'rotation', 'position', 'stripe frequency', 'stripe orientation', 'brightness')
    """
    unknown = sorted(set(values) - set(SCENE_ASPECTS))
    if unknown:
        raise ValueError(f"unknown aspects {unknown}; expected some of {SCENE_ASPECTS}")
    v = {a: float(values.get(a, 0.5)) for a in SCENE_ASPECTS}
    yy, xx = torch.meshgrid(torch.arange(size) + 0.5, torch.arange(size) + 0.5, indexing="ij")
    freq = 1.5 + 4.5 * v["stripe frequency"]  # cycles per image
    theta = math.pi * v["stripe orientation"]
    phase = 2 * math.pi * float(torch.rand((), generator=g))
    u = (xx * math.cos(theta) + yy * math.sin(theta)) / size
    img = (0.3 + 0.4 * v["brightness"] + 0.18 * torch.sin(2 * math.pi * freq * u + phase)).expand(3, -1, -1)
    r = size * (0.12 + 0.16 * v["size"])
    cx = size * (0.3 + 0.4 * v["position"])
    cy = size * (0.5 + (float(torch.rand((), generator=g)) - 0.5) * 0.1)
    turn = 2 * math.pi * v["rotation"]
    along = (xx - cx) * math.cos(turn) + (yy - cy) * math.sin(turn)  # towards the apex
    across = -(xx - cx) * math.sin(turn) + (yy - cy) * math.cos(turn)
    mask = (along <= r) & (along >= -0.6 * r) & (across.abs() <= (r - along) * 0.55)
    img = torch.where(mask, _hsv(v["color"] % 1.0, 0.8, 0.9)[:, None, None], img)
    img = img + (torch.rand(img.shape, generator=g) - 0.5) * 0.04
    return (img.clamp(0, 1) * 255).round().to(torch.uint8)


def split_intervals(split: str, bins: int = 8) -> list[tuple[float, float]]:
    """The intervals of ``[0, 1)`` a split draws its values from: the even ones for ``"train"``, the odd ones
    for ``"test"`` (disjoint, interleaved, so held-out values lie between trained ones).

    >>> split_intervals("train", 4), split_intervals("test", 4)
    ([(0.0, 0.25), (0.5, 0.75)], [(0.25, 0.5), (0.75, 1.0)])
    """
    if split not in ("train", "test"):
        raise ValueError(f"split={split!r}: expected 'train' or 'test'")
    if bins < 4 or bins % 2:
        raise ValueError(f"bins must be an even number >= 4, got {bins}")
    first = 0 if split == "train" else 1
    return [(k / bins, (k + 1) / bins) for k in range(first, bins, 2)]


@dataclasses.dataclass(frozen=True)
class ValueTriplet:
    """Three scenes ``A, B, C`` (shown in a random order) that vary two aspects (see the module docstring).

    ``images`` and ``values`` are in the shown order; ``odd[a]`` is the index of the odd image by aspect ``a``
    and ``reference`` the index of ``B``. :meth:`records` gives the odd-one-out records (one per aspect, one
    vote), :meth:`two_afc` the 2AFC records (reference ``B``; the two other images as candidates, in the
    shown order).

    >>> t = value_triplets(1, ("color", "size"), split="train", size=32)[0]
    >>> len(t.images), sorted(t.odd), t.reference in (0, 1, 2)
    (3, ['color', 'size'], True)
    """

    id: str
    images: tuple[torch.Tensor, torch.Tensor, torch.Tensor]
    values: tuple[dict[str, float], dict[str, float], dict[str, float]]
    aspects: tuple[str, str]
    odd: dict[str, int]
    reference: int

    def records(self) -> list[OddOneOutRecord]:
        """One odd-one-out record per aspect, with a vote of 1 on the image that differs in that aspect."""
        return [
            OddOneOutRecord(
                id=f"{self.id}-{a}",
                images=self.images,  # type: ignore[arg-type]  # tensors are accepted like paths
                aspect=a,
                votes=tuple(1.0 if k == self.odd[a] else 0.0 for k in range(3)),  # type: ignore[arg-type]
            )
            for a in self.aspects
        ]

    def two_afc(self) -> list[TwoAFCRecord]:
        """One 2AFC record per aspect: the reference ``B`` against the two other images, with a vote of 0
        on the candidate that is the odd one in that aspect and 1 on the other."""
        cand = [k for k in range(3) if k != self.reference]
        return [
            TwoAFCRecord(
                id=f"{self.id}-{a}",
                reference=self.images[self.reference],  # type: ignore[arg-type]
                candidates=(self.images[cand[0]], self.images[cand[1]]),  # type: ignore[arg-type]
                aspect=a,
                votes=tuple(0.0 if k == self.odd[a] else 1.0 for k in cand),  # type: ignore[arg-type]
            )
            for a in self.aspects
        ]


def value_triplets(
    n: int,
    aspects: tuple[str, str] = ("color", "stripe frequency"),
    *,
    split: str = "train",
    seed: int = 0,
    size: int = 64,
    bins: int = 8,
    jitter: float = 0.06,
) -> list[ValueTriplet]:
    """``n`` triplets over the aspect pair ``aspects`` with values from the ``split``'s intervals
    (:func:`split_intervals`); every other aspect of :data:`SCENE_ASPECTS` is drawn once per triplet from all of
    ``[0, 1)`` (a nuisance shared by the three images).

    The two aspects name different odd images, and in 2AFC form different candidates:

    >>> t = value_triplets(1, ("color", "size"), split="test", size=32)[0]
    >>> [r.aspect for r in t.records()], t.odd["color"] != t.odd["size"], t.reference not in t.odd.values()
    (['color', 'size'], True, True)
    >>> [r.votes for r in t.two_afc()] in ([(1.0, 0.0), (0.0, 1.0)], [(0.0, 1.0), (1.0, 0.0)])
    True
    """
    x, y = aspects
    if x == y or x not in SCENE_ASPECTS or y not in SCENE_ASPECTS:
        raise ValueError(f"aspects={aspects!r}: expected two different aspects of {SCENE_ASPECTS}")
    if not 0 <= jitter < 1 / bins:
        raise ValueError(f"jitter must be in [0, 1/bins) = [0, {1 / bins}), got {jitter}")
    intervals = split_intervals(split, bins)
    g = torch.Generator().manual_seed(seed)

    def rand() -> float:
        return float(torch.rand((), generator=g))

    def draw_two() -> tuple[tuple[float, float], float]:
        """(x1, x1') in one interval (within ``jitter``), x2 in another."""
        i, j = torch.randperm(len(intervals), generator=g)[:2].tolist()
        lo, hi = intervals[i]
        a = lo + (hi - lo) * rand()
        near = min(max(a + (rand() - 0.5) * jitter, lo), hi - 1e-6)
        lo2, hi2 = intervals[j]
        return (a, near), lo2 + (hi2 - lo2) * rand()

    out = []
    for t in range(n):
        base = {a: rand() for a in SCENE_ASPECTS if a not in aspects}
        (x1, x1b), x2 = draw_two()
        (y2, y2b), y1 = draw_two()
        abc = ({x: x1, y: y1}, {x: x1b, y: y2}, {x: x2, y: y2b})  # A, B, C: odd by x = C, by y = A
        order = torch.randperm(3, generator=g).tolist()
        values = tuple({**base, **abc[k]} for k in order)
        images = tuple(draw_scene(v, size, g) for v in values)
        out.append(
            ValueTriplet(
                id=f"v{seed}-{split}-{t}",
                images=images,  # type: ignore[arg-type]
                values=values,  # type: ignore[arg-type]
                aspects=(x, y),
                odd={x: order.index(2), y: order.index(0)},
                reference=order.index(1),
            )
        )
    return out
