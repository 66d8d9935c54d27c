"""MIE constants and the small helpers every MIE module shares (no model code, no checkpoint code).

The lowest layer of the family: :mod:`genmetrics.mie.checkpoint` and :mod:`genmetrics.mie.model` both
import it, and it imports neither (so the two never import each other in a loop).
"""

from __future__ import annotations

import re
from typing import Any

from torch import nn

from genmetrics.backbones.hf import load_vlm
from genmetrics.core.options import integer
from genmetrics.data.jsonl import MAX_REFERENCES as MAX_REFERENCES  # one limit: pair files and model
from genmetrics.errors import InputError

DIMENSIONS = ("existence", "appearance", "interaction")
MIN_REFERENCES = 1
TUNING_MODES = ("layer_only", "lora_layer")
DEFAULT_TUNING = "layer_only"  # Appendix E, Table "Training Hyperparameters": layer-only unfreezing (top 4)
UNFREEZE_LAYERS = 4
LORA_DEFAULTS: dict[str, Any] = {"r": 16, "alpha": 32, "dropout": 0.0}  # the authors' peft_kwargs
IMAGE_SIZE = 512  # Appendix E: 512 px, aspect ratio kept (the authors' code passes images unresized)
#: ``image_size`` of a metric or command that takes the checkpoint's own value (genmetrics' format: what it
#: was trained with; the authors' layout: unresized, as their code scores)
FROM_CHECKPOINT = "checkpoint"
_UNRESIZED = ("none", "null", "original")

#: The text of the authors' scoring contract (MIE_Inference/README.md, mie/dataset.py).
PROMPT_TEMPLATE = (
    "You are evaluating a multi-subject personalization result. The first images are subject references. "
    "The last image is the generated candidate. Prompt: {prompt}"
)

#: backbone aliases -> hub ids (any Qwen3.5 or Qwen3-VL checkpoint id or folder also works)
BACKBONES: dict[str, str] = {
    "0.8b": "Qwen/Qwen3.5-0.8B",
    "2b": "Qwen/Qwen3.5-2B",
    "4b": "Qwen/Qwen3.5-4B",
    "qwen3.5-0.8b": "Qwen/Qwen3.5-0.8B",
    "qwen3.5-2b": "Qwen/Qwen3.5-2B",
    "qwen3.5-4b": "Qwen/Qwen3.5-4B",
}
DEFAULT_BACKBONE = "4b"

#: LoRA targets of ``lora_layer``: every linear projection in the attention and MLP blocks of the vision
#: tower and of the language tower (what unsloth's ``finetune_vision/language/attention/mlp`` selects).
LORA_TARGETS = (
    r".*(?:visual\.blocks\.\d+\.(?:attn|mlp)|language_model\.layers\.\d+\."
    r"(?:self_attn|linear_attn|mlp))\.[A-Za-z0-9_]+"
)


def resolve_backbone_name(name: str) -> str:
    """Alias (``"0.8b"``, ``"2b"``, ``"4b"``, ``"qwen3.5-4b"``) -> hub id; anything else unchanged.

    >>> resolve_backbone_name("0.8b"), resolve_backbone_name("/models/my-mie-backbone")
    ('Qwen/Qwen3.5-0.8B', '/models/my-mie-backbone')
    """
    return BACKBONES.get(str(name).lower(), str(name))


def build_backbone(name: str, *, device: Any = None, dtype: Any = None) -> tuple[nn.Module, Any]:
    """``(vlm, processor)`` for a backbone alias, hub id or local folder (see :data:`BACKBONES`). An installed
    backbone provider (:mod:`genmetrics.backbones.provider`, kind ``"vlm"``) answers first.

    >>> from genmetrics.backbones.provider import use_provider
    >>> from genmetrics.testing import tiny_backbones
    >>> with use_provider(tiny_backbones):  # nothing downloads
    ...     vlm, processor = build_backbone("0.8b")
    >>> type(vlm).__name__
    'Qwen3_5Model'
    """
    return load_vlm(resolve_backbone_name(name), dtype=dtype, device=device)


def canonical_name(name: str) -> str:
    """A parameter name reduced to what every wrapper agrees on: from ``visual.`` / ``language_model.`` on,
    without peft's ``base_layer.`` and adapter name (``base_model.model.model.language_model.layers.3.
    mlp.up_proj.base_layer.weight`` -> ``language_model.layers.3.mlp.up_proj.weight``).

    >>> canonical_name("base_model.model.model.language_model.layers.3.mlp.up_proj.base_layer.weight")
    'language_model.layers.3.mlp.up_proj.weight'
    >>> canonical_name("model.visual.blocks.0.attn.qkv.lora_A.default.weight")
    'visual.blocks.0.attn.qkv.lora_A.weight'
    """
    name = name.replace(".base_layer.", ".")
    name = re.sub(r"\.(lora_[AB])\.[^.]+\.weight$", r".\1.weight", name)
    m = re.search(r"(?:^|\.)((?:visual|language_model)\.)", name)
    return name[m.start(1) :] if m else name


def image_size_option(value: Any, *, owner: str = "mie", allow_checkpoint: bool = False) -> Any:
    """Parse an ``image_size`` option: a longer-side bound in px (an integer >= 1), ``None`` (or the words
    ``"none"`` / ``"original"`` of the command line: images go to the processor unresized, only its own pixel
    budget applies, as the authors' code) or, where ``allow_checkpoint``, ``"checkpoint"`` (the
    checkpoint's own value).

    >>> image_size_option("512"), image_size_option(None), image_size_option("none")
    (512, None, None)
    >>> image_size_option("checkpoint", allow_checkpoint=True)
    'checkpoint'
    >>> image_size_option(0)
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: mie: option image_size: expected the longer image side in px (an integer >= 1) or none (unresized), got 0
    """
    if value is None or (isinstance(value, str) and value.strip().lower() in _UNRESIZED):
        return None
    if allow_checkpoint and isinstance(value, str) and value.strip().lower() == FROM_CHECKPOINT:
        return FROM_CHECKPOINT
    try:
        return integer("image_size", value, lo=1, owner=owner)
    except InputError:
        also = f" or {FROM_CHECKPOINT!r} (the checkpoint's own)" if allow_checkpoint else ""
        raise InputError(
            f"{owner}: option image_size: expected the longer image side in px (an integer >= 1) or none "
            f"(unresized){also}, got {value!r}"
        ) from None
