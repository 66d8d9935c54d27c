"""Embedding baselines: CLIP-I (image-image) and DINO-I. (CLIP-T is ``clip_t``, an alias of the raclip
family's ``clipscore``, which computes the same ``100 * cos``.)

Each takes a caller-built backbone (``backbone=``) or loads its default
weights lazily on first use. Image embeddings can be cached on disk (``cache_dir=``), keyed by image
content and weights identity. ``precision="bf16"`` runs the image tower under bfloat16 autocast (the
cosine stays float32 / float64; docs/performance.md, "bfloat16").
"""

from __future__ import annotations

import hashlib
import os
from typing import Any

import torch
import torch.nn.functional as F

from genmetrics.accel.cast_weights import cached_weight_scope
from genmetrics.backbones.clip_preprocess import load_on_device, normalisation
from genmetrics.backbones.hf import load_auto_model
from genmetrics.backbones.openclip import clip_image_batch, encode_image, load_open_clip
from genmetrics.backbones.provider import provide
from genmetrics.core.metric import SampleMetric
from genmetrics.core.options import number
from genmetrics.data.caches.features import FeatureCache
from genmetrics.data.device import check_precision, precision_autocast
from genmetrics.data.io.images import ResizePolicy, as_image_list
from genmetrics.errors import InputError

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


class _EmbeddingMetric(SampleMetric):
    default_weights = ""

    def __init__(
        self,
        *,
        backbone: Any = None,
        weights: str | None = None,
        data_range: float = 1.0,
        cache_dir: str | os.PathLike | None = None,
        precision: str = "fp32",
        batch_size: int = 32,
        **kwargs: Any,
    ) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        if backbone is not None and weights is not None:
            raise InputError(
                f"{self.name}: pass either backbone= (a built model) or weights= (a name to load), not both"
            )
        self.weights = weights or (None if backbone is not None else self.default_weights)
        self.data_range = number("data_range", data_range, lo=0.0, lo_open=True, owner=self.name or None)
        self.precision = check_precision(precision, owner=self.name or None)
        self._cache_dir = cache_dir
        # not ``_cache``: torchmetrics keeps its pre-sync copy of the states there (sync() overwrites it,
        # unsync()/reset() set it to None)
        self._feature_cache: FeatureCache | None = None
        if backbone is not None:
            self._set_backbone(backbone)

    def _set_backbone(self, backbone: Any, **extra: Any) -> None:
        self.register_backbone("backbone", backbone)
        for k, v in extra.items():
            setattr(self, k, v)

    def _model(self) -> Any:
        if "backbone" not in self._backbones:
            self._load_default()
        return self._backbones["backbone"]

    def _load_default(self) -> None:
        raise NotImplementedError

    def _embed_raw(self, images: list[Any]) -> torch.Tensor:
        raise NotImplementedError

    def _embed_dim(self, model: Any) -> int | None:
        """The model's embedding size, when its configuration says (None: learnt from a fresh embedding)."""
        return None

    def _cache_identity(self, model: Any) -> str:
        """What the cached embeddings depend on: the metric, the weights (their name, or for a caller-built
        backbone a fingerprint of its tensors -- never ``id(model)``, which a later process reuses for
        another model), ``data_range`` (it scales float tensors before the model sees them) and a
        ``precision`` other than float32 (float32 entries keep the key they had before the option)."""
        weights = self.weights or f"weights-sha256:{_fingerprint(model)}"
        extra = "" if self.precision == "fp32" else f":precision={self.precision}"
        return f"{type(self).__name__}:{weights}:data_range={self.data_range:g}{extra}"

    def _fresh(self, items: list[Any]) -> torch.Tensor:
        with torch.inference_mode():
            # copies of the weights are kept for a model the metric loaded, never for a caller's backbone
            keep = self.weights is not None
            with (
                precision_autocast(self.precision, self.device),
                cached_weight_scope(self._model(), keep=keep),
            ):
                raw = self._embed_raw(items)
            return F.normalize(raw.float(), dim=-1)

    def embed(self, images: Any) -> torch.Tensor:
        """L2-normalised float32 image embeddings ``[B,D]`` (cached on disk when ``cache_dir`` is set).

        A cached entry is used only when it is one finite vector of the model's size with unit norm (what
        this metric writes); anything else -- another model's entry, a truncated or altered file -- is
        recomputed and overwritten, with one warning (:class:`~genmetrics.data.caches.features.FeatureCache`).

        >>> import tempfile
        >>> from genmetrics.testing import random_images, tiny_clip
        >>> x = random_images(2, seed=1)
        >>> with tempfile.TemporaryDirectory() as d:
        ...     cached = CLIPImageSimilarity(backbone=tiny_clip()[0], cache_dir=d)
        ...     first, again = cached.embed(x), cached.embed(x)  # the second call reads the cache
        >>> bool(torch.equal(first, again)), cached._feature_cache.hits
        (True, 2)
        """
        items = as_image_list(images, name="images")
        model = self._model()
        if self._cache_dir is None:
            return self._fresh(items)
        if self._feature_cache is None:
            self._feature_cache = FeatureCache(self._cache_identity(model), self._cache_dir)
        out: list[torch.Tensor | None] = [None] * len(items)
        dim = self._embed_dim(model)
        if not items:
            return self._fresh(items)
        if dim is None:  # learn the size from one fresh embedding, never from the cache
            first = self._fresh(items[:1])[0].cpu()
            out[0], dim = first, int(first.shape[-1])
            self._feature_cache.put(items[0], {"embedding": first})
        todo = []
        for i, x in enumerate(items):
            if out[i] is not None:
                continue
            hit = self._feature_cache.get(x, expect={"embedding": (dim,)}, check=_unit_norm)
            if hit is not None:
                out[i] = hit["embedding"].float()
            else:
                todo.append(i)
        if todo:
            new = self._fresh([items[i] for i in todo]).cpu()
            for j, i in enumerate(todo):
                out[i] = new[j]
                self._feature_cache.put(items[i], {"embedding": new[j]})
        return torch.stack(out).to(self.device)  # type: ignore[arg-type]


def _fingerprint(model: Any) -> str:
    """sha256 over every tensor's name, shape, dtype, float64 sum and first 16 values: equal for the same
    weights, different for another model (any retraining moves the sums), cheap for large ones."""
    h = hashlib.sha256()
    with torch.no_grad():
        for name, t in model.state_dict().items():
            flat = t.detach().reshape(-1)
            h.update(f"{name}{tuple(t.shape)}{t.dtype}".encode())
            if flat.numel():
                h.update(repr(float(flat.double().sum())).encode())
                h.update(flat[:16].double().cpu().numpy().tobytes())
    return h.hexdigest()[:32]


def _unit_norm(entry: dict[str, torch.Tensor]) -> str | None:
    """None when the cached embedding has norm 1 up to float32 rounding (normalising a D-vector in float32
    leaves its norm within D * eps of 1: worst case, every one of the D squares and the sum rounded the
    same way), else the reason to refuse it."""
    e = entry["embedding"]
    norm = float(e.double().norm())
    return (
        None
        if abs(norm - 1.0) <= e.numel() * torch.finfo(torch.float32).eps
        else f"its norm is {norm:.6g}, not 1"
    )


class _ImagePairMetric(_EmbeddingMetric):
    def prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        if reference is None or candidates is None:
            raise InputError(
                f"{self.name}: needs reference images and candidates, one reference per candidate"
            )
        if condition is not None:
            raise InputError(f"{self.name}: takes no condition (text); use clip_t for image-text alignment")
        return {
            "reference": as_image_list(reference, name="reference"),
            "candidates": as_image_list(candidates, name="candidates"),
        }

    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        a = self.embed(batch["reference"])
        b = self.embed(batch["candidates"])
        return (a * b).sum(-1).double()


class _ClipMixin:
    default_weights = "ViT-B-32-quickgelu/openai"

    def _load_default(self) -> None:
        model, _, tokenizer = load_open_clip(self.weights, device=self.device)  # type: ignore[attr-defined]
        self._set_backbone(model, tokenizer=tokenizer)  # type: ignore[attr-defined]

    def _embed_dim(self, model: Any) -> int | None:
        dim = getattr(getattr(model, "visual", None), "output_dim", None)
        return int(dim) if isinstance(dim, int) else None

    def _embed_raw(self, images: list[Any]) -> torch.Tensor:
        model = self._model()  # type: ignore[attr-defined]
        x = clip_image_batch(images, model, data_range=self.data_range)  # type: ignore[attr-defined]
        return encode_image(model, x)


class CLIPImageSimilarity(_ClipMixin, _ImagePairMetric):
    """CLIP-I: ``cos(E_v(reference), E_v(candidate))`` with an open_clip model.

    On a tiny random CLIP (``genmetrics.testing``; ``CLIPImageSimilarity()`` loads the default weights):

    >>> from genmetrics.testing import random_images, tiny_clip
    >>> clip_i = CLIPImageSimilarity(backbone=tiny_clip()[0])
    >>> x, y = random_images(2, seed=1), random_images(2, seed=2)
    >>> round(float(clip_i.score(x, x)), 4), abs(float(clip_i.score(x, y) - clip_i.score(y, x))) < 1e-6
    (1.0, True)
    """


class DINOSimilarity(_ImagePairMetric):
    """DINO-I: cosine of DINOv2 [CLS] (``pooler_output``) embeddings. Images are resized (shorter side,
    bicubic) and centre-cropped to the model's ``config.image_size`` and normalised with ImageNet
    statistics; the default weights are ``facebook/dinov2-base`` at 224 px.

    On a tiny random DINOv2 (``genmetrics.testing``; ``DINOSimilarity()`` loads the default weights):

    >>> from genmetrics.testing import random_images, tiny_dino
    >>> dino = DINOSimilarity(backbone=tiny_dino())
    >>> x, y = random_images(2, seed=1), random_images(2, seed=2)
    >>> round(float(dino.score(x, x)), 4), abs(float(dino.score(x, y) - dino.score(y, x))) < 1e-6
    (1.0, True)
    """

    default_weights = "facebook/dinov2-base"

    def _load_default(self) -> None:
        provided = provide("dino", str(self.weights))
        if provided is not None:
            self._set_backbone(provided)
            return
        # the loader of every transformers backbone: a local folder, GENMETRICS_HOME, the Hugging Face cache,
        # then a download (the cache of HF_HOME counts: weights there are local)
        model = load_auto_model(str(self.weights))
        self._set_backbone(model)

    def _embed_dim(self, model: Any) -> int | None:
        dim = getattr(getattr(model, "config", None), "hidden_size", None)
        return int(dim) if isinstance(dim, int) else None

    def _embed_raw(self, images: list[Any]) -> torch.Tensor:
        model = self._model()
        size = int(getattr(model.config, "image_size", 224))
        if size == 518:  # DINOv2 checkpoints declare 518 (position table) but are evaluated at 224
            size = 224
        policy = ResizePolicy("shorter_side_center_crop", size)
        # decoded images go to the device first; resize, crop and normalise run there
        x = policy.stack(load_on_device(images, self.device, data_range=self.data_range, name="images"))
        mean, std = normalisation(IMAGENET_MEAN, IMAGENET_STD, self.device)
        return model(pixel_values=(x - mean) / std).pooler_output
