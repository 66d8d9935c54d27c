"""Every private open_clip member genmetrics calls, in one place.

* ``VisionTransformer._embeds(images)``: patch embedding, class token, positions, patch dropout and
  ``ln_pre`` -- the input of the first block. The fast image path (:mod:`genmetrics.backbones.clip_vision`)
  and RA-CLIPScore's hand-run blocks (:mod:`genmetrics.raclip.model`) start from it, so a tower that adds
  a step there in a later release is still embedded exactly as its own ``forward`` does.
* ``TextTransformer._embeds(ids)``: the token embeddings and the attention mask (causal plus the padding
  mask of towers built with ``use_pad_mask``) at the ids' length; the trimmed text path
  (:mod:`genmetrics.backbones.clip_text`) takes the mask from it.
* ``open_clip.pretrained._get_safe_alternatives(filename)``: the ``.safetensors`` file open_clip tries
  before ``filename`` on the Hugging Face Hub; ``genmetrics weights`` names the same file.

open_clip has no public equivalent of any of them. A tower without ``_embeds`` (:func:`has_embeds` is
False) takes the public ``encode_image`` / ``encode_text`` path: slower, same score. Calling a wrapper on
an open_clip that dropped the member raises :class:`~genmetrics.errors.DependencyChanged`, naming the member and the installed
version; ``tests/backbones/test_openclip_compat.py`` runs :func:`check_openclip_private_apis` on the installed
open_clip.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import torch

from genmetrics.errors import DependencyChanged

#: the private names used here (the scan in tests/test_private_access.py allows them in this file only)
PRIVATE_APIS = (
    "open_clip.transformer.VisionTransformer._embeds",
    "open_clip.transformer.TextTransformer._embeds",
    "open_clip.pretrained._get_safe_alternatives",
)


#: the supported range, named in the error when a member is missing
REQUIREMENT = "open_clip_torch>=3.1,<4"


def _changed(member: str) -> DependencyChanged:
    return DependencyChanged.missing("open_clip_torch", member, __name__, REQUIREMENT)


def _member(owner: Any, name: str, label: str) -> Callable[..., Any]:
    fn = getattr(owner, name, None)
    if not callable(fn):
        raise _changed(label)
    return fn


def has_embeds(tower: Any) -> bool:
    """Whether an open_clip vision or text tower has ``_embeds`` (else callers take the public path).

    >>> from genmetrics.testing import tiny_clip
    >>> model = tiny_clip()[0]
    >>> has_embeds(model.visual), has_embeds(torch.nn.Linear(1, 1))
    (True, False)
    """
    return callable(getattr(tower, "_embeds", None))


def vision_embeds(visual: Any, images: torch.Tensor) -> torch.Tensor:
    """The input ``[B, 1 + patches, width]`` of an open_clip ``VisionTransformer``'s first block for
    ``images [B, 3, H, W]`` (patch embedding, class token, positions, patch dropout, ``ln_pre``).

    >>> from genmetrics.testing import tiny_clip
    >>> visual = tiny_clip()[0].visual
    >>> tuple(vision_embeds(visual, torch.zeros(2, 3, 32, 32)).shape)  # 16 patches + [CLS], width 64
    (2, 17, 64)
    """
    return _member(visual, "_embeds", f"{type(visual).__name__}._embeds")(images)


def text_embeds(tower: Any, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor | None]:
    """``(token embeddings + positions [B, L, width], attention mask or None)`` of an open_clip
    ``TextTransformer`` for ``ids [B, L]``; the mask is the causal mask at length ``L`` plus, for towers
    built with ``use_pad_mask``, the padding mask per text.

    >>> from open_clip.transformer import TextTransformer
    >>> tower = TextTransformer(context_length=8, vocab_size=100, width=16, heads=2, layers=1, output_dim=8)
    >>> x, mask = text_embeds(tower, torch.ones(2, 5, dtype=torch.long))
    >>> tuple(x.shape), tuple(mask.shape)  # open_clip's causal mask at the full context length
    ((2, 5, 16), (8, 8))
    """
    return _member(tower, "_embeds", f"{type(tower).__name__}._embeds")(ids)


def safetensors_alternatives(filename: str) -> list[str]:
    """The ``.safetensors`` files open_clip looks for on the Hub before ``filename``, in its order.

    >>> safetensors_alternatives("open_clip_pytorch_model.bin")
    ['open_clip_model.safetensors']
    """
    import open_clip.pretrained as ocp

    fn = _member(ocp, "_get_safe_alternatives", "open_clip.pretrained._get_safe_alternatives")
    return list(fn(filename))


def check_openclip_private_apis() -> None:
    """Raise :class:`~genmetrics.errors.DependencyChanged` naming the first member of :data:`PRIVATE_APIS` the installed
    open_clip lacks.

    >>> check_openclip_private_apis()
    """
    import open_clip.pretrained as ocp
    import open_clip.transformer as oct

    for owner, name, label in (
        (oct.VisionTransformer, "_embeds", PRIVATE_APIS[0]),
        (oct.TextTransformer, "_embeds", PRIVATE_APIS[1]),
        (ocp, "_get_safe_alternatives", PRIVATE_APIS[2]),
    ):
        _member(owner, name, label)
