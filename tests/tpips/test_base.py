"""genmetrics.tpips.base: the shared VLM runtime: the vision cache (once per image, bit-identical, DeepStack
kept), the resize policy, aspect truncation."""

from __future__ import annotations

import pytest
import torch

from genmetrics.testing import ASPECTS8
from genmetrics.tpips.model import TPIPSModel

from .conftest import SIZE

VARIANTS = ["late", "mid", "early"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_vision_cache_once_per_image_and_identical(vlm, processor, images, variant):
    """8 aspects over one pair: the vision tower runs once per image, and the result equals computing each
    aspect on its own with no cache at all."""
    cached = TPIPSModel(vlm, processor, variant, image_size=SIZE, vision_cache_size=16)
    s = cached.similarity([images[0]] * 8, [images[1]] * 8, ASPECTS8)
    assert cached.vision_calls == 2
    again = cached.similarity([images[0]] * 8, [images[1]] * 8, ASPECTS8)  # from the cache: bit-identical
    assert cached.vision_calls == 2 and torch.equal(s, again)
    plain = TPIPSModel(vlm, processor, variant, image_size=SIZE, vision_cache_size=0)
    ref = torch.cat([plain.similarity([images[0]], [images[1]], [a]) for a in ASPECTS8])
    assert plain.vision_calls == 16
    assert torch.allclose(s, ref, atol=1e-5, rtol=1e-5), (s - ref).abs().max()
    assert len({round(float(x), 6) for x in s}) > 1  # the aspect changes the similarity


def test_vision_cache_keeps_deepstack(vlm, processor, images):
    m = TPIPSModel(vlm, processor, "late", image_size=SIZE)
    f = m.vision_features(m.load_images(images[:1]))[0]
    assert len(f.deepstack) == len(vlm.config.vision_config.deepstack_visual_indexes) >= 1
    assert f.deepstack[0].shape == f.embeds.shape


def test_different_sizes_are_resized_by_policy(models, images):
    """Images of other sizes are resized to image_size x image_size (bicubic, aspect not kept)."""
    from genmetrics.data.io.images import ResizePolicy

    m = models["early"]
    wide = torch.randint(0, 256, (3, 48, 100), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    s = m.similarity([images[0]], [wide], ["color"])
    resized = ResizePolicy("resize", SIZE).apply_one(wide.float() / 255)
    assert torch.equal(s, m.similarity([images[0]], [resized], ["color"]))


def test_long_aspect_is_truncated_by_tokenizer(models, images):
    m = models["late"]
    long = "lighting " * 400
    with pytest.warns(UserWarning, match="truncated"):
        s = m.similarity([images[0]], [images[1]], [long])
    assert torch.isfinite(s).all()


@pytest.mark.parametrize(
    "resize,image_size,mode,size",
    [
        (None, 64, "square", 64),
        (None, None, "smart", None),
        ("smart", 64, "smart", None),
        ("square", 96, "square", 96),
    ],
)
def test_the_resize_policy_follows_the_options(resize, image_size, mode, size):
    from genmetrics.tpips.base import make_resize

    r = make_resize(resize, image_size, 32)
    assert (r.mode, r.size) == (mode, size)


def test_side_by_side_keeps_every_image_in_order():
    from genmetrics.tpips.base import side_by_side

    parts = [torch.full((3, 8, w), float(i)) for i, w in enumerate((8, 4, 12))]
    strip = side_by_side(parts)
    assert strip.shape == (3, 8, 24)
    assert torch.equal(strip[..., :8], parts[0]) and torch.equal(strip[..., 8:12], parts[1])
    assert torch.equal(strip[..., 12:], parts[2])
