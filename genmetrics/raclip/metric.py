"""RA-CLIPScore family metrics: ``raclip``, ``clipscore``, ``hcs`` (per image) and ``sad``, ``pad``,
``rsad`` (real set vs generated set). See docs/raclip.md.

Set-level metrics keep only float64 sufficient statistics per set (count, sums, sums of squares or
the C x C cross-products, the P x C map sums), all reduced with ``dist_reduce_fx="sum"``; memory does
not grow with the number of images. Two documented exceptions keep per-image rows (``"cat"`` states):
``divergence="kde"`` (a KDE needs the samples) and ``score="hcs"`` (C_img is the mean of the whole
real set, known only at the end).
"""

from __future__ import annotations

import os
from itertools import combinations
from typing import Any, ClassVar

import open_clip
import torch
import torch.nn.functional as F

from genmetrics.accel.cast_weights import cached_weight_scope
from genmetrics.backbones.openclip import (
    TextEmbeddingCache,
    clip_image_batch,
    encode_image,
    load_open_clip,
    parse_clip_weights,
)
from genmetrics.backbones.provider import current_provider
from genmetrics.core import options as O
from genmetrics.core._torchmetrics_compat import set_update_count
from genmetrics.core.metric import Metric, SampleMetric
from genmetrics.core.options import choice, number, template
from genmetrics.data.device import check_precision, precision_autocast
from genmetrics.data.io.batching import map_batches
from genmetrics.data.io.images import as_image_list, to_tensor
from genmetrics.data.text.inputs import as_text_list
from genmetrics.errors import InputError
from genmetrics.functional import divergence as D
from genmetrics.raclip import DEFAULT_WEIGHTS, report
from genmetrics.raclip.attributes import resolve_attributes
from genmetrics.raclip.model import (
    HCS_TEMPLATE,
    POSITIVE_TEMPLATE,
    RegionAttributeScorer,
    check_vit,
    clipscore,
    hcs,
    scorer_options,
)

SCORES = ("raclip", "clipscore", "hcs")
#: ``compat="hcs2024"``: what the 2024 SaD/PaD/HCS code (Kim et al., github.com/notou10/sadpad) does
HCS2024: dict[str, Any] = dict(
    score="hcs", text_center="bare", kl_direction="real||gen", divergence="kde", kde_range=D.HCS_GRID
)
COMPAT = ("hcs2024",)


def _check_text_center(text_center: str) -> str:
    if text_center not in ("prompts", "bare"):
        raise InputError(
            f"text_center: expected 'prompts' (Eq. 2: mean of the attribute vectors) or 'bare' (the "
            f"2024 HCS code: mean of the bare attribute strings), got {text_center!r}"
        )
    return text_center


def _check_compat(owner: str, compat: Any, given: dict[str, Any]) -> None:
    """``compat`` is None or one of :data:`COMPAT`; it fixes the options in ``given`` (refused when set)."""
    if compat is None:
        return
    if compat not in COMPAT:
        raise InputError(f"{owner}: option compat: expected None or one of {COMPAT}, got {compat!r}")
    clash = [k for k, v in given.items() if v is not None]
    if clash:
        fixed = ", ".join(f"{k}={HCS2024[k]!r}" for k in given)
        raise InputError(
            f"{owner}: option {clash[0]} cannot be combined with compat={compat!r}, which fixes "
            f"{fixed} (the 2024 code's choices); drop {clash[0]}= or drop compat="
        )


def _refuse_given(owner: str, given: dict[str, Any], why: str) -> None:
    """Refuse the first option of ``given`` that was set (not None): it would change nothing (``why``)."""
    for k, v in given.items():
        if v is not None:
            raise InputError(f"{owner}: option {k} has no effect {why}; drop {k}=")


def _light_check(items: list[Any], name: str, data_range: float) -> None:
    """Validate images without decoding files or loading weights (tensors fully, paths for existence)."""
    for i, x in enumerate(items):
        if isinstance(x, (str, os.PathLike)):
            if not os.path.exists(x):
                raise InputError(f"{name}[{i}]: image file {str(x)!r} does not exist; check the path")
        elif isinstance(x, torch.Tensor):
            to_tensor(x, data_range=data_range, name=f"{name}[{i}]")
        else:
            to_tensor(x, data_range=data_range, name=f"{name}[{i}]")  # PIL passes; anything else raises


def _images(x: Any, name: str, data_range: float) -> list[Any]:
    items = as_image_list(x, name=name)
    if not items:
        raise InputError(f"{name}: the batch is empty; expected at least one image")
    _light_check(items, name, data_range)
    return items


class _ClipFamily:
    """Backbone handling shared by the family: caller-built ``backbone=`` + ``tokenizer=`` or lazy ``weights=``."""

    name: ClassVar[str]

    def _init_backbone(
        self, backbone: Any, tokenizer: Any, weights: str | None, data_range: float, precision: str = "fp32"
    ) -> None:
        self.precision = check_precision(precision, owner=self.name or None)
        if backbone is not None and weights is not None:
            raise InputError(
                f"{self.name}: pass either backbone= (a built model) or weights= (a name to load), not both"
            )
        if backbone is not None and tokenizer is None:
            raise InputError(
                f"{self.name}: backbone= needs its tokenizer= (open_clip.get_tokenizer(model_name))"
            )
        if backbone is None and tokenizer is not None:
            raise InputError(
                f"{self.name}: option tokenizer has no effect without backbone= (weights= load their own "
                "tokenizer); pass backbone= with it or drop tokenizer="
            )
        if not isinstance(data_range, (int, float)) or not data_range > 0:
            raise InputError(f"data_range: expected a positive number (1.0 or 255.0), got {data_range!r}")
        self.weights = weights if backbone is None else None
        self._own_model = backbone is None  # loaded by the metric (weights by name), not the caller's
        self.data_range = number("data_range", data_range, lo=0.0, lo_open=True, owner=self.name or None)
        self.tokenizer = tokenizer
        self._aux: dict[Any, Any] = {}  # str keys and ("text", ...) tuples
        if backbone is not None:
            self._accept_backbone(backbone)
            self.register_backbone("backbone", backbone)  # type: ignore[attr-defined]

    def _accept_backbone(self, backbone: Any) -> None:
        """Hook: validate a caller-built backbone at construction time."""

    def _model(self) -> Any:
        if "backbone" not in self._backbones:  # type: ignore[attr-defined]
            model, _, tokenizer = load_open_clip(self.weights or DEFAULT_WEIGHTS, device=self.device)  # type: ignore[attr-defined]
            self._accept_backbone(model)
            self.tokenizer = tokenizer
            self.register_backbone("backbone", model)  # type: ignore[attr-defined]
        return self._backbones["backbone"]  # type: ignore[attr-defined]

    def _pixels(self, images: list[Any], name: str) -> torch.Tensor:
        model = self._model()
        return clip_image_batch(images, model, data_range=self.data_range, name=name)

    def _image_embeddings(self, x: torch.Tensor) -> torch.Tensor:
        """``encode_image`` (the fast open_clip ViT path) of preprocessed pixels in the metric's ``precision``,
        as float32."""
        model = self._model()
        # copies of the weights are kept for a model the metric loaded, never for a caller's backbone
        with precision_autocast(self.precision, x.device), cached_weight_scope(keep=self._own_model):
            return encode_image(model, x).float()

    def _text_cache(self) -> Any:
        """This metric's text embeddings, one per distinct text: the context cut after the longest
        text of each call, the text tower in float64 unless ``text_dtype="model"`` (clipscore)."""
        model_precision = getattr(self, "text_dtype", "float64") == "model"
        return self._aux.setdefault(
            "prompt_cache", TextEmbeddingCache(dtype=None if model_precision else torch.float64)
        )

    def _texts(self, texts: list[str], *, normalize: bool = True, name: str = "attributes") -> torch.Tensor:
        """``[N,E]`` embeddings of ``texts`` (float64, or float32 with ``text_dtype="model"``); each distinct
        text is encoded once per metric."""
        # the text tower is float64 by default: autocast leaves it alone
        with precision_autocast(self.precision, self.device):  # type: ignore[attr-defined]
            return self._text_cache().embed(
                self._model(), self.tokenizer, texts, name=name, normalize=normalize
            )

    def _hcs_text(self, text_center: str) -> tuple[torch.Tensor, torch.Tensor]:
        """HCS attribute vectors (``"a photo of " + attr``, unnormalised) and ``C_text``."""
        attrs = list(self.attributes)  # type: ignore[attr-defined]
        # float64 from the float64 text tower: the centred differences would amplify float32 rounding, and with
        # text_center="prompts" two attributes are exactly antisymmetric
        t_attr = self._texts([HCS_TEMPLATE.format(a) for a in attrs], normalize=False).double()
        if text_center == "bare":
            return t_attr, self._texts(attrs, normalize=False).double().mean(0)
        return t_attr, t_attr.mean(0)

    def __getstate__(self) -> dict[str, Any]:
        state = super().__getstate__()  # type: ignore[misc]
        state = dict(state)
        state["_aux"] = {}
        return state


class _RAMixin(_ClipFamily):
    def _set_scorer_options(self, **given: Any) -> None:
        """Check the scorer options (None = not given; no-ops refused) and keep the given ones."""
        scorer_options(owner=self.name, **given)
        self._ra_options = {k: v for k, v in given.items() if v is not None}

    def _accept_backbone(self, backbone: Any) -> None:
        check_vit(backbone)

    def _scorer(self) -> RegionAttributeScorer:
        model = self._model()
        sc = self._aux.get("scorer")
        if sc is None or sc.model is not model:
            sc = RegionAttributeScorer(
                model,
                self.tokenizer,
                precision=self.precision,
                keep_cast_weights=self._own_model,  # a model the metric loaded
                **self._ra_options,
            )
            self._aux["scorer"] = sc
        return sc


# ----------------------------------------------------------------------------------- per image
class RAClipScore(_RAMixin, SampleMetric):
    """``raclip``: RA-CLIPScore per image (Eq. 9).

    With ``attributes`` (a list, a shipped set name or a text file) every candidate gets a score per
    attribute (``[B,C]``) and ``compute()`` is the mean per attribute ``[C]``. Without ``attributes``,
    ``condition`` gives one text per candidate, each image is scored against its own text (``[B]``) and
    ``compute()`` is the mean (a scalar tensor).

    On a tiny random CLIP (``RAClipScore("celeba-20")`` loads the default ViT-B/32 weights):

    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> images = random_images(3)
    >>> ra = RAClipScore(["smiling", "wearing hat"], backbone=model, tokenizer=tokenizer)
    >>> ra.update(candidates=images)
    >>> per = ra.per_sample()["scores"]
    >>> tuple(per.shape), tuple(ra.compute().shape)
    ((3, 2), (2,))
    >>> by_text = RAClipScore(backbone=model, tokenizer=tokenizer)  # one text per image instead
    >>> by_text.update(candidates=images, condition=["smiling"] * 3)
    >>> torch.allclose(by_text.per_sample()["scores"], per[:, 0])
    True
    """

    def __init__(
        self,
        attributes: Any = None,
        *,
        backbone: Any = None,
        tokenizer: Any = None,
        weights: str | None = None,
        dual_prompt: bool = True,
        local_tokens: bool = True,
        global_token: bool = True,
        temperature: float | None = None,
        positive_template: str = POSITIVE_TEMPLATE,
        negative_template: str | None = None,
        data_range: float = 1.0,
        precision: str = "fp32",
        batch_size: int = 32,
        **kwargs: Any,
    ) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        self.attributes = resolve_attributes(attributes) if attributes is not None else None
        self._set_scorer_options(
            dual_prompt=dual_prompt,
            local_tokens=local_tokens,
            global_token=global_token,
            temperature=temperature,
            positive_template=positive_template,
            negative_template=negative_template,
        )
        self._init_backbone(backbone, tokenizer, weights, data_range, precision)

    def prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        """Check and convert one batch of inputs into what :meth:`score_batch` of RA-CLIPScore reads (the
        :meth:`~genmetrics.core.sample_metric.SampleMetric.prepare` hook)."""
        if reference is not None:
            raise InputError(
                f"{self.name}: takes no reference images (it scores each candidate against text); "
                "for real-vs-generated comparisons use sad, pad or rsad"
            )
        if candidates is None:
            raise InputError(f"{self.name}: no candidates given; pass candidates=images")
        items = _images(candidates, "candidates", self.data_range)
        if self.attributes is not None:
            if condition is not None:
                raise InputError(
                    f"{self.name}: built with attributes=..., so it takes no condition; build it without "
                    "attributes to score each image against its own text"
                )
            return {"candidates": items}
        if condition is None:
            raise InputError(
                f"{self.name}: pass attributes=[...] when creating the metric, or condition= (one text "
                "per candidate) to update()"
            )
        return {"candidates": items, "condition": as_text_list(condition, name="condition")}

    @torch.no_grad()
    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        """Per-sample RA-CLIPScore of one prepared batch (the
        :meth:`~genmetrics.core.sample_metric.SampleMetric.score_batch` hook)."""
        x = self._pixels(batch["candidates"], "candidates")
        if self.attributes is not None:
            return self._scorer()(x, self.attributes).score.double()
        texts = batch["condition"]
        uniq = list(dict.fromkeys(texts))
        out = self._scorer()(x, uniq).score
        idx = torch.tensor([uniq.index(t) for t in texts], device=out.device)
        return out.gather(1, idx[:, None])[:, 0].double()


class CLIPScore(_ClipFamily, SampleMetric):
    """``clipscore``: Eq. 1, ``100 cos(E_v(x), E_t(t))`` (no clamp, no 2.5 weight).

    With ``attributes`` each attribute is the text (``prompt_template`` applied, default ``"{}"``) and
    ``compute()`` is the mean per attribute ``[C]``; without, ``condition`` holds one text per image.
    Each distinct ``condition`` prompt or attribute prompt is encoded once per metric, with the context cut
    to the longest, in
    ``text_dtype="float64"`` (default; the exact value of the text tower, within 1e-6 score units of a
    float64 model, at about twice the float32 text cost) or ``"model"`` (the model's own precision;
    float32 rounding moves scores by up to ~1e-5). See docs/performance.md.

    ``clip_t`` is the same metric under another name. On a tiny random CLIP:

    >>> import genmetrics as gm
    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> clip_t = gm.create_metric("clip_t", backbone=model, tokenizer=tokenizer)
    >>> type(clip_t).__name__
    'CLIPScore'
    >>> clip_t.update(candidates=random_images(2), condition=["a cat", "a red car"])
    >>> s = clip_t.per_sample()["scores"]
    >>> tuple(s.shape), bool((s.abs() <= 100).all())  # 100 * cosine
    ((2,), True)
    """

    def __init__(
        self,
        attributes: Any = None,
        *,
        backbone: Any = None,
        tokenizer: Any = None,
        weights: str | None = None,
        prompt_template: str = "{}",
        text_dtype: str = "float64",
        data_range: float = 1.0,
        precision: str = "fp32",
        batch_size: int = 32,
        **kwargs: Any,
    ) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        self.attributes = resolve_attributes(attributes) if attributes is not None else None
        template("prompt_template", prompt_template, slots=1)
        self.prompt_template = prompt_template
        if text_dtype not in ("float64", "model"):
            raise InputError(
                f"{self.name}: option text_dtype: expected 'float64' (exact text embeddings) or 'model' "
                f"(the model's own precision), got {text_dtype!r}"
            )
        self.text_dtype = text_dtype
        self._init_backbone(backbone, tokenizer, weights, data_range, precision)

    prepare = RAClipScore.prepare

    @torch.no_grad()
    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        """Per-sample CLIPScore (100 x the image-text cosine, floored at 0) of one prepared batch, float64
        ``[B]`` (the :meth:`~genmetrics.core.sample_metric.SampleMetric.score_batch` hook)."""
        img = self._image_embeddings(self._pixels(batch["candidates"], "candidates"))
        # each distinct prompt / attribute is encoded once per metric (cache keyed by the text)
        if self.attributes is not None:
            return clipscore(img, self._texts([self.prompt_template.format(a) for a in self.attributes]))
        txt = self._texts(
            [self.prompt_template.format(t) for t in batch["condition"]], name="condition", normalize=False
        )
        # cosine in float64: a float32 product alone rounds ~1e-6 at |score| ~ 16 (the text side is exact)
        return 100.0 * (F.normalize(img.double(), dim=-1) * F.normalize(txt.double(), dim=-1)).sum(-1)


class HCS(_ClipFamily, SampleMetric):
    """``hcs``: Heterogeneous CLIPScore (Kim et al. 2024, Eq. 2) of each candidate for each attribute.

    ``C_img`` is the mean image embedding of the reference (real) set; the attribute vectors use the
    prompt ``"a photo of " + attr``. ``C_text`` is the mean of those same attribute vectors with
    ``text_center="prompts"`` (default; the paper's Eq. 2, under which two attributes give exactly
    ``HCS(x, t_p) = -HCS(x, t_q)``), or the mean embedding of the bare attribute strings with
    ``text_center="bare"`` (what the 2024 HCS code does; use it for parity). Reference images
    only feed ``C_img``; candidates are scored. ``update(reference=...)`` and ``update(candidates=...)``
    may come in any order because candidate embeddings are kept and scored at ``compute()``, which
    returns the mean HCS per attribute ``[C]``. ``image_center=`` (a tensor ``[E]``) fixes ``C_img``
    instead. ``per_sample()`` gives the per-candidate HCS ``[N,C]``. ``compat="hcs2024"`` is the 2024
    code's HCS (``text_center="bare"``; it cannot be combined with ``text_center=``). The attribute texts
    are encoded once per metric (per distinct text), trimmed to their length, by the text tower in float64:
    the exact value of the untrimmed tower, since the centring amplifies float32 rounding.

    With two attributes the centred text vectors are opposite, so the two scores are negatives:

    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> hcs = HCS(["smiling", "frowning"], backbone=model, tokenizer=tokenizer)
    >>> hcs.update(reference=random_images(4, seed=1), candidates=random_images(3, seed=2))
    >>> per = hcs.per_sample()["scores"]
    >>> tuple(per.shape), torch.allclose(per[:, 0], -per[:, 1], atol=1e-6)
    ((3, 2), True)
    """

    def __init__(
        self,
        attributes: Any = None,
        *,
        backbone: Any = None,
        tokenizer: Any = None,
        weights: str | None = None,
        image_center: Any = None,
        text_center: str | None = None,
        compat: str | None = None,
        data_range: float = 1.0,
        precision: str = "fp32",
        batch_size: int = 32,
        **kwargs: Any,
    ) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        self.attributes = resolve_attributes(attributes)
        _check_compat(self.name, compat, {"text_center": text_center})
        self.compat = compat
        self.text_center = _check_text_center(
            HCS2024["text_center"] if compat else (text_center or "prompts")
        )
        self.image_center = (
            None if image_center is None else torch.as_tensor(image_center, dtype=torch.float64)
        )
        # per-update partial sums of reference embeddings ([k,E], "cat"): C_img without knowing E up front
        self.add_state("ref_sums", default=[], dist_reduce_fx="cat")
        self.add_state("ref_count", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
        self._init_backbone(backbone, tokenizer, weights, data_range, precision)

    def update(
        self, reference: Any = None, candidates: Any = None, condition: Any = None, *, ids: Any = None
    ) -> None:
        """Add ``reference`` images (summed into the image centre ``C_img``) and/or ``candidates`` to score, with
        optional ``ids``; ``condition`` is refused (the attributes are fixed at creation)."""
        if condition is not None:
            raise InputError("hcs: takes no condition; the attributes are fixed when the metric is created")
        if reference is None and candidates is None:
            raise InputError(
                "hcs: pass reference= (real images, for C_img) and/or candidates= (images to score)"
            )
        if reference is not None and self.image_center is not None:
            raise InputError(
                "hcs: built with image_center=, so reference images would change nothing (they only "
                "feed C_img); drop reference= or build the metric without image_center="
            )
        if reference is not None:
            items = _images(reference, "reference", self.data_range)
            embs = map_batches(lambda sl: self._embed(items[sl], "reference"), len(items), self.batch_size)
            total = torch.cat(embs, 0).sum(0, keepdim=True).to(self.device)
            self.ref_sums.append(total)
            self.ref_count += float(len(items))
        if candidates is not None:
            super().update(candidates=candidates, ids=ids)

    def prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        """Check and convert one batch of inputs into what :meth:`score_batch` of HCS reads (the
        :meth:`~genmetrics.core.sample_metric.SampleMetric.prepare` hook)."""
        return {"candidates": _images(candidates, "candidates", self.data_range)}

    @torch.no_grad()
    def _embed(self, images: list[Any], name: str) -> torch.Tensor:
        # the fast tower: rows independent of the batch
        return self._image_embeddings(self._pixels(images, name)).double()

    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        """Per-sample HCS of one prepared batch (the
        :meth:`~genmetrics.core.sample_metric.SampleMetric.score_batch` hook)."""
        return self._embed(batch["candidates"], "candidates")  # embeddings; HCS is formed at compute()

    def _centers(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        if self.image_center is not None:
            c_img = self.image_center.to(self.device)
        else:
            sums = self.ref_sums
            if isinstance(sums, list):
                sums = torch.cat(sums, 0) if sums else None
            if sums is None or sums.numel() == 0 or float(self.ref_count) == 0:
                raise InputError(
                    "hcs: no reference (real) images were given; C_img is their mean embedding. Call "
                    "update(reference=real_images) or pass image_center="
                )
            c_img = sums.sum(0) / self.ref_count
        t_attr, c_text = self._hcs_text(self.text_center)
        return c_img, t_attr, c_text

    def compute_state(self) -> torch.Tensor:
        """The value of HCS from the accumulated (synced) state (the
        :meth:`~genmetrics.core.metric_base.Metric.compute_state` hook)."""
        emb, _ = self._gathered()
        c_img, t_attr, c_text = self._centers()
        return hcs(emb, t_attr, c_img, c_text).mean(0)

    def per_sample(self, *, sync: bool = True) -> dict[str, Any]:
        """``{"ids": [...], "scores": [N, C]}``: each candidate's HCS for each attribute, with ``C_img`` from
        every process's reference images (gathered first when ``sync``)."""
        with self._synced(sync) as names:  # C_img from every process's reference images
            emb, ids = self._gathered()
            c_img, t_attr, c_text = self._centers()
        return {
            "ids": [names.get(int(i)) if int(i) >= 0 else None for i in ids],
            "scores": hcs(emb, t_attr, c_img, c_text),
        }


# ---------------------------------------------------------------------------------- set level
def _grid_of(model: Any) -> tuple[int, int]:
    gh, gw = model.visual.grid_size
    return int(gh), int(gw)


def _grid_from_weights(spec: str | None) -> tuple[int, int] | None:
    """Patch grid from the open_clip model config, without loading weights (None when unknown)."""
    if current_provider() is not None:
        return None  # a backbone provider may give another model: read the grid from the one it gives
    try:
        name = parse_clip_weights(spec or DEFAULT_WEIGHTS).model
        if name.startswith("hf-hub:"):
            return None  # its config lives on the hub: never look it up here (no network at construction)
        cfg = open_clip.get_model_config(name)
        vc = cfg["vision_cfg"]
        size, patch = vc.get("image_size", 224), vc.get("patch_size")
        if patch is None or "timm_model_name" in vc:
            return None
        size = (size, size) if isinstance(size, int) else tuple(size)
        patch = (patch, patch) if isinstance(patch, int) else tuple(patch)
        return size[0] // patch[0], size[1] // patch[1]
    except Exception:  # noqa: BLE001 - unknown config (hub id, local file): fall back to loading the model
        return None


#: options of sad / pad that R-SaD (a difference of mean maps) has no use for
_KL_ONLY = (
    "score",
    "kl_direction",
    "eps",
    "divergence",
    "kde_points",
    "kde_range",
    "text_center",
    "keep_scores",
    "compat",
)


class _SetDivergence(_RAMixin, Metric):
    """Shared machinery of sad / pad / rsad: two sets, any update order, float64 states.

    Scorer options default to ``None`` ("not given", the scorer's defaults apply) so that an option that
    would change nothing can be told apart and refused."""

    _needs_cross: ClassVar[bool] = False
    _needs_maps: ClassVar[bool] = False

    def __init__(
        self,
        attributes: Any = None,
        *,
        backbone: Any = None,
        tokenizer: Any = None,
        weights: str | None = None,
        dual_prompt: bool | None = None,
        local_tokens: bool | None = None,
        global_token: bool | None = None,
        temperature: float | None = None,
        positive_template: str | None = None,
        negative_template: str | None = None,
        data_range: float = 1.0,
        precision: str = "fp32",
        batch_size: int = 32,
        **kwargs: Any,
    ) -> None:
        super().__init__(batch_size=batch_size, **kwargs)
        self.attributes = resolve_attributes(attributes)
        self._set_scorer_options(
            dual_prompt=dual_prompt,
            local_tokens=local_tokens,
            global_token=global_token,
            temperature=temperature,
            positive_template=positive_template,
            negative_template=negative_template,
        )
        self.score_kind = "raclip"
        self._keep_rows = False
        self._init_backbone(backbone, tokenizer, weights, data_range, precision)

    # -- scoring ------------------------------------------------------------------------
    @torch.no_grad()
    def _score_rows(self, images: list[Any], name: str) -> dict[str, torch.Tensor]:
        x = self._pixels(images, name)
        if self.score_kind == "raclip":
            out = self._scorer()(x, self.attributes)
            return {"score": out.score.double(), "maps": out.patch_scores.double()}
        img = self._image_embeddings(x)
        if self.score_kind == "clipscore":
            return {"score": clipscore(img, self._texts(list(self.attributes)))}
        return {"score": img.double()}  # hcs: embeddings, scored at compute()

    def update(
        self, reference: Any = None, candidates: Any = None, condition: Any = None, *, ids: Any = None
    ) -> None:
        """Accumulate ``reference`` (real images) and/or ``candidates`` (generated images), in any order.

        ``ids`` is accepted for interface compatibility and ignored: sufficient statistics cannot drop
        duplicates, so shard without padding (e.g. ``DistributedSampler(drop_last=False)`` padding off)."""
        if condition is not None:
            raise InputError(
                f"{self.name}: takes no condition; the attributes are fixed when the metric is created"
            )
        if reference is None and candidates is None:
            raise InputError(
                f"{self.name}: pass reference= (real images) and/or candidates= (generated images)"
            )
        todo = []
        if reference is not None:
            todo.append(("real", _images(reference, "reference", self.data_range), "reference"))
        if candidates is not None:
            todo.append(("gen", _images(candidates, "candidates", self.data_range), "candidates"))
        for s, items, name in todo:

            def rows(sl: slice, items: list[Any] = items, name: str = name) -> dict[str, torch.Tensor]:
                return self._score_rows(items[sl], name)

            for res in map_batches(rows, len(items), self.batch_size):
                self._accumulate(s, res)

    def _accumulate(self, s: str, res: dict[str, torch.Tensor]) -> None:
        x = res["score"].to(self.device)
        setattr(self, f"{s}_n", getattr(self, f"{s}_n") + float(x.shape[0]))
        if self._keep_rows:
            getattr(self, f"{s}_rows").append(x)
        elif not self._needs_maps:
            setattr(self, f"{s}_sum", getattr(self, f"{s}_sum") + x.sum(0))
            if self._needs_cross:
                setattr(self, f"{s}_cross", getattr(self, f"{s}_cross") + x.T @ x)
            else:
                setattr(self, f"{s}_sq", getattr(self, f"{s}_sq") + (x * x).sum(0))
        if self._needs_maps:
            maps = res["maps"].to(self.device)
            expected = getattr(self, f"{s}_maps").shape
            if tuple(maps.shape[1:]) != tuple(expected):
                raise InputError(
                    f"{self.name}: the model gives maps {tuple(maps.shape[1:])}, the state expects "
                    f"{tuple(expected)}; use one backbone for the whole run"
                )
            setattr(self, f"{s}_maps", getattr(self, f"{s}_maps") + maps.sum(0))

    # -- compute ------------------------------------------------------------------------
    def _undefined_value(self) -> dict[str, torch.Tensor]:
        """forward() on a batch that alone is not two sets of >= 2 images: NaN of the usual structure."""
        c = len(self.attributes)

        def nan(*shape: int) -> torch.Tensor:
            return torch.full(shape, float("nan"), dtype=torch.float64, device=self.device)

        if self.name == "pad":
            return {"mean": nan(), "per_pair": nan(c * (c - 1) // 2)}
        out = {"mean": nan(), "per_attribute": nan(c)}
        if self._needs_maps:
            out["map"] = nan(self.grid[0] * self.grid[1], c)
        return out

    def _check_sets(self, minimum: int) -> None:
        for s, role, arg in (("real", "reference (real)", "reference"), ("gen", "generated", "candidates")):
            n = int(float(getattr(self, f"{s}_n")))
            if n == 0:
                raise InputError(
                    f"{self.name}: no {role} images were given; call update({arg}=images) before compute()"
                )
            if n < minimum:
                raise InputError(
                    f"{self.name}: {n} {role} image(s); fitting a Gaussian per set needs at least "
                    f"{minimum} images in each set"
                )


class _KLDivergence(_SetDivergence):
    """sad / pad: a distribution per set (Gaussian or KDE) of per-image scores, compared with KL."""

    def __init__(
        self,
        attributes: Any = None,
        *,
        score: str | None = None,
        kl_direction: str | None = None,
        eps: float | None = None,
        divergence: str | None = None,
        kde_points: int | None = None,
        kde_range: tuple[float, float] | None = None,
        text_center: str | None = None,
        keep_scores: bool = False,
        compat: str | None = None,
        **kwargs: Any,
    ) -> None:
        owner = self.name
        _check_compat(
            owner,
            compat,
            dict(
                score=score,
                text_center=text_center,
                kl_direction=kl_direction,
                divergence=divergence,
                kde_range=kde_range,
            ),
        )
        if compat is not None:
            score, text_center, kl_direction = (
                HCS2024["score"],
                HCS2024["text_center"],
                HCS2024["kl_direction"],
            )
            divergence, kde_range = HCS2024["divergence"], HCS2024["kde_range"]
        score = "raclip" if score is None else score
        if score not in SCORES:
            raise InputError(f"{owner}: option score: expected one of {SCORES}, got {score!r}")
        divergence = "gaussian" if divergence is None else divergence
        if divergence not in ("gaussian", "kde"):
            raise InputError(
                f"{owner}: option divergence: expected 'gaussian' (closed-form KL, streaming) or 'kde' "
                f"(KDE on a grid, as the 2024 HCS code), got {divergence!r}"
            )
        # options that would change nothing are refused, naming the option
        if score != "raclip":
            _refuse_given(
                owner,
                {
                    k: kwargs.get(k)
                    for k in (
                        "dual_prompt",
                        "local_tokens",
                        "global_token",
                        "temperature",
                        "positive_template",
                        "negative_template",
                    )
                },
                f"with score={score!r} (it configures the RA-CLIPScore scorer)",
            )
        if score != "hcs":
            _refuse_given(
                owner, {"text_center": text_center}, f"with score={score!r} (C_text belongs to HCS)"
            )
        if divergence == "gaussian":
            _refuse_given(
                owner,
                {"kde_points": kde_points, "kde_range": kde_range},
                "with divergence='gaussian' (it sets the KDE grid)",
            )
        else:
            _refuse_given(
                owner, {"eps": eps}, "with divergence='kde' (it is the Gaussian mode's variance ridge)"
            )
            if keep_scores:
                raise InputError(
                    f"{owner}: option keep_scores has no effect with divergence='kde' (the KDE mode keeps "
                    "the scores anyway and offers no bootstrap interval); drop keep_scores="
                )
        super().__init__(attributes, **kwargs)
        self.compat = compat
        self.score_kind = score
        self.text_center = _check_text_center("prompts" if text_center is None else text_center)
        # options are checked here (InputError naming the option); functional/ raises plain ValueError
        direction = "gen||real" if kl_direction is None else kl_direction
        self.kl_direction = choice("kl_direction", direction, D.DIRECTIONS, owner=self.name)
        self.eps = number("eps", D.DEFAULT_EPS if eps is None else eps, lo=0.0, owner=self.name)
        self.divergence = divergence
        self.kde_points = O.integer(
            "kde_points", D.HCS_POINTS if kde_points is None else kde_points, lo=4, owner=owner
        )
        if kde_range is None:
            kde_range = D.HCS_GRID if score in ("hcs", "clipscore") else (0.0, 1.0)
        if len(tuple(kde_range)) != 2 or not float(kde_range[1]) > float(kde_range[0]):
            raise InputError(
                f"{owner}: option kde_range: expected (low, high) with low < high, got {kde_range!r}"
            )
        self.kde_range = (float(kde_range[0]), float(kde_range[1]))

        c = len(self.attributes)
        f64 = torch.float64
        self._keep_rows = divergence == "kde" or score == "hcs" or bool(keep_scores)
        self.keep_scores = bool(keep_scores)
        for st in ("real", "gen"):
            self.add_state(f"{st}_n", default=torch.tensor(0.0, dtype=f64), dist_reduce_fx="sum")
            if self._keep_rows:
                # KDE needs the samples; HCS needs C_img of the whole real set: rows are kept (documented)
                self.add_state(f"{st}_rows", default=[], dist_reduce_fx="cat")
            else:
                self.add_state(f"{st}_sum", default=torch.zeros(c, dtype=f64), dist_reduce_fx="sum")
                if self._needs_cross:
                    self.add_state(f"{st}_cross", default=torch.zeros(c, c, dtype=f64), dist_reduce_fx="sum")
                else:
                    self.add_state(f"{st}_sq", default=torch.zeros(c, dtype=f64), dist_reduce_fx="sum")

    def _compat_extras(self, mean: torch.Tensor) -> dict[str, torch.Tensor]:
        """``compat="hcs2024"``: also the number the 2024 code prints (mean rounded to 10 decimals, x 1e7)."""
        if self.compat != "hcs2024":
            return {}
        return {
            "printed_x1e7": torch.tensor(
                round(float(mean), 10) * 1e7, dtype=torch.float64, device=mean.device
            )
        }

    def _rows(self) -> tuple[torch.Tensor, torch.Tensor]:
        def cat(v: Any) -> torch.Tensor:
            return torch.cat(v, 0) if isinstance(v, list) else v

        real, gen = cat(self.real_rows), cat(self.gen_rows)
        if self.score_kind == "hcs":
            c_img = real.mean(0)
            t_attr, c_text = self._hcs_text(self.text_center)
            real, gen = hcs(real, t_attr, c_img, c_text), hcs(gen, t_attr, c_img, c_text)
        return real, gen

    def _stats(self, s: str, second: str) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        return getattr(self, f"{s}_n"), getattr(self, f"{s}_sum"), getattr(self, f"{s}_{second}")

    @property
    def pairs(self) -> list[tuple[str, str]]:
        """Attribute pairs in PaD order (``itertools.combinations``)."""
        return list(combinations(self.attributes, 2))

    def update_scores(self, reference: Any = None, candidates: Any = None) -> None:
        """Accumulate per-image scores computed elsewhere with this metric's scorer: ``[N, C]`` rows, one per
        image, columns in :attr:`attributes` order (the ``score`` of a
        :class:`~genmetrics.raclip.model.RegionAttributeScorer` with the same options and backbone). For a
        caller that scores each image once and feeds several set metrics (``genmetrics compare`` feeds ``sad``
        and ``pad``); the value is then the one :meth:`update` on the images gives. Not for ``score='hcs'``,
        whose rows are image embeddings."""
        if self.score_kind == "hcs":
            raise InputError(
                f"{self.name}: update_scores takes per-image attribute scores; with score='hcs' the metric "
                "keeps image embeddings: pass the images to update()"
            )
        c = len(self.attributes)
        for s, rows, name in (("real", reference, "reference"), ("gen", candidates, "candidates")):
            if rows is None:
                continue
            x = torch.as_tensor(rows)
            if x.ndim != 2 or x.shape[1] != c or not x.is_floating_point():
                raise InputError(
                    f"{self.name}: update_scores({name}=...): expected float scores [N, {c}] (one column per "
                    f"attribute), got {x.dtype} {tuple(x.shape)}; pass the scorer's per-image scores"
                )
            if not bool(torch.isfinite(x).all()):
                raise InputError(f"{self.name}: update_scores({name}=...): the scores hold NaN or inf values")
            self._accumulate(s, {"score": x.double()})
        set_update_count(self, self.update_count + 1)  # the state changed outside update(): one more update

    def bootstrap(self, *, n_boot: int = 200, alpha: float = 0.05, seed: int = 0) -> dict[str, Any] | None:
        """The bootstrap of the mean divergence: ``ci`` (the ``1 - alpha`` interval of :meth:`bootstrap_ci`),
        ``estimate`` (the bias-corrected number to show with it), ``plugin`` (the paper's plug-in number),
        ``method``, ``n_boot``, ``level``, ``seed``; ``None`` where :meth:`bootstrap_ci` is ``None``."""
        if not self._keep_rows or self.divergence != "gaussian":
            return None
        # torchmetrics' public ``sync_on_compute``: what its private ``_to_sync`` holds outside ``forward``
        sync = self.sync_on_compute
        with self.sync_context(dist_sync_fn=self.dist_sync_fn, should_sync=sync, should_unsync=True):
            self._check_sets(2)
            real, gen = self._rows()
        boot = report.bootstrap_means(
            real.cpu(),
            gen.cpu(),
            n_boot=n_boot,
            seed=seed,
            direction=self.kl_direction,
            eps=self.eps,
            alpha=alpha,
            pad_budget=2e11 if self.name == "pad" else 0.0,
        )
        key = "pad" if self.name == "pad" else "sad"
        return {
            "ci": boot[key],
            "estimate": boot.get(f"{key}_estimate"),
            "plugin": boot.get(f"{key}_plugin"),
            "method": boot.get(f"{key}_method"),
            **{k: boot[k] for k in ("n_boot", "level", "seed")},
        }

    def bootstrap_ci(self, *, n_boot: int = 200, alpha: float = 0.05, seed: int = 0) -> list[float] | None:
        """Bootstrap interval of the true mean divergence (both sets resampled independently; a bootstrap test
        inverted along a path of Gaussian fits, docs/bootstrap.md: it starts at 0 when the two sets are no
        further apart than two samples of one distribution, and holds the bias-corrected estimate), from
        the per-image scores kept with ``keep_scores=True`` (or the rows kept by hcs / kde modes);
        ``None`` for the KDE mode or when no rows are kept. Synchronised across processes like ``compute()``."""
        boot = self.bootstrap(n_boot=n_boot, alpha=alpha, seed=seed)
        return None if boot is None else boot["ci"]


class SaD(_KLDivergence):
    """``sad``: Single-attribute Divergence (Eq. 12) between the real and the generated set.

    ``compute()`` -> ``{"mean": scalar, "per_attribute": [C]}`` (float64, nats; tables often show x1000).

    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> sad = SaD(["smiling", "wearing hat"], backbone=model, tokenizer=tokenizer)
    >>> real = random_images(6, seed=1)
    >>> same = sad.score(reference=real, candidates=real)  # a set against itself
    >>> sorted(same), float(same["mean"]) < 1e-9
    (['mean', 'per_attribute'], True)
    >>> bool(sad.score(reference=real, candidates=random_images(6, seed=2) // 2)["mean"] > 0)  # darker set
    True
    """

    def compute_state(self) -> dict[str, torch.Tensor]:
        """The value of SaD from the accumulated (synced) state (the
        :meth:`~genmetrics.core.metric_base.Metric.compute_state` hook)."""
        self._check_sets(2)
        if self._keep_rows:
            real, gen = self._rows()
            if self.divergence == "kde":
                per = D.kde_sad(
                    real, gen, n_points=self.kde_points, grid=self.kde_range, direction=self.kl_direction
                )
            else:
                per = D.sad(real, gen, direction=self.kl_direction, eps=self.eps)
        else:
            per = D.sad_from_stats(
                self._stats("real", "sq"), self._stats("gen", "sq"), direction=self.kl_direction, eps=self.eps
            )
        per = per.to(self.device)
        return {"mean": per.mean(), "per_attribute": per, **self._compat_extras(per.mean())}


class PaD(_KLDivergence):
    """``pad``: Pair-attribute Divergence (Eq. 13) over every unordered attribute pair.

    ``compute()`` -> ``{"mean": scalar, "per_pair": [C*(C-1)//2]}`` (float64, nats; pairs in
    ``itertools.combinations`` order, labels in :attr:`pairs`).

    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> pad = PaD(["smiling", "wearing hat", "a red car"], backbone=model, tokenizer=tokenizer)
    >>> real = random_images(6, seed=1)
    >>> out = pad.score(reference=real, candidates=random_images(6, seed=2) // 2)
    >>> pad.pairs[0], tuple(out["per_pair"].shape), bool(out["mean"] > 0)
    (('smiling', 'wearing hat'), (3,), True)
    """

    _needs_cross = True

    def __init__(self, attributes: Any = None, **kwargs: Any) -> None:
        super().__init__(attributes, **kwargs)
        if len(self.attributes) < 2:
            raise InputError("pad: needs at least 2 attributes to form a pair; pass two or more attributes")

    def compute_state(self) -> dict[str, torch.Tensor]:
        """The value of PaD from the accumulated (synced) state (the
        :meth:`~genmetrics.core.metric_base.Metric.compute_state` hook)."""
        self._check_sets(2)
        if self._keep_rows:
            real, gen = self._rows()
            if self.divergence == "kde":
                per = D.kde_pad(
                    real, gen, n_points=self.kde_points, grid=self.kde_range, direction=self.kl_direction
                )
            else:
                per = D.pad(real, gen, direction=self.kl_direction, eps=self.eps)
        else:
            per = D.pad_from_stats(
                self._stats("real", "cross"),
                self._stats("gen", "cross"),
                direction=self.kl_direction,
                eps=self.eps,
            )
        per = per.to(self.device)
        return {"mean": per.mean(), "per_pair": per, **self._compat_extras(per.mean())}


class RSaD(_SetDivergence):
    """``rsad``: Regional Single-attribute Divergence (Eq. 14).

    ``compute()`` -> ``{"mean": scalar, "per_attribute": [C], "map": [P,C]}``: ``map`` is mean(real) -
    mean(gen) of the refined patch scores (positive = more present there in the real set),
    ``per_attribute`` the ranking score ``mean_j |R-SaD_j|`` and ``mean`` its mean over attributes.
    The grid is :attr:`grid` (row-major).

    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()  # a 32 px ViT with 8 px patches: a 4 x 4 grid
    >>> rsad = RSaD(["smiling", "wearing hat"], backbone=model, tokenizer=tokenizer)
    >>> real = random_images(3, seed=1)
    >>> out = rsad.score(reference=real, candidates=real)
    >>> rsad.grid, tuple(out["map"].shape), float(out["map"].abs().max())  # a set against itself: 0
    ((4, 4), (16, 2), 0.0)
    """

    _needs_maps = True

    def __init__(self, attributes: Any = None, **kwargs: Any) -> None:
        for k in _KL_ONLY:
            if k in kwargs:
                raise InputError(
                    f"rsad: option {k} has no effect on R-SaD (Eq. 14 is a difference of mean refined "
                    "patch maps: no score choice, distribution fit, KL direction or KDE); drop "
                    f"{k}=, or use sad / pad for it"
                )
        super().__init__(attributes, **kwargs)
        c = len(self.attributes)
        grid = (
            _grid_of(self._backbones["backbone"])
            if "backbone" in self._backbones
            else (_grid_from_weights(self.weights))
        )
        if grid is None:
            grid = _grid_of(self._model())
        self.grid = grid
        for st in ("real", "gen"):
            self.add_state(f"{st}_n", default=torch.tensor(0.0, dtype=torch.float64), dist_reduce_fx="sum")
            self.add_state(
                f"{st}_maps",
                default=torch.zeros(grid[0] * grid[1], c, dtype=torch.float64),
                dist_reduce_fx="sum",
            )

    def compute_state(self) -> dict[str, torch.Tensor]:
        """The value of R-SaD from the accumulated (synced) state (the
        :meth:`~genmetrics.core.metric_base.Metric.compute_state` hook)."""
        self._check_sets(1)
        m = self.real_maps / self.real_n - self.gen_maps / self.gen_n
        per = m.abs().mean(0)
        return {"mean": per.mean(), "per_attribute": per, "map": m}
