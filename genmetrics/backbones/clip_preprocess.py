"""open_clip image preprocessing on tensors: any image of the image contract -> the model's input batch.

Resizing follows the model's own ``preprocess_cfg`` (open_clip's ``preprocess`` does the same on PIL
images); normalisation uses its mean/std. Images come through :func:`genmetrics.data.images.load_batch`
(every PIL mode, file, uint8 or float tensor), one at a time, so each row of a batch is the image alone.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from genmetrics.data.images import load_batch

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
    batch. The tensor lands on ``device`` (default: the model's device) as ``dtype`` (default: the dtype
    of the model's floating-point weights, so bf16/fp16 models get matching input).

    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> x = clip_image_batch([random_images(1, 48)[0], random_images(1, 64, height=40)[0]], model)
    >>> tuple(x.shape), x.dtype  # both at the model's 32 px input
    ((2, 3, 32, 32), torch.float32)
    """
    cfg = clip_preprocess_cfg(model)
    mode = "bilinear" if cfg["interpolation"] == "bilinear" else "bicubic"
    batch = torch.stack([_fit(x, cfg, mode) for x in load_batch(images, data_range=data_range, name=name)], 0)
    mean = torch.tensor(cfg["mean"], dtype=batch.dtype).view(1, 3, 1, 1)
    std = torch.tensor(cfg["std"], dtype=batch.dtype).view(1, 3, 1, 1)
    batch = (batch - mean) / std
    if dtype is None:
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    return batch.to(device=device if device is not None else model_device(model), dtype=dtype)
