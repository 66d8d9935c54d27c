"""open_clip weights as a user spells them (``MODEL/TAG``, ``hf-hub:ID``, ``MODEL:/path/ckpt``), read without
importing torch or open_clip: the loader (:mod:`genmetrics.backbones.openclip`) and the pre-check
(:mod:`genmetrics.backbones.precheck`) parse them here, so both say the same thing about them.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from genmetrics.core.options import expand_user
from genmetrics.errors import InputError

if TYPE_CHECKING:
    from genmetrics.errors import WeightsUnavailableError

__all__ = [
    "CLIP_OPTION",
    "DEFAULT_CLIP",
    "ClipWeights",
    "is_local_checkpoint",
    "missing_checkpoint",
    "parse_clip_weights",
]

#: how a user points an open_clip metric at local weights
CLIP_OPTION = "--weights MODEL/TAG or MODEL:/path/ckpt.safetensors (command line), backbone=... (Python)"


@dataclass(frozen=True)
class ClipWeights:
    """An open_clip model name plus a pretrained tag, hub id (``hf-hub:org/name``) or local file.

    >>> str(ClipWeights("ViT-B-32-quickgelu", "openai"))
    'ViT-B-32-quickgelu/openai'
    """

    model: str
    pretrained: str

    def __str__(self) -> str:
        return f"{self.model}/{self.pretrained}"


DEFAULT_CLIP = ClipWeights("ViT-B-32-quickgelu", "openai")


def parse_clip_weights(spec: str | ClipWeights | None) -> ClipWeights:
    """``"ViT-B-16/openai"``, ``"hf-hub:org/name"`` or ``"ViT-B-16:/path/ckpt.safetensors"``.

    OpenAI ViT weights get the QuickGELU architecture they were trained with:

    >>> parse_clip_weights("ViT-B-16/openai"), parse_clip_weights("ViT-B-32:/ckpt.safetensors").pretrained
    (ClipWeights(model='ViT-B-16-quickgelu', pretrained='openai'), '/ckpt.safetensors')
    """
    if spec is None:
        return DEFAULT_CLIP
    if isinstance(spec, ClipWeights):
        return _quickgelu(spec)
    if spec.startswith("hf-hub:"):
        return ClipWeights(spec, "")
    # MODEL:PATH first: the path keeps its leading '/' (absolute) and '~' is expanded
    model, s, tag = spec.partition(":")
    if s and model and tag and "/" not in model and "\\" not in model and len(model) > 1:
        return _quickgelu(
            ClipWeights(model, str(expand_user(tag, what="--weights")) if tag.startswith("~") else tag)
        )
    if spec.startswith(("/", "./", "../", "~", "\\")) or Path(spec).expanduser().is_file():
        raise InputError(
            f"--weights {spec!r}: a local open_clip checkpoint needs its architecture; write "
            f"MODEL:PATH, e.g. 'ViT-B-32:{spec}' (see `open_clip.list_models()`)"
        )
    model, s, tag = spec.partition("/")
    if s and model and tag:
        return _quickgelu(ClipWeights(model, tag))
    return _quickgelu(ClipWeights(spec, "openai"))


def _quickgelu(w: ClipWeights) -> ClipWeights:
    if w.pretrained == "openai" and not w.model.endswith("-quickgelu") and w.model.startswith(("ViT-", "RN")):
        return ClipWeights(w.model + "-quickgelu", w.pretrained)
    return w


def is_local_checkpoint(w: ClipWeights) -> bool:
    """Whether ``w`` names a local checkpoint file (``MODEL:/path/ckpt.safetensors``) rather than a tag.

    >>> is_local_checkpoint(parse_clip_weights("ViT-B-32:/ckpt.safetensors")), is_local_checkpoint(DEFAULT_CLIP)
    (True, False)
    """
    return bool(w.pretrained) and (
        os.sep in w.pretrained or w.pretrained.endswith((".bin", ".pt", ".pth", ".safetensors"))
    )


def missing_checkpoint(w: ClipWeights) -> WeightsUnavailableError | None:
    """The error for a local checkpoint that does not exist, named as the user spelt it (``MODEL:PATH``);
    None for one that exists or a tag.

    >>> print(missing_checkpoint(parse_clip_weights("ViT-B-32:/no/such.safetensors")))  # doctest: +ELLIPSIS
    weights 'ViT-B-32:/no/such.safetensors' are not available (no such file or folder). Looked in: /no/such.safetensors. ...
    """
    if not is_local_checkpoint(w) or Path(w.pretrained).exists():
        return None
    from genmetrics.backbones.weights import weights_unavailable

    return weights_unavailable(
        f"{w.model}:{w.pretrained}", w.pretrained, CLIP_OPTION, why="no such file or folder"
    )
