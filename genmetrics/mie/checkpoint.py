"""MIE checkpoints: genmetrics' own format and the authors' layout, loaded safely and exactly.

genmetrics' format (written by :meth:`MIEModel.save_pretrained`)::

    mie_config.json            {"format": "genmetrics-mie", "version": 2, "mode", "unfreeze_layers", "lora", ...}
    mie_weights.safetensors    score_head.*, classification_head.*, backbone.<name> (trained layers),
                               lora.<name> (LoRA A/B of lora_layer)

The authors' layout (``MIE_Inference/README.md``; ``lens_*`` are their pre-rename names)::

    mie_config.json | lens_config.json     {"base_model_name", "mode", "num_error_classes", "unfreeze_layers"}
    mie_heads.pt | lens_heads.pt           {"score_head": state_dict, "classification_head": state_dict}
    lora_adapter/                          peft adapter (modes lora, lora_layer)
    trainable_backbone.pt                  {param name: tensor} (modes layer_only, partial, lora_layer, full)

``.pt`` files are read with ``torch.load(weights_only=True)`` only. Parameter names are matched after
:func:`~genmetrics.mie.common.canonical_name` (peft and ``*ForConditionalGeneration`` prefixes removed),
every tensor of a file must apply to a parameter of the same shape, and the trained layers and LoRA
layers the mode implies must all be present: anything else is one :class:`WeightsUnavailableError`
listing what did not apply (a partial ``strict=False`` load that silently applies nothing is the
classic failure this prevents). :attr:`MIEModel.load_report` counts what was applied.
"""

from __future__ import annotations

import json
import logging
import os
import re
from pathlib import Path
from typing import Any

import torch
from huggingface_hub import snapshot_download
from peft import LoraConfig
from safetensors.torch import save_file

from genmetrics.backbones.hf import hf_cache_dir
from genmetrics.backbones.hub import hub_calls
from genmetrics.backbones.weights import load_state_dict, offline
from genmetrics.data.output.atomic import atomic_output, atomic_write_json
from genmetrics.data.output.write_rule import make_folder
from genmetrics.errors import InputError, WeightsUnavailableError
from genmetrics.mie.common import LORA_TARGETS, PROMPT_TEMPLATE, build_backbone, canonical_name
from genmetrics.mie.hints import (
    CONFIG_NAMES,
    TRAIN_HINT,
    heads_unavailable,
    is_hub_id,
    local_heads,
    no_such_heads,
)
from genmetrics.mie.hints import pick_file as _pick

log = logging.getLogger(__name__)

FORMAT_VERSION = 2
HEADS_NAMES = ("mie_heads.pt", "lens_heads.pt")
WEIGHTS_NAME = "mie_weights.safetensors"
ADAPTER_DIR = "lora_adapter"
BACKBONE_NAME = "trainable_backbone.pt"
#: the authors' mode names -> (tuning, uses LoRA, uses trainable_backbone.pt)
AUTHOR_MODES = {
    "head_only": (None, False, False),
    "layer_only": ("layer_only", False, True),
    "partial": ("layer_only", False, True),
    "lora_layer": ("lora_layer", True, True),
    "lora": ("lora_layer", True, False),
}


def resolve_heads(path_or_id: str | os.PathLike) -> Path:
    """A checkpoint folder (holding ``mie_config.json`` or ``lens_config.json``), the ``--out`` folder of
    ``genmetrics train mie`` (its ``best/`` checkpoint, else ``final/``: what ``train_mie`` returns as
    ``result["checkpoint"]``) or a hub id -> the checkpoint folder.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "mie_config.json").write_text("{}")
    ...     resolve_heads(d) == Path(d)
    True
    >>> with tempfile.TemporaryDirectory() as run:  # a training run's folder: its best checkpoint
    ...     for sub in ("best", "final"):
    ...         (Path(run) / sub).mkdir()
    ...         _ = (Path(run) / sub / "mie_config.json").write_text("{}")
    ...     resolve_heads(run).name
    'best'
    """
    s = os.fspath(path_or_id)
    local = local_heads(s)  # an existing path: its checkpoint folder, or the error naming what it lacks
    if local is not None:
        if local != Path(s).expanduser():
            log.info("MIE heads %s: a training run's folder; using its %s/ checkpoint", s, local.name)
        return local
    if not is_hub_id(s):
        raise no_such_heads(s)
    why: str | None = None
    try:
        with hub_calls(offline=offline()) as why:
            return Path(snapshot_download(s, cache_dir=str(hf_cache_dir()), local_files_only=offline()))
    except Exception as e:  # noqa: BLE001 - any hub failure becomes one clear error
        raise heads_unavailable(s, [str(hf_cache_dir()), "the Hugging Face Hub"], e, why=why) from None


def read_config(folder: Path) -> tuple[dict[str, Any], str]:
    """``(config, layout)`` with layout ``"genmetrics"`` or ``"authors"``.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "mie_config.json").write_text('{"format": "genmetrics-mie", "version": 2}')
    ...     read_config(Path(d))
    ({'format': 'genmetrics-mie', 'version': 2}, 'genmetrics')
    """
    p = _pick(folder, CONFIG_NAMES)
    if p is None:
        raise WeightsUnavailableError(
            f"MIE checkpoint {str(folder)!r} holds neither of {CONFIG_NAMES}. {TRAIN_HINT}"
        )
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except OSError as e:  # the file system's problem (exit 1), not the file's content
        raise WeightsUnavailableError(f"MIE checkpoint {str(folder)!r}: cannot read {p.name} ({e})") from None
    except json.JSONDecodeError as e:
        raise InputError(f"MIE checkpoint {str(folder)!r}: {p.name} is not valid JSON ({e})") from None
    if cfg.get("format") == "genmetrics-mie":
        if int(cfg.get("version", 0)) != FORMAT_VERSION:
            raise InputError(
                f"{str(p)!r} is a genmetrics MIE checkpoint of version {cfg.get('version')}; this genmetrics reads version "
                f"{FORMAT_VERSION} (version 1 used a different architecture, not the paper's): retrain it"
            )
        return cfg, "genmetrics"
    if "mode" not in cfg:
        raise InputError(f"{str(p)!r} is neither a genmetrics MIE config nor the authors' (no 'mode')")
    if cfg["mode"] not in AUTHOR_MODES:
        raise InputError(
            f"{str(p)!r}: mode {cfg['mode']!r} is not supported; expected one of {sorted(AUTHOR_MODES)}"
        )
    return cfg, "authors"


def _torch_load(path: Path, safe: str) -> Any:
    """``torch.load(weights_only=True)``; a pickle that needs code (or a file that is not a tensor file) is
    refused naming the file and the safe format ``safe`` to write instead (never torch's advice to turn
    ``weights_only`` off)."""
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - pickles with code, corrupt files: one clear error
        found = re.search(r"GLOBAL ([\w.]+)", str(e))
        why = f"it pickles the object {found.group(1)}, which would run code" if found else type(e).__name__
        raise InputError(
            f"MIE checkpoint file {str(path)!r} is refused: only plain tensors load (torch.load with "
            f"weights_only=True), and {why}. Write it as {safe}"
        ) from None


def _check_tensors(tensors: Any, what: str) -> dict[str, torch.Tensor]:
    """Every value a tensor with finite values, or one error naming the file and the tensor."""
    if not isinstance(tensors, dict):
        raise InputError(f"{what}: expected a dict of tensors, got {type(tensors).__name__}")
    for k, v in tensors.items():
        if not isinstance(v, torch.Tensor):
            raise InputError(f"{what}: entry {k!r} is a {type(v).__name__}, not a tensor")
        if v.is_floating_point() and not bool(torch.isfinite(v).all()):
            bad = int((~torch.isfinite(v)).sum())
            raise InputError(
                f"{what}: tensor {k!r} holds {bad} NaN or infinite value(s); the checkpoint is damaged or "
                "tampered with: retrain or restore it"
            )
    return tensors


# ---------------------------------------------------------------------- applying tensors
def _apply(
    model: Any, tensors: dict[str, torch.Tensor], what: str, *, expected: set[str] | None = None
) -> int:
    """Copy ``tensors`` (any naming, see ``canonical_name``) into the backbone; every one must apply (a
    parameter of that name and shape, finite values) and, when given, every canonical name in ``expected``
    must be covered; nothing is copied unless all do. Returns the count applied."""
    _check_tensors(tensors, f"MIE checkpoint {what}")
    params = {canonical_name(n): p for n, p in model.vlm.named_parameters()}
    todo, unmatched, bad_shape = {}, [], []
    for k, v in tensors.items():
        c = canonical_name(k)
        p = params.get(c)
        if p is None:
            unmatched.append(k)
        elif tuple(p.shape) != tuple(v.shape):
            bad_shape.append(f"{k} {tuple(v.shape)} vs {tuple(p.shape)}")
        else:
            todo[c] = (p, v)
    missing = sorted((expected or set()) - set(todo))
    if unmatched or bad_shape or missing or not tensors:
        raise InputError(
            f"MIE checkpoint {what}: {len(todo)} of {len(tensors)} tensors apply; refusing a partial load "
            f"(no parameter named like {unmatched[:3]}; shape mismatches {bad_shape[:3]}; not in the file but trained "
            f"in this mode {missing[:3]}). Is it for another backbone, mode or unfreeze_layers?"
        )
    with torch.no_grad():
        for p, v in todo.values():
            p.copy_(v.to(p.device, p.dtype))
    return len(todo)


_HEADS = ("score_head", "classification_head")
_OWN_PREFIXES = ("score_head.", "classification_head.", "backbone.", "lora.")
_SAFE_PT = "torch.save of a dict of tensors only (as the authors' save_pretrained writes it)"


def _load_heads(model: Any, heads: Any, what: str) -> int:
    """Both heads, strictly: exactly their tensors (no missing, no extra, same shapes, finite values)."""
    if not isinstance(heads, dict):
        raise InputError(
            f"MIE checkpoint {what}: expected a dict of head state dicts, got {type(heads).__name__}"
        )
    extra = sorted(str(k) for k in heads if k not in _HEADS)
    if extra:
        raise InputError(
            f"MIE checkpoint {what}: unexpected entries {extra[:5]} besides {list(_HEADS)}; refusing a file "
            "that holds more than the heads"
        )
    loaded = {}
    h = model.hidden_size
    for name in _HEADS:
        sd = heads.get(name)
        if not isinstance(sd, dict):
            raise InputError(
                f"MIE checkpoint {what}: no {name!r} state dict (keys: {sorted(map(str, heads))[:5]})"
            )
        _check_tensors(sd, f"MIE checkpoint {what} ({name})")
        want = {k: tuple(v.shape) for k, v in getattr(model, name).state_dict().items()}
        missing = sorted(set(want) - set(sd))
        unexpected = sorted(set(sd) - set(want))
        shapes = [
            f"{k} {tuple(sd[k].shape)} vs {want[k]}"
            for k in want
            if k in sd and tuple(sd[k].shape) != want[k]
        ]
        if missing or unexpected or shapes:
            raise InputError(
                f"MIE checkpoint {what}: {name} does not load into this model's Linear({h}, {h // 2}) -> GELU "
                f"-> Linear({h // 2}, n) head: missing tensors {missing[:4]}, unexpected {unexpected[:4]}, "
                f"shape mismatches {shapes[:2]}; is it for another backbone?"
            )
        loaded[name] = sd
    for name, sd in loaded.items():
        getattr(model, name).load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
    return sum(len(sd) for sd in loaded.values())


def _adapter(folder: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    d = folder / ADAPTER_DIR
    conf_p = d / "adapter_config.json"
    if not conf_p.is_file():
        raise InputError(
            f"MIE checkpoint {str(folder)!r}: the mode uses LoRA but {ADAPTER_DIR}/adapter_config.json "
            "is missing"
        )
    try:
        conf = json.loads(conf_p.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
        raise InputError(f"{str(conf_p)!r} is not a readable JSON file ({e})") from None
    if not isinstance(conf, dict):
        raise InputError(f"{str(conf_p)!r}: expected a JSON object, got {type(conf).__name__}")
    for flag in ("use_dora", "use_rslora"):
        if conf.get(flag):
            raise InputError(f"{str(conf_p)!r}: {flag}=true is not supported by MIE")
    if conf.get("rank_pattern") or conf.get("alpha_pattern"):
        raise InputError(f"{str(conf_p)!r}: per-layer rank_pattern/alpha_pattern is not supported by MIE")
    if (d / "adapter_model.safetensors").is_file():
        weights = load_state_dict(d / "adapter_model.safetensors")
    elif (d / "adapter_model.bin").is_file():
        weights = _torch_load(
            d / "adapter_model.bin",
            "adapter_model.safetensors (peft: save_pretrained(safe_serialization=True))",
        )
    else:
        raise InputError(
            f"MIE checkpoint {str(folder)!r}: {ADAPTER_DIR}/ has no adapter_model.safetensors or .bin"
        )
    return conf, weights


def _lora_modules(weights: dict[str, torch.Tensor]) -> list[str]:
    return sorted({canonical_name(k).rsplit(".lora_A", 1)[0] for k in weights if ".lora_A" in k})


# ---------------------------------------------------------------------- save / load
def recorded_backbone(name: str) -> str:
    """How a checkpoint records its backbone: a local folder as its absolute path (so the checkpoint loads
    from any working folder), a hub id or alias unchanged.

    >>> import tempfile
    >>> recorded_backbone("Qwen/Qwen3.5-0.8B")
    'Qwen/Qwen3.5-0.8B'
    >>> with tempfile.TemporaryDirectory() as d:
    ...     Path(recorded_backbone(d)).is_absolute()
    True
    """
    p = Path(name).expanduser()
    return str(p.resolve()) if name and p.exists() else name


def backbone_location(name: str, folder: Path) -> str:
    """The backbone a checkpoint in ``folder`` names, as it should be loaded: a path that exists as written
    (absolute, or relative to the working folder) or relative to the checkpoint folder -> that path; a name
    that is written as a path (``./x``, ``../x``, ``~/x``, ``/x``, ``a/b/c``) and exists in neither place -> one
    error naming both places; anything else (a hub id, an alias) unchanged.

    >>> import tempfile
    >>> backbone_location("Qwen/Qwen3.5-0.8B", Path("."))
    'Qwen/Qwen3.5-0.8B'
    >>> with tempfile.TemporaryDirectory() as d:
    ...     (Path(d) / "vlm").mkdir()
    ...     backbone_location("vlm", Path(d)) == str(Path(d) / "vlm")  # next to the checkpoint
    True
    >>> backbone_location("./models/missing-vlm", Path("/ckpt"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.WeightsUnavailableError: MIE checkpoint '/ckpt': its backbone './models/missing-vlm' ... looked in ...
    """
    p = Path(name).expanduser()
    places = [p] if p.is_absolute() else [Path.cwd() / p, folder / p]
    for place in places:
        if place.exists():
            return str(place)
    written_as_path = name.startswith(("/", "./", "../", "~", "\\")) or name.count("/") > 1 or "\\" in name
    if written_as_path:
        raise WeightsUnavailableError(
            f"MIE checkpoint {str(folder)!r}: its backbone {name!r} (base_model_name in its config) is a local "
            f"folder that does not exist; looked in {', '.join(repr(str(x)) for x in places)}. Pass the "
            "backbone (backbone=/processor=, --backbone) or fix base_model_name"
        )
    return name


def save_checkpoint(model: Any, path: str | os.PathLike) -> Path:
    """genmetrics' format (see module doc); the config is written last, atomically.

    >>> import tempfile
    >>> from genmetrics.mie.model import MIEModel
    >>> from genmetrics.testing import tiny_qwen35, tiny_qwen35_processor
    >>> model = MIEModel(tiny_qwen35(), tiny_qwen35_processor(), unfreeze_layers=1)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     sorted(p.name for p in save_checkpoint(model, Path(d) / "heads").iterdir())
    ['mie_config.json', 'mie_weights.safetensors']
    """
    out = make_folder(path)
    _save_tensors(out / WEIGHTS_NAME, _weights(model), safetensors_metadata={"format": "genmetrics-mie"})
    _write_json(out / "mie_config.json", model.config_dict())
    return out


def _weights(model: Any) -> dict[str, torch.Tensor]:
    """What genmetrics' format stores: ``score_head.*``, ``classification_head.*``, ``backbone.<canonical
    name>`` (trained layers), ``lora.<canonical name>`` (LoRA A/B), on the CPU."""
    sd: dict[str, torch.Tensor] = {}
    for head in ("score_head", "classification_head"):
        sd.update({f"{head}.{k}": v for k, v in getattr(model, head).state_dict().items()})
    for n in model.full_layer_names():
        sd[f"backbone.{canonical_name(n)}"] = model.vlm.get_parameter(n)
    for n in model.lora_parameter_names():
        sd[f"lora.{canonical_name(n)}"] = model.vlm.get_parameter(n)
    return {k: v.detach().to("cpu").contiguous() for k, v in sd.items()}


def _write_json(path: Path, obj: Any) -> None:
    """Written last and atomically, under the write rule (genmetrics/data/output/): a folder holding the
    config holds every file it names."""
    atomic_write_json(path, obj, root=path.parent)


def _save_tensors(path: Path, tensors: Any, *, safetensors_metadata: dict[str, str] | None = None) -> None:
    """One tensor file written whole or not at all, under the write rule: safetensors when ``metadata`` is
    given, else ``torch.save`` (the authors' ``.pt`` layout, plain tensors only)."""
    with atomic_output(path, root=path.parent) as tmp:
        if safetensors_metadata is not None:
            save_file(tensors, str(tmp), metadata=safetensors_metadata)
        else:
            torch.save(tensors, tmp)


# ---------------------------------------------------------------------- export to the authors' layout
#: The authors' loader builds ``*ForConditionalGeneration`` (the core model under ``model.``); in modes with
#: LoRA it wraps it in a peft ``PeftModel`` (``base_model.model.`` before that).
AUTHORS_PREFIX = {False: "model.", True: "base_model.model.model."}
#: adapter_config.json keys every peft release since LoRA's first reads (a newer peft's extra keys can stop
#: an older one; the authors' pin is older than genmetrics')
_ADAPTER_KEYS = (
    "peft_type",
    "task_type",
    "base_model_name_or_path",
    "r",
    "lora_alpha",
    "lora_dropout",
    "target_modules",
    "bias",
    "fan_in_fan_out",
    "inference_mode",
    "modules_to_save",
    "init_lora_weights",
    "layers_to_transform",
    "layers_pattern",
    "rank_pattern",
    "alpha_pattern",
    "use_rslora",
    "use_dora",
)


def export_authors_layout(source: Any, out: str | os.PathLike, *, overwrite: bool = False) -> dict[str, Any]:
    """Write a genmetrics MIE checkpoint (a folder in genmetrics' format, or an :class:`MIEModel`) in the
    authors' layout, so their ``MIE_Inference/mie_loader.py`` loads it: ``mie_config.json``
    (``base_model_name``, ``mode``, ``num_error_classes``, ``unfreeze_layers``; plus ``image_size`` and
    ``exported_by``, which their loader ignores), ``mie_heads.pt``, ``trainable_backbone.pt`` (the trained
    layers, named as their ``PeftModel`` / ``*ForConditionalGeneration`` names them, fp32) and
    ``lora_adapter/`` (peft's adapter format, ``lora_layer`` only). Reads the files only: no backbone loads.
    Returns ``{"out", "mode", "tensors", "lora_modules", "image_size", "notes"}``.

    The authors' code scores images unresized: a checkpoint trained with ``image_size=512`` gives the same
    numbers there only on images of at most 512 px (``notes`` says so).

    >>> import tempfile
    >>> from genmetrics.mie.model import MIEModel
    >>> from genmetrics.testing import tiny_qwen35, tiny_qwen35_processor
    >>> model = MIEModel(tiny_qwen35(), tiny_qwen35_processor(), unfreeze_layers=1, backbone_name="org/vlm")
    >>> with tempfile.TemporaryDirectory() as d:
    ...     info = export_authors_layout(model, Path(d) / "authors")
    ...     names = sorted(p.name for p in Path(info["out"]).iterdir())
    ...     again = load_checkpoint(MIEModel, info["out"], tiny_qwen35(), tiny_qwen35_processor())
    >>> names, info["mode"], again.load_report["backbone"] == info["tensors"]["backbone"]
    (['mie_config.json', 'mie_heads.pt', 'trainable_backbone.pt'], 'layer_only', True)
    """
    if isinstance(source, (str, os.PathLike)):
        folder = resolve_heads(source)
        cfg, layout = read_config(folder)
        if layout != "genmetrics":
            raise InputError(
                f"export: {str(folder)!r} is already in the authors' layout ({_pick(folder, CONFIG_NAMES)}); "
                "nothing to convert"
            )
        if not (folder / WEIGHTS_NAME).is_file():
            raise InputError(f"MIE checkpoint {str(folder)!r}: {WEIGHTS_NAME} is missing")
        sd = load_state_dict(folder / WEIGHTS_NAME)
    else:
        cfg, sd = source.config_dict(), _weights(source)
    if cfg.get("prompt_template", PROMPT_TEMPLATE) != PROMPT_TEMPLATE:
        raise InputError(
            "export: this checkpoint was trained with a custom prompt_template; the authors' code always uses "
            "its own text, so it would score it with another input than it was trained on"
        )
    name = cfg.get("base_model_name") or ""
    if not name:
        raise InputError(
            "export: the checkpoint does not name its backbone (base_model_name); the authors' loader needs it"
        )
    dst = Path(out)
    if dst.exists() and any(dst.iterdir()) and not overwrite:
        raise InputError(
            f"export: {str(dst)!r} is not empty; choose a new folder or pass overwrite=True (--overwrite)"
        )
    dst = make_folder(dst)
    mode = cfg["mode"]
    lora = {k[len("lora.") :]: v for k, v in sd.items() if k.startswith("lora.")}
    layers = {k[len("backbone.") :]: v for k, v in sd.items() if k.startswith("backbone.")}
    wrapped = _lora_modules(lora)
    prefix = AUTHORS_PREFIX[bool(wrapped)]
    heads = {h: {k[len(h) + 1 :]: v for k, v in sd.items() if k.startswith(h + ".")} for h in _HEADS}
    _save_tensors(dst / HEADS_NAMES[0], heads)
    tensors = {"heads": sum(len(v) for v in heads.values()), "backbone": 0, "lora": 0}
    if layers:
        renamed = {prefix + _peft_name(k, wrapped): v.float() for k, v in layers.items()}
        _save_tensors(dst / BACKBONE_NAME, renamed)
        tensors["backbone"] = len(renamed)
    if wrapped:
        _write_adapter(dst / ADAPTER_DIR, lora, wrapped, cfg, name)
        tensors["lora"] = len(lora)
    notes = []
    if cfg.get("image_size") is not None:
        notes.append(
            f"trained with image_size={cfg['image_size']}; the authors' code passes images unresized, so it "
            f"gives genmetrics' numbers on images of at most {cfg['image_size']} px (longer side)"
        )
    _write_json(
        dst / CONFIG_NAMES[0],
        {
            "base_model_name": name,
            "mode": mode,
            "num_error_classes": int(cfg["num_error_classes"]),
            "unfreeze_layers": int(cfg["unfreeze_layers"]),
            "image_size": cfg.get("image_size"),
            "exported_by": "genmetrics",
        },
    )
    return {
        "out": str(dst),
        "mode": mode,
        "tensors": tensors,
        "lora_modules": len(wrapped),
        "image_size": cfg.get("image_size"),
        "notes": notes,
    }


def _peft_name(name: str, wrapped: list[str]) -> str:
    """``language_model.layers.3.mlp.up_proj.weight`` -> ``...up_proj.base_layer.weight`` when that linear
    carries LoRA (peft moves the wrapped layer's own weight and bias under ``base_layer``)."""
    module, _, leaf = name.rpartition(".")
    return f"{module}.base_layer.{leaf}" if module in wrapped else name


def _write_adapter(
    folder: Path, lora: dict[str, torch.Tensor], wrapped: list[str], cfg: dict[str, Any], base: str
) -> None:
    folder = make_folder(folder)
    prefix = AUTHORS_PREFIX[True]
    _save_tensors(
        folder / "adapter_model.safetensors",
        {prefix + k: v.contiguous() for k, v in lora.items()},
        safetensors_metadata={"format": "pt"},
    )
    conf = LoraConfig(
        r=int(cfg["lora"]["r"]),
        lora_alpha=int(cfg["lora"]["alpha"]),
        lora_dropout=float(cfg["lora"]["dropout"]),
        target_modules=["model." + m for m in wrapped],
        bias="none",
        base_model_name_or_path=base,
        inference_mode=True,
    ).to_dict()
    conf["target_modules"] = sorted(conf["target_modules"])
    _write_json(folder / "adapter_config.json", {k: conf.get(k) for k in _ADAPTER_KEYS})


def load_checkpoint(
    cls: Any,
    path_or_id: str | os.PathLike,
    backbone: Any = None,
    processor: Any = None,
    *,
    device: Any = None,
    dtype: Any = None,
    **overrides: Any,
) -> Any:
    """Build ``cls`` (an :class:`~genmetrics.mie.MIEModel`) from a checkpoint in either layout: the backbone it
    names (or the one given), its adapter and trained layers, and the heads (``MIEModel.from_pretrained``).

    >>> import tempfile
    >>> from genmetrics.mie.model import MIEModel
    >>> from genmetrics.testing import tiny_qwen35, tiny_qwen35_processor
    >>> model = MIEModel(tiny_qwen35(), tiny_qwen35_processor(), unfreeze_layers=1)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     again = load_checkpoint(MIEModel, save_checkpoint(model, d), tiny_qwen35(), tiny_qwen35_processor())
    >>> torch.equal(again.score_head[0].weight, model.score_head[0].weight)
    True
    """
    folder = resolve_heads(path_or_id)
    cfg, layout = read_config(folder)
    name = cfg.get("base_model_name") or cfg.get("model_name") or cfg.get("backbone") or ""
    if backbone is None:
        if not name:
            raise WeightsUnavailableError(
                f"MIE checkpoint {str(path_or_id)!r} does not name its backbone; pass backbone= "
                "and processor="
            )
        name = backbone_location(name, folder)
        backbone, processor = build_backbone(name, device=device, dtype=dtype)
    elif processor is None:
        raise InputError("from_pretrained: pass the processor together with the backbone")
    if layout == "genmetrics":
        model = _load_own(cls, folder, cfg, backbone, processor, name, overrides)
    else:
        model = _load_authors(cls, folder, cfg, backbone, processor, name, overrides)
    if device is not None:
        model.to(device)
    return model.eval()


def _load_own(
    cls: Any,
    folder: Path,
    cfg: dict[str, Any],
    backbone: Any,
    processor: Any,
    name: str,
    overrides: dict[str, Any],
) -> Any:
    mode = cfg["mode"]
    kwargs = dict(
        tuning=None if mode == "head_only" else mode,
        unfreeze_layers=int(cfg["unfreeze_layers"]),
        lora_r=cfg["lora"]["r"],
        lora_alpha=cfg["lora"]["alpha"],
        lora_dropout=cfg["lora"]["dropout"],
        prompt_template=cfg["prompt_template"],
        image_size=cfg.get("image_size"),
        max_references=int(cfg.get("max_references", 8)),
        num_error_classes=int(cfg["num_error_classes"]),
        lora_target_modules=cfg.get("lora_target_modules") or LORA_TARGETS,
        backbone_name=name or None,
    )
    kwargs.update(overrides)
    model = cls(backbone, processor, **kwargs)
    if not (folder / WEIGHTS_NAME).is_file():
        raise InputError(f"MIE checkpoint {str(folder)!r}: {WEIGHTS_NAME} is missing. {TRAIN_HINT}")
    weights_p = folder / WEIGHTS_NAME
    sd = _check_tensors(load_state_dict(weights_p), f"MIE checkpoint {str(weights_p)!r}")
    extra = sorted(k for k in sd if not k.startswith(_OWN_PREFIXES))
    if extra:
        raise InputError(
            f"MIE checkpoint {str(weights_p)!r}: unexpected tensors {extra[:5]} (genmetrics' format holds only "
            f"{', '.join(p + '*' for p in _OWN_PREFIXES)}); refusing a file that holds more"
        )
    heads = {h: {k[len(h) + 1 :]: v for k, v in sd.items() if k.startswith(h + ".")} for h in _HEADS}
    report = {"heads": _load_heads(model, heads, str(weights_p))}
    layers = {k[len("backbone.") :]: v for k, v in sd.items() if k.startswith("backbone.")}
    lora = {k[len("lora.") :]: v for k, v in sd.items() if k.startswith("lora.")}
    for what, tensors, names in (
        ("backbone", layers, model.full_layer_names()),
        ("lora", lora, model.lora_parameter_names()),
    ):
        expected = {canonical_name(n) for n in names}
        report[what] = (
            _apply(model, tensors, f"{folder}/{WEIGHTS_NAME} ({what})", expected=expected)
            if expected or tensors
            else 0
        )
    model.load_report = report
    return model


def _load_authors(
    cls: Any,
    folder: Path,
    cfg: dict[str, Any],
    backbone: Any,
    processor: Any,
    name: str,
    overrides: dict[str, Any],
) -> Any:
    tuning, uses_lora, uses_layers = AUTHOR_MODES[cfg["mode"]]
    unfreeze = int(cfg.get("unfreeze_layers", 4)) if uses_layers else 0
    kwargs: dict[str, Any] = dict(
        tuning=None,
        num_error_classes=int(cfg.get("num_error_classes", 3)),
        backbone_name=name or None,
        # the authors' code hands images to the processor unresized (their loader and dataset never resize);
        # a genmetrics export records the size it was trained with
        image_size=cfg.get("image_size"),
    )
    kwargs.update(overrides)
    model = cls(backbone, processor, **kwargs)
    heads_p = _pick(folder, HEADS_NAMES)
    if heads_p is None:
        raise InputError(f"MIE checkpoint {str(folder)!r} holds neither of {HEADS_NAMES}")
    heads = _torch_load(heads_p, _SAFE_PT)
    report: dict[str, Any] = {"heads": _load_heads(model, heads, str(heads_p)), "lora": 0, "backbone": 0}
    model.tuning, model.unfreeze_layers = tuning, unfreeze
    if uses_lora:
        conf, weights = _adapter(folder)
        model.lora = {
            "r": int(conf.get("r", 8)),
            "alpha": int(conf.get("lora_alpha", 8)),
            "dropout": float(conf.get("lora_dropout", 0.0)),
        }
        model.add_lora(model.lora, target_modules=_lora_modules(weights))
        report["lora"] = _apply(
            model,
            weights,
            f"{folder}/{ADAPTER_DIR}",
            expected={canonical_name(n) for n in model.lora_parameter_names()},
        )
    if uses_layers:
        p = folder / BACKBONE_NAME
        if not p.is_file():
            raise InputError(
                f"MIE checkpoint {str(folder)!r}: mode {cfg['mode']} needs {BACKBONE_NAME}, which is missing"
            )
        updates = _torch_load(p, _SAFE_PT)
        report["backbone"] = _apply(
            model, updates, str(p), expected={canonical_name(n) for n in model.full_layer_names()}
        )
    for n in model.full_layer_names():
        model.vlm.get_parameter(n).requires_grad_(True)
    model.load_report = report
    return model
