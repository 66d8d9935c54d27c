"""TPIPS models on the Qwen3-VL family (Wang et al., "The Many Senses of Visual Similarity").

* :class:`TPIPSModel` -- aspect-conditioned pairwise similarity ``f(x1, x2 | c)`` in three variants, one
  file each: ``"late"`` (:mod:`genmetrics.tpips.late`, the Qwen3-VL-Embedding embedding and cosine),
  ``"mid"`` (:mod:`genmetrics.tpips.mid`, Eq. 3) and ``"early"`` (:mod:`genmetrics.tpips.early`,
  Appendix C.2). This module holds the class that picks the variant, the public API and Eq. 2's triplet
  scores.
* :class:`~genmetrics.tpips.triplet.TPIPSTripletModel` (Appendix B.1 / C.3 triplet head) and
  :class:`~genmetrics.tpips.baselines.PairwiseScoreModel` (Appendix C.3 0-10 score) are re-exported here,
  as are :func:`~genmetrics.tpips.loading.load_tpips` and the constants of :mod:`genmetrics.tpips.common`.

Images: anything :func:`genmetrics.data.images.load_batch` accepts. Default ``resize="smart"``: each image
is brought to its official Qwen3-VL-Embedding size (:func:`genmetrics.backbones.qwen_vl.smart_resize`,
aspect kept); mid and early fusion, which compare two images token by token, bring both images of a pair to
one shared size. ``resize="square"`` (or ``image_size=S``) is the older fixed ``S x S`` policy.

The vision tower is frozen and aspect-independent: its output (merged tokens and DeepStack features) is
computed once per distinct image and reused across aspects, pairs and calls
(:class:`genmetrics.backbones.qwen_vl.VisionEncoder`); the language tower is then called with
``inputs_embeds``, explicit M-RoPE positions and the DeepStack features at the image positions, which
reproduces the standard ``Qwen3VLModel`` forward exactly (``tests/tpips/test_model.py``).
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import nn

from genmetrics.backbones.qwen_vl import attn_implementation, linear_attention_layers
from genmetrics.data.results import atomic_output, atomic_write_text, make_folder
from genmetrics.errors import InputError
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
    unit_cosine,
)
from genmetrics.tpips.early import early_inputs, early_pairs
from genmetrics.tpips.late import late_embed
from genmetrics.tpips.loading import load_tpips, save_peft
from genmetrics.tpips.mid import MidFusionHead, initial_weight, mid_distance, mid_features, probe_indices
from genmetrics.tpips.triplet import TPIPSTripletModel

__all__ = [
    "CONFIG_NAME",
    "DEFAULT_IMAGE_SIZE",
    "DEFAULT_TEMPERATURE",
    "DEFAULT_WEIGHTS",
    "FORMAT",
    "HEAD_NAME",
    "PROMPTS",
    "PairwiseScoreModel",
    "TPIPSModel",
    "TPIPSTripletModel",
    "TRIPLET_WEIGHTS",
    "VARIANTS",
    "WEIGHTS_8B",
    "check_aspects",
    "is_overall",
    "load_tpips",
    "prompt_for",
]

#: value range of ``f`` per variant (mid fusion: a negative weighted distance, unbounded below)
VALUE_RANGE = {"late": (-1.0, 1.0), "early": (-1.0, 1.0), "mid": (float("-inf"), 0.0)}


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
    ) -> None:
        if variant not in VARIANTS:
            raise InputError(
                f"variant={variant!r}: expected one of {', '.join(VARIANTS)} (the triplet-head variant "
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
        )
        self.variant = variant
        self.temperature = float(DEFAULT_TEMPERATURE[variant] if temperature is None else temperature)
        if self.temperature <= 0:
            raise InputError(f"temperature must be positive, got {temperature!r}")
        self.prompts = check_prompts(prompts, variant)
        self.probe_layers: list[int] = []
        self.head: MidFusionHead | None = None
        self.register_vector: nn.Parameter | None = None
        self.mid_hidden = int(mid_hidden)
        if variant == "early":
            self._check_full_attention(backbone)
            with torch.no_grad():
                init = self.language_model.embed_tokens.weight.float().mean(0)
            self.register_vector = nn.Parameter(init.clone().to(self.device))
        elif variant == "mid":
            self.probe_layers = probe_indices(len(self.language_model.layers), probe_layers)
            w0 = (
                initial_weight(self.temperature, len(self.probe_layers))
                if mid_init is None
                else float(mid_init)
            )
            self.head = MidFusionHead(
                self.hidden_size, len(self.probe_layers), mid_hidden, init_weight=w0, text_norm=mid_text_norm
            )
            self.head.to(self.device)

    def _check_full_attention(self, backbone: nn.Module) -> None:
        linear = linear_attention_layers(backbone)
        if linear:
            raise InputError(
                f"early fusion needs softmax attention in every language layer, but this backbone has "
                f"{len(linear)} linear-attention layers (e.g. Qwen3.5's Gated-DeltaNet, layers {linear[:8]}) that "
                "ignore custom attention masks, so the Appendix C.2 mask cannot be applied; use variant='late' "
                "or 'mid', or a Qwen3-VL backbone (Qwen/Qwen3-VL-Embedding-2B)"
            )
        impl = attn_implementation(self._parts)
        if impl not in ("sdpa", "eager"):
            raise InputError(
                f"early fusion needs attn_implementation 'sdpa' (or 'eager') for its custom 4D mask; "
                f"the backbone uses {impl!r}: load it with attn_implementation='sdpa'"
            )

    @property
    def value_range(self) -> tuple[float, float]:
        """The range of ``f`` for this variant: cosine ``[-1, 1]`` (late, early), ``(-inf, 0]`` (mid)."""
        return VALUE_RANGE[self.variant]

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
        if self.variant != "late":
            raise InputError(
                f"embed() is defined for late fusion only; this model is variant={self.variant!r}"
            )
        imgs = self.load_images(images)
        asp = check_aspects(aspects, len(imgs))
        with torch.no_grad():
            return late_embed(self, self.resized(imgs), asp).float()

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
        if self.variant == "early":
            return early_pairs(self, list(a), list(b), aspects)
        if self.variant == "late":
            a, b = self.resized(a), self.resized(b)
        else:
            a, b = self.resized_pairs(a, b)
        enc = self._encode_unique(list(a) + list(b), list(aspects) + list(aspects))
        n = len(a)
        return self._pair_from_enc(enc, list(range(n)), list(range(n, 2 * n)))

    def triplet_scores(
        self, x1: list[torch.Tensor], x2: list[torch.Tensor], x3: list[torch.Tensor], aspects: list[str]
    ) -> torch.Tensor:
        """``[B,3]`` ``s_bar = [f(x2,x3), f(x1,x3), f(x1,x2)]`` (column k leaves image k out)."""
        pairs = ((x2, x3), (x1, x3), (x1, x2))
        if self.variant == "early":
            return torch.stack([early_pairs(self, list(p), list(q), aspects) for p, q in pairs], 1)
        n = len(x1)
        if self.variant == "late":
            r1, r2, r3 = self.resized(x1), self.resized(x2), self.resized(x3)
            enc = self._encode_unique(r1 + r2 + r3, list(aspects) * 3)
            idx = {id(x1): range(n), id(x2): range(n, 2 * n), id(x3): range(2 * n, 3 * n)}
            return torch.stack(
                [self._pair_from_enc(enc, list(idx[id(p)]), list(idx[id(q)])) for p, q in pairs], 1
            )
        sized = [self.resized_pairs(p, q) for p, q in pairs]  # mid: each pair on its shared grid
        flat = [t for p, q in sized for t in p + q]
        enc = self._encode_unique(flat, list(aspects) * 6)
        cols = [
            self._pair_from_enc(
                enc, list(range(2 * k * n, (2 * k + 1) * n)), list(range((2 * k + 1) * n, (2 * k + 2) * n))
            )
            for k in range(3)
        ]
        return torch.stack(cols, 1)

    # -- late / mid encodings ----------------------------------------------------------------------
    def _encode_unique(self, images: list[torch.Tensor], aspects: list[str]) -> dict[str, Any]:
        """Encode each distinct (image, aspect) once. Returns ``{"index": [i -> row], "enc": ...}``."""
        keys = self._keys(images)
        rows: dict[tuple[str, str], int] = {}
        index, uniq_keys, uniq_asp = [], [], []
        uniq_imgs: list[torch.Tensor] = []
        for k, x, a in zip(keys, images, aspects):
            r = rows.get((k, a))
            if r is None:
                r = rows[(k, a)] = len(uniq_imgs)
                uniq_imgs.append(x)
                uniq_keys.append(k)
                uniq_asp.append(a)
            index.append(r)
        if self.variant == "late":
            enc: Any = late_embed(self, uniq_imgs, uniq_asp, keys=uniq_keys)
        else:
            enc = mid_features(self, uniq_imgs, uniq_asp, keys=uniq_keys)
        return {"index": index, "enc": enc}

    def _pair_from_enc(self, enc: dict[str, Any], ia: list[int], ib: list[int]) -> torch.Tensor:
        ra = [enc["index"][i] for i in ia]
        rb = [enc["index"][i] for i in ib]
        if self.variant == "late":
            z = enc["enc"]
            if torch.is_grad_enabled() and z.requires_grad:
                return (z[ra] * z[rb]).sum(-1)
            return unit_cosine(z[ra], z[rb])
        assert self.head is not None
        return mid_distance(self.head, enc["enc"], ra, rb)

    def early_inputs(self, fa: list[Any], fb: list[Any], aspects: list[str]) -> dict[str, Any]:
        """The Appendix C.2 inputs (see :func:`genmetrics.tpips.early.early_inputs`)."""
        return early_inputs(self, fa, fb, aspects)

    # -- persistence -------------------------------------------------------------------------------
    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """The TPIPS parameters that live outside the backbone (register vector, mid-fusion MLPs)."""
        out: dict[str, torch.Tensor] = {}
        if self.register_vector is not None:
            out["register"] = self.register_vector.detach().cpu().contiguous()
        if self.head is not None:
            out.update(
                {f"head.{k}": v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()}
            )
        return out

    def load_head_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        if self.register_vector is not None:
            if "register" not in sd:
                raise InputError(
                    "the saved TPIPS head has no register vector; was it trained for early fusion?"
                )
            self.register_vector.data.copy_(
                sd["register"].to(self.register_vector.device, self.register_vector.dtype)
            )
        if self.head is not None:
            head = {k[5:]: v for k, v in sd.items() if k.startswith("head.")}
            missing = self.head.load_state_dict(head, strict=False)
            if missing.missing_keys:
                raise InputError(
                    f"the saved TPIPS head lacks {missing.missing_keys[:3]}; was it trained for mid fusion "
                    "with the same probe layers?"
                )
            self.head.to(self.device)

    def config_dict(self, base_weights: str | None = None) -> dict[str, Any]:
        return {
            "format": FORMAT,
            "variant": self.variant,
            "resize": self.resize.mode,
            "image_size": self.image_size,
            "temperature": self.temperature,
            "prompts": list(self.prompts),
            "probe_layers": self.probe_layers,
            "mid_hidden": self.mid_hidden,
            "base_weights": base_weights,
            **({"mid_text_norm": self.head.text_norm} if self.head is not None else {}),
        }

    def save_pretrained(self, path: str | os.PathLike, *, base_weights: str | None = None) -> Path:
        """Write the adapter folder: peft adapter (if the backbone is a PeftModel), ``tpips.json`` and
        ``tpips_head.safetensors``. Reload with :func:`load_tpips` / :meth:`from_pretrained`."""
        from safetensors.torch import save_file

        out = make_folder(path)  # the write rule (genmetrics/data/results.py)
        save_peft(self.backbone, out)
        with atomic_output(out / HEAD_NAME, root=out) as tmp:
            save_file(self.head_state_dict() or {"_empty": torch.zeros(1)}, str(tmp))
        atomic_write_text(out / CONFIG_NAME, json.dumps(self.config_dict(base_weights), indent=2), root=out)
        return out

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
        **kwargs: Any,
    ) -> TPIPSModel:
        """Load a saved TPIPS adapter folder or hub id (see :func:`load_tpips`)."""
        m = load_tpips(
            path,
            backbone=backbone,
            processor=processor,
            weights=weights,
            device=device,
            dtype=dtype,
            **kwargs,
        )
        if not isinstance(m, TPIPSModel):
            raise InputError(f"{path!s} holds a triplet-head model; use TPIPSTripletModel.from_pretrained")
        return m
