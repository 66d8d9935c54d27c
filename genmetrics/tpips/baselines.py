"""The Appendix C.3 zero-shot pairwise 0-10 score baseline: both images side by side, the rating question,
and the expected digit read from the digit-token probabilities, averaged over both orders."""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from genmetrics.errors import InputError
from genmetrics.tpips.base import VLMBase, side_by_side
from genmetrics.tpips.common import DEFAULT_IMAGE_SIZE, check_aspects, check_prompts, prompt_for

__all__ = ["PairwiseScoreModel"]


class PairwiseScoreModel(VLMBase):
    """Appendix C.3 pairwise 0-10 score: both images side by side, the rating question, and the expected
    digit ``E[d] = sum_d d * P(d)`` from the digit-token probabilities (renormalised over 0..9; when "10"
    is not a single token, ``P(10) = P("1") * P("0" | "1")`` is read in the same forward pass by appending
    "1"). Averaged over both left/right orders. Needs a backbone with an LM head.

    >>> from genmetrics.testing import random_images, tiny_qwen3vl_for_generation, tiny_qwen3vl_processor
    >>> model = PairwiseScoreModel(tiny_qwen3vl_for_generation(), tiny_qwen3vl_processor(), image_size=64)
    >>> a, b = random_images(2, 64, seed=1), random_images(2, 64, seed=2)
    >>> s = model.score(a, b, ["color", "overall"])
    >>> bool(((s >= 0) & (s <= 10)).all()), torch.allclose(s, model.score(b, a, ["color", "overall"]))
    (True, True)
    """

    def __init__(
        self,
        backbone: nn.Module,
        processor: Any,
        *,
        image_size: int | None = None,
        prompts: tuple[str, str] | None = None,
        vision_cache_size: int = 64,
        batch_size: int = 8,
        data_range: float = 1.0,
        image_modes: str = "official",
    ) -> None:
        super().__init__(
            backbone,
            processor,
            image_size=image_size or DEFAULT_IMAGE_SIZE,
            resize="square",
            vision_cache_size=vision_cache_size,
            batch_size=batch_size,
            data_range=data_range,
            image_modes=image_modes,
        )
        if self.lm_head is None:
            raise InputError(
                "the pairwise 0-10 score baseline needs a generative backbone with an LM head "
                "(e.g. Qwen3VLForConditionalGeneration / Qwen3-VL-8B-Instruct)"
            )
        self.prompts = check_prompts(prompts, "pairwise")
        digit_ids = []
        for d in range(10):
            t = self.text_ids(str(d))
            if len(t) != 1:
                raise InputError(f"the tokenizer does not have a single token for the digit {d}")
            digit_ids.append(t[0])
        self.digit_ids = digit_ids
        ten = self.text_ids("10")
        self.ten_id = ten[0] if len(ten) == 1 else None

    @torch.no_grad()
    def _expected(
        self, left: list[torch.Tensor], right: list[torch.Tensor], aspects: list[str]
    ) -> torch.Tensor:
        feats = self.vision_features(
            [side_by_side([a, b]) for a, b in zip(self.resized(left), self.resized(right))]
        )
        head = self.lm_head
        assert head is not None  # checked in __init__
        outs = []
        for i in range(0, len(feats), self.batch_size):
            items = [
                [
                    ("text", "<|im_start|>user\n"),
                    ("image", f),
                    ("text", prompt_for("pairwise", self.clip_aspect(a), self.prompts)),
                    ("text", "<|im_end|>\n<|im_start|>assistant\n"),
                ]
                + ([("text", "1")] if self.ten_id is None else [])
                for f, a in zip(feats[i : i + self.batch_size], aspects[i : i + self.batch_size])
            ]
            batch = self.build_sequences(items)
            hidden, _ = self.run_batch(batch)
            rows = torch.arange(hidden.shape[0], device=hidden.device)
            last = torch.tensor([n - 1 for n in batch.lengths], device=hidden.device)
            if self.ten_id is None:
                first = head(hidden[rows, last - 1]).double()
                nxt = torch.softmax(head(hidden[rows, last]).double(), -1)[
                    :, self.digit_ids[0]
                ]  # P("0" | "1")
                p = torch.softmax(first[:, self.digit_ids], -1)
                values = torch.arange(10, dtype=torch.float64, device=p.device)
                e = (p * values).sum(-1) - p[:, 1] * 1.0 + p[:, 1] * ((1 - nxt) * 1.0 + nxt * 10.0)
            else:
                first = head(hidden[rows, last]).double()
                p = torch.softmax(first[:, self.digit_ids + [self.ten_id]], -1)
                e = (p * torch.arange(11, dtype=torch.float64, device=p.device)).sum(-1)
            outs.append(e)
        return torch.cat(outs, 0)

    def score(self, images_a: Any, images_b: Any, aspects: Any) -> torch.Tensor:
        """``[B]`` expected 0-10 similarity rating, averaged over (a, b) and (b, a)."""
        a = self.load_images(images_a, name="images_a")
        b = self.load_images(images_b, name="images_b")
        if len(a) != len(b):
            raise InputError(f"images_a has {len(a)} images but images_b has {len(b)}")
        asp = check_aspects(aspects, len(a))
        return (0.5 * (self._expected(a, b, asp) + self._expected(b, a, asp))).float()

    similarity = score
