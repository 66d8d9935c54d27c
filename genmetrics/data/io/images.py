"""The image input contract shared by every metric.

Accepted, per image:

* a file path (``str`` or ``os.PathLike``) of any format Pillow reads;
* a ``PIL.Image.Image``;
* a ``torch.uint8`` tensor ``[3,H,W]`` with values 0..255;
* a floating tensor ``[3,H,W]`` with values in ``[0, data_range]`` (``data_range=1.0`` by default;
  pass ``data_range=255.0`` for float tensors in 0..255).

A batch is a list/tuple of those, or one tensor ``[B,3,H,W]``. Anything else raises
:class:`~genmetrics.errors.InputError` naming the input, what arrived and what is expected.

Conversion rules for files and PIL images (documented in docs/errors.md):

* EXIF orientation is applied (``ImageOps.exif_transpose``);
* grayscale (``L``, ``1``), palette (``P``), CMYK, YCbCr and the like convert to RGB with Pillow;
* images with alpha (``RGBA``, ``LA``, ``PA``, palette with transparency) are composited on **white**;
* the value range comes from the file's declared sample type, never from its values: 16-bit images
  (``I;16``) are scaled by 255/65535; 32-bit integer images (``I``, signed) by 255/(2**31-1) (negative
  values are refused); 32-bit float images (``F``) are 0..1 (values up to 1% outside are clipped, values
  further out or NaN are refused: rescale the file);
* animated GIF/WebP/PNG and multi-page TIFF: the first frame is used and a warning says how many frames
  were dropped;
* images above :data:`MAX_PIXELS` pixels (``GENMETRICS_MAX_PIXELS``) are refused (decompression-bomb
  guard); zero-size images are refused.

Resizing is never implicit: each backbone names one :class:`ResizePolicy`.
"""

from __future__ import annotations

import contextlib
import math
import os
import re
import warnings
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeAlias

import numpy as np
import torch
import torch.nn.functional as F
from PIL import Image, ImageFile, ImageOps, UnidentifiedImageError

from genmetrics.core.options import env
from genmetrics.data.io.files import (  # noqa: F401 - re-exported: the listing rules live apart, torch-free
    IMAGE_EXTENSIONS,
    broken_link,
    list_images,
    stem_index,
    unused_references,
)
from genmetrics.errors import InputError

ImageLike: TypeAlias = str | os.PathLike | Image.Image | torch.Tensor

#: Largest image accepted (pixels) unless GENMETRICS_MAX_PIXELS says otherwise. Pillow's own bomb limit is
#: raised to this and turned into an error.
MAX_PIXELS = 16384 * 16384


def max_pixels() -> int:
    """The largest image accepted, in pixels (``GENMETRICS_MAX_PIXELS``, else the built-in guard).

    >>> import os
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {"GENMETRICS_MAX_PIXELS": "4096"}):
    ...     max_pixels()
    4096
    """
    return int(env("GENMETRICS_MAX_PIXELS", MAX_PIXELS))


class FramesDroppedWarning(UserWarning):
    """An animated or multi-page image file was read as its first frame.

    >>> import tempfile, warnings
    >>> with tempfile.TemporaryDirectory() as d:
    ...     frames = [Image.new("RGB", (4, 4), c) for c in ("red", "blue")]
    ...     frames[0].save(f"{d}/anim.gif", save_all=True, append_images=frames[1:])
    ...     with warnings.catch_warnings(record=True) as caught:
    ...         warnings.simplefilter("always")
    ...         _ = load_image(f"{d}/anim.gif")
    >>> [type(w.message).__name__ for w in caught]
    ['FramesDroppedWarning']
    """


_RANGE_TOL = 1e-3  # relative tolerance on float range checks (rounding of normalised data)
#: the longest side a shorter-side resize keeps, in multiples of the shorter side: a 100000 x 1 image is
#: cut to its central 64 x 1 part before resizing (224 x 14336 floats instead of 224 x 22 400 000, 60 GB);
#: the centre crop takes its pixels from that part, so only sub-pixel resampling positions change
MAX_ASPECT = 64


def _describe(x: Any) -> str:
    if isinstance(x, torch.Tensor):
        return f"tensor of shape {tuple(x.shape)} and dtype {x.dtype}"
    if isinstance(x, np.ndarray):
        return f"numpy array of shape {x.shape} and dtype {x.dtype}"
    if isinstance(x, Image.Image):
        return f"PIL image of mode {x.mode} and size {x.size}"
    return f"{type(x).__name__} {x!r}"[:200]


def load_image(
    path: str | os.PathLike, *, convert: Callable[[Image.Image], Image.Image] | None = None
) -> Image.Image:
    """Open ``path`` and return an RGB PIL image following the module's conversion rules (``convert``: another
    mode-to-RGB rule, applied to the decoded, EXIF-rotated first frame instead of :func:`to_rgb`).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     Image.new("L", (3, 2), 200).save(f"{d}/grey.png")
    ...     im = load_image(f"{d}/grey.png")
    >>> im.mode, im.size, im.getpixel((0, 0))
    ('RGB', (3, 2), (200, 200, 200))
    >>> load_image("missing.png")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: image file 'missing.png' does not exist; check the path ...
    """
    p = Path(path)
    if not p.exists():
        if p.is_symlink():
            raise broken_link(p)
        raise InputError(
            f"image file {str(p)!r} does not exist; check the path (relative paths resolve from {os.getcwd()!r})"
        )
    if p.is_dir():
        raise InputError(
            f"{str(p)!r} is a folder, expected an image file; pass its images, e.g. "
            f"genmetrics.data.io.images.list_images({str(p)!r}) (sorted by name; "
            "on the command line a folder is accepted as is)"
        )
    if p.stat().st_size == 0:
        raise InputError(f"image file {str(p)!r} is empty (0 bytes); regenerate or remove it")
    limit = max_pixels()
    try:
        with _pillow_settings(limit):
            with Image.open(p) as im:
                _check_pixels(im.size, str(p))  # from the header: nothing is decoded before this
                frames = int(getattr(im, "n_frames", 1) or 1)
                fmt = (im.format or "").upper()
                im.seek(0)
                im.load()
                im = ImageOps.exif_transpose(im)
                rgb = to_rgb(im, name=str(p)) if convert is None else convert(im)
        if frames > 1:
            kind = "pages" if fmt == "TIFF" else "frames"
            warnings.warn(
                f"{p}: {frames} {kind}; the first is used and the other {frames - 1} are dropped "
                "(split the file to score each)",
                FramesDroppedWarning,
                stacklevel=2,
            )
        return rgb
    except InputError:
        raise
    except (Image.DecompressionBombError, Image.DecompressionBombWarning) as e:
        # Pillow's own text names its error threshold (twice the limit), which contradicted ours: only the
        # image's size is taken from it
        size = re.search(r"\((\d+) pixels\)", str(e))
        raise InputError(
            f"image file {str(p)!r} is too large ({size[1] + ' pixels' if size else 'too many pixels'}); "
            f"the decompression-bomb limit is {limit} pixels "
            "(set GENMETRICS_MAX_PIXELS to raise it if the file is trusted)"
        ) from None
    except UnidentifiedImageError:
        raise InputError(
            f"{str(p)!r} is not an image Pillow can read (corrupt, or another file type with an image "
            "extension); replace or remove it"
        ) from None
    except PermissionError:  # the file is fine, the reader may not open it: no reason to replace it
        raise InputError(
            f"image file {str(p)!r} cannot be read (permission denied for this user); give read permission "
            "(chmod a+r) or remove it"
        ) from None
    except (OSError, SyntaxError, ValueError) as e:
        raise InputError(
            f"image file {str(p)!r} is corrupt or truncated ({e}); replace or remove it"
        ) from None


@contextlib.contextmanager
def _pillow_settings(limit: int) -> Iterator[None]:
    """Pillow's process-wide switches for one read: the bomb limit ``limit`` (its warning an error) and
    truncated files refused. Both are restored afterwards, so a setting another library made (e.g.
    ``ImageFile.LOAD_TRUNCATED_IMAGES = True``) is never changed for the rest of the process."""
    old_limit, old_truncated = Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES
    Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES = limit, False
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("error", Image.DecompressionBombWarning)
            yield
    finally:
        Image.MAX_IMAGE_PIXELS, ImageFile.LOAD_TRUNCATED_IMAGES = old_limit, old_truncated


def image_size(x: ImageLike) -> tuple[int, int]:
    """``(width, height)`` of an image in any accepted form, for a file read from its header only (nothing
    is decoded), so a decision that depends on the size (a size mismatch, the bomb limit) comes before any
    decoding.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     Image.new("RGB", (640, 20)).save(f"{d}/wide.png")
    ...     image_size(f"{d}/wide.png"), image_size(torch.zeros(3, 4, 5))
    ((640, 20), (5, 4))
    """
    if isinstance(x, (str, os.PathLike)):
        try:
            with _pillow_settings(max_pixels()), Image.open(x) as im:
                w, h = im.size
                # EXIF orientation from the header; a PNG whose eXIf chunk follows the pixels would be decoded
                # to read it, so such a PNG counts as upright here
                header_exif = im.format != "PNG" or "exif" in im.info
                orientation = im.getexif().get(0x0112, 1) if header_exif else 1
        except (
            OSError,
            SyntaxError,
            ValueError,
            Image.DecompressionBombError,
            Image.DecompressionBombWarning,
        ):
            return load_image(
                x
            ).size  # unreadable or too large: load_image names the problem (nothing decoded)
        return (h, w) if orientation in (5, 6, 7, 8) else (w, h)  # EXIF rotation swaps the sides
    if isinstance(x, Image.Image):
        return x.size
    if isinstance(x, torch.Tensor) and x.ndim >= 2:
        return int(x.shape[-1]), int(x.shape[-2])
    return to_pil(x).size


def check_image_header(path: str | os.PathLike) -> tuple[int, int]:
    """Check an image file from its header only (it exists, Pillow reads its format, its size is within the
    bomb limit; nothing is decoded) and return its ``(width, height)``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = Path(f"{d}/bad.png").write_bytes(b"not a png")
    ...     check_image_header(f"{d}/bad.png")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: ...is not an image Pillow can read...
    """
    size = image_size(path)
    _check_pixels(size, str(path))
    return size


def check_image_file(path: str | os.PathLike, *, decode_up_to: int = 4096 * 4096) -> tuple[int, int]:
    """Check an image file before any weights load and return its ``(width, height)``: the header (format,
    size against the bomb limit) always; the whole file decoded when it has at most ``decode_up_to`` pixels,
    else Pillow's structural check (``verify``), so checking a huge image costs no memory.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     Image.new("RGB", (8, 6)).save(f"{d}/ok.png")
    ...     _ = Path(f"{d}/bad.png").write_bytes(b"not a png")
    ...     size = check_image_file(f"{d}/ok.png")
    ...     try:
    ...         check_image_file(f"{d}/bad.png")
    ...     except InputError as e:
    ...         print(size, "is not an image Pillow can read" in str(e))
    (8, 6) True
    """
    w, h = image_size(path)
    _check_pixels((w, h), str(path))
    if w * h <= decode_up_to:
        load_image(path)
        return w, h
    try:
        with _pillow_settings(max_pixels()), Image.open(path) as im:
            im.verify()
    except (OSError, SyntaxError, ValueError) as e:
        raise InputError(
            f"image file {str(path)!r} is corrupt or truncated ({e}); replace or remove it"
        ) from None
    return w, h


def _well_formed(x: Any) -> bool:
    """A file path, a PIL image or a ``[3,H,W]`` tensor (what :func:`image_size` can size without guessing)."""
    if isinstance(x, torch.Tensor):
        return x.ndim == 3 and x.shape[0] == 3
    return isinstance(x, (str, os.PathLike, Image.Image))


def check_same_size(references: Sequence[Any], candidates: Sequence[Any], *, fix: str) -> None:
    """Refuse, from the headers (nothing decoded), the first candidate whose size differs from its
    reference's; ``fix`` says what to do. For metrics that compare pixels and do not resize.

    >>> check_same_size([torch.zeros(3, 4, 4)], [torch.zeros(3, 4, 5)], fix="resize them")
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: candidates[0]: size (4, 5) differs from its reference (4, 4); resize them
    """
    for i, (r, c) in enumerate(zip(references, candidates)):
        if not all(_well_formed(x) for x in (r, c)):
            continue  # a malformed input is named by the loader (channels-last, wrong dtype, ...)
        (rw, rh), (cw, ch) = image_size(r), image_size(c)
        if (rw, rh) != (cw, ch):
            where = f" ({c})" if isinstance(c, (str, os.PathLike)) else ""
            raise InputError(
                f"candidates[{i}]{where}: size {(ch, cw)} differs from its reference {(rh, rw)}; {fix}"
            )


def _check_pixels(size: tuple[int, int], name: str) -> None:
    w, h = size
    if w <= 0 or h <= 0:
        raise InputError(f"{name}: image has zero size {w}x{h}; expected a non-empty image")
    limit = max_pixels()
    if w * h > limit:
        raise InputError(
            f"{name}: image of {w}x{h} = {w * h} pixels exceeds the decompression-bomb limit of {limit} "
            "pixels (set GENMETRICS_MAX_PIXELS to raise it if the file is trusted)"
        )


def to_rgb(im: Image.Image, *, name: str = "image") -> Image.Image:
    """Convert any PIL mode to 8-bit RGB by the documented rules (alpha on white, 16-bit scaled).

    >>> to_rgb(Image.new("RGBA", (2, 2), (255, 0, 0, 0))).getpixel((0, 0))  # fully transparent: white
    (255, 255, 255)
    >>> to_rgb(Image.new("I;16", (2, 2), 65535)).getpixel((0, 0))  # 16-bit white stays white
    (255, 255, 255)
    """
    _check_pixels(im.size, name)
    mode = im.mode
    if mode == "RGB":
        return im
    if mode in ("I;16", "I;16B", "I;16L", "I;16N", "I", "F"):
        return _deep_to_rgb(im, name)
    if mode == "P" and "transparency" in im.info:
        im = im.convert("RGBA")
        mode = "RGBA"
    if mode in ("RGBA", "LA", "PA", "RGBa", "La"):
        rgba = im.convert("RGBA")
        background = Image.new("RGBA", rgba.size, (255, 255, 255, 255))
        return Image.alpha_composite(background, rgba).convert("RGB")
    return im.convert("RGB")


#: declared sample type -> the value that maps to 255 (see the module docstring and docs/errors.md)
DEEP_MODES = {
    "I;16": 65535.0,
    "I;16B": 65535.0,
    "I;16L": 65535.0,
    "I;16N": 65535.0,
    "I": float(2**31 - 1),
    "F": 1.0,
}
_FLOAT_CLIP = 0.01  # float images: values up to 1% outside 0..1 are rounding and are clipped


def _deep_to_rgb(im: Image.Image, name: str) -> Image.Image:
    """16-bit, 32-bit integer and 32-bit float single-channel images -> RGB, scaled by the declared type."""
    full = DEEP_MODES[im.mode]
    arr = np.asarray(im, dtype=np.float64)
    if im.mode == "F":
        if not np.isfinite(arr).all():
            raise InputError(f"{name}: float image contains NaN or infinite values; clean the file first")
        lo, hi = float(arr.min()), float(arr.max())
        if lo < -_FLOAT_CLIP or hi > 1.0 + _FLOAT_CLIP:
            raise InputError(
                f"{name}: 32-bit float image with values in [{lo:.4g}, {hi:.4g}]; float images are read "
                "as 0..1 (by their declared type, not their values): rescale the file to 0..1 or save "
                "it as 8- or 16-bit"
            )
    elif im.mode == "I" and float(arr.min()) < 0:
        raise InputError(
            f"{name}: 32-bit integer image with negative values (min {arr.min():.0f}); integer images "
            "are read as 0..2**31-1: rescale the file or save it as 8- or 16-bit"
        )
    arr = np.clip(arr / full * 255.0 + 0.5, 0, 255).astype(np.uint8)
    return Image.fromarray(arr, mode="L").convert("RGB")


def decode_uint8(x: str | os.PathLike | Image.Image, *, name: str = "image") -> torch.Tensor:
    """A file or PIL image -> its RGB pixels as a uint8 ``[3,H,W]`` tensor, by the module's conversion rules:
    decoding only, what an input worker has to do. Every metric takes the result as it would take the file
    (``uint8 / 255`` is what :func:`to_tensor` computes for both), and resizes and normalises it on its
    device.

    >>> t = decode_uint8(Image.new("LA", (3, 2), (100, 0)))  # transparent grey: composited on white
    >>> tuple(t.shape), t.dtype, t[:, 0, 0].tolist()
    ((3, 2, 3), torch.uint8, [255, 255, 255])
    """
    im = load_image(x) if isinstance(x, (str, os.PathLike)) else to_rgb(x, name=name)
    return torch.from_numpy(np.asarray(im, dtype=np.uint8).copy()).permute(2, 0, 1)


def pil_to_tensor(im: Image.Image) -> torch.Tensor:
    """RGB PIL image -> float32 ``[3,H,W]`` in [0,1].

    >>> t = pil_to_tensor(Image.new("RGB", (3, 2), (255, 0, 51)))
    >>> tuple(t.shape), t.dtype, t[:, 0, 0].tolist()
    ((3, 2, 3), torch.float32, [1.0, 0.0, 0.20000000298023224])
    """
    return decode_uint8(im).float().div_(255.0)


def _check_tensor(x: torch.Tensor, *, name: str, data_range: float) -> torch.Tensor:
    if x.ndim != 3:
        raise InputError(
            f"{name}: expected an image tensor [3,H,W] (or a batch [B,3,H,W]), got {_describe(x)}"
        )
    if x.shape[0] != 3:
        hint = " (channels-last? use x.permute(2, 0, 1))" if x.shape[-1] in (1, 3, 4) else ""
        hint += " (grayscale? use x.expand(3, -1, -1))" if x.shape[0] == 1 else ""
        hint += " (RGBA? drop or composite the alpha channel)" if x.shape[0] == 4 else ""
        raise InputError(f"{name}: expected 3 channels first [3,H,W], got {_describe(x)}{hint}")
    if x.shape[1] == 0 or x.shape[2] == 0:
        raise InputError(f"{name}: image has zero size, got {_describe(x)}")
    _check_pixels((int(x.shape[2]), int(x.shape[1])), name)
    if x.dtype == torch.uint8:
        return x.float().div(255.0)
    if x.dtype == torch.bool or not (x.is_floating_point()):
        raise InputError(
            f"{name}: unsupported dtype {x.dtype}; expected torch.uint8 in 0..255 or a float tensor in "
            f"[0, data_range]; for 16-bit data use x.float() / 65535"
        )
    xf = x.detach().float()
    # one read of the device for the whole check: NaN propagates through min/max, inf is their value
    lo, hi = torch.stack(tuple(torch.aminmax(xf.reshape(-1)))).tolist()
    if not (math.isfinite(lo) and math.isfinite(hi)):
        raise InputError(f"{name}: tensor contains NaN or infinite values; clean the generator output first")
    tol = _RANGE_TOL * data_range
    if lo < -tol or hi > data_range + tol:
        hint = ""
        if lo < -tol and lo >= -1 - tol and hi <= 1 + tol:
            hint = "; it looks normalised to [-1,1]: pass (x + 1) / 2"
        elif hi > 1 + tol and hi <= 255 + tol and data_range == 1.0:
            hint = "; it looks like 0..255: pass data_range=255.0 or convert to uint8"
        raise InputError(
            f"{name}: float values in [{lo:.4g}, {hi:.4g}] are outside the declared range [0, {data_range:g}]{hint}"
        )
    return xf.div(data_range).clamp_(0.0, 1.0)


def to_tensor(x: ImageLike, *, data_range: float = 1.0, name: str = "image") -> torch.Tensor:
    """One image in any accepted form -> float32 ``[3,H,W]`` in [0,1] on the CPU (or the input's device).

    >>> float(to_tensor(torch.full((3, 2, 2), 255, dtype=torch.uint8)).max())  # uint8: divided by 255
    1.0
    >>> float(to_tensor(torch.full((3, 2, 2), 255.0), data_range=255.0).max())  # floats: by data_range
    1.0
    >>> to_tensor(torch.zeros(4, 2, 2))
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: image: expected 3 channels first [3,H,W], got tensor of shape (4, 2, 2) and dtype torch.float32 (RGBA? drop or composite the alpha channel)
    """
    if isinstance(x, (str, os.PathLike)):
        return pil_to_tensor(load_image(x))
    if isinstance(x, Image.Image):
        return pil_to_tensor(to_rgb(x, name=name))
    if isinstance(x, torch.Tensor):
        return _check_tensor(x, name=name, data_range=data_range)
    if isinstance(x, np.ndarray):
        raise InputError(
            f"{name}: numpy arrays are not accepted ({_describe(x)}); use torch.from_numpy(a).permute(2, 0, 1) "
            "for HxWx3 uint8 arrays, or PIL.Image.fromarray(a)"
        )
    raise InputError(
        f"{name}: expected a file path, a PIL image or a tensor [3,H,W] (uint8 0..255 or float in [0, data_range]), "
        f"got {_describe(x)}"
    )


def to_pil(x: ImageLike, *, data_range: float = 1.0, name: str = "image") -> Image.Image:
    """One image in any accepted form -> RGB PIL image (exactly, for uint8 input).

    >>> x = torch.randint(0, 256, (3, 4, 5), dtype=torch.uint8, generator=torch.Generator().manual_seed(0))
    >>> im = to_pil(x)
    >>> im.size, torch.equal(torch.from_numpy(np.array(im)).permute(2, 0, 1), x)  # (W, H); a lossless round trip
    ((5, 4), True)
    """
    if isinstance(x, (str, os.PathLike)):
        return load_image(x)
    if isinstance(x, Image.Image):
        return to_rgb(x, name=name)
    if isinstance(x, torch.Tensor) and x.dtype == torch.uint8:
        _check_tensor(x, name=name, data_range=data_range)
        return Image.fromarray(x.permute(1, 2, 0).cpu().numpy().copy(), mode="RGB")
    t = to_tensor(x, data_range=data_range, name=name)
    arr = (t.permute(1, 2, 0).cpu().numpy() * 255.0 + 0.5).clip(0, 255).astype(np.uint8)
    return Image.fromarray(arr, mode="RGB")


def as_image_list(images: Any, *, name: str = "images") -> list[ImageLike]:
    """Split a batch (list/tuple of images, a path, or a tensor [B,3,H,W] / [3,H,W]) into a list of images.

    >>> len(as_image_list(torch.zeros(2, 3, 4, 4))), len(as_image_list(torch.zeros(3, 4, 4))), as_image_list("a.png")
    (2, 1, ['a.png'])
    """
    if images is None:
        raise InputError(f"{name}: no images given; expected a list of images or a tensor [B,3,H,W]")
    if isinstance(images, torch.Tensor):
        if images.ndim == 4:
            return list(images.unbind(0))
        if images.ndim == 3:
            return [images]
        raise InputError(f"{name}: expected a tensor [B,3,H,W] or [3,H,W], got {_describe(images)}")
    if isinstance(images, (str, os.PathLike, Image.Image)):
        return [images]
    if isinstance(images, Sequence) and not isinstance(images, (bytes, bytearray)):
        return list(images)
    raise InputError(f"{name}: expected a list of images or a tensor [B,3,H,W], got {_describe(images)}")


def load_batch(images: Any, *, data_range: float = 1.0, name: str = "images") -> list[torch.Tensor]:
    """A batch in any accepted form -> list of float32 ``[3,H,W]`` tensors in [0,1] (sizes may differ).

    >>> [tuple(t.shape) for t in load_batch([torch.zeros(3, 4, 4, dtype=torch.uint8), Image.new("RGB", (6, 8))])]
    [(3, 4, 4), (3, 8, 6)]
    """
    items = as_image_list(images, name=name)
    if not items:
        raise InputError(f"{name}: the batch is empty; expected at least one image")
    return [
        to_tensor(
            x, data_range=data_range, name=f"{name}[{i}]" if not isinstance(x, (str, os.PathLike)) else str(x)
        )
        for i, x in enumerate(items)
    ]


@dataclass(frozen=True)
class ResizePolicy:
    """How a backbone brings images to its input size. One named policy per backbone.

    * ``"none"``: sizes are left alone; a batch of mixed sizes is an error (pixel metrics);
    * ``"resize"``: bicubic (antialiased) resize to ``size x size``; aspect ratio is not kept (TPIPS);
    * ``"shorter_side_center_crop"``: resize the shorter side to ``size`` then centre-crop (CLIP, DINO); an
      image longer than :data:`MAX_ASPECT` times its shorter side is first cut to that central part;
    * ``"to_first"``: resize every image to the first image's size (candidates to their reference).

    >>> images = [torch.rand(3, 8, 6), torch.rand(3, 4, 4)]
    >>> tuple(ResizePolicy("shorter_side_center_crop", 4).stack(images).shape)
    (2, 3, 4, 4)
    >>> ResizePolicy("none").stack(images)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: ...
    """

    name: str = "none"
    size: int | None = None

    def __post_init__(self) -> None:
        if self.name not in ("none", "resize", "shorter_side_center_crop", "to_first"):
            raise InputError(
                f"unknown resize policy {self.name!r}; use none, resize, shorter_side_center_crop or to_first"
            )
        if self.name in ("resize", "shorter_side_center_crop") and (self.size is None or self.size <= 0):
            raise InputError(f"resize policy {self.name!r} needs a positive size, got {self.size!r}")

    def apply_one(self, x: torch.Tensor, target: tuple[int, int] | None = None) -> torch.Tensor:
        """One image ``[C,H,W]`` under this policy (``target``: the size ``to_first`` resizes to); returned
        unchanged when it already has the size the policy asks for."""
        h, w = int(x.shape[-2]), int(x.shape[-1])
        if self.name == "none":
            return x
        if self.name == "to_first":
            assert target is not None
            return x if (h, w) == target else _resize(x, target)
        if self.name == "resize":
            s = int(self.size)  # type: ignore[arg-type]
            return x if (h, w) == (s, s) else _resize(x, (s, s))
        s = int(self.size)  # type: ignore[arg-type]
        short = min(h, w)
        if max(h, w) > MAX_ASPECT * short:  # 100000 x 1: keep the central MAX_ASPECT:1 part (bounded memory)
            ch, cw = min(h, MAX_ASPECT * short), min(w, MAX_ASPECT * short)
            x = x[..., (h - ch) // 2 : (h - ch) // 2 + ch, (w - cw) // 2 : (w - cw) // 2 + cw]
            h, w = ch, cw
        scale = s / short
        nh, nw = max(s, round(h * scale)), max(s, round(w * scale))
        y = x if (h, w) == (nh, nw) else _resize(x, (nh, nw))
        top, left = (nh - s) // 2, (nw - s) // 2
        return y[..., top : top + s, left : left + s]

    def stack(self, images: list[torch.Tensor], *, name: str = "images") -> torch.Tensor:
        """Apply the policy to a list of ``[3,H,W]`` tensors and stack them into ``[B,3,H,W]``."""
        if not images:
            raise InputError(f"{name}: the batch is empty; expected at least one image")
        target = (int(images[0].shape[-2]), int(images[0].shape[-1]))
        out = [self.apply_one(x, target) for x in images]
        sizes = {tuple(o.shape[-2:]) for o in out}
        if len(sizes) > 1:
            raise InputError(
                f"{name}: images have different sizes {sorted(sizes)[:4]} and this metric does not resize "
                "(resize policy 'none'); resize them to one size first, or choose resize='to_first'"
            )
        return torch.stack(out, 0)


def _resize(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    y = F.interpolate(x.unsqueeze(0), size=size, mode="bicubic", antialias=True, align_corners=False)
    return y.squeeze(0).clamp_(0.0, 1.0)


def match_by_stem(
    references: list[Path],
    candidates: list[Path],
    *,
    ref_name: str = "references",
    cand_name: str = "candidates",
) -> list[tuple[str, Path, Path]]:
    """Pair candidate files with reference files of the same stem; every candidate must have one, and a stem
    may appear once per side (:func:`stem_index`). References without a candidate are not used: list them
    with :func:`unused_references` to say so.

    >>> refs, cands = [Path("r/000.png"), Path("r/001.png")], [Path("g/001.jpg")]
    >>> [(stem, r.name, c.name) for stem, r, c in match_by_stem(refs, cands)]
    [('001', '001.png', '001.jpg')]
    >>> match_by_stem(refs, [Path("g/007.png")])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: candidates: 1 file(s) have no reference with the same stem in references (first: 007.png); ...
    """
    by_stem = stem_index(references, role=ref_name)
    stem_index(candidates, role=cand_name)
    out, missing = [], []
    for c in candidates:
        r = by_stem.get(c.stem)
        if r is None:
            missing.append(c.name)
        else:
            out.append((c.stem, r, c))
    if missing:
        raise InputError(
            f"{cand_name}: {len(missing)} file(s) have no reference with the same stem in {ref_name} "
            f"(first: {', '.join(missing[:3])}); references are matched by file name without extension"
        )
    return out


def image_id(x: ImageLike, index: int) -> str:
    """A stable sample id: the file stem for paths, else the position in the batch.

    >>> image_id("gen/blur/000.png", 5), image_id(torch.zeros(3, 2, 2), 5)
    ('000', '5')
    """
    if isinstance(x, (str, os.PathLike)):
        return Path(x).stem
    return str(index)


def grid_side(n: int) -> int:
    """The side of a square token grid of ``n`` tokens (a ValueError when ``n`` is not a square).

    >>> grid_side(49)
    7
    """
    side = int(math.isqrt(n))
    if side * side != n:
        raise ValueError(f"{n} tokens do not form a square grid")
    return side
