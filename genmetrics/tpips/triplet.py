"""The triplet-head variant (Appendix B.1) and the zero-shot triplet baseline (Appendix C.3): the three
images side by side, "which is the most different", answer logits for left / middle / right from a 3-way
head initialised from the LM-head rows of the answer tokens, averaged over the 6 orders.

Each image is first brought to ``image_size x image_size`` (the square policy, default 448) so the strip is
``S x 3S``, itself a multiple of 32 within Qwen3-VL's pixel budget (the official ``smart_resize`` leaves it
as is)."""

from __future__ import annotations

import itertools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from genmetrics.errors import InputError
from genmetrics.tpips.adapter import finish_loading, open_adapter, write_adapter
from genmetrics.tpips.base import VLMBase, side_by_side
from genmetrics.tpips.common import (
    DEFAULT_IMAGE_SIZE,
    FORMAT,
    MAX_ASPECT_TOKENS,
    check_aspects,
    check_prompts,
    prompt_for,
)
from genmetrics.tpips.fusion import check_head_tensors

__all__ = ["ANSWERS_3", "TPIPSTripletModel"]

ANSWERS_3 = ("left", "middle", "right")


def _mean_over_orders(fn, columns: list[list[torch.Tensor]], orders: list[tuple[int, ...]]) -> torch.Tensor:
    """Average ``fn(ordered columns) -> [B,k]`` probabilities mapped back to the original positions."""
    total = None
    for order in orders:
        probs = fn([columns[j] for j in order])
        back = torch.zeros_like(probs)
        for pos, orig in enumerate(order):
            back[:, orig] = probs[:, pos]
        total = back if total is None else total + back
    assert total is not None  # at least one order
    return total / len(orders)


class TPIPSTripletModel(VLMBase):
    """Appendix B.1 triplet head (trainable) and Appendix C.3 zero-shot triplet baseline.

    The three images (each resized to ``image_size``) are concatenated horizontally into one image; the
    model answers which one is the most different. A 3-way linear head over the final hidden state of the
    last prompt token, initialised from the LM-head rows (or tied input embeddings) of the answer tokens
    ``left`` / ``middle`` / ``right``, gives the logits; untrained it reproduces the zero-shot answer
    probabilities. Inference averages the probabilities over all 6 orders (2 for 2AFC) mapped back to the
    original positions; training permutes each triplet at random (permutation augmentation).

    >>> from genmetrics.testing import random_images, tiny_qwen3vl_for_generation, tiny_qwen3vl_processor
    >>> model = TPIPSTripletModel(tiny_qwen3vl_for_generation(), tiny_qwen3vl_processor(), image_size=64)
    >>> x1, x2, x3 = (random_images(2, 64, seed=s) for s in (1, 2, 3))
    >>> p = model.odd_one_out(x1, x2, x3, ["color", "overall"])
    >>> tuple(p.shape), torch.allclose(p.sum(1), torch.ones(2))
    ((2, 3), True)
    >>> torch.allclose(model.two_afc(x1, x2, x3, ["color", "overall"]).sum(1), torch.ones(2))
    True
    """

    variant = "triplet"

    def __init__(
        self,
        backbone: nn.Module,
        processor: Any,
        *,
        image_size: int | None = None,
        prompts: tuple[str, str] | None = None,
        two_afc_prompts: tuple[str, str] | None = None,
        vision_cache_size: int = 8,
        batch_size: int = 8,
        data_range: float = 1.0,
        max_aspect_tokens: int = MAX_ASPECT_TOKENS,
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
            max_aspect_tokens=max_aspect_tokens,
            image_modes=image_modes,
        )
        self.prompts = check_prompts(prompts, "triplet")
        self.two_afc_prompts = check_prompts(two_afc_prompts, "triplet_2afc", name="two_afc_prompts")
        self.answer_ids = self._answer_token_ids(ANSWERS_3)
        weight = self._answer_rows(self.answer_ids)
        self.head = nn.Linear(self.hidden_size, 3, bias=True)
        with torch.no_grad():
            self.head.weight.copy_(weight.float())
            self.head.bias.zero_()
        self.head.to(self.device)
        self.temperature = 1.0

    def _answer_token_ids(self, words: Sequence[str]) -> list[int]:
        ids = [self.text_ids(w)[0] for w in words]
        if len(set(ids)) != len(ids):
            raise InputError(f"the tokenizer maps the answers {list(words)} to clashing first tokens {ids}")
        return ids

    def _answer_rows(self, ids: list[int]) -> torch.Tensor:
        w = getattr(self.lm_head, "weight", None)  # None without an LM head (tied embeddings)
        if not isinstance(w, torch.Tensor):
            w = self.language_model.embed_tokens.weight
        return w.detach()[ids].clone()

    def _logits(
        self, images: list[torch.Tensor], aspects: list[str], prompts: tuple[str, str]
    ) -> torch.Tensor:
        feats = self.vision_features(images, use_cache=self.vision_cache.max_items > 0)
        outs = []
        for i in range(0, len(images), self.batch_size):
            items = [
                [
                    ("text", "<|im_start|>user\n"),
                    ("image", f),
                    ("text", prompt_for("triplet", self.clip_aspect(a), prompts)),
                    ("text", "<|im_end|>\n<|im_start|>assistant\n"),
                ]
                for f, a in zip(feats[i : i + self.batch_size], aspects[i : i + self.batch_size])
            ]
            batch = self.build_sequences(items)
            h = self.last_token_states(batch)
            outs.append(self.head(h.to(self.head.weight.dtype)))
        return torch.cat(outs, 0)

    def ordered_logits(
        self, x1: list[torch.Tensor], x2: list[torch.Tensor], x3: list[torch.Tensor], aspects: list[str]
    ) -> torch.Tensor:
        """``[B,3]`` answer logits for the images in the given (left, middle, right) order."""
        x1, x2, x3 = self.resized(x1), self.resized(x2), self.resized(x3)
        return self._logits([side_by_side([a, b, c]) for a, b, c in zip(x1, x2, x3)], aspects, self.prompts)

    def forward(
        self,
        images1: Any,
        images2: Any,
        images3: Any,
        aspects: list[str],
        permutations: list[tuple[int, int, int]] | None = None,
    ) -> torch.Tensor:
        """Training forward: ``[B,3]`` logits over the original positions; each row ``i`` is shown in the
        order ``permutations[i]`` (identity if None)."""
        cols = [self.load_images(im) for im in (images1, images2, images3)]
        n = len(cols[0])
        perms = permutations or [(0, 1, 2)] * n
        shown = [[cols[perms[i][p]][i] for i in range(n)] for p in range(3)]
        logits = self.ordered_logits(shown[0], shown[1], shown[2], list(aspects))
        back = torch.empty_like(logits)
        for i, order in enumerate(perms):
            for pos, orig in enumerate(order):
                back[i, orig] = logits[i, pos]
        return back

    def odd_one_out(self, images1: Any, images2: Any, images3: Any, aspects: Any) -> torch.Tensor:
        """``[B,3]`` probability that each image is the odd one out, averaged over the 6 orders."""
        cols, asp = self.load_triplets(images1, images2, images3, aspects)
        with torch.no_grad():
            return _mean_over_orders(
                lambda c: torch.softmax(self.ordered_logits(c[0], c[1], c[2], asp).double(), 1),
                cols,
                list(itertools.permutations(range(3))),
            ).float()

    def two_afc(self, reference: Any, candidates0: Any, candidates1: Any, aspects: Any) -> torch.Tensor:
        """``[B,2]`` probability that each candidate is more similar to the reference (reference in the
        centre, both left/right orders averaged)."""
        ref = self.load_images(reference, name="reference")
        c0 = self.load_images(candidates0, name="candidates0")
        c1 = self.load_images(candidates1, name="candidates1")
        if not (len(ref) == len(c0) == len(c1)):
            raise InputError(f"2AFC: got {len(ref)} references and {len(c0)}/{len(c1)} candidates")
        asp = check_aspects(aspects, len(ref))

        def probs(cands: list[list[torch.Tensor]]) -> torch.Tensor:
            imgs = [
                side_by_side([x, r, y])
                for x, r, y in zip(self.resized(cands[0]), self.resized(ref), self.resized(cands[1]))
            ]
            lg = self._logits(imgs, asp, self.two_afc_prompts)
            return torch.softmax(lg[:, [0, 2]].double(), 1)  # left / right

        with torch.no_grad():
            return _mean_over_orders(probs, [c0, c1], [(0, 1), (1, 0)]).float()

    def config_dict(self, base_weights: str | None = None) -> dict[str, Any]:
        """The ``tpips.json`` of this model."""
        return {
            "format": FORMAT,
            "variant": "triplet",
            "image_size": self.image_size,
            "image_modes": self.image_modes,
            "prompts": list(self.prompts),
            "base_weights": base_weights,
        }

    def save_pretrained(self, path: str | os.PathLike, *, base_weights: str | None = None) -> Path:
        """Write the adapter folder (peft adapter, ``tpips.json``, the head in ``tpips_head.safetensors``)."""
        return write_adapter(path, self.backbone, self.head_state_dict(), self.config_dict(base_weights))

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """The 3-way head's tensors (``head.weight``, ``head.bias``)."""
        return {f"head.{k}": v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()}

    def load_head_state_dict(self, sd: dict[str, torch.Tensor], *, source: str = "head state") -> None:
        """Load :meth:`head_state_dict`'s tensors (missing, extra, misshaped or non-finite ones refused)."""
        sd = check_head_tensors(sd, self.head_state_dict(), source=source)
        self.head.load_state_dict({k[len("head.") :]: v for k, v in sd.items()})
        self.head.to(self.device)

    @classmethod
    def from_pretrained(
        cls,
        path: str | os.PathLike,
        *,
        backbone: nn.Module | None = None,
        processor: Any = None,
        weights: str | None = None,
        device: Any = None,
        dtype: Any = None,
        image_size: int | None = None,
        resize: str | None = None,
        **kwargs: Any,
    ) -> TPIPSTripletModel:
        """Load a saved triplet-head adapter folder or hub id (``resize`` is accepted and ignored: the strip
        always uses the square policy).

        >>> import tempfile
        >>> from genmetrics.testing import tiny_qwen3vl_for_generation, tiny_qwen3vl_processor
        >>> proc = tiny_qwen3vl_processor()
        >>> model = TPIPSTripletModel(tiny_qwen3vl_for_generation(), proc, image_size=64)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     again = TPIPSTripletModel.from_pretrained(model.save_pretrained(d), backbone=tiny_qwen3vl_for_generation(),
        ...                                               processor=proc)
        >>> again.image_size, torch.equal(again.head.weight, model.head.weight)
        (64, True)
        """
        folder, cfg, backbone, processor = open_adapter(
            path,
            ("triplet",),
            "use TPIPSModel.from_pretrained (or load_tpips)",
            backbone=backbone,
            processor=processor,
            weights=weights,
            dtype=dtype,
            device=device,
        )
        model = cls(
            backbone,
            processor,
            image_size=image_size or cfg.get("image_size"),
            prompts=tuple(cfg["prompts"]) if cfg.get("prompts") else None,
            **{"image_modes": cfg.get("image_modes", "genmetrics"), **kwargs},
        )
        return finish_loading(model, folder, device)
