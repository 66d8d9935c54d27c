"""Saving and loading TPIPS adapters: ``tpips.json`` (variant, resize policy, prompts, base weights), the peft
adapter and ``tpips_head.safetensors`` (register vector, mid-fusion MLPs, triplet head)."""

from __future__ import annotations

import json
import os
import warnings
from pathlib import Path
from typing import Any

from torch import nn

from genmetrics.data.results import atomic_output
from genmetrics.errors import InputError
from genmetrics.tpips.common import CONFIG_NAME, DEFAULT_WEIGHTS, FORMAT, HEAD_NAME, TRIPLET_WEIGHTS, VARIANTS

__all__ = ["adapter_folder", "load_tpips", "save_peft"]

ADAPTER_HINT = (
    "Fix: pass the folder written by `genmetrics train tpips` (OUT/adapter) or TPIPSModel.save_pretrained "
    "(adapter=... / --adapter), or a hub id of a published TPIPS adapter."
)


def save_peft(backbone: Any, out: Path) -> None:
    """Write ``backbone``'s peft adapter into the folder ``out`` (nothing for a backbone without one).

    >>> import tempfile
    >>> from genmetrics.backbones.hf import add_lora
    >>> from genmetrics.testing import tiny_qwen3vl
    >>> with tempfile.TemporaryDirectory() as d:
    ...     save_peft(add_lora(tiny_qwen3vl(), r=4), Path(d))
    ...     save_peft(tiny_qwen3vl(), Path(d) / "none")
    ...     sorted(p.name for p in Path(d).iterdir())
    ['README.md', 'adapter_config.json', 'adapter_model.safetensors']
    """
    if hasattr(
        backbone, "peft_config"
    ):  # peft writes a fresh folder; its files then move in (the write rule)
        with warnings.catch_warnings(), atomic_output(out, directory=True, merge=True) as tmp:
            warnings.simplefilter("ignore", FutureWarning)
            backbone.save_pretrained(str(tmp))


def adapter_folder(path_or_id: str | os.PathLike) -> Path:
    """A local adapter folder (absolute path), or a hub id downloaded (snapshot) under the genmetrics cache.

    >>> adapter_folder("/no/such/adapter")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.WeightsUnavailableError: weights '/no/such/adapter' are not available. ... No such TPIPS adapter folder. ...
    """
    from genmetrics.backbones.qwen_vl import resolve_folder

    return resolve_folder(path_or_id, CONFIG_NAME, what="TPIPS adapter", hint=ADAPTER_HINT)


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

    A zero-shot mid-fusion model on the tiny Qwen3-VL, saved and loaded back (``load_tpips("OUT/adapter")``
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
    from genmetrics.backbones.hf import load_peft_adapter, load_vlm
    from genmetrics.tpips.model import TPIPSModel
    from genmetrics.tpips.triplet import TPIPSTripletModel

    cfg: dict[str, Any] = {}
    folder = None
    if adapter is not None:
        folder = adapter_folder(adapter)
        cfg = json.loads((folder / CONFIG_NAME).read_text())
        if cfg.get("format") != FORMAT:
            raise InputError(
                f"{folder / CONFIG_NAME}: unknown format {cfg.get('format')!r}; expected {FORMAT!r}"
            )
        if variant is not None and variant != cfg["variant"]:
            raise InputError(
                f"variant={variant!r} but the adapter at {adapter!s} was trained as {cfg['variant']!r}"
            )
    v = variant or cfg.get("variant") or "late"
    if v not in VARIANTS + ("triplet",):
        raise InputError(f"variant={v!r}: expected late, mid, early or triplet")
    if backbone is None:
        w = weights or cfg.get("base_weights") or (TRIPLET_WEIGHTS if v == "triplet" else DEFAULT_WEIGHTS)
        backbone, loaded_proc = load_vlm(w, dtype=dtype, device=device, for_generation=(v == "triplet"))
        processor = processor or loaded_proc
    elif processor is None:
        raise InputError("processor: pass the backbone's processor together with backbone=")
    if folder is not None and (folder / "adapter_config.json").is_file():
        with (
            warnings.catch_warnings()
        ):  # peft calls a deprecated transformers alias (is_gradient_checkpointing)
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            backbone = load_peft_adapter(backbone, folder, is_trainable=False)
    size = image_size or cfg.get("image_size")
    mode = resize or (None if image_size else cfg.get("resize")) or ("square" if size else None)
    if v == "triplet":
        model: Any = TPIPSTripletModel(
            backbone,
            processor,
            image_size=size,
            prompts=tuple(cfg["prompts"]) if cfg.get("prompts") else None,
            **{k: kwargs[k] for k in ("vision_cache_size", "batch_size", "data_range") if k in kwargs},
        )
    else:
        extra = dict(kwargs)
        if cfg:
            extra.setdefault("temperature", cfg.get("temperature"))
            if cfg.get("prompts"):
                extra.setdefault("prompts", tuple(cfg["prompts"]))
            if cfg.get("probe_layers"):
                extra.setdefault("probe_layers", cfg["probe_layers"])
            if cfg.get("mid_hidden"):
                extra.setdefault("mid_hidden", cfg["mid_hidden"])
            if v == "mid":  # adapters saved before the option had no input norm
                extra.setdefault("mid_text_norm", cfg.get("mid_text_norm", "none"))
        model = TPIPSModel(
            backbone, processor, v, image_size=size if mode == "square" else None, resize=mode, **extra
        )
    if folder is not None and (folder / HEAD_NAME).is_file():
        from genmetrics.backbones.weights import load_state_dict

        model.load_head_state_dict(load_state_dict(folder / HEAD_NAME))
    if device is not None:
        model.to(device)
    return model.eval()
