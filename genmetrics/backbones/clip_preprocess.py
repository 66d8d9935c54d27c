"""open_clip image preprocessing on tensors: any image of the image contract -> the model's input batch.

Resizing follows the model's own ``preprocess_cfg`` (open_clip's ``preprocess`` does the same on PIL
images); normalisation uses its mean/std. Images come through :func:`genmetrics.data.io.images.load_batch`
(every PIL mode, file, uint8 or float tensor), one at a time, so each row of a batch is the image alone.

Everything after decoding runs on the model's device: a tensor image is moved there first (a uint8 image
as uint8, a quarter of the bytes of float32), then converted, resized, cropped and normalised there, so a
data-loading worker only has to decode. On the CPU the arithmetic is the same as resizing first and moving
after; on another device the kernels round differently, within :func:`device_difference_bound`.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from genmetrics.data.io.images import as_image_list, load_batch

OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)


def clip_preprocess_cfg(model: Any) -> dict[str, Any]:
    """The model's preprocessing: ``size (h, w)``, ``mean``, ``std``, ``interpolation``, ``resize_mode``.

    Read from ``model.visual.preprocess_cfg`` (open_clip >= 2.23) or the legacy ``image_size`` /
    ``image_mean`` / ``image_std`` attributes; mean/std default to OpenAI's when the model has none
    (models built in code, e.g. :func:`genmetrics.testing.tiny_clip`).

    >>> from genmetrics.testing import tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> cfg = clip_preprocess_cfg(model)
    >>> cfg["size"], cfg["resize_mode"], cfg["mean"][0]
    ((32, 32), 'shortest', 0.48145466)
    """
    visual = getattr(model, "visual", model)
    cfg = dict(getattr(visual, "preprocess_cfg", None) or {})
    size = cfg.get("size", getattr(visual, "image_size", 224))
    if isinstance(size, int):
        size = (size, size)
    mean = cfg.get("mean") or getattr(visual, "image_mean", None) or OPENAI_MEAN
    std = cfg.get("std") or getattr(visual, "image_std", None) or OPENAI_STD
    return {
        "size": (int(size[0]), int(size[1])),
        "mean": tuple(float(m) for m in mean),
        "std": tuple(float(s) for s in std),
        "interpolation": cfg.get("interpolation", "bicubic"),
        "resize_mode": cfg.get("resize_mode", "shortest"),
        "fill_color": cfg.get("fill_color", 0),
    }


def model_device(model: Any) -> torch.device:
    """The device of the model's first parameter (the CPU for a model without parameters).

    >>> model_device(torch.nn.Linear(2, 2)), model_device(torch.nn.ReLU())
    (device(type='cpu'), device(type='cpu'))
    """
    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def _resize(x: torch.Tensor, hw: tuple[int, int], mode: str) -> torch.Tensor:
    if tuple(x.shape[-2:]) == hw:
        return x
    y = F.interpolate(x.unsqueeze(0), size=hw, mode=mode, antialias=True, align_corners=False)
    return y.squeeze(0).clamp_(0.0, 1.0)


def _fit(x: torch.Tensor, cfg: dict[str, Any], mode: str) -> torch.Tensor:
    """One image ``[3,h,w]`` in [0,1] -> ``[3,th,tw]`` by the config's resize mode."""
    th, tw = cfg["size"]
    h, w = int(x.shape[-2]), int(x.shape[-1])
    if cfg["resize_mode"] == "squash":
        return _resize(x, (th, tw), mode)
    if cfg["resize_mode"] == "longest":
        scale = min(th / h, tw / w)
        nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
        y = torch.full((3, th, tw), float(cfg["fill_color"]) / 255.0, dtype=x.dtype, device=x.device)
        top, left = (th - nh) // 2, (tw - nw) // 2
        y[:, top : top + nh, left : left + nw] = _resize(x, (nh, nw), mode)
        return y
    # "shortest": resize so the image covers the target, then centre-crop
    scale = max(th / h, tw / w)
    nh, nw = max(th, round(h * scale)), max(tw, round(w * scale))
    y = _resize(x, (nh, nw), mode)
    top, left = (nh - th) // 2, (nw - tw) // 2
    return y[:, top : top + th, left : left + tw]


#: the normalisation constants, made once per (mean, std, device): a new tensor on a GPU is a host copy
_STATS: dict[tuple[Any, ...], tuple[torch.Tensor, torch.Tensor]] = {}


def normalisation(mean: Any, std: Any, device: Any) -> tuple[torch.Tensor, torch.Tensor]:
    """``mean`` and ``std`` as float32 ``[1,3,1,1]`` tensors on ``device``, made once per device.

    >>> m, s = normalisation(OPENAI_MEAN, OPENAI_STD, "cpu")
    >>> tuple(m.shape), m is normalisation(OPENAI_MEAN, OPENAI_STD, "cpu")[0]
    ((1, 3, 1, 1), True)
    """
    key = (tuple(float(v) for v in mean), tuple(float(v) for v in std), str(torch.device(device)))
    if key not in _STATS:
        _STATS[key] = (
            torch.tensor(key[0], dtype=torch.float32, device=device).view(1, 3, 1, 1),
            torch.tensor(key[1], dtype=torch.float32, device=device).view(1, 3, 1, 1),
        )
    return _STATS[key]


def load_on_device(
    images: Any, device: Any, *, data_range: float = 1.0, name: str = "images"
) -> list[torch.Tensor]:
    """:func:`~genmetrics.data.io.images.load_batch` on ``device``: tensor images are moved there as they came
    (uint8 stays uint8: a quarter of the bytes of float32) and converted to float32 in [0, 1] there; files
    and PIL images are decoded on the CPU and their float tensor moved.

    >>> x = torch.full((2, 3, 4, 4), 255, dtype=torch.uint8)
    >>> [(t.device.type, t.dtype, float(t.max())) for t in load_on_device(x, "cpu")]
    [('cpu', torch.float32, 1.0), ('cpu', torch.float32, 1.0)]
    """
    dev = torch.device(device)
    if isinstance(images, torch.Tensor):
        images = images.to(dev, non_blocking=True)  # one copy of the whole batch, in its own dtype
    items = [
        x.to(dev, non_blocking=True) if isinstance(x, torch.Tensor) else x
        for x in as_image_list(images, name=name)
    ]
    return [x.to(dev, non_blocking=True) for x in load_batch(items, data_range=data_range, name=name)]


#: ``(support in kernel units, kernel, its derivative)`` of torch's antialiased resize filters: the cubic
#: with ``a = -0.5`` (PIL's; torch's antialiased bicubic uses it) and the triangle
_A = -0.5
_FILTERS: dict[str, tuple[float, Any, Any]] = {
    "bicubic": (
        2.0,
        lambda t: ((_A + 2) * t - (_A + 3)) * t * t + 1 if t < 1 else ((t - 5) * t + 8) * t * _A - 4 * _A,
        lambda t: (3 * (_A + 2) * t - 2 * (_A + 3)) * t if t < 1 else _A * ((3 * t - 10) * t + 8),
    ),
    "bilinear": (1.0, lambda t: 1 - t, lambda t: -1.0),
}


def resize_weights(n_in: int, n_out: int, mode: str = "bicubic") -> tuple[torch.Tensor, torch.Tensor]:
    """The antialiased 1-D resize ``n_in -> n_out`` (``align_corners=False``) as float64 matrices
    ``[n_out, n_in]``: its normalised weights, as torch computes them (centre ``scale (i + 0.5)``, the filter
    stretched by ``scale`` when shrinking), and their derivative with respect to the centre (what a rounding
    of the centre moves the result by, per unit).

    >>> w, dw = resize_weights(512, 224)
    >>> tuple(w.shape), bool(torch.allclose(w.sum(1), torch.ones(224, dtype=torch.float64)))
    ((224, 512), True)
    """
    support, k, dk = _FILTERS[mode]
    scale = n_in / n_out
    inv = 1.0 / scale if scale >= 1.0 else 1.0
    sup = support * scale if scale >= 1.0 else support
    w = torch.zeros(n_out, n_in, dtype=torch.float64)
    dw = torch.zeros(n_out, n_in, dtype=torch.float64)
    for i in range(n_out):
        c = scale * (i + 0.5)
        lo, hi = max(int(c - sup + 0.5), 0), min(int(c + sup + 0.5), n_in)
        t = [(j - c + 0.5) * inv for j in range(lo, hi)]
        kv = [k(abs(x)) if abs(x) < support else 0.0 for x in t]
        # d k(|t|)/dc = -inv * sign(t) * k'(|t|)
        dv = [-inv * (1.0 if x >= 0 else -1.0) * dk(abs(x)) if abs(x) < support else 0.0 for x in t]
        total, dtotal = sum(kv), sum(dv)
        for j, (a, b) in enumerate(zip(kv, dv)):
            w[i, lo + j] = a / total
            dw[i, lo + j] = b / total - a * dtotal / (total * total)
    return w, dw


def resize_taps(n_in: int, n_out: int, mode: str = "bicubic") -> tuple[int, float]:
    """``(taps, abs_sum)`` of the antialiased 1-D resize ``n_in -> n_out`` that :func:`clip_image_batch`
    runs: the most input samples one output sample reads, and the largest sum of the absolute values of
    its weights (above 1 where the bicubic kernel has negative lobes). Read off torch's own resize of each
    unit impulse, in float64.

    >>> taps, abs_sum = resize_taps(512, 224)  # ~2.3x down: the 4-tap cubic stretched 2.3 times
    >>> taps, round(abs_sum, 3)
    (10, 1.17)
    >>> resize_taps(5, 5)
    (1, 1.0)
    """
    if n_in == n_out:
        return 1, 1.0
    eye = torch.eye(n_in, dtype=torch.float64).view(1, n_in, 1, n_in)
    w = F.interpolate(eye, size=(1, n_out), mode=mode, antialias=True, align_corners=False)[0, :, 0, :]
    nz = (w != 0).sum(0)
    return int(nz.max()), float(w.abs().sum(0).max())


def _axis_error(n_in: int, n_out: int, mode: str) -> tuple[float, float]:
    """``(e, W)`` for one resize axis, in units of ``u``: ``e`` bounds the float32 error of one output
    sample of values in [0, 1], ``W`` is the weights' largest absolute sum (the gain applied to an error
    already in the input)."""
    if n_in == n_out:
        return 0.0, 1.0
    w, dw = resize_weights(n_in, n_out, mode)  # equal to torch's impulse response (resize_taps reads that)
    taps, abs_sum = int((w != 0).sum(1).max()), float(w.abs().sum(1).max())
    shift = float(dw.abs().sum(1).max())  # |d y / d centre| for values in [0, 1]
    # the centre scale (i + 0.5) is rounded twice at magnitude <= n_in (2 n_in u), the filter argument a
    # few times more at magnitude <= the support (folded into + 8); each weight's evaluation, the weight sum
    # and the division (3 roundings of a weight, relative), the products and the running sum (taps)
    return (2 * n_in + 8) * shift + (2 * taps + 6) * abs_sum, abs_sum


def device_difference_bound(in_hw: tuple[int, int], cfg: dict[str, Any]) -> float:
    """The largest difference between two correct float32 evaluations of :func:`clip_image_batch` for an
    image of ``in_hw`` (e.g. the CPU's and a GPU's), in normalised units, derived from float32 rounding.

    One evaluation resizes rows then columns (:func:`resize_weights`): an axis errs by at most
    ``e = u ((2 n_in + 8) D + (2 taps + 6) W)`` on values in [0, 1] (``u = 2^-24``; ``D`` the largest
    absolute sum of the weights' derivatives by the centre, which is rounded at magnitude ``n_in``; ``W`` the
    largest absolute sum of the weights), and the second axis carries the first one's error times its ``W``;
    clamping and cropping do not grow it; ``(y - m) / s`` divides it by ``s`` and adds two roundings of a
    value below ``(1 + m) / s``. Two evaluations differ by at most twice that. The conversion of uint8
    (``x / 255``, correctly rounded) is the same on every device.

    >>> from genmetrics.testing import tiny_clip
    >>> cfg = {**clip_preprocess_cfg(tiny_clip()[0]), "size": (224, 224)}  # ViT-B/32's input
    >>> f"{device_difference_bound((512, 512), cfg):.1e}"  # 0.11 of one 8-bit level (1/255/0.26 = 0.015)
    '1.6e-03'
    """
    u = 2.0**-24
    th, tw = cfg["size"]
    h, w = in_hw
    if cfg["resize_mode"] == "squash":
        nh, nw = th, tw
    else:
        scale = min(th / h, tw / w) if cfg["resize_mode"] == "longest" else max(th / h, tw / w)
        nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
        if cfg["resize_mode"] == "shortest":
            nh, nw = max(th, nh), max(tw, nw)
    mode = "bilinear" if cfg["interpolation"] == "bilinear" else "bicubic"
    e_h, sum_h = _axis_error(h, nh, mode)
    e_w, sum_w = _axis_error(w, nw, mode)
    resize_err = (max(e_h * sum_w, e_w * sum_h) + e_h + e_w) * u  # either pass order
    s_min = min(cfg["std"])
    largest = max((1.0 + m) / s for m, s in zip(cfg["mean"], cfg["std"]))
    return 2.0 * (resize_err / s_min + 2 * u * largest)


def clip_image_batch(
    images: Any,
    model: Any,
    *,
    data_range: float = 1.0,
    name: str = "images",
    device: Any = None,
    dtype: Any = None,
) -> torch.Tensor:
    """Images in any form of the image contract -> the model's input tensor ``[B,3,h,w]`` (float32).

    Resizes with the model's preprocessing config (``shortest``: shorter side to the input size then
    centre crop, like open_clip's ``preprocess``; ``longest``: fit inside and pad; ``squash``: resize
    without keeping the aspect ratio), then normalises with the model's mean/std (OpenAI's when the
    model carries none). Each image is resized on its own, so a row does not depend on the rest of the
    batch. Tensor images are moved to ``device`` (default: the model's device) as they came (uint8 stays
    uint8) and preprocessed there; the result has ``dtype`` (default: the dtype of the model's
    floating-point weights, so bf16/fp16 models get matching input). On a GPU a batch of device tensors
    is preprocessed without a host synchronisation; the result differs from the CPU's by at most
    :func:`device_difference_bound` (float32 rounding of the resize kernels).

    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> x = clip_image_batch([random_images(1, 48)[0], random_images(1, 64, height=40)[0]], model)
    >>> tuple(x.shape), x.dtype  # both at the model's 32 px input
    ((2, 3, 32, 32), torch.float32)
    """
    cfg = clip_preprocess_cfg(model)
    mode = "bilinear" if cfg["interpolation"] == "bilinear" else "bicubic"
    dev = torch.device(device) if device is not None else model_device(model)
    loaded = load_on_device(images, dev, data_range=data_range, name=name)
    batch = torch.stack([_fit(x, cfg, mode) for x in loaded], 0)
    mean, std = normalisation(cfg["mean"], cfg["std"], dev)
    batch = (batch - mean) / std
    if dtype is None:
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    return batch.to(dtype=dtype)
