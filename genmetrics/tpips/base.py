"""The machinery every TPIPS model shares: images -> (resize policy) -> cached vision features -> the
language tower with explicit M-RoPE positions (the shared Qwen-VL runtime,
:mod:`genmetrics.backbones.qwen_vl`), plus text helpers and right-padded sequence building.

:class:`VLMBase` is the public API the fusion variants (:mod:`genmetrics.tpips.fusion`), the triplet head and
the pairwise baseline are written against: nothing outside this module reaches into its private state."""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import nn

from genmetrics.backbones.qwen_vl import (
    IMAGE_MODES,
    QwenResize,
    VisionCache,
    VisionEncoder,
    VisionFeatures,
    VLMParts,
    attn_implementation,
    keys_of,
    official_rgb_uint8,
    qwen_image,
    resolve_parts,
    run_language_model,
    scatter_features,
    token_ids,
)
from genmetrics.data.io.images import as_image_list
from genmetrics.data.io.pipeline import rgb_uint8
from genmetrics.errors import InputError
from genmetrics.tpips.common import DEFAULT_IMAGE_SIZE, MAX_ASPECT_TOKENS, check_aspects

__all__ = ["SequenceBatch", "Spans", "VLMBase", "make_resize", "side_by_side"]

#: a sequence segment: ``("text", str)``, ``("instruction", str)`` or ``("image", VisionFeatures)``
Segment = tuple[str, Any]


def make_resize(resize: str | None, image_size: int | None, factor: int) -> QwenResize:
    """``resize`` None: ``"square"`` when ``image_size`` is given (the older fixed-square policy), else
    ``"smart"`` (the official Qwen3-VL-Embedding policy).

    >>> make_resize(None, 64, 32).mode, make_resize(None, None, 32).mode, make_resize("square", None, 32).size
    ('square', 'smart', 448)
    """
    mode = resize or ("square" if image_size is not None else "smart")
    if mode == "square" and image_size is None:
        image_size = DEFAULT_IMAGE_SIZE
    return QwenResize(mode, int(image_size) if mode == "square" and image_size is not None else None, factor)


def side_by_side(images: Sequence[torch.Tensor]) -> torch.Tensor:
    """Images of one height placed left to right in one image (the triplet and pairwise prompts' strip).

    >>> tuple(side_by_side([torch.zeros(3, 64, 64), torch.ones(3, 64, 32)]).shape)
    (3, 64, 96)
    """
    return torch.cat(list(images), dim=-1)


@dataclass
class Spans:
    """Where the parts of one sequence are: ``images`` as ``(start, end)`` token ranges in order, and the
    instruction's range (None when the sequence has no ``("instruction", ...)`` segment).

    >>> Spans(images=[(5, 9)], instruction=(2, 4)).images[0]
    (5, 9)
    """

    images: list[tuple[int, int]] = field(default_factory=list)
    instruction: tuple[int, int] | None = None


@dataclass
class SequenceBatch:
    """A right-padded batch of chat sequences ready for the language tower (see :meth:`VLMBase.build_sequences`):
    token ids ``[B,S]``, attention mask ``[B,S]``, M-RoPE positions ``(3,B,S)``, the image-token mask ``[B,S]``,
    the vision features in sequence order, each row's real length and its :class:`Spans`.

    >>> from genmetrics.testing import random_images, tiny_tpips
    >>> model = tiny_tpips("late")
    >>> features = model.vision_features(model.resized(model.load_images(random_images(1, 64))))
    >>> batch = model.build_sequences([[("text", "<|im_start|>user\\n"), ("image", features[0])]])
    >>> (s0, s1), = batch.spans[0].images  # the 2 x 2 merged tokens of a 64 px image
    >>> tuple(batch.position_ids.shape[:2]), s1 - s0, bool((batch.input_ids[0, s0:s1] == model.image_token_id).all())
    ((3, 1), 4, True)
    """

    input_ids: torch.Tensor
    attention_mask: torch.Tensor
    position_ids: torch.Tensor
    visual_mask: torch.Tensor
    features: list[VisionFeatures]
    lengths: list[int]
    spans: list[Spans]


class VLMBase(nn.Module):
    """Images -> cached vision features -> language tower with explicit positions (see module docstring).

    >>> from genmetrics.testing import random_images, tiny_qwen3vl, tiny_qwen3vl_processor
    >>> base = VLMBase(tiny_qwen3vl(), tiny_qwen3vl_processor(), resize="smart")
    >>> images = base.resized(base.load_images(random_images(2, 50)))  # smart resize: 50 px -> 64 px
    >>> _ = base.vision_features(images + images)  # the same images again: from the cache
    >>> [tuple(x.shape) for x in images], base.vision_calls, base.hidden_size
    ([(3, 64, 64), (3, 64, 64)], 2, 64)
    """

    #: (template with {aspect}, template for "overall"); each model sets its own (see common.check_prompts)
    prompts: tuple[str, str]

    def __init__(
        self,
        backbone: nn.Module,
        processor: Any,
        *,
        image_size: int | None = None,
        resize: str | None = None,
        vision_cache_size: int = 64,
        batch_size: int = 16,
        vision_batch_size: int = 32,
        data_range: float = 1.0,
        max_aspect_tokens: int = MAX_ASPECT_TOKENS,
        image_modes: str = "official",
    ) -> None:
        super().__init__()
        if image_modes not in IMAGE_MODES:
            raise InputError(
                f"image_modes={image_modes!r}: expected 'official' (PIL modes converted as the Qwen3-VL-Embedding "
                "embedder does) or 'genmetrics' (alpha composited on white, 16/32-bit rescaled)"
            )
        self.image_modes = image_modes
        self.backbone = backbone
        self._parts = resolve_parts(backbone)
        if (
            processor is None
            or not hasattr(processor, "tokenizer")
            or not hasattr(processor, "image_processor")
        ):
            raise InputError(
                "processor: expected the model's transformers processor (with .tokenizer and "
                f".image_processor, e.g. Qwen3VLProcessor), got {type(processor).__name__}"
            )
        self.processor = processor
        self.tokenizer = processor.tokenizer
        self.vision = VisionEncoder(
            self._parts.base.visual,
            processor.image_processor,
            cache_size=vision_cache_size,
            batch_size=vision_batch_size,
        )
        self.patch_size, self.merge_size = self.vision.patch_size, self.vision.merge_size
        self.resize = make_resize(resize, image_size, self.vision.factor)
        self.data_range = float(data_range)
        self.batch_size = int(batch_size)
        self.max_aspect_tokens = int(max_aspect_tokens)
        ids = token_ids(self._parts.config, self.tokenizer)
        self.image_token_id, self.vision_start_id, self.vision_end_id, self.pad_id = (
            ids.image,
            ids.vision_start,
            ids.vision_end,
            ids.pad,
        )
        self._tok_cache: dict[str, list[int]] = {}

    # -- basic properties --------------------------------------------------------------------------
    @property
    def parts(self) -> VLMParts:
        """The backbone's pieces (base VLM with ``.visual`` and ``.language_model``, LM head, config)."""
        return self._parts

    @property
    def image_size(self) -> int | None:
        """Side of the square policy (None under the default ``"smart"`` policy)."""
        return self.resize.size

    @property
    def vision_cache(self) -> VisionCache:
        """The LRU cache of vision-tower features shared by every scoring call (keyed by image content, scoped by
        dtype and device)."""
        return self.vision.cache

    @property
    def vision_calls(self) -> int:
        """Images pushed through the vision tower so far (for tests and benchmarks)."""
        return self.vision.calls

    @property
    def language_model(self) -> Any:  # a transformers text model (duck-typed), not analysed by mypy
        """The backbone's language tower (a transformers text model)."""
        return self._parts.base.language_model

    @property
    def lm_head(self) -> nn.Module | None:
        """The backbone's LM head (None for a base ``Qwen3VLModel``)."""
        return self._parts.lm_head

    @property
    def attn_implementation(self) -> str:
        """The language tower's attention implementation (``"sdpa"``, ``"eager"``, ...)."""
        return attn_implementation(self._parts)

    @property
    def device(self) -> torch.device:
        """The device of the language tower's weights (where inputs go)."""
        return self.language_model.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        """The floating-point dtype of the language tower's weights."""
        return self.language_model.embed_tokens.weight.dtype

    @property
    def hidden_size(self) -> int:
        """Width of the language tower's hidden states (its token embedding size)."""
        return int(self.language_model.embed_tokens.weight.shape[1])

    def train(self, mode: bool = True) -> VLMBase:
        """Set training mode like ``nn.Module.train``, keeping the frozen vision tower in eval mode (no dropout).
        Returns the model."""
        super().train(mode)
        self._parts.base.visual.eval()  # frozen tower: never dropout
        return self

    # -- text --------------------------------------------------------------------------------------
    def text_ids(self, text: str) -> list[int]:
        """Token ids of ``text`` without special-token additions (cached).

        >>> from genmetrics.testing import tiny_tpips
        >>> model = tiny_tpips()
        >>> model.text_ids("<|im_start|>") == model.text_ids("<|im_start|>") and len(model.text_ids("<|im_start|>"))
        1
        """
        ids = self._tok_cache.get(text)
        if ids is None:
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if len(self._tok_cache) < 4096:
                self._tok_cache[text] = ids
        return ids

    def clip_aspect(self, aspect: str) -> str:
        """``aspect``, truncated by the tokenizer to ``max_aspect_tokens`` with a warning when longer (never by
        slicing the prompt's ids, so the prompt's closing tokens survive)."""
        enc = self.tokenizer(
            aspect, add_special_tokens=False, truncation=True, max_length=self.max_aspect_tokens
        )
        ids = enc["input_ids"]
        if len(ids) >= self.max_aspect_tokens:
            full = len(self.tokenizer(aspect, add_special_tokens=False)["input_ids"])
            if full > self.max_aspect_tokens:
                warnings.warn(
                    f"aspect of {full} tokens truncated to {self.max_aspect_tokens} tokens by the tokenizer",
                    stacklevel=3,
                )
                return self.tokenizer.decode(ids)
        return aspect

    # -- images ------------------------------------------------------------------------------------
    def load_triplets(
        self, images1: Any, images2: Any, images3: Any, aspects: Any
    ) -> tuple[list[list[torch.Tensor]], list[str]]:
        """The three image columns of a batch of triplets, decoded, and one aspect per row (checked)."""
        cols = [
            self.load_images(im, name=f"images{i + 1}") for i, im in enumerate((images1, images2, images3))
        ]
        if not (len(cols[0]) == len(cols[1]) == len(cols[2])):
            raise InputError(
                f"triplets: got {len(cols[0])}, {len(cols[1])} and {len(cols[2])} images; "
                "pass one of each per row"
            )
        return cols, check_aspects(aspects, len(cols[0]))

    @property
    def input_transform(self) -> Any:
        """What the input pipeline's workers do per decoded file for this model: the RGB conversion
        :attr:`image_modes` names, as ``uint8 [3,H,W]`` (:meth:`load_images` of it equals that of the file)."""
        return official_rgb_uint8 if self.image_modes == "official" else rgb_uint8

    def load_images(self, images: Any, *, name: str = "images") -> list[torch.Tensor]:
        """Any accepted batch -> list of float ``[3,H,W]`` tensors in [0,1] at their own size (the resize
        policy is applied when they are scored), PIL modes converted by :attr:`image_modes`
        (:func:`~genmetrics.backbones.qwen_vl.qwen_image`). An input object repeated in the batch is decoded once."""
        items = as_image_list(images, name=name)
        if not items:
            raise InputError(f"{name}: the batch is empty; expected at least one image")
        done: dict[int, torch.Tensor] = {}
        out = []
        for i, x in enumerate(items):
            t = done.get(id(x))
            if t is None:
                label = str(x) if isinstance(x, (str, os.PathLike)) else f"{name}[{i}]"
                t = qwen_image(x, image_modes=self.image_modes, data_range=self.data_range, name=label)
                t = done[id(x)] = t.cpu()
            out.append(t)
        return out

    def resized(self, images: Sequence[torch.Tensor]) -> list[torch.Tensor]:
        """Each image under the resize policy, on its own (late fusion); a repeated object is resized once."""
        memo: dict[int, torch.Tensor] = {}
        for x in images:
            if id(x) not in memo:
                memo[id(x)] = self.resize.apply(x)
        return [memo[id(x)] for x in images]

    def resized_pairs(
        self, a: Sequence[torch.Tensor], b: Sequence[torch.Tensor]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Both images of each pair at one size (:meth:`QwenResize.pair_size`), for token-wise comparison."""
        memo: dict[tuple[int, tuple[int, int]], torch.Tensor] = {}

        def one(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
            k = (id(x), size)
            if k not in memo:
                memo[k] = self.resize.apply(x, size)
            return memo[k]

        out_a, out_b = [], []
        for x, y in zip(a, b):
            size = self.resize.pair_size(x, y)
            out_a.append(one(x, size))
            out_b.append(one(y, size))
        return out_a, out_b

    def vision_features(
        self, images: list[torch.Tensor], *, use_cache: bool = True, keys: list[str] | None = None
    ) -> list[VisionFeatures]:
        """Features of already-resized images; every distinct image goes through the vision tower once."""
        return self.vision.features(
            images, keys=keys, use_cache=use_cache and self.vision_cache.max_items > 0
        )

    @staticmethod
    def content_keys(images: list[torch.Tensor]) -> list[str]:
        """Content hashes of images (an object repeated in the list is hashed once)."""
        return keys_of(images)

    # -- sequences ---------------------------------------------------------------------------------
    def build_sequences(self, items: list[list[Segment]]) -> SequenceBatch:
        """Right-padded batch of sequences made of ``("text", str)`` / ``("instruction", str)`` /
        ``("image", VisionFeatures)`` segments, with the standard Qwen3-VL layout (``<|vision_start|>`` image
        tokens ``<|vision_end|>``) and M-RoPE positions as ``Qwen3VLModel.get_rope_index`` computes them."""
        seqs, poss, vis_masks, feats, spans = [], [], [], [], []
        for segs in items:
            ids: list[int] = []
            pos: list[tuple[int, int, int]] = []
            vmask: list[bool] = []
            fs: list[VisionFeatures] = []
            span = Spans()
            p = 0
            for kind, val in segs:
                if kind in ("text", "instruction"):
                    t = self.text_ids(val)
                    if kind == "instruction":
                        span.instruction = (len(ids), len(ids) + len(t))
                    ids += t
                    pos += [(p + i, p + i, p + i) for i in range(len(t))]
                    vmask += [False] * len(t)
                    p += len(t)
                    continue
                f: VisionFeatures = val
                gh, gw = f.grid
                ids.append(self.vision_start_id)
                pos.append((p, p, p))
                p += 1
                span.images.append((len(ids), len(ids) + gh * gw))
                ids += [self.image_token_id] * (gh * gw)
                pos += [(p, p + r, p + c) for r in range(gh) for c in range(gw)]
                p += max(gh, gw)
                ids.append(self.vision_end_id)
                pos.append((p, p, p))
                p += 1
                vmask += [False] + [True] * (gh * gw) + [False]
                fs.append(f)
            seqs.append(ids)
            poss.append(pos)
            vis_masks.append(vmask)
            feats.append(fs)
            spans.append(span)
        B, S = len(seqs), max(len(s) for s in seqs)
        input_ids = torch.full((B, S), self.pad_id, dtype=torch.long)
        attn = torch.zeros((B, S), dtype=torch.long)
        position_ids = torch.zeros((3, B, S), dtype=torch.long)
        vmask_t = torch.zeros((B, S), dtype=torch.bool)
        for b in range(B):
            n = len(seqs[b])
            input_ids[b, :n] = torch.tensor(seqs[b])
            attn[b, :n] = 1
            pt = torch.tensor(poss[b], dtype=torch.long).T
            position_ids[:, b, :n] = pt
            last = int(pt[:, -1].max()) if n else 0
            position_ids[:, b, n:] = torch.arange(last + 1, last + 1 + S - n)
            vmask_t[b, :n] = torch.tensor(vis_masks[b])
        dev = self.device
        return SequenceBatch(
            input_ids=input_ids.to(dev),
            attention_mask=attn.to(dev),
            position_ids=position_ids.to(dev),
            visual_mask=vmask_t.to(dev),
            features=[f for fs in feats for f in fs],
            lengths=[len(s) for s in seqs],
            spans=spans,
        )

    def embed_inputs(
        self, input_ids: torch.Tensor, visual_mask: torch.Tensor, features: list[VisionFeatures]
    ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        """Token embeddings with the image features at ``visual_mask``, and the DeepStack levels
        (:func:`genmetrics.backbones.qwen_vl.scatter_features`)."""
        return scatter_features(self.language_model, input_ids, visual_mask, features)

    def run_language_model(
        self,
        embeds: torch.Tensor,
        attention_mask: torch.Tensor,
        position_ids: torch.Tensor,
        visual_mask: torch.Tensor,
        deepstack: list[torch.Tensor] | None,
        capture: Sequence[int] = (),
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """The language tower on ``inputs_embeds`` (:func:`genmetrics.backbones.qwen_vl.run_language_model`):
        ``(last hidden states, {layer: its output})``."""
        return run_language_model(
            self.language_model, embeds, attention_mask, position_ids, visual_mask, deepstack, capture
        )

    def run_batch(
        self, batch: SequenceBatch, capture: Sequence[int] = ()
    ) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        """The language tower on a :meth:`build_sequences` batch: ``(last hidden states, captured layers)``."""
        embeds, ds = self.embed_inputs(batch.input_ids, batch.visual_mask, batch.features)
        return self.run_language_model(
            embeds, batch.attention_mask, batch.position_ids, batch.visual_mask, ds, capture
        )

    def last_token_states(self, batch: SequenceBatch) -> torch.Tensor:
        """``[B,D]`` final hidden state of each sequence's last real token (right padding)."""
        hidden, _ = self.run_batch(batch)
        last = torch.tensor([n - 1 for n in batch.lengths], device=hidden.device)
        return hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
