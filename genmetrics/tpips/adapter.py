"""TPIPS adapter folders, read and written without knowing the model classes (so the models can load
themselves and :func:`~genmetrics.tpips.loading.load_tpips` can pick one, with no import loop):

``tpips.json`` (format, variant, resize policy, prompts, variant options, base weights), the peft adapter
(``adapter_config.json`` + ``adapter_model.safetensors``) and ``tpips_head.safetensors`` (the register vector,
the mid-fusion MLPs or the triplet head)."""

from __future__ import annotations

import json
import os
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from genmetrics.backbones.hf import load_peft_adapter, load_vlm, quiet_peft, unavailable_error
from genmetrics.backbones.qwen_vl import resolve_folder
from genmetrics.backbones.weights import load_state_dict
from genmetrics.data.output.atomic import atomic_output, atomic_write_text
from genmetrics.data.output.write_rule import make_folder
from genmetrics.errors import InputError, WeightsUnavailableError
from genmetrics.tpips.common import CONFIG_NAME, DEFAULT_WEIGHTS, FORMAT, HEAD_NAME, TRIPLET_WEIGHTS, VARIANTS
from genmetrics.tpips.hints import ADAPTER_HINT

__all__ = [
    "adapter_backbone",
    "adapter_folder",
    "finish_loading",
    "open_adapter",
    "read_adapter_config",
    "read_head_file",
    "recorded_weights",
    "resize_options",
    "save_peft",
    "weights_record",
    "write_adapter",
]

_PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl")


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


def write_adapter(
    path: str | os.PathLike, backbone: Any, head: dict[str, torch.Tensor], config: dict[str, Any]
) -> Path:
    """Write an adapter folder: the peft adapter (if any), ``tpips_head.safetensors`` and ``tpips.json``.

    >>> import tempfile
    >>> from genmetrics.testing import tiny_qwen3vl
    >>> with tempfile.TemporaryDirectory() as d:
    ...     out = write_adapter(d, tiny_qwen3vl(), {}, {"format": FORMAT, "variant": "late"})
    ...     sorted(p.name for p in out.iterdir()), read_adapter_config(out)["variant"]
    (['tpips.json', 'tpips_head.safetensors'], 'late')
    """
    out = make_folder(path)  # the write rule (genmetrics/data/output/)
    save_peft(backbone, out)
    with atomic_output(out / HEAD_NAME, root=out) as tmp:
        save_file(head or {"_empty": torch.zeros(1)}, str(tmp))
    config = {**config, **weights_record(config.get("base_weights"), out)}
    atomic_write_text(
        out / CONFIG_NAME, json.dumps(config, indent=2), root=out
    )  # last: the folder is complete
    return out


def weights_record(base_weights: str | None, folder: Path) -> dict[str, Any]:
    """How ``tpips.json`` records the base weights: a local folder as its absolute path and, so a run folder
    moved together with its weights still works, its path relative to the adapter ``folder``; a hub id as is.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     (Path(d) / "weights").mkdir()
    ...     rec = weights_record(str(Path(d) / "weights"), Path(d) / "run" / "final")
    >>> Path(rec["base_weights"]).is_absolute(), rec["base_weights_relative"]
    (True, '../../weights')
    >>> weights_record("Qwen/Qwen3-VL-Embedding-2B", Path("run"))
    {'base_weights': 'Qwen/Qwen3-VL-Embedding-2B'}
    """
    if not base_weights:
        return {"base_weights": base_weights}
    local = Path(base_weights).expanduser()
    if not local.exists():
        return {"base_weights": base_weights}
    absolute = local.resolve()
    return {
        "base_weights": str(absolute),
        "base_weights_relative": os.path.relpath(absolute, folder.resolve()),
    }


def recorded_weights(config: dict[str, Any], folder: Path) -> tuple[str | None, list[str]]:
    """The base weights an adapter records, found from any working folder: ``(weights, places looked)``. A
    recorded path is tried as absolute, relative to the adapter folder and (older adapters) relative to the
    working folder; a hub id comes back as is. A recorded local folder found nowhere raises
    ``WeightsUnavailableError`` naming every place looked and the fix.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:  # doctest: +ELLIPSIS
    ...     recorded_weights({"base_weights": "/gone/weights", "base_weights_relative": "../weights"}, Path(d))
    Traceback (most recent call last):
        ...
    genmetrics.errors.WeightsUnavailableError: weights '/gone/weights' are not available. Looked in: /gone/weights, .../weights (relative to the adapter). ...
    """
    recorded = config.get("base_weights")
    if not recorded:
        return None, []
    p = Path(recorded).expanduser()
    candidates: list[tuple[Path, str]] = []
    if p.is_absolute():
        candidates.append((p, ""))
    else:
        candidates.append((folder / p, " (relative to the adapter)"))
        candidates.append((Path.cwd() / p, " (relative to the working folder)"))
    if config.get("base_weights_relative"):
        candidates.append(
            ((folder / config["base_weights_relative"]).resolve(), " (relative to the adapter)")
        )
    for c, _ in candidates:
        if c.exists():
            return str(c), []
    looked = [f"{c}{how}" for c, how in candidates]
    if p.is_absolute() or config.get("base_weights_relative"):
        raise unavailable_error(
            recorded,
            looked,
            hint=f"{folder / CONFIG_NAME} records these base weights as a local folder. Fix: pass weights= "
            "(--weights) with the folder (or hub id) of the weights the adapter was trained on.",
        )
    return recorded, looked  # a hub id (or an older adapter's relative path): load_vlm looks in the caches


def adapter_folder(path_or_id: str | os.PathLike) -> Path:
    """A local adapter folder (absolute path), or a hub id downloaded (snapshot) under the genmetrics cache.

    >>> adapter_folder("/no/such/adapter")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.WeightsUnavailableError: weights '/no/such/adapter' are not available. ... No such TPIPS adapter folder. ...
    """
    return resolve_folder(path_or_id, CONFIG_NAME, what="TPIPS adapter", hint=ADAPTER_HINT)


def read_adapter_config(folder: Path) -> dict[str, Any]:
    """``folder/tpips.json``, checked: JSON, the format, a known variant.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:  # doctest: +ELLIPSIS
    ...     _ = (Path(d) / CONFIG_NAME).write_text('{"format": "other"}')
    ...     read_adapter_config(Path(d))
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: .../tpips.json: unknown format 'other'; expected 'genmetrics.tpips/1' ...
    """
    path = folder / CONFIG_NAME
    try:
        cfg = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, OSError) as e:
        raise InputError(f"{path}: not a readable JSON file ({e}); restore the adapter folder") from None
    if not isinstance(cfg, dict) or cfg.get("format") != FORMAT:
        got = cfg.get("format") if isinstance(cfg, dict) else type(cfg).__name__
        raise InputError(
            f"{path}: unknown format {got!r}; expected {FORMAT!r} (a folder written by `genmetrics train "
            "tpips` or save_pretrained)"
        )
    if cfg.get("variant") not in VARIANTS + ("triplet",):
        raise InputError(f"{path}: variant {cfg.get('variant')!r}; expected late, mid, early or triplet")
    return cfg


def resize_options(config: dict[str, Any], image_size: int | None, resize: str | None) -> dict[str, Any]:
    """``image_size`` / ``resize`` for a model: the caller's, else the adapter's recorded policy; adapters
    saved before the smart policy (an ``image_size``, no ``"resize"``) keep their square policy.

    >>> resize_options({"image_size": 64}, None, None), resize_options({"resize": "smart"}, None, None)
    ({'image_size': 64, 'resize': 'square'}, {'image_size': None, 'resize': 'smart'})
    """
    size = image_size or config.get("image_size")
    mode = resize or (None if image_size else config.get("resize")) or ("square" if size else None)
    return {"image_size": size if mode == "square" else None, "resize": mode}


def adapter_backbone(
    folder: Path | None,
    config: dict[str, Any],
    *,
    variant: str,
    backbone: nn.Module | None,
    processor: Any,
    weights: str | None,
    dtype: Any,
    device: Any,
) -> tuple[Any, Any]:
    """The backbone and processor for a model of ``variant``: the caller's (``backbone`` + ``processor``), or
    ``weights`` / the adapter's base weights / the default loaded with :func:`~genmetrics.backbones.hf.load_vlm`;
    with the folder's peft adapter applied when it has one.

    >>> from genmetrics.testing import tiny_qwen3vl
    >>> adapter_backbone(None, {}, variant="late", backbone=tiny_qwen3vl(), processor=None, weights=None,
    ...                  dtype=None, device=None)
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: processor: pass the backbone's processor together with backbone=
    """
    if backbone is None:
        recorded, looked = (None, []) if weights or folder is None else recorded_weights(config, folder)
        w = weights or recorded or (TRIPLET_WEIGHTS if variant == "triplet" else DEFAULT_WEIGHTS)
        try:
            backbone, loaded = load_vlm(w, dtype=dtype, device=device, for_generation=variant == "triplet")
        except WeightsUnavailableError as e:
            if not looked:
                raise
            raise WeightsUnavailableError(
                f"{e} (The adapter {folder} records base weights {w!r}; as a local folder they are not at "
                f"{', '.join(looked)}.)"
            ) from None
        processor = processor or loaded
    elif processor is None:
        raise InputError("processor: pass the backbone's processor together with backbone=")
    if folder is not None and (folder / "adapter_config.json").is_file():
        with quiet_peft():
            backbone = load_peft_adapter(backbone, folder, is_trainable=False)
    return backbone, processor


def read_head_file(folder: Path) -> dict[str, torch.Tensor] | None:
    """The tensors of ``folder/tpips_head.safetensors`` (None when the folder has none).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     save_file({"register": torch.ones(2)}, f"{d}/{HEAD_NAME}")
    ...     sorted(read_head_file(Path(d))), read_head_file(Path(d) / "missing")
    (['register'], None)
    """
    path = folder / HEAD_NAME
    if not path.is_file():
        pickled = [
            folder / f"tpips_head{x}" for x in _PICKLE_SUFFIXES if (folder / f"tpips_head{x}").is_file()
        ]
        if pickled:
            raise InputError(
                f"{pickled[0]} is a pickle file; genmetrics reads TPIPS heads only from safetensors ({HEAD_NAME}) "
                "and never unpickles a file: re-save the adapter with save_pretrained"
            )
        return None
    try:
        return load_state_dict(path)
    except WeightsUnavailableError as e:  # not a safetensors file (e.g. a pickle renamed): never unpickled
        raise InputError(str(e)) from None


def open_adapter(
    path: str | os.PathLike,
    accepts: Sequence[str],
    hint: str,
    *,
    backbone: nn.Module | None,
    processor: Any,
    weights: str | None,
    dtype: Any,
    device: Any,
) -> tuple[Path, dict[str, Any], Any, Any]:
    """``(folder, config, backbone, processor)`` of an adapter whose variant is one of ``accepts`` (else an
    ``InputError`` ending in ``hint``, before any weights load); the backbone as :func:`adapter_backbone`.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:  # doctest: +ELLIPSIS
    ...     _ = write_adapter(d, None, {}, {"format": FORMAT, "variant": "triplet"})
    ...     open_adapter(d, ("late",), "load it with load_tpips", backbone=None, processor=None, weights=None,
    ...                  dtype=None, device=None)
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: ... holds a triplet TPIPS model; load it with load_tpips
    """
    folder = adapter_folder(path)
    cfg = read_adapter_config(folder)
    if cfg["variant"] not in accepts:
        raise InputError(f"{path!s} holds a {cfg['variant']} TPIPS model; {hint}")
    backbone, processor = adapter_backbone(
        folder,
        cfg,
        variant=cfg["variant"],
        backbone=backbone,
        processor=processor,
        weights=weights,
        dtype=dtype,
        device=device,
    )
    return folder, cfg, backbone, processor


def finish_loading(model: Any, folder: Path, device: Any) -> Any:
    """Load the folder's head tensors into ``model`` (checked by its ``load_head_state_dict``), move it to
    ``device`` and return it in eval mode.

    >>> import tempfile
    >>> from genmetrics.testing import tiny_tpips
    >>> model = tiny_tpips("early").train()
    >>> with tempfile.TemporaryDirectory() as d:
    ...     folder = model.save_pretrained(d)
    ...     finish_loading(model, folder, None).training
    False
    """
    head = read_head_file(folder)
    if head is None and model.head_state_dict():
        raise InputError(
            f"{folder}: no {HEAD_NAME}, but a {model.variant} TPIPS model keeps trained tensors there "
            f"({', '.join(sorted(model.head_state_dict())[:3])}); restore the file or the whole adapter folder"
        )
    if head is not None:
        model.load_head_state_dict(head, source=str(folder / HEAD_NAME))
    if device is not None:
        model.to(device)
    return model.eval()


def adapter_base_weights(adapter: str | os.PathLike | None) -> str | None:
    """The base weights an adapter folder's ``tpips.json`` names (``None`` without an adapter, without the
    file, or when it cannot be read): for labels and records only, loading checks the file itself.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / CONFIG_NAME).write_text('{"base_weights": "Qwen/Qwen3-VL-Embedding-2B"}')
    ...     adapter_base_weights(d), adapter_base_weights(Path(d) / "missing"), adapter_base_weights(None)
    ('Qwen/Qwen3-VL-Embedding-2B', None, None)
    """
    if not adapter:
        return None
    p = Path(adapter) / CONFIG_NAME
    if p.is_file():
        try:
            return json.loads(p.read_text()).get("base_weights")
        except (ValueError, OSError):
            return None
    return None
