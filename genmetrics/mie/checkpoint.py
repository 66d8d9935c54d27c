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
:func:`~genmetrics.mie.model.canonical_name` (peft and ``*ForConditionalGeneration`` prefixes removed),
every tensor of a file must apply to a parameter of the same shape, and the trained layers and LoRA
layers the mode implies must all be present: anything else is one :class:`WeightsUnavailableError`
listing what did not apply (a partial ``strict=False`` load that silently applies nothing is the
classic failure this prevents). :attr:`MIEModel.load_report` counts what was applied.
"""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import torch

from genmetrics.data.results import atomic_output, atomic_write_text
from genmetrics.errors import InputError, WeightsUnavailableError

FORMAT_VERSION = 2
CONFIG_NAMES = ("mie_config.json", "lens_config.json")
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

_TRAIN_HINT = (
    "Train heads with `genmetrics train mie --data silver.jsonl --out DIR` (see docs/mie.md), then pass "
    "heads=DIR (Python) or --heads DIR (command line); a hub id of a published MIE checkpoint also works."
)


def _pick(folder: Path, names: tuple[str, ...]) -> Path | None:
    for n in names:
        if (folder / n).is_file():
            return folder / n
    return None


def resolve_heads(path_or_id: str | os.PathLike) -> Path:
    """A local checkpoint folder (holding ``mie_config.json`` or ``lens_config.json``) or a hub id -> folder.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "mie_config.json").write_text("{}")
    ...     resolve_heads(d) == Path(d).resolve()
    True
    """
    from genmetrics.backbones.weights import offline, weights_unavailable

    s = os.fspath(path_or_id)
    p = Path(s).expanduser()
    if p.exists():
        if p.is_dir() and _pick(p, CONFIG_NAMES):
            return p
        raise WeightsUnavailableError(
            f"MIE heads {s!r}: expected a folder holding mie_config.json (genmetrics' format or the authors' layout, "
            f"also lens_config.json). {_TRAIN_HINT}"
        )
    if not re.match(r"^[A-Za-z0-9][\w.-]*/[\w.-]+$", s) or s.startswith((".", "/", "~")):
        raise WeightsUnavailableError(f"MIE heads {s!r}: no such folder. {_TRAIN_HINT}")
    from genmetrics.backbones.hf import hf_cache_dir

    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(s, cache_dir=str(hf_cache_dir()), local_files_only=offline()))
    except Exception as e:  # noqa: BLE001 - any hub failure becomes one clear error
        err = weights_unavailable(
            f"MIE heads {s}", [str(hf_cache_dir()), "the Hugging Face Hub"], "heads=", e
        )
        raise WeightsUnavailableError(f"{err} {_TRAIN_HINT}") from None


def no_heads_error() -> WeightsUnavailableError:
    """The error for an ``mie`` metric created without trained heads (it says how to train them).

    >>> str(no_heads_error()).startswith("the mie metric needs trained heads")
    True
    """
    return WeightsUnavailableError(
        "the mie metric needs trained heads (score + diagnostic heads and their trained layers); none are bundled. "
        + _TRAIN_HINT
    )


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
            f"MIE checkpoint {str(folder)!r} holds neither of {CONFIG_NAMES}. {_TRAIN_HINT}"
        )
    try:
        cfg = json.loads(p.read_text(encoding="utf-8"))
    except (OSError, json.JSONDecodeError) as e:
        raise WeightsUnavailableError(f"MIE checkpoint {str(folder)!r}: cannot read {p.name} ({e})") from None
    if cfg.get("format") == "genmetrics-mie":
        if int(cfg.get("version", 0)) != FORMAT_VERSION:
            raise WeightsUnavailableError(
                f"{str(p)!r} is a genmetrics MIE checkpoint of version {cfg.get('version')}; this genmetrics reads version "
                f"{FORMAT_VERSION} (version 1 used a different architecture, not the paper's): retrain it"
            )
        return cfg, "genmetrics"
    if "mode" not in cfg:
        raise WeightsUnavailableError(
            f"{str(p)!r} is neither a genmetrics MIE config nor the authors' (no 'mode')"
        )
    if cfg["mode"] not in AUTHOR_MODES:
        raise WeightsUnavailableError(
            f"{str(p)!r}: mode {cfg['mode']!r} is not supported; expected one of {sorted(AUTHOR_MODES)}"
        )
    return cfg, "authors"


def _torch_load(path: Path) -> Any:
    try:
        return torch.load(path, map_location="cpu", weights_only=True)
    except Exception as e:  # noqa: BLE001 - pickles with code, corrupt files: one clear error
        raise WeightsUnavailableError(
            f"MIE checkpoint file {str(path)!r} cannot be loaded with weights_only=True "
            f"({type(e).__name__}: {str(e)[:200]}); only plain tensor files are accepted"
        ) from None


# ---------------------------------------------------------------------- applying tensors
def _apply(
    model: Any, tensors: dict[str, torch.Tensor], what: str, *, expected: set[str] | None = None
) -> int:
    """Copy ``tensors`` (any naming, see ``canonical_name``) into the backbone; every one must apply and,
    when given, every canonical name in ``expected`` must be covered. Returns the count applied."""
    from genmetrics.mie.model import canonical_name

    params = {canonical_name(n): p for n, p in model.vlm.named_parameters()}
    applied, unmatched, bad_shape = set(), [], []
    with torch.no_grad():
        for k, v in tensors.items():
            c = canonical_name(k)
            p = params.get(c)
            if p is None:
                unmatched.append(k)
            elif tuple(p.shape) != tuple(v.shape):
                bad_shape.append(f"{k} {tuple(v.shape)} vs {tuple(p.shape)}")
            else:
                p.copy_(v.to(p.device, p.dtype))
                applied.add(c)
    missing = sorted((expected or set()) - applied)
    if unmatched or bad_shape or missing or not tensors:
        raise WeightsUnavailableError(
            f"MIE checkpoint {what}: {len(applied)} of {len(tensors)} tensors applied; refusing a partial load "
            f"(no parameter named like {unmatched[:3]}; shape mismatches {bad_shape[:3]}; not in the file but trained "
            f"in this mode {missing[:3]}). Is it for another backbone, mode or unfreeze_layers?"
        )
    return len(applied)


def _load_heads(model: Any, heads: dict[str, Any], what: str) -> int:
    n = 0
    for name in ("score_head", "classification_head"):
        sd = heads.get(name)
        if not isinstance(sd, dict):
            raise WeightsUnavailableError(
                f"MIE checkpoint {what}: no {name!r} state dict (keys: {sorted(heads)[:5]})"
            )
        head = getattr(model, name)
        try:
            head.load_state_dict({k: v.float() for k, v in sd.items()}, strict=True)
        except RuntimeError as e:
            h = model.hidden_size
            raise WeightsUnavailableError(
                f"MIE checkpoint {what}: {name} does not load into this model's "
                f"Linear({h}, {h // 2}) -> GELU -> Linear({h // 2}, n) head (keys '0.weight', "
                f"'0.bias', '2.weight', '2.bias'; is it for another backbone?): "
                f"{' '.join(str(e).split())[:300]}"
            ) from None
        n += len(sd)
    return n


def _adapter(folder: Path) -> tuple[dict[str, Any], dict[str, torch.Tensor]]:
    d = folder / ADAPTER_DIR
    conf_p = d / "adapter_config.json"
    if not conf_p.is_file():
        raise WeightsUnavailableError(
            f"MIE checkpoint {str(folder)!r}: the mode uses LoRA but {ADAPTER_DIR}/adapter_config.json "
            "is missing"
        )
    conf = json.loads(conf_p.read_text(encoding="utf-8"))
    for flag in ("use_dora", "use_rslora"):
        if conf.get(flag):
            raise WeightsUnavailableError(f"{str(conf_p)!r}: {flag}=true is not supported by MIE")
    if conf.get("rank_pattern") or conf.get("alpha_pattern"):
        raise WeightsUnavailableError(
            f"{str(conf_p)!r}: per-layer rank_pattern/alpha_pattern is not supported by MIE"
        )
    if (d / "adapter_model.safetensors").is_file():
        from safetensors.torch import load_file

        weights = load_file(str(d / "adapter_model.safetensors"))
    elif (d / "adapter_model.bin").is_file():
        weights = _torch_load(d / "adapter_model.bin")
    else:
        raise WeightsUnavailableError(
            f"MIE checkpoint {str(folder)!r}: {ADAPTER_DIR}/ has no adapter_model.safetensors or .bin"
        )
    return conf, weights


def _lora_modules(weights: dict[str, torch.Tensor]) -> list[str]:
    from genmetrics.mie.model import canonical_name

    return sorted({canonical_name(k).rsplit(".lora_A", 1)[0] for k in weights if ".lora_A" in k})


# ---------------------------------------------------------------------- save / load
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
    from safetensors.torch import save_file

    from genmetrics.mie.model import canonical_name

    out = Path(path)
    out.mkdir(parents=True, exist_ok=True)
    sd: dict[str, torch.Tensor] = {}
    for head in ("score_head", "classification_head"):
        sd.update({f"{head}.{k}": v for k, v in getattr(model, head).state_dict().items()})
    for n in model.full_layer_names():
        sd[f"backbone.{canonical_name(n)}"] = model.vlm.get_parameter(n)
    for n in model.lora_parameter_names():
        sd[f"lora.{canonical_name(n)}"] = model.vlm.get_parameter(n)
    with atomic_output(out / WEIGHTS_NAME) as tmp:  # the write rule (genmetrics/data/results.py)
        save_file(
            {k: v.detach().to("cpu").contiguous() for k, v in sd.items()},
            str(tmp),
            metadata={"format": "genmetrics-mie"},
        )
    atomic_write_text(out / "mie_config.json", json.dumps(model.config_dict(), indent=2))
    return out


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
    from genmetrics.mie.model import build_backbone

    folder = resolve_heads(path_or_id)
    cfg, layout = read_config(folder)
    name = cfg.get("base_model_name") or cfg.get("model_name") or cfg.get("backbone") or ""
    if backbone is None:
        if not name:
            raise WeightsUnavailableError(
                f"MIE checkpoint {str(path_or_id)!r} does not name its backbone; pass backbone= "
                "and processor="
            )
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
    from genmetrics.backbones.weights import load_state_dict
    from genmetrics.mie.model import LORA_TARGETS

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
        raise WeightsUnavailableError(
            f"MIE checkpoint {str(folder)!r}: {WEIGHTS_NAME} is missing. {_TRAIN_HINT}"
        )
    sd = load_state_dict(folder / WEIGHTS_NAME)
    heads = {
        h: {k[len(h) + 1 :]: v for k, v in sd.items() if k.startswith(h + ".")}
        for h in ("score_head", "classification_head")
    }
    report = {"heads": _load_heads(model, heads, str(folder))}
    from genmetrics.mie.model import canonical_name

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
    from genmetrics.mie.model import canonical_name

    tuning, uses_lora, uses_layers = AUTHOR_MODES[cfg["mode"]]
    unfreeze = int(cfg.get("unfreeze_layers", 4)) if uses_layers else 0
    kwargs: dict[str, Any] = dict(
        tuning=None, num_error_classes=int(cfg.get("num_error_classes", 3)), backbone_name=name or None
    )
    kwargs.update(overrides)
    model = cls(backbone, processor, **kwargs)
    heads_p = _pick(folder, HEADS_NAMES)
    if heads_p is None:
        raise WeightsUnavailableError(f"MIE checkpoint {str(folder)!r} holds neither of {HEADS_NAMES}")
    heads = _torch_load(heads_p)
    if not isinstance(heads, dict):
        raise WeightsUnavailableError(
            f"{str(heads_p)!r}: expected a dict of head state dicts, got {type(heads).__name__}"
        )
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
            raise WeightsUnavailableError(
                f"MIE checkpoint {str(folder)!r}: mode {cfg['mode']} needs {BACKBONE_NAME}, which is missing"
            )
        updates = _torch_load(p)
        if not isinstance(updates, dict):
            raise WeightsUnavailableError(
                f"{str(p)!r}: expected a dict of tensors, got {type(updates).__name__}"
            )
        report["backbone"] = _apply(
            model, updates, str(p), expected={canonical_name(n) for n in model.full_layer_names()}
        )
    for n in model.full_layer_names():
        model.vlm.get_parameter(n).requires_grad_(True)
    model.load_report = report
    return model
