"""genmetrics.data.images: decompression bombs, extreme strips and truncated files, and PIL's global settings left
as they were."""

from __future__ import annotations

import io

import numpy as np
from PIL import Image, ImageFile

from genmetrics.errors import InputError
from tests.reliability.hostile import Cases, _png

# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case("h-bomb-header-refused", "fault", "a 30000 x 30000 PNG of a few kB: refused from its header", slow=True)
def _(ctx):
    import tracemalloc

    from genmetrics.data.images import load_image

    p = _png(ctx.inp / "bomb.png", 30000, 30000)
    ctx.freeze()
    tracemalloc.start()
    try:
        ctx.refused(lambda: load_image(p), "bomb.png")
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak


@case("h-strip-100000x1", "fault", "a 100000 x 1 image: loaded or refused, memory bounded")
def _(ctx):
    import tracemalloc

    from genmetrics.data.images import load_image

    p = ctx.inp / "strip.png"
    Image.new("RGB", (100000, 1), (9, 9, 9)).save(p)
    ctx.freeze()
    tracemalloc.start()
    try:
        try:
            out = load_image(p)
            assert out is not None
        except InputError as e:
            assert "strip.png" in str(e)
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert peak < 64 << 20, peak


# ======================================================================= 5. silent answers (silent)
@case(
    "h-global-load-truncated",
    "silent",
    "loading a truncated JPEG leaves PIL's LOAD_TRUNCATED_IMAGES as it was",
)
def _(ctx):
    from genmetrics.data.images import load_image

    buf = io.BytesIO()
    Image.fromarray(np.random.default_rng(0).integers(0, 255, (64, 64, 3), dtype=np.uint8)).save(buf, "JPEG")
    p = ctx.inp / "cut.jpg"
    p.write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    ctx.freeze()
    for before in (False, True):
        ctx.monkeypatch.setattr(ImageFile, "LOAD_TRUNCATED_IMAGES", before)
        try:
            load_image(p)
        except InputError:
            pass
        assert ImageFile.LOAD_TRUNCATED_IMAGES is before


@case("h-global-max-pixels", "silent", "loading an image leaves PIL's MAX_IMAGE_PIXELS as it was")
def _(ctx):
    from genmetrics.data.images import load_image

    p = _png(ctx.inp / "a.png", 8, 8)
    ctx.freeze()
    before = Image.MAX_IMAGE_PIXELS
    load_image(p)
    assert Image.MAX_IMAGE_PIXELS == before


test_hostile = HOSTILE.test()
