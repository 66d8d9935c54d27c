"""Late fusion (the Qwen3-VL-Embedding format): the instruction in the system turn, the image in the user
turn, then ``<|im_start|>assistant\\n``; the embedding is the L2-normalised final (post-norm) hidden state of
the last real token (right padding); ``f`` = cosine. Mid fusion reuses the same sequences."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from genmetrics.backbones.qwen_vl import VisionFeatures
from genmetrics.tpips.base import Segment, VLMBase
from genmetrics.tpips.common import prompt_for, unit_cosine
from genmetrics.tpips.fusion import EncodedFusion, FusionOptions

__all__ = ["LateFusion", "embedding_sequences"]


def embedding_sequences(
    base: VLMBase, feats: list[VisionFeatures], aspects: list[str], family: str
) -> list[list[Segment]]:
    """One ``system: instruction / user: image / assistant`` sequence per (image, aspect), the instruction
    from the prompt ``family`` (``"late"``, ``"mid"``) and the model's templates.

    >>> from genmetrics.testing import random_images, tiny_tpips
    >>> model = tiny_tpips("late")
    >>> features = model.vision_features(model.resized(model.load_images(random_images(1, 64))))
    >>> [kind for kind, _ in embedding_sequences(model, features, ["color"], "late")[0]]
    ['text', 'instruction', 'text', 'image', 'text']
    """
    items = []
    for f, a in zip(feats, aspects):
        instr = prompt_for(family, base.clip_aspect(a), base.prompts)
        items.append(
            [
                ("text", "<|im_start|>system\n"),
                ("instruction", instr),
                ("text", "<|im_end|>\n<|im_start|>user\n"),
                ("image", f),
                ("text", "<|im_end|>\n<|im_start|>assistant\n"),
            ]
        )
    return items


class LateFusion(EncodedFusion):
    """``f = cos(z_a, z_b)`` of the unit embeddings (:meth:`embed`); exactly 1 for identical images and exactly
    symmetric without gradients (:func:`~genmetrics.tpips.common.unit_cosine`), the plain dot product of the
    unit vectors with gradients.

    >>> from genmetrics.testing import random_images, tiny_tpips
    >>> model = tiny_tpips("late")
    >>> z = model.fusion.embed(model, model.load_images(random_images(2, 64)), ["color", "overall"])
    >>> tuple(z.shape), torch.allclose(z.norm(dim=-1), torch.ones(2))
    ((2, 64), True)
    """

    name = "late"
    value_range = (-1.0, 1.0)

    def __init__(self, base: VLMBase, options: FusionOptions) -> None:
        super().__init__()

    def encode(
        self, base: VLMBase, images: list[torch.Tensor], aspects: list[str], *, keys: list[str] | None = None
    ) -> torch.Tensor:
        """``[N,D]`` float32 unit embeddings of resized images under their aspects (keeps the graph)."""
        feats = base.vision_features(images, keys=keys)
        outs = []
        for i in range(0, len(images), base.batch_size):
            sl = slice(i, i + base.batch_size)
            batch = base.build_sequences(embedding_sequences(base, feats[sl], aspects[sl], self.name))
            outs.append(F.normalize(base.last_token_states(batch).float(), dim=-1))
        return torch.cat(outs, 0)

    def compare(self, encoding: Any, rows_a: list[int], rows_b: list[int]) -> torch.Tensor:
        """``[R]`` cosine similarities of the unit embeddings at ``rows_a`` and ``rows_b`` of ``encoding`` (a
        plain dot product while training, so gradients flow)."""
        z: torch.Tensor = encoding
        if torch.is_grad_enabled() and z.requires_grad:
            return (z[rows_a] * z[rows_b]).sum(-1)
        return unit_cosine(z[rows_a], z[rows_b])

    def embed(self, base: VLMBase, images: list[torch.Tensor], aspects: list[str]) -> torch.Tensor:
        """``[B, D]`` unit embeddings of ``images`` (resized by the backbone's policy) under ``aspects``."""
        return self.encode(base, base.resized(images), aspects)
