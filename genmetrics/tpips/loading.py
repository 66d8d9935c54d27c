"""Building a TPIPS model of any variant: a trained adapter folder (its ``tpips.json`` names the variant, and
the model class loads itself: :meth:`TPIPSModel.from_pretrained <genmetrics.tpips.model.TPIPSModel.from_pretrained>`,
:meth:`TPIPSTripletModel.from_pretrained <genmetrics.tpips.triplet.TPIPSTripletModel.from_pretrained>`), or a
zero-shot model on base weights. The folder format is in :mod:`genmetrics.tpips.adapter`."""

from __future__ import annotations

import os
from typing import Any

from torch import nn

from genmetrics.errors import InputError
from genmetrics.tpips.adapter import (
    adapter_backbone,
    adapter_folder,
    read_adapter_config,
    resize_options,
    save_peft,
)
from genmetrics.tpips.common import VARIANTS
from genmetrics.tpips.model import TPIPSModel
from genmetrics.tpips.triplet import TPIPSTripletModel

__all__ = ["adapter_folder", "load_tpips", "save_peft"]

#: options the triplet head takes from ``load_tpips(**kwargs)``
_TRIPLET_OPTIONS = ("vision_cache_size", "batch_size", "data_range", "image_modes")


def load_tpips(
    adapter: str | os.PathLike | None = None,
    *,
    backbone: nn.Module | None = None,
    processor: Any = None,
    weights: str | None = None,
    variant: str | None = None,
    device: Any = None,
    dtype: Any = None,
    image_size: int | None = None,
    resize: str | None = None,
    **kwargs: Any,
) -> Any:
    """Build a TPIPS model.

    * ``adapter`` (a folder written by training / ``save_pretrained``, or a hub id): its ``tpips.json``
      gives the variant, image size, prompts and base weights; the peft adapter is applied to the backbone
      and the head parameters are loaded.
    * without ``adapter``: the zero-shot model of ``variant`` (default ``"late"``) on ``weights``.
    * ``backbone``/``processor`` given: used as is (no download); otherwise ``weights`` (or the adapter's
      base weights, or ``Qwen/Qwen3-VL-Embedding-2B``) are loaded with
      :func:`genmetrics.backbones.hf.load_vlm` (raises ``WeightsUnavailableError`` when offline and absent).

    A zero-shot mid-fusion model on the tiny Qwen3-VL, saved and loaded back (``load_tpips("OUT/final")``
    does the same on the real base weights):

    >>> import tempfile, torch
    >>> from genmetrics.testing import random_images, tiny_qwen3vl, tiny_qwen3vl_processor
    >>> proc = tiny_qwen3vl_processor()
    >>> model = load_tpips(backbone=tiny_qwen3vl(), processor=proc, variant="mid", image_size=64)
    >>> a, b = random_images(2, 64, seed=1), random_images(2, 64, seed=2)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     folder = model.save_pretrained(d)
    ...     again = load_tpips(folder, backbone=tiny_qwen3vl(), processor=proc)
    >>> again.variant, torch.allclose(again.similarity(a, b, ["color"] * 2), model.similarity(a, b, ["color"] * 2))
    ('mid', True)
    """
    if adapter is not None:
        folder = adapter_folder(adapter)
        cfg = read_adapter_config(folder)
        if variant is not None and variant != cfg["variant"]:
            raise InputError(
                f"variant={variant!r} but the adapter at {adapter!s} was trained as {cfg['variant']!r}"
            )
        common = dict(
            backbone=backbone,
            processor=processor,
            weights=weights,
            device=device,
            dtype=dtype,
            image_size=image_size,
            resize=resize,
        )
        if cfg["variant"] == "triplet":
            extra = {k: kwargs[k] for k in _TRIPLET_OPTIONS if k in kwargs}
            return TPIPSTripletModel.from_pretrained(folder, **common, **extra)
        return TPIPSModel.from_pretrained(folder, **common, **kwargs)
    v = variant or "late"
    if v not in VARIANTS + ("triplet",):
        raise InputError(f"variant={v!r}: expected late, mid, early or triplet")
    backbone, processor = adapter_backbone(
        None,
        {},
        variant=v,
        backbone=backbone,
        processor=processor,
        weights=weights,
        dtype=dtype,
        device=device,
    )
    model: Any
    if v == "triplet":
        extra = {k: kwargs[k] for k in _TRIPLET_OPTIONS if k in kwargs}
        model = TPIPSTripletModel(backbone, processor, image_size=image_size, **extra)
    else:
        model = TPIPSModel(backbone, processor, v, **resize_options({}, image_size, resize), **kwargs)
    if device is not None:
        model.to(device)
    return model.eval()
