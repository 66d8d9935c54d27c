"""Batch composition never changes a score for the open_clip / DINO metrics: a batch that mixes
image sizes, aspect ratios, PIL modes (L, LA, RGBA, P, I;16, CMYK) and tensors gives each row the score of
the row alone (<= 1e-5), and batch sizes 1, 3 and all agree -- for raclip, clipscore / clip_t, hcs, sad,
pad, rsad, clip_i, dino and RegionAttributeScorer.

Why it holds: every image is decoded and resized on its own (``clip_image_batch``, ``ResizePolicy``), the
towers are per-row computations, the packed/plain choice is made once per tower and not per batch, and the
per-row products of the last block run one image at a time. On a CPU whose kernels give a row the same bits
in any batch (both AMD EPYC CPUs measured) the scores are equal; elsewhere they differ by float32 rounding,
orders of magnitude below the 1e-5 asked here (see tests/backbones/test_clip_vision.py for the bound).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

import genmetrics as gm
from genmetrics.backbones.openclip import clip_image_batch
from genmetrics.raclip.model import RegionAttributeScorer
from genmetrics.testing import tiny_clip, tiny_dino

ATTRS = ["smiling", "wearing hat", "a red car"]
TOL = 1e-5


def mixed_images(seed: int = 0) -> list:
    """Seven images of different sizes, aspect ratios and kinds: RGB, L, LA, RGBA, P, I;16, CMYK PIL images
    and a uint8 tensor."""
    g = np.random.default_rng(seed)

    def rgb(w: int, h: int) -> Image.Image:
        return Image.fromarray(g.integers(0, 256, (h, w, 3), dtype=np.uint8), "RGB")

    return [
        rgb(32, 32),
        rgb(61, 17).convert("L"),
        rgb(20, 48).convert("LA"),
        rgb(40, 40).convert("RGBA"),
        rgb(90, 33).convert("P"),
        Image.fromarray(g.integers(0, 65536, (37, 29), dtype=np.uint16)),  # I;16
        rgb(25, 70).convert("CMYK"),
        torch.from_numpy(g.integers(0, 256, (3, 44, 52), dtype=np.uint8)),
    ]


IMAGES = mixed_images(0)
PROMPTS = [
    "a cat",
    "a photo of a red car on the street",
    "x",
    "snow",
    "a dog",
    "two people",
    "a house",
    "sea",
]


def _assert_rows(by_batch: dict[int, torch.Tensor], alone: torch.Tensor) -> None:
    for bs, scores in by_batch.items():
        assert scores.shape == alone.shape, bs
        diff = float((scores.double() - alone.double()).abs().max())
        assert diff <= TOL, f"batch_size={bs}: a row differs from the row alone by {diff:.3g}"


def _clip_kwargs() -> dict:
    model, tok = tiny_clip()
    return {"backbone": model, "tokenizer": tok}


@pytest.mark.parametrize(
    ("name", "kwargs", "with_condition"),
    [
        ("raclip", {"attributes": ATTRS}, False),
        ("raclip", {}, True),
        ("clipscore", {}, True),
        ("clip_t", {"attributes": ATTRS}, False),
    ],
    ids=["raclip-attributes", "raclip-condition", "clipscore-condition", "clip_t-attributes"],
)
def test_per_image_text_metrics(name, kwargs, with_condition):
    kw = {**_clip_kwargs(), **kwargs}
    n = len(IMAGES)

    def scores(images, prompts, batch_size):
        m = gm.create_metric(name, batch_size=batch_size, **kw)
        m.update(candidates=images, condition=prompts if with_condition else None)
        return m.per_sample()["scores"]

    alone = torch.cat([scores([IMAGES[i]], [PROMPTS[i]], 1) for i in range(n)])
    _assert_rows({bs: scores(IMAGES, PROMPTS[:n], bs) for bs in (1, 3, n)}, alone)
    # a row's score does not depend on its neighbours either: the same image among others
    shuffled = [IMAGES[i] for i in (3, 0, 6, 1)]
    got = scores(shuffled, [PROMPTS[i] for i in (3, 0, 6, 1)], 4)
    _assert_rows({4: got}, alone[[3, 0, 6, 1]])


@pytest.mark.parametrize("name", ["clip_i", "dino"])
def test_image_pair_metrics(name):
    backbone = tiny_clip()[0] if name == "clip_i" else tiny_dino()
    refs = mixed_images(1)
    n = len(IMAGES)

    def scores(r, c, batch_size):
        m = gm.create_metric(name, backbone=backbone, batch_size=batch_size)
        m.update(reference=r, candidates=c)
        return m.per_sample()["scores"]

    alone = torch.cat([scores([refs[i]], [IMAGES[i]], 1) for i in range(n)])
    _assert_rows({bs: scores(refs, IMAGES, bs) for bs in (1, 3, n)}, alone)


def test_hcs_rows_and_center():
    kw = _clip_kwargs()
    refs = mixed_images(2)
    n = len(IMAGES)

    def scores(batch_size, candidates=IMAGES):
        m = gm.create_metric("hcs", attributes=ATTRS, batch_size=batch_size, **kw)
        m.update(reference=refs)  # C_img from the mixed reference set, embedded in batches of batch_size
        m.update(candidates=candidates)
        return m.per_sample()["scores"]

    one = scores(1)
    alone = torch.cat([scores(1, [IMAGES[i]]) for i in range(n)])
    _assert_rows({bs: scores(bs) for bs in (3, n)} | {1: one}, alone)


@pytest.mark.parametrize("name", ["sad", "pad", "rsad"])
def test_set_metrics_agree_across_batch_sizes(name):
    kw = _clip_kwargs()
    real, gen = mixed_images(3), mixed_images(4)
    n = len(real)
    out = {}
    for bs in (1, 3, n):
        m = gm.create_metric(name, attributes=ATTRS, batch_size=bs, **kw)
        m.update(reference=real)
        m.update(candidates=gen)
        out[bs] = m.compute()
    for bs in (3, n):
        for k, v in out[bs].items():
            diff = float((v.double() - out[1][k].double()).abs().max())
            assert diff <= TOL, f"{name}[{k}] batch_size={bs} vs 1: {diff:.3g}"


def test_region_attribute_scorer_rows():
    model, tok = tiny_clip()
    scorer = RegionAttributeScorer(model, tok)
    x = clip_image_batch(IMAGES, model)
    with torch.no_grad():
        full = scorer(x, ATTRS)
        parts = [scorer(x[i : i + 1], ATTRS) for i in range(x.shape[0])]
        threes = [scorer(x[i : i + 3], ATTRS) for i in range(0, x.shape[0], 3)]
    for field in ("score", "global_score", "patch_scores"):
        alone = torch.cat([getattr(p, field) for p in parts])
        by3 = torch.cat([getattr(p, field) for p in threes])
        _assert_rows({len(IMAGES): getattr(full, field), 3: by3}, alone)
