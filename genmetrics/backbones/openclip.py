"""open_clip loading with genmetrics' weights policy, and the one import place for the open_clip helpers.

OpenAI weights were trained with QuickGELU: their tags map to the ``-quickgelu`` configs, otherwise the
activations are silently wrong. Each weights record carries its preprocessing (open_clip's own).

The helpers live in modules with one job each and are re-exported here (the names docs and DESIGN use):
:mod:`~genmetrics.backbones.clip_preprocess` (``clip_image_batch``, ``clip_preprocess_cfg``),
:mod:`~genmetrics.backbones.clip_tokens` (``tokenize``, ``trim_padding``),
:mod:`~genmetrics.backbones.clip_text` (``encode_text_ids``, ``TextEmbeddingCache``),
:mod:`~genmetrics.backbones.clip_vision` (``encode_image``), :mod:`~genmetrics.backbones.clip_packed`
(``PackedBlock``, ``packed_vision_blocks``, ``release_packed_weights``).
"""

from __future__ import annotations

import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import open_clip
import torch

from genmetrics.backbones.clip_packed import PackedBlock, packed_vision_blocks, release_packed_weights
from genmetrics.backbones.clip_preprocess import (
    OPENAI_MEAN,
    OPENAI_STD,
    clip_image_batch,
    clip_preprocess_cfg,
)
from genmetrics.backbones.clip_text import TextEmbeddingCache, encode_text_ids
from genmetrics.backbones.clip_tokens import tokenize, trim_padding
from genmetrics.backbones.clip_vision import encode_image
from genmetrics.backbones.provider import provide
from genmetrics.backbones.weights import genmetrics_home, offline, weights_unavailable
from genmetrics.errors import InputError
from genmetrics.options import expand_user

__all__ = [
    "DEFAULT_CLIP",
    "OPENAI_MEAN",
    "OPENAI_STD",
    "ClipWeights",
    "PackedBlock",
    "TextEmbeddingCache",
    "clip_image_batch",
    "clip_preprocess_cfg",
    "encode_image",
    "encode_text_ids",
    "load_open_clip",
    "packed_vision_blocks",
    "parse_clip_weights",
    "release_packed_weights",
    "tokenize",
    "trim_padding",
]


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


def load_open_clip(spec: str | ClipWeights | None = None, *, device: Any = "cpu", precision: str = "fp32"):
    """Return ``(model, preprocess, tokenizer)`` for open_clip weights, honouring the offline policy.

    An installed backbone provider (:mod:`genmetrics.backbones.provider`, kind ``"open_clip"``) is asked
    first; its ``(model, tokenizer)`` is returned as ``(model, None, tokenizer)`` (genmetrics preprocesses
    with :func:`~genmetrics.backbones.clip_preprocess.clip_image_batch`, never with open_clip's ``preprocess``).

    >>> from genmetrics.backbones.provider import use_provider
    >>> from genmetrics.testing import tiny_backbones
    >>> with use_provider(tiny_backbones):  # nothing downloads: the provider answers
    ...     model, preprocess, tokenizer = load_open_clip("ViT-B-32/openai")
    >>> type(model).__name__, preprocess, type(tokenizer).__name__
    ('CLIP', None, 'SimpleTokenizer')

    The model is built outside ``torch.inference_mode`` even when called inside it (a metric loading its
    weights lazily during ``update``), so its weights are ordinary tensors with version counters and
    :func:`~genmetrics.backbones.clip_vision.encode_image` can keep their packed copy.
    """
    with torch.inference_mode(False):
        return _load_open_clip(spec, device=device, precision=precision)


def _load_open_clip(spec: str | ClipWeights | None, *, device: Any, precision: str):
    w = parse_clip_weights(spec)
    provided = provide("open_clip", str(w))
    if provided is not None:
        model, tokenizer = provided
        return model.to(device).eval(), None, tokenizer
    cache_dir = str(genmetrics_home() / "open_clip")
    looked = [cache_dir]
    if w.pretrained and (os.sep in w.pretrained or w.pretrained.endswith((".bin", ".pt", ".safetensors"))):
        if not Path(w.pretrained).exists():
            raise weights_unavailable(str(w), w.pretrained, "backbone=... or --weights MODEL:/path/to/ckpt")
        looked = [w.pretrained]
    try:
        if offline():
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # open_clip logs its own download failure on the root logger before raising; the error raised
        # below carries that message, so the log line would only print it twice.
        previous = logging.root.manager.disable
        logging.disable(logging.ERROR)
        try:
            model, _, preprocess = open_clip.create_model_and_transforms(
                w.model,
                pretrained=w.pretrained or None,
                device=device,
                precision=precision,
                cache_dir=cache_dir,
                weights_only=True,
            )
        finally:
            logging.disable(previous)
    except RuntimeError as e:
        msg = str(e).lower()
        if any(k in msg for k in ("unknown model", "not found", "download", "pretrained", "checkpoint")):
            raise weights_unavailable(str(w), looked, "backbone=... or --weights MODEL/TAG", e) from None
        raise
    except (OSError, ValueError) as e:
        raise weights_unavailable(str(w), looked, "backbone=... or --weights MODEL/TAG", e) from None
    tokenizer = open_clip.get_tokenizer(w.model)
    model.eval()
    return model, preprocess, tokenizer
