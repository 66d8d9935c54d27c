"""PSNR, SSIM and MS-SSIM on batches of [0,1] images (pure tensors).

Per-image values with torchmetrics' definitions (``torchmetrics.functional.image``): SSIM reflect-pads
the images by half the window and averages the SSIM map over the whole image; MS-SSIM uses the
contrast-sensitivity term of the valid region at every scale but the last, the SSIM of the last scale,
2x2 average pooling between scales and the ``relu`` normalisation. Two differences, both deliberate:

* the Gaussian window is separable and applied as two 1-D passes (``2k`` instead of ``k^2``
  multiply-adds per pixel, as shifted adds rather than ``conv2d``), and its size is ``kernel_size`` (torchmetrics derives it from ``sigma``
  and ignores ``kernel_size`` for Gaussian windows; with the defaults 11 / 1.5 the two agree);
* maps are computed in the input dtype (float32 is within 1e-6 of float64 on natural and noisy
  images) and every mean over pixels is accumulated in float64.
"""

from __future__ import annotations

import functools
from typing import Any

import torch
import torch.nn.functional as F


def gaussian_window(
    kernel_size: int,
    sigma: float,
    *,
    dtype: torch.dtype = torch.float32,
    device: torch.device | str | None = None,
) -> torch.Tensor:
    """The normalised 1-D Gaussian ``[kernel_size]`` centred on the middle tap.

    >>> w = gaussian_window(5, 1.0, dtype=torch.float64)
    >>> round(float(w.sum()), 12), int(w.argmax()), bool(torch.equal(w, w.flip(0)))
    (1.0, 2, True)
    """
    x = torch.arange(kernel_size, dtype=torch.float64) - (kernel_size - 1) / 2.0
    g = torch.exp(-(x * x) / (2.0 * sigma * sigma))
    return (g / g.sum()).to(dtype=dtype, device=device)


#: bytes of each input handled per block by :func:`squared_error_sums` on the CPU (of the float32 buffer for
#: uint8 inputs): one block of both inputs and the difference (3 MiB) stays in the core's L2/L3 cache, so every
#: pass after the first reads cache, not memory; smaller blocks pay more in per-call dispatch (2-15 us a
#: call) than they gain in cache speed (512 KiB measured the same as 1 MiB, 128-256 KiB slower, 4 MiB slower)
BLOCK_BYTES = 1 << 20

#: the signed integer type of each float type's width: a float's bit pattern read as this integer orders all
#: values from +0.0 to +inf (and NaN above them) as the floats; negative floats read as negative integers
_SAME_WIDTH_INT = {8: torch.int64, 4: torch.int32, 2: torch.int16}


def squared_error_sums(
    preds: torch.Tensor, target: torch.Tensor, *, with_range: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Per image ``sum((preds - target)^2)`` of ``[B,...,W]``, float64 ``[B]``; with ``with_range`` also the
    smallest and largest value of the two inputs (``[2]``, input dtype), else None.

    Each image row (the last axis, ``W`` terms) is summed in the input dtype (float32 for integer inputs,
    whose differences are taken exactly, not modulo 256), rows in float64. On the CPU the rows of both
    inputs go in blocks of about :data:`BLOCK_BYTES`: the difference (written into one reused block buffer)
    reads the block from memory, the range check and the row norms read it again from the cache, so memory
    is read once. The range check reads the values' bit patterns as integers (``aminmax`` of integers is
    about twice as fast as of floats, which must look for NaN); when the smallest pattern is negative (a
    negative value or ``-0.0``) the float range is read again with float ``aminmax``, so the returned range
    is the float one either way (NaN included). ``uint8`` inputs (no range to fear: every value is one of
    0..255) are converted block by block into the float32 buffer and never copied whole. Tensors autograd
    tracks take the plain expression, which keeps the graph.

    Integer inputs (uint8) give the exact integer sums on every path (squares summed in float64), the
    bits of :mod:`genmetrics.accel.pixel_native`'s kernel, which gives the same sums in one read.

    ``preds`` and ``target`` of two shapes (no broadcasting) or with no image axis raise ValueError, as do
    images without pixels; an empty batch gives empty sums.

    >>> x = torch.zeros(2, 3, 4, 4)
    >>> sse, rng = squared_error_sums(x, x + 0.5, with_range=True)
    >>> sse.tolist(), rng.tolist()  # 48 px x 0.25; values span [0, 0.5]
    ([12.0, 12.0], [0.0, 0.5])
    >>> u = torch.full((1, 3, 4, 4), 200, dtype=torch.uint8)
    >>> squared_error_sums(u, u - 3)[0].tolist()  # 48 px x 3^2, integer differences
    [432.0]
    """
    # a negative-bit view (``z.conj().imag``) holds its values negated in memory: the blocks read memory
    preds, target = preds.resolve_neg(), target.resolve_neg()
    if preds.shape != target.shape or preds.dim() < 2:  # the row views below would pair other pixels
        raise ValueError(
            f"squared_error_sums: expected preds and target of one shape [B,...,W], got {tuple(preds.shape)} "
            f"and {tuple(target.shape)}; resize one to the other"
        )
    if preds.numel() == 0:  # an empty batch: no sums; images without pixels: no range, no PSNR (0 / 0)
        if with_range or preds.shape[0]:
            raise ValueError(f"squared_error_sums: no values in images of shape {tuple(preds.shape)}")
        return torch.zeros(0, dtype=torch.float64, device=preds.device), None
    b, w = preds.shape[0], preds.shape[-1]
    tracked = torch.is_grad_enabled() and (preds.requires_grad or target.requires_grad)
    u8 = preds.dtype == torch.uint8
    blocked = (
        not tracked
        and preds.device.type == "cpu"
        and preds.dtype == target.dtype
        and (u8 or (preds.is_floating_point() and preds.element_size() in _SAME_WIDTH_INT))
        and b * w > 0
        and preds.is_contiguous()
        and target.is_contiguous()
    )
    if not blocked:
        if not preds.is_floating_point():  # integers: exact differences and sums (uint8 - uint8 would wrap)
            d = preds.double() - target.double()
            return d.mul_(d).reshape(b, -1).sum(1), (float_range(preds, target) if with_range else None)
        d = (preds - target).reshape(b, -1, w)
        sse = torch.linalg.vector_norm(d, dim=-1).double().square().sum(1)
        return sse, (float_range(preds, target) if with_range else None)
    pr, tr = preds.view(-1, w), target.view(-1, w)  # all rows of all images: a block may span two images
    k = max(1, BLOCK_BYTES // (w * 4 if u8 else w * preds.element_size()))
    buf = torch.empty((min(k, pr.shape[0]), w), dtype=torch.float32 if u8 else preds.dtype)
    norms: list[torch.Tensor] = []
    ranges: list[torch.Tensor] = []
    aminmax, sub, norm = torch.aminmax, torch.sub, torch.linalg.vector_norm  # ~200 blocks per 256 images
    # the blocks as views made by one ``split`` each (slicing every block in Python cost ~10% of the loop)
    # uint8: squares up to 255^2 are exact in float32; a row's sums stay exact integers in float32 while
    # W * 255^2 < 2^24 (in any order: every partial sum is representable), else they are taken in float64
    row_dtype = torch.float32 if w * 255 * 255 < 1 << 24 else torch.float64
    if u8:
        for p, t in zip(pr.split(k), tr.split(k)):
            d = buf if p.shape[0] == k else buf[: p.shape[0]]
            d.copy_(p)  # 0..255 exactly in float32; the subtraction converts the target block on the fly
            sub(d, t, out=d)
            norms.append(d.mul_(d).sum(-1, dtype=row_dtype))
            if with_range:
                ranges += aminmax(p)
                ranges += aminmax(t)
    else:
        as_int = _SAME_WIDTH_INT[preds.element_size()]
        pib, tib = pr.view(as_int).split(k), tr.view(as_int).split(k)
        for p, t, pi, ti in zip(pr.split(k), tr.split(k), pib, tib):
            # the subtraction is the block's first touch (reads memory); the range check and the norms
            # read the cache (measured: 0.41-0.46 of read bandwidth against 0.34-0.39 range check first)
            d = sub(p, t, out=buf if p.shape[0] == k else buf[: p.shape[0]])
            if with_range:
                ranges += aminmax(pi)
                ranges += aminmax(ti)
            norms.append(norm(d, dim=-1))
    rows = torch.cat(norms).view(b, -1).double()
    sse = (rows if u8 else rows.square_()).sum(1)
    if not with_range:
        return sse, None
    lo, hi = torch.stack(ranges[0::2]).min(), torch.stack(ranges[1::2]).max()
    if u8:
        return sse, torch.stack((lo, hi))
    if int(lo) < 0:  # a negative value or -0.0: the integer order no longer follows the float order
        return sse, float_range(preds, target)
    return sse, torch.stack((lo, hi)).view(preds.dtype)


def float_range(preds: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``[min, max]`` of the values of both tensors (input dtype; NaN when either holds one)."""
    lo_p, hi_p = torch.aminmax(preds.detach())
    lo_t, hi_t = torch.aminmax(target.detach())
    return torch.stack((torch.minimum(lo_p, lo_t), torch.maximum(hi_p, hi_t)))


def psnr(preds: torch.Tensor, target: torch.Tensor, *, data_range: float = 1.0) -> torch.Tensor:
    """``10 log10(data_range^2 / MSE)`` per image of ``[B,C,H,W]``, float64 ``[B]`` (inf for equal images).

    The squared errors come from :func:`squared_error_sums` (one pass over memory on the CPU).

    >>> x = torch.zeros(2, 3, 8, 8)
    >>> [round(v, 4) for v in psnr(x, x + 0.1).tolist()], psnr(x, x).tolist()  # MSE 0.01 -> 20 dB; equal -> inf
    ([20.0, 20.0], [inf, inf])
    """
    sse, _ = squared_error_sums(preds, target)
    return psnr_from_sse(sse, preds[0].numel() if preds.shape[0] else 1, data_range=data_range)


def psnr_from_sse(sse: torch.Tensor, n: int, *, data_range: float = 1.0) -> torch.Tensor:
    """``10 log10(data_range^2 / (sse / n))``: PSNR from per-image sums of ``n`` squared errors.

    >>> psnr_from_sse(torch.tensor([0.5], dtype=torch.float64), 50).tolist()  # MSE 0.01
    [20.0]
    """
    return 10.0 * torch.log10(data_range * data_range / (sse / n))


@functools.lru_cache(maxsize=64)
def gaussian_taps(kernel_size: int, sigma: float, dtype: torch.dtype = torch.float32) -> tuple[float, ...]:
    """:func:`gaussian_window` rounded to ``dtype``, as Python floats, computed once per argument set: the
    taps the filters multiply by, known on the host without reading a device tensor.

    >>> taps = gaussian_taps(5, 1.0)
    >>> taps == tuple(gaussian_window(5, 1.0).tolist()), gaussian_taps(5, 1.0) is taps
    (True, True)
    """
    return tuple(float(t) for t in gaussian_window(kernel_size, sigma, dtype=dtype).tolist())


def _blur(x: torch.Tensor, taps: tuple[float, ...]) -> torch.Tensor:
    """Valid separable Gaussian filtering of ``[..., H, W]`` -> ``[..., H-k+1, W-k+1]``.

    Written as ``k`` shifted multiply-adds per axis: on the CPU this is several times faster than
    ``conv2d`` with one input channel, and it gives the same sums up to float rounding. The taps are
    Python floats (:func:`gaussian_taps`), so no device value is read back.
    """
    k = len(taps)
    h = x.shape[-2] - k + 1
    y = x[..., 0:h, :] * taps[0]
    for i in range(1, k):
        y.add_(x[..., i : i + h, :], alpha=taps[i])
    w = y.shape[-1] - k + 1
    z = y[..., 0:w] * taps[0]
    for i in range(1, k):
        z.add_(y[..., i : i + w], alpha=taps[i])
    return z


def _ssim_terms(
    preds: torch.Tensor,
    target: torch.Tensor,
    win: tuple[float, ...],
    c1: float,
    c2: float,
    *,
    pad: bool,
    luminance: bool,
) -> tuple[torch.Tensor | None, torch.Tensor]:
    """``(ssim_map or None, cs_map)`` over ``[B,C,H,W]``; ``pad`` reflect-pads by half the window first."""
    b, c, h, w = preds.shape
    p = (len(win) - 1) // 2
    x = preds.reshape(b * c, 1, h, w)
    y = target.reshape(b * c, 1, h, w)
    if pad:
        x = F.pad(x, (p, p, p, p), mode="reflect")
        y = F.pad(y, (p, p, p, p), mode="reflect")
    # Centring both images by the same constant leaves variances and covariance unchanged and keeps the
    # second moments small, so E[x^2] - E[x]^2 loses less to cancellation in float32.
    x = x - 0.5
    y = y - 0.5
    maps = _blur(torch.cat((x, y, x * x, y * y, x * y), 0), win)
    mx, my, xx, yy, xy = maps.split(b * c)
    mxy = mx * my
    mx2 = mx * mx
    my2 = my * my
    sxx = (xx - mx2).clamp_(min=0.0)
    syy = (yy - my2).clamp_(min=0.0)
    sxy = xy - mxy
    cs = (2.0 * sxy + c2) / (sxx + syy + c2)
    if not luminance:
        return None, cs.reshape(b, c, *cs.shape[-2:])
    # luminance of the uncentred means: mu = m + 0.5
    ux, uy = mx + 0.5, my + 0.5
    lum = (2.0 * ux * uy + c1) / (ux * ux + uy * uy + c1)
    s = lum * cs
    return s.reshape(b, c, *s.shape[-2:]), cs.reshape(b, c, *cs.shape[-2:])


def _image_mean(x: torch.Tensor) -> torch.Tensor:
    return torch.sum(x.reshape(x.shape[0], -1), dim=1, dtype=torch.float64) / (x[0].numel())


#: bytes the five blurred maps of one chunk of images may take on the CPU (see :func:`_cpu_chunks`)
SSIM_CHUNK_BYTES = 2 << 20


def _check_pair(name: str, preds: torch.Tensor, target: torch.Tensor) -> None:
    """``preds`` and ``target`` are image batches ``[B,C,H,W]`` of one shape (chunks of a mismatched pair
    would score only the images both have)."""
    if preds.shape != target.shape or preds.dim() != 4:
        raise ValueError(
            f"{name}: expected preds and target of one shape [B,C,H,W], got {tuple(preds.shape)} and "
            f"{tuple(target.shape)}; pass one target image per prediction, of its size"
        )


def _cpu_chunks(
    fn: Any, preds: torch.Tensor, target: torch.Tensor, kernel_size: int, **kw: Any
) -> torch.Tensor | None:
    """``fn`` over chunks of images whose filtered maps fit in about :data:`SSIM_CHUNK_BYTES` (a core's
    L2 cache), concatenated; ``None`` when one chunk holds the batch, or off the CPU (where one launch per
    batch is what is fast). The filters are memory-bound: a 32-image batch of 64x64 images took 2.3x the
    time per image of chunks of 4. Every image is computed by the same operations on the same values
    whatever the chunk (each image's planes are iterated alone, so vector loops split them the same way):
    the bits do not depend on the chunking."""
    b, c, h, w = preds.shape
    per_image = 5 * c * (h + kernel_size - 1) * (w + kernel_size - 1) * preds.element_size()
    n = max(1, SSIM_CHUNK_BYTES // per_image)
    if preds.device.type != "cpu" or b <= n:
        return None
    return torch.cat(
        [fn(p, t, kernel_size=kernel_size, **kw) for p, t in zip(preds.split(n), target.split(n))]
    )


def ssim(
    preds: torch.Tensor,
    target: torch.Tensor,
    *,
    kernel_size: int = 11,
    sigma: float = 1.5,
    k1: float = 0.01,
    k2: float = 0.03,
    data_range: float = 1.0,
) -> torch.Tensor:
    """SSIM per image of ``[B,C,H,W]`` (reflect padding, whole-image mean), float64 ``[B]``.

    >>> x = torch.rand(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    >>> ssim(x, x).tolist(), bool((ssim(x, 1 - x) < 0).all())  # identical -> 1; an inverted image anticorrelates
    ([1.0, 1.0], True)
    """
    kw = {"sigma": sigma, "k1": k1, "k2": k2, "data_range": data_range}
    _check_pair("ssim", preds, target)
    chunked = _cpu_chunks(ssim, preds, target, kernel_size, **kw)
    if chunked is not None:
        return chunked
    win = gaussian_taps(kernel_size, float(sigma), preds.dtype)
    s, _ = _ssim_terms(
        preds, target, win, (k1 * data_range) ** 2, (k2 * data_range) ** 2, pad=True, luminance=True
    )
    assert s is not None  # luminance=True always returns the SSIM map
    return _image_mean(s)


def ms_ssim(
    preds: torch.Tensor,
    target: torch.Tensor,
    *,
    kernel_size: int = 11,
    sigma: float = 1.5,
    betas: tuple[float, ...] = (0.0448, 0.2856, 0.3001, 0.2363, 0.1333),
    k1: float = 0.01,
    k2: float = 0.03,
    data_range: float = 1.0,
) -> torch.Tensor:
    """MS-SSIM per image of ``[B,C,H,W]`` with the ``relu`` normalisation, float64 ``[B]``.

    Five scales with an 11-tap window need at least 161 px per side:

    >>> x = torch.rand(1, 1, 161, 161, generator=torch.Generator().manual_seed(0))
    >>> noisy = (x + 0.2 * torch.rand(1, 1, 161, 161, generator=torch.Generator().manual_seed(1))).clamp(0, 1)
    >>> [round(v, 6) for v in ms_ssim(x, x).tolist()], bool(ms_ssim(x, noisy) < 1)
    ([1.0], True)
    """
    kw = {"sigma": sigma, "betas": betas, "k1": k1, "k2": k2, "data_range": data_range}
    _check_pair("ms_ssim", preds, target)
    chunked = _cpu_chunks(ms_ssim, preds, target, kernel_size, **kw)
    if chunked is not None:
        return chunked
    win = gaussian_taps(kernel_size, float(sigma), preds.dtype)
    c1, c2 = (k1 * data_range) ** 2, (k2 * data_range) ** 2
    out = torch.ones(preds.shape[0], dtype=torch.float64, device=preds.device)
    for i, beta in enumerate(betas):
        last = i == len(betas) - 1
        s, cs = _ssim_terms(preds, target, win, c1, c2, pad=last, luminance=last)
        v = _image_mean(cs if s is None else s).clamp_(min=0.0)  # the SSIM map only exists at the last scale
        out = out * v.pow(beta)
        if not last:
            preds = F.avg_pool2d(preds, 2)
            target = F.avg_pool2d(target, 2)
    return out


__all__ = [
    "BLOCK_BYTES",
    "SSIM_CHUNK_BYTES",
    "gaussian_window",
    "ms_ssim",
    "psnr",
    "psnr_from_sse",
    "squared_error_sums",
    "ssim",
]
