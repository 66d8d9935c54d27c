"""The image input contract: every accepted form gives the same tensor; rejected forms give clear errors."""

from __future__ import annotations

import io

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st
from PIL import Image, ImageFile

from genmetrics.data.io.images import (
    ResizePolicy,
    check_image_header,
    list_images,
    load_batch,
    load_image,
    match_by_stem,
    to_pil,
    to_tensor,
)
from genmetrics.errors import InputError
from tests.reliability.hostile import Cases, _png


@pytest.fixture
def rgb():
    g = torch.Generator().manual_seed(0)
    return torch.randint(0, 256, (3, 12, 10), generator=g, dtype=torch.uint8)


def test_all_forms_equal(tmp_path, rgb):
    arr = rgb.permute(1, 2, 0).numpy()
    pil = Image.fromarray(arr, "RGB")
    path = tmp_path / "x.png"
    pil.save(path)
    expected = rgb.float() / 255
    for form in (rgb, rgb.float() / 255, rgb.double() / 255, pil, str(path), path):
        assert torch.allclose(to_tensor(form), expected, atol=1e-6)
    assert torch.allclose(to_tensor(rgb.float(), data_range=255.0), expected, atol=1e-6)
    assert np.array_equal(np.asarray(to_pil(rgb)), arr)
    assert np.array_equal(np.asarray(to_pil(rgb.float() / 255)), arr)
    batch = load_batch(torch.stack([rgb, rgb]))
    assert len(batch) == 2 and torch.equal(batch[0], batch[1])


def test_file_mode_rules(tmp_path):
    # grayscale -> replicated; RGBA -> composited on white; 16-bit -> scaled; palette -> RGB
    Image.new("L", (4, 4), 100).save(tmp_path / "g.png")
    assert torch.allclose(to_tensor(tmp_path / "g.png"), torch.full((3, 4, 4), 100 / 255))
    Image.new("RGBA", (4, 4), (0, 0, 0, 0)).save(tmp_path / "a.png")
    assert torch.allclose(to_tensor(tmp_path / "a.png"), torch.ones(3, 4, 4))
    Image.new("RGBA", (4, 4), (10, 20, 30, 255)).save(tmp_path / "b.png")
    assert torch.allclose(to_tensor(tmp_path / "b.png")[:, 0, 0], torch.tensor([10, 20, 30]) / 255)
    Image.fromarray(np.full((4, 4), 65535, dtype=np.uint16)).save(tmp_path / "w.png")
    assert torch.allclose(to_tensor(tmp_path / "w.png"), torch.ones(3, 4, 4))
    p = Image.new("P", (4, 4))
    p.putpalette([255, 0, 0] * 256)
    p.save(tmp_path / "p.png")
    assert torch.allclose(to_tensor(tmp_path / "p.png")[:, 0, 0], torch.tensor([1.0, 0, 0]))
    Image.new("CMYK", (4, 4), (0, 0, 0, 0)).save(tmp_path / "c.jpg")
    assert to_tensor(tmp_path / "c.jpg").shape == (3, 4, 4)


def test_exif_orientation(tmp_path):
    im = Image.new("RGB", (6, 3), (255, 0, 0))
    exif = Image.Exif()
    exif[0x0112] = 6  # rotate 90 CW on display
    im.save(tmp_path / "o.jpg", exif=exif.tobytes())
    assert to_tensor(tmp_path / "o.jpg").shape == (3, 6, 3)


@pytest.mark.parametrize(
    "bad, fragment",
    [
        (torch.zeros(2, 3, 4, 4, 1), "expected an image tensor"),
        (torch.zeros(4, 8, 8), "expected 3 channels"),
        (torch.zeros(8, 8, 3), "channels-last"),
        (torch.zeros(1, 8, 8), "grayscale"),
        (torch.zeros(3, 8, 8, dtype=torch.int32), "unsupported dtype"),
        (torch.full((3, 8, 8), float("nan")), "NaN"),
        (torch.full((3, 8, 8), float("inf")), "NaN or infinite"),
        (torch.full((3, 8, 8), -0.5), "[-1,1]"),
        (torch.full((3, 8, 8), 200.0), "data_range=255"),
        (torch.zeros(3, 0, 8), "zero size"),
        (np.zeros((8, 8, 3), np.uint8), "numpy arrays are not accepted"),
        (12, "expected a file path"),
        ("/does/not/exist.png", "does not exist"),
    ],
)
def test_rejected_forms(bad, fragment):
    with pytest.raises(InputError) as e:
        to_tensor(bad)
    assert fragment in str(e.value)


def test_uint16_tensor_rejected():
    with pytest.raises(InputError, match="65535"):
        to_tensor(torch.zeros(3, 4, 4, dtype=torch.uint16))


def test_bad_files(tmp_path):
    (tmp_path / "text.jpg").write_text("hello, not an image")
    (tmp_path / "empty.png").write_bytes(b"")
    buf = io.BytesIO()
    Image.new("RGB", (64, 64), (1, 2, 3)).save(buf, "JPEG")
    (tmp_path / "trunc.jpg").write_bytes(buf.getvalue()[: len(buf.getvalue()) // 2])
    buf = io.BytesIO()
    Image.new("RGB", (64, 64)).save(buf, "PNG")
    (tmp_path / "corrupt.png").write_bytes(buf.getvalue()[:40] + b"\0" * 30)
    for name, fragment in [
        ("text.jpg", "not an image"),
        ("empty.png", "empty"),
        ("trunc.jpg", "corrupt or truncated"),
        ("corrupt.png", "corrupt|not an image"),
    ]:
        with pytest.raises(InputError, match=fragment) as e:
            load_image(tmp_path / name)
        assert name in str(e.value)


def test_decompression_bomb(tmp_path, monkeypatch):
    import genmetrics.data.io.images as im

    Image.new("RGB", (100, 100)).save(tmp_path / "big.png")
    monkeypatch.setattr(im, "MAX_PIXELS", 5000)
    with pytest.raises(InputError, match="decompression-bomb|too large"):
        load_image(tmp_path / "big.png")


def test_resize_policies():
    x = torch.rand(3, 20, 40)
    assert ResizePolicy("resize", 16).apply_one(x).shape == (3, 16, 16)
    assert ResizePolicy("shorter_side_center_crop", 10).apply_one(x).shape == (3, 10, 10)
    assert ResizePolicy("to_first").stack([torch.rand(3, 8, 8), x]).shape == (2, 3, 8, 8)
    with pytest.raises(InputError, match="different sizes"):
        ResizePolicy("none").stack([torch.rand(3, 8, 8), x])
    with pytest.raises(InputError, match="unknown resize policy"):
        ResizePolicy("squish")


def test_folders(tmp_path):
    with pytest.raises(InputError, match="does not exist"):
        list_images(tmp_path / "nope")
    (tmp_path / "empty").mkdir()
    with pytest.raises(InputError, match="contains no images"):
        list_images(tmp_path / "empty")
    for d in ("r", "c"):
        (tmp_path / d).mkdir()
    for s in ("a", "b"):
        Image.new("RGB", (4, 4)).save(tmp_path / "r" / f"{s}.png")
    Image.new("RGB", (4, 4)).save(tmp_path / "c" / "a.jpg")
    Image.new("RGB", (4, 4)).save(tmp_path / "c" / "z.jpg")
    with pytest.raises(InputError, match="no reference with the same stem"):
        match_by_stem(list_images(tmp_path / "r"), list_images(tmp_path / "c"))
    (tmp_path / "c" / "z.jpg").unlink()
    pairs = match_by_stem(list_images(tmp_path / "r"), list_images(tmp_path / "c"))
    assert [p[0] for p in pairs] == ["a"]


@settings(max_examples=40, deadline=None)
@given(
    st.integers(1, 5),
    st.integers(1, 9),
    st.integers(1, 9),
    st.sampled_from([torch.uint8, torch.float32, torch.float64]),
)
def test_tensor_roundtrip_property(c, h, w, dtype):
    g = torch.Generator().manual_seed(h * 100 + w)
    x = torch.randint(0, 256, (c, h, w), generator=g, dtype=torch.uint8)
    x = x if dtype == torch.uint8 else x.to(dtype) / 255
    if c != 3:
        with pytest.raises(InputError):
            to_tensor(x)
    else:
        y = to_tensor(x)
        assert y.dtype == torch.float32 and y.shape == (3, h, w)
        assert float(y.min()) >= 0 and float(y.max()) <= 1
        assert torch.equal(
            torch.from_numpy(np.array(to_pil(x))).permute(2, 0, 1),
            (x if dtype == torch.uint8 else (x * 255).round().to(torch.uint8)),
        )


# ------------------------------------------------------------------------------ faults and unusual inputs
@pytest.fixture
def no_decoding(monkeypatch):
    """Fail the test if any image is decoded (Pillow's ImageFile.load)."""
    from PIL import ImageFile

    def load(self):
        raise AssertionError(f"decoded {self.size}")

    monkeypatch.setattr(ImageFile.ImageFile, "load", load)


def test_size_mismatch_is_refused_from_the_header(tmp_path, no_decoding):
    """A 12000 x 12000 PNG of a few kB against a 32 x 32 reference: refused before anything is decoded
    (decoded, it would take 432 MB as RGB and 1.7 GB as a float tensor)."""
    import genmetrics as gm
    from genmetrics.data.io.images import check_image_file, image_size

    big = tmp_path / "big.png"
    Image.new("1", (12000, 12000)).save(big)  # writing encodes; nothing is decoded
    assert big.stat().st_size < 200_000
    small = torch.zeros(3, 32, 32, dtype=torch.uint8)
    assert image_size(big) == (12000, 12000)
    assert check_image_file(big) == (12000, 12000)  # above the decode budget: header + structure only
    with pytest.raises(InputError, match=r"size \(12000, 12000\) differs from its reference \(32, 32\)"):
        gm.create_metric("psnr").update(reference=[small], candidates=[str(big)])


def test_extreme_aspect_ratio_is_bounded(monkeypatch):
    """100000 x 1 through a shorter-side resize to 16: the intermediate image stays within MAX_ASPECT times
    the square (the full resize would be 16 x 1 600 000); ordinary images take the usual path unchanged."""
    import torch.nn.functional as F

    from genmetrics.data.io import images as I

    sizes = []
    real = I._resize
    monkeypatch.setattr(I, "_resize", lambda x, size: sizes.append(size) or real(x, size))
    policy = ResizePolicy("shorter_side_center_crop", 16)
    out = policy.apply_one(torch.rand(3, 1, 100000, generator=torch.Generator().manual_seed(0)))
    assert tuple(out.shape) == (3, 16, 16)
    assert max(h * w for h, w in sizes) <= I.MAX_ASPECT * 16 * 16
    x = torch.rand(3, 20, 50, generator=torch.Generator().manual_seed(1))  # 2.5:1, below the bound
    full = F.interpolate(x[None], size=(16, 40), mode="bicubic", antialias=True, align_corners=False)[0]
    assert torch.equal(policy.apply_one(x), full.clamp(0, 1)[:, :, 12:28])


def test_pillow_globals_are_left_as_they_were(tmp_path):
    """Loading images never changes Pillow's process-wide switches for the rest of the process; a truncated
    file is refused even when another library has turned LOAD_TRUNCATED_IMAGES on."""
    from PIL import ImageFile

    from genmetrics.data.io.images import check_image_file, image_size

    good, cut = tmp_path / "good.png", tmp_path / "cut.png"
    Image.effect_noise((64, 64), 50).convert("RGB").save(good)
    cut.write_bytes(good.read_bytes()[: good.stat().st_size // 2])
    saved = ImageFile.LOAD_TRUNCATED_IMAGES, Image.MAX_IMAGE_PIXELS
    try:
        for truncated in (True, False):
            ImageFile.LOAD_TRUNCATED_IMAGES = truncated
            Image.MAX_IMAGE_PIXELS = 12345
            load_image(good), image_size(good), check_image_file(good)
            with pytest.raises(InputError, match="truncated|corrupt"):
                load_image(cut)
            assert (ImageFile.LOAD_TRUNCATED_IMAGES, Image.MAX_IMAGE_PIXELS) == (truncated, 12345)
    finally:
        ImageFile.LOAD_TRUNCATED_IMAGES, Image.MAX_IMAGE_PIXELS = saved


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


def test_a_broken_link_and_a_loop_are_named_as_links(tmp_path):
    """load_image said 'does not exist; check the path' for a link that is there, pointing nowhere or at itself."""
    (tmp_path / "b.png").symlink_to(tmp_path / "gone.png")
    (tmp_path / "c.png").symlink_to("c.png")
    with pytest.raises(InputError, match=r"b\.png' is a broken symbolic link \(to .*gone\.png"):
        load_image(tmp_path / "b.png")
    with pytest.raises(InputError, match=r"c\.png' is a symbolic link that points back to itself"):
        load_image(tmp_path / "c.png")


def test_a_file_this_user_may_not_read_is_named_as_such_not_as_corrupt(tmp_path, monkeypatch):
    """A chmod 000 image was 'corrupt or truncated (...Permission denied...); replace or remove it': the file
    is fine and replacing it is the wrong fix. The error is raised the way a non-root user meets it (the
    tests may run as root, who reads any file)."""
    from PIL import Image as PILImage

    path = tmp_path / "locked.png"
    PILImage.new("RGB", (4, 4)).save(path)
    real_open = PILImage.open

    def refuse(fp, *a, **k):
        if str(fp) == str(path):
            raise PermissionError(13, "Permission denied", str(fp))
        return real_open(fp, *a, **k)

    monkeypatch.setattr(PILImage, "open", refuse)
    for read in (load_image, check_image_header):
        with pytest.raises(InputError, match=r"locked\.png' cannot be read \(permission denied") as e:
            read(path)
        assert "corrupt" not in str(e.value) and "chmod" in str(e.value)


def test_a_folder_given_as_an_image_names_the_call_that_lists_its_images(tmp_path):
    """`metric.update(reference="refs", ...)` said 'pass the folder where a folder is accepted' without saying
    where; the error now names the listing call, and that call, pasted, gives the folder's images."""
    import ast
    import re

    folder = tmp_path / "refs"
    Image.new("RGB", (4, 4)).save(_mkdir(folder) / "b.png")
    Image.new("RGB", (4, 4)).save(folder / "a.png")
    with pytest.raises(InputError) as e:
        load_image(folder)
    call = re.search(r"genmetrics\.data\.io\.images\.list_images\((.+?)\) \(", str(e.value))
    assert call is not None, str(e.value)
    import genmetrics.data.io.images as module

    listed = module.list_images(ast.literal_eval(call[1]))  # the quoted path, as printed
    assert [p.name for p in listed] == ["a.png", "b.png"]


def _mkdir(p):
    p.mkdir(parents=True)
    return p
