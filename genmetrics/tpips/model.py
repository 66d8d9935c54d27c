"""TPIPS models on the Qwen3-VL family (Wang et al., "The Many Senses of Visual Similarity").

* :class:`TPIPSModel` -- aspect-conditioned pairwise similarity ``f(x1, x2 | c)`` in three variants, one
  :class:`~genmetrics.tpips.fusion.Fusion` class each: ``"late"`` (:class:`~genmetrics.tpips.late.LateFusion`,
  the Qwen3-VL-Embedding embedding and cosine), ``"mid"`` (:class:`~genmetrics.tpips.mid.MidFusion`, Eq. 3)
  and ``"early"`` (:class:`~genmetrics.tpips.early.EarlyFusion`, Appendix C.2). The model holds the shared
  runtime (:class:`~genmetrics.tpips.base.VLMBase`), the public API, Eq. 2 and saving; the fusion does the
  comparing (:data:`FUSIONS` maps a variant name to its class).
* :class:`~genmetrics.tpips.triplet.TPIPSTripletModel` (Appendix B.1 / C.3 triplet head) and
  :class:`~genmetrics.tpips.baselines.PairwiseScoreModel` (Appendix C.3 0-10 score) are re-exported here, as
  are the constants of :mod:`genmetrics.tpips.common`. Loading a saved adapter of any variant:
  :func:`genmetrics.tpips.load_tpips`.

Images: anything :func:`genmetrics.data.io.images.load_batch` accepts. Default ``resize="smart"``: each image
is brought to its official Qwen3-VL-Embedding size (:func:`genmetrics.backbones.qwen_vl.smart_resize`,
aspect kept); mid and early fusion, which compare two images token by token, bring both images of a pair to
one shared size. ``resize="square"`` (or ``image_size=S``) is the older fixed ``S x S`` policy.

The vision tower is frozen and aspect-independent: its output (merged tokens and DeepStack features) is
computed once per distinct image and reused across aspects, pairs and calls
(:class:`genmetrics.backbones.qwen_vl.VisionEncoder`); the language tower is then called with
``inputs_embeds``, explicit M-RoPE positions and the DeepStack features at the image positions, which
reproduces the standard ``Qwen3VLModel`` forward exactly (``tests/tpips/test_late.py``).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from genmetrics.errors import InputError
from genmetrics.tpips.adapter import finish_loading, open_adapter, resize_options, write_adapter
from genmetrics.tpips.base import VLMBase
from genmetrics.tpips.baselines import PairwiseScoreModel
from genmetrics.tpips.common import (
    CONFIG_NAME,
    DEFAULT_IMAGE_SIZE,
    DEFAULT_TEMPERATURE,
    DEFAULT_WEIGHTS,
    FORMAT,
    HEAD_NAME,
    MAX_ASPECT_TOKENS,
    PROMPTS,
    TRIPLET_WEIGHTS,
    VARIANTS,
    WEIGHTS_8B,
    check_aspects,
    check_prompts,
    is_overall,
    prompt_for,
)
from genmetrics.tpips.early import EarlyFusion
from genmetrics.tpips.fusion import Fusion, FusionOptions
from genmetrics.tpips.late import LateFusion
from genmetrics.tpips.mid import MidFusion
from genmetrics.tpips.triplet import TPIPSTripletModel

__all__ = [
    "CONFIG_NAME",
    "DEFAULT_IMAGE_SIZE",
    "DEFAULT_TEMPERATURE",
    "DEFAULT_WEIGHTS",
    "FORMAT",
    "FUSIONS",
    "HEAD_NAME",
    "PROMPTS",
    "PairwiseScoreModel",
    "TPIPSModel",
    "TPIPSTripletModel",
    "TRIPLET_WEIGHTS",
    "VALUE_RANGE",
    "VARIANTS",
    "WEIGHTS_8B",
    "check_aspects",
    "is_overall",
    "prompt_for",
]

#: variant name -> its fusion class (a new variant is one more entry)
FUSIONS: dict[str, type[Fusion]] = {"late": LateFusion, "mid": MidFusion, "early": EarlyFusion}
assert tuple(FUSIONS) == VARIANTS
#: value range of ``f`` per variant (mid fusion: a negative weighted distance, unbounded below)
VALUE_RANGE = {name: cls.value_range for name, cls in FUSIONS.items()}


class TPIPSModel(VLMBase):
    """Aspect-conditioned similarity ``f(x1, x2 | c)``; see the module docstring for the three variants.

    Args:
        backbone: a Qwen3-VL model (``Qwen3VLModel``, ``Qwen3VLForConditionalGeneration``, or a
            ``peft.PeftModel`` around one). Qwen3.5 works for ``late`` and ``mid`` only.
        processor: its ``Qwen3VLProcessor``.
        variant: ``"late"`` | ``"mid"`` | ``"early"``.
        resize: ``"smart"`` (default: the official Qwen3-VL-Embedding ``smart_resize``, aspect kept) or
            ``"square"`` (every image ``image_size x image_size``).
        image_size: side of the square policy (multiple of 32; default 448); giving it alone selects
            ``resize="square"``.
        temperature: Eq. 2's ``tau`` (default 0.05 late/early, 0.0025 mid).
        prompts: ``(template with {aspect}, overall template)`` to override the paper's prompt (e.g.
            ``PROMPTS["embedding_baseline"]`` for the zero-shot Qwen3-VL-Embedding baseline of App. C.3).
        probe_layers: mid fusion: number of evenly spaced probe layers (default 20, capped at the
            number of layers) or explicit layer indices.
        mid_hidden: hidden width of each mid-fusion MLP.
        mid_init: mid fusion: initial channel weight (default ``sqrt(tau / L)``, see
            :func:`genmetrics.tpips.mid.initial_weight`).
        mid_text_norm: mid fusion: ``"layer"`` (default) LayerNorm on each MLP's input (the averaged
            instruction state), ``"none"`` the paper-literal raw average (see :mod:`genmetrics.tpips.mid`).
        vision_cache_size: images kept in the vision-feature LRU across calls.
        batch_size: sequences per language-tower call.
        image_modes: how PIL images and files of other modes than RGB become RGB: ``"official"`` (default, as
            the Qwen3-VL-Embedding embedder: LA/PA alpha dropped, 16-bit clipped) or ``"genmetrics"`` (alpha
            composited on white, 16/32-bit and float rescaled); see docs/tpips.md.

    On the tiny random Qwen3-VL (``load_tpips()`` builds it on the real weights). Late fusion compares
    aspect-conditioned embeddings: symmetric, and an image is most similar to itself:

    >>> from genmetrics.testing import random_images, tiny_qwen3vl, tiny_qwen3vl_processor
    >>> model = TPIPSModel(tiny_qwen3vl(), tiny_qwen3vl_processor(), "late", image_size=64)
    >>> a, b = random_images(2, 64, seed=1), random_images(2, 64, seed=2)
    >>> s = model.similarity(a, b, ["color", "pose of the cat"])
    >>> torch.equal(s, model.similarity(b, a, ["color", "pose of the cat"])), model.similarity(a, a, ["color"] * 2).tolist()
    (True, [1.0, 1.0])
    >>> p = model.odd_one_out(a, a, b, ["color", "color"])  # Eq. 2: P(image k is the odd one)
    >>> torch.allclose(p.sum(1), torch.ones(2, dtype=p.dtype)), bool((p[:, 2] > p[:, 0]).all())
    (True, True)
    """

    def __init__(
        self,
        backbone: nn.Module,
        processor: Any,
        variant: str = "late",
        *,
        image_size: int | None = None,
        resize: str | None = None,
        temperature: float | None = None,
        prompts: tuple[str, str] | None = None,
        probe_layers: int | Sequence[int] = 20,
        mid_hidden: int = 256,
        mid_init: float | None = None,
        mid_text_norm: str = "layer",
        vision_cache_size: int = 64,
        batch_size: int = 16,
        vision_batch_size: int = 32,
        data_range: float = 1.0,
        max_aspect_tokens: int = MAX_ASPECT_TOKENS,
        image_modes: str = "official",
    ) -> None:
        if variant not in FUSIONS:
            raise InputError(
                f"variant={variant!r}: expected one of {', '.join(FUSIONS)} (the triplet-head variant "
                "is TPIPSTripletModel)"
            )
        super().__init__(
            backbone,
            processor,
            image_size=image_size,
            resize=resize,
            vision_cache_size=vision_cache_size,
            batch_size=batch_size,
            vision_batch_size=vision_batch_size,
            data_range=data_range,
            max_aspect_tokens=max_aspect_tokens,
            image_modes=image_modes,
        )
        self.temperature = float(DEFAULT_TEMPERATURE[variant] if temperature is None else temperature)
        if self.temperature <= 0:
            raise InputError(f"temperature must be positive, got {temperature!r}")
        self.prompts = check_prompts(prompts, variant)
        options = FusionOptions(
            temperature=self.temperature,
            probe_layers=probe_layers,
            mid_hidden=mid_hidden,
            mid_init=mid_init,
            mid_text_norm=mid_text_norm,
        )
        self.fusion: Fusion = FUSIONS[variant](self, options)

    @property
    def variant(self) -> str:
        """``"late"``, ``"mid"`` or ``"early"``: the name of :attr:`fusion`."""
        return self.fusion.name

    @property
    def value_range(self) -> tuple[float, float]:
        """The range of ``f`` for this variant: cosine ``[-1, 1]`` (late, early), ``(-inf, 0]`` (mid)."""
        return self.fusion.value_range

    # -- public API --------------------------------------------------------------------------------
    def similarity(self, images_a: Any, images_b: Any, aspects: Any) -> torch.Tensor:
        """``[B]`` float32 similarities ``f(a_i, b_i | aspects_i)`` (no gradient).

        ``aspects`` is a list of ``B`` non-empty strings or one string for all pairs. Late and early
        fusion give a cosine in [-1, 1]; mid fusion a negative weighted distance (<= 0).
        """
        a = self.load_images(images_a, name="images_a")
        b = self.load_images(images_b, name="images_b")
        if len(a) != len(b):
            raise InputError(f"images_a has {len(a)} images but images_b has {len(b)}; pass one pair per row")
        asp = check_aspects(aspects, len(a))
        with torch.no_grad():
            return self.pair_scores(a, b, asp).float()

    def embed(self, images: Any, aspects: Any) -> torch.Tensor:
        """Late fusion: ``[B, D]`` L2-normalised float32 embeddings (cosine = similarity)."""
        imgs = self.load_images(images)
        asp = check_aspects(aspects, len(imgs))
        with torch.no_grad():
            return self.fusion.embed(self, imgs, asp).float()

    def odd_one_out(self, images1: Any, images2: Any, images3: Any, aspects: Any) -> torch.Tensor:
        """``[B,3]`` Eq. 2 probabilities that each image is the odd one out (float64, no gradient)."""
        x, asp = self.load_triplets(images1, images2, images3, aspects)
        with torch.no_grad():
            return torch.softmax(
                self.triplet_scores(x[0], x[1], x[2], asp).double() / self.temperature, dim=1
            )

    def forward(self, images1: Any, images2: Any, images3: Any, aspects: list[str]) -> torch.Tensor:
        """Training forward: ``[B,3]`` logits ``s_bar / tau`` of Eq. 2 (gradients flow to LoRA and heads)."""
        x = [self.load_images(im) for im in (images1, images2, images3)]
        return self.triplet_scores(x[0], x[1], x[2], list(aspects)) / self.temperature

    # -- scores (gradient-enabled) -----------------------------------------------------------------
    def pair_scores(self, a: list[torch.Tensor], b: list[torch.Tensor], aspects: list[str]) -> torch.Tensor:
        """``[B]`` similarities of loaded image lists (keeps the autograd graph when enabled)."""
        return self.fusion.pair_scores(self, list(a), list(b), list(aspects))

    def triplet_scores(
        self, x1: list[torch.Tensor], x2: list[torch.Tensor], x3: list[torch.Tensor], aspects: list[str]
    ) -> torch.Tensor:
        """``[B,3]`` ``s_bar = [f(x2,x3), f(x1,x3), f(x1,x2)]`` (column k leaves image k out)."""
        return self.fusion.triplet_scores(self, list(x1), list(x2), list(x3), list(aspects))

    # -- persistence -------------------------------------------------------------------------------
    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """The TPIPS parameters that live outside the backbone (register vector, mid-fusion MLPs)."""
        return self.fusion.head_state_dict()

    def load_head_state_dict(self, sd: dict[str, torch.Tensor], *, source: str = "head state") -> None:
        """Load :meth:`head_state_dict`'s tensors; missing, extra, misshaped or non-finite ones are refused with
        an ``InputError`` naming ``source`` and the tensor."""
        self.fusion.load_head_state_dict(sd, source=source)

    def config_dict(self, base_weights: str | None = None) -> dict[str, Any]:
        """The ``tpips.json`` of this model (what :meth:`from_pretrained` needs to rebuild it)."""
        return {
            "format": FORMAT,
            "variant": self.variant,
            "resize": self.resize.mode,
            "image_size": self.image_size,
            "image_modes": self.image_modes,
            "temperature": self.temperature,
            "prompts": list(self.prompts),
            "base_weights": base_weights,
            **self.fusion.config(),
        }

    def save_pretrained(self, path: str | os.PathLike, *, base_weights: str | None = None) -> Path:
        """Write the adapter folder: peft adapter (if the backbone is a PeftModel), ``tpips.json`` and
        ``tpips_head.safetensors``. Reload with :func:`~genmetrics.tpips.load_tpips` / :meth:`from_pretrained`."""
        return write_adapter(path, self.backbone, self.head_state_dict(), self.config_dict(base_weights))

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
    ) -> TPIPSModel:
        """Load a saved TPIPS adapter folder or hub id (late, mid or early fusion; see
        :func:`~genmetrics.tpips.load_tpips` for every variant). Keyword options override the saved ones.

        >>> import tempfile
        >>> from genmetrics.testing import random_images, tiny_qwen3vl, tiny_qwen3vl_processor
        >>> model = TPIPSModel(tiny_qwen3vl(), tiny_qwen3vl_processor(), "early")
        >>> a, b = random_images(1, 64, seed=1), random_images(1, 64, seed=2)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     again = TPIPSModel.from_pretrained(model.save_pretrained(d), backbone=tiny_qwen3vl(),
        ...                                        processor=tiny_qwen3vl_processor())
        >>> again.variant, torch.equal(again.similarity(a, b, "color"), model.similarity(a, b, "color"))
        ('early', True)
        """
        folder, cfg, backbone, processor = open_adapter(
            path,
            tuple(FUSIONS),
            "use TPIPSTripletModel.from_pretrained (or load_tpips)",
            backbone=backbone,
            processor=processor,
            weights=weights,
            dtype=dtype,
            device=device,
        )
        variant = cfg["variant"]
        options = {**FUSIONS[variant].options_from_config(cfg), **kwargs}
        options.setdefault("temperature", cfg.get("temperature"))
        options.setdefault(
            "image_modes", cfg.get("image_modes", "genmetrics")
        )  # older adapters: the contract
        if cfg.get("prompts"):
            options.setdefault("prompts", tuple(cfg["prompts"]))
        model = cls(backbone, processor, variant, **resize_options(cfg, image_size, resize), **options)
        return finish_loading(model, folder, device)
