"""Late fusion (the Qwen3-VL-Embedding format): the instruction in the system turn, the image in the user
turn, then ``<|im_start|>assistant\\n``; the embedding is the L2-normalised final (post-norm) hidden state of
the last real token (right padding); ``f`` = cosine. Mid fusion reuses the same sequences."""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from genmetrics.backbones.qwen_vl import VisionFeatures
from genmetrics.tpips.common import prompt_for


def single_items(model: Any, feats: list[VisionFeatures], aspects: list[str]) -> list[list[tuple[str, Any]]]:
    """One ``system: instruction / user: image / assistant`` sequence per (image, aspect).

    >>> from genmetrics.testing import random_images, tiny_tpips
    >>> model = tiny_tpips("late")
    >>> features = model.vision_features(model.resized(model.load_images(random_images(1, 64))))
    >>> [kind for kind, _ in single_items(model, features, ["color"])[0]]
    ['text', 'instruction', 'text', 'image', 'text']
    """
    items = []
    for f, a in zip(feats, aspects):
        instr = prompt_for("late", model._clip_aspect(a), model.prompts)
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


def late_embed(
    model: Any, images: list[torch.Tensor], aspects: list[str], *, keys: list[str] | None = None
) -> torch.Tensor:
    """``[B,D]`` float32 unit embeddings of resized images under their aspects (keeps the graph).

    >>> from genmetrics.testing import random_images, tiny_tpips
    >>> model = tiny_tpips("late")
    >>> e = late_embed(model, model.resized(model.load_images(random_images(2, 64))), ["color", "overall"])
    >>> tuple(e.shape), torch.allclose(e.norm(dim=-1), torch.ones(2))
    ((2, 64), True)
    """
    feats = model.vision_features(images, keys=keys)
    outs = []
    for i in range(0, len(images), model.batch_size):
        batch = model._build_single(
            single_items(model, feats[i : i + model.batch_size], aspects[i : i + model.batch_size])
        )
        outs.append(F.normalize(model.last_token_states(batch).float(), dim=-1))
    return torch.cat(outs, 0)
