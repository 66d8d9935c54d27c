"""The registered ``tpips`` metric: aspect-conditioned similarity of candidates to their reference.

``update(reference, candidates, condition)``:

* ``reference``: ``B`` images (paths, PIL, uint8 or float tensors, or a tensor ``[B,3,H,W]``);
* ``candidates``: ``B`` images (one per reference) or ``B`` lists of ``K`` images (a tensor ``[B,K,3,H,W]``
  works too), each compared with its reference;
* ``condition``: ``B`` aspect strings, or one string for all ("lighting", "pose of the cat", "overall").
  When ``condition`` is None the metric's ``aspect=`` option is used.

Per-sample scores are the similarities ``f(reference, candidate | aspect)`` (``[B]`` or ``[B,K]``);
``compute()`` is their mean (per candidate column for ``[B,K]``); :meth:`TPIPS.per_aspect` gives the
accumulated mean per aspect and :meth:`TPIPS.similarities` the one-shot per-sample similarities.
Images reach the backbone as the official Qwen3-VL-Embedding embedder sends them (``resize="smart"``:
``smart_resize``, aspect kept; see docs/tpips.md); ``resize="square"`` / ``image_size=S`` is the older fixed
``S x S`` policy.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Sequence
from typing import Any

import torch

from genmetrics.accel.cast_weights import cached_weight_scope
from genmetrics.backbones.memory_model import batch_peak_bytes, image_hw, real_config_from_model
from genmetrics.backbones.qwen_vl import IMAGE_MODES, mode_sensitive, official_rgb_uint8, qwen_image
from genmetrics.core.metric import SampleMetric, batch_len, eval_mode, hash_id, keep_index, slice_batch
from genmetrics.core.options import integer, number
from genmetrics.data.device import check_precision, precision_autocast
from genmetrics.data.io.batching import device_memory, map_batches
from genmetrics.data.io.images import as_image_list, to_tensor
from genmetrics.data.io.pipeline import rgb_uint8
from genmetrics.errors import InputError
from genmetrics.tpips.common import DEFAULT_WEIGHTS, VARIANTS, check_aspects
from genmetrics.tpips.loading import load_tpips
from genmetrics.tpips.model import VALUE_RANGE, TPIPSModel


class TPIPS(SampleMetric):
    """TPIPS similarity (higher = more similar under the aspect).

    Args:
        backbone: a Qwen3-VL model (or a ready :class:`~genmetrics.tpips.model.TPIPSModel`); None loads
            ``weights`` lazily on first scoring.
        processor: the backbone's processor (required with ``backbone``).
        variant: ``"late"`` (default), ``"mid"`` or ``"early"`` (ignored when ``adapter`` fixes it).
        weights: base weights when ``backbone`` is None (default ``Qwen/Qwen3-VL-Embedding-2B``;
            ``Qwen/Qwen3-VL-Embedding-8B`` or a local folder also work).
        adapter: a trained TPIPS adapter folder (``genmetrics train tpips`` writes ``OUT/adapter``) or hub id.
        aspect: the aspect used when ``update`` gets no ``condition``.
        resize: ``"smart"`` (default, the official Qwen3-VL-Embedding policy) or ``"square"``.
        image_size: side of the square policy (multiple of 32; default 448); alone it selects ``"square"``.
        data_range: the value range of float tensor images (1.0 or 255.0).
        dtype: backbone precision when loading weights (default bf16 on CUDA, fp32 on CPU).
        precision: ``"fp32"`` (default) or ``"bf16"``: the backbone's forward under bfloat16 autocast
            (slower than fp32 on a CPU without bf16 units); ``"fp32"`` switches autocast off. The similarity itself is
            taken in float64 either way.
        vision_cache_size: images whose vision-tower output is kept across calls.
        image_modes: how PIL images and files of modes other than RGB become RGB: ``"official"`` (as the
            Qwen3-VL-Embedding embedder), ``"genmetrics"`` (alpha on white, 16-bit rescaled); default: the
            adapter's, else ``"official"``.

    On the tiny random Qwen3-VL (``TPIPS()`` loads Qwen3-VL-Embedding-2B): one aspect per pair, the
    per-sample similarities, their mean and the mean per aspect:

    >>> from genmetrics.testing import random_images, tiny_qwen3vl, tiny_qwen3vl_processor
    >>> tpips = TPIPS(tiny_qwen3vl(), tiny_qwen3vl_processor(), image_size=64)
    >>> a, b = random_images(2, 64, seed=1), random_images(2, 64, seed=2)
    >>> tpips.update(reference=a, candidates=a, condition=["color", "color"])  # identical pairs: 1
    >>> tpips.update(reference=a, candidates=b, condition=["color", "overall"])
    >>> scores = tpips.per_sample()["scores"]
    >>> scores[:2].tolist(), sorted(tpips.per_aspect()), bool(tpips.compute() == scores.mean())
    ([1.0, 1.0], ['color', 'overall'], True)
    """

    sample_states = ("aspect_ids",)  # one row per sample

    def __init__(
        self,
        backbone: Any = None,
        processor: Any = None,
        *,
        variant: str = "late",
        weights: str | None = None,
        adapter: str | os.PathLike | None = None,
        aspect: str | None = None,
        image_size: int | None = None,
        resize: str | None = None,
        data_range: float = 1.0,
        dtype: Any = None,
        precision: str = "fp32",
        vision_cache_size: int = 64,
        image_modes: str | None = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(**kwargs)
        if image_modes not in (None, *IMAGE_MODES):
            raise InputError(
                f"image_modes={image_modes!r}: expected 'official' (as the Qwen3-VL-Embedding embedder) or "
                "'genmetrics' (alpha on white, 16-bit rescaled)"
            )
        self.image_modes = image_modes
        if variant not in VARIANTS:
            raise InputError(f"variant={variant!r}: expected one of {', '.join(VARIANTS)}")
        if backbone is not None and processor is None and not hasattr(backbone, "similarity"):
            raise InputError("processor: pass the backbone's processor together with backbone=")
        if aspect is not None:
            check_aspects([aspect], 1, name="aspect")
        self.variant = variant
        self.weights = weights
        self.adapter = adapter
        self.aspect = aspect
        self.data_range = number("data_range", data_range, lo=0.0, lo_open=True, owner="tpips")
        self.dtype_option = dtype
        self.precision = check_precision(precision, owner="tpips")
        self.vision_cache_size = integer("vision_cache_size", vision_cache_size, lo=0, owner="tpips")
        if resize not in (None, "smart", "square"):
            raise InputError(
                f"resize={resize!r}: expected 'smart' (the official Qwen3-VL-Embedding policy) or 'square'"
            )
        self.image_size = (
            integer("image_size", image_size, lo=1, owner="tpips") if image_size is not None else None
        )
        self.resize = resize
        self._candidate_k: int | None = None
        self.add_state("aspect_ids", default=[], dist_reduce_fx="cat")
        self._aspect_names: dict[int, str] = {}
        self._model_ready = False
        self._given = (backbone, processor)
        if backbone is not None:
            self._build()

    # -- model -------------------------------------------------------------------------------------
    def _build(self) -> Any:
        backbone, processor = self._given
        if isinstance(backbone, TPIPSModel):
            model = backbone
            if self.image_modes is not None:
                model.image_modes = self.image_modes
        else:
            extra = {} if self.image_modes is None else {"image_modes": self.image_modes}
            model = load_tpips(
                self.adapter,
                backbone=backbone,
                processor=processor,
                weights=self.weights,
                variant=None if self.adapter else self.variant,
                image_size=self.image_size,
                resize=self.resize,
                dtype=self.dtype_option,
                vision_cache_size=self.vision_cache_size,
                data_range=self.data_range,
                **extra,
            )
        if not isinstance(model, TPIPSModel):
            raise InputError(
                "the tpips metric needs a pairwise (late/mid/early) model; a triplet-head adapter scores "
                "triplets only: evaluate it with `genmetrics evaluate-human tpips --adapter ...`"
            )
        callers = (
            model is backbone
        )  # the caller's TPIPSModel keeps its requires_grad flags and train/eval mode
        # copies of the weights are kept only for a model loaded from weights by name (not around a caller's
        # backbone, whose weights its owner may still change)
        self._keep_cast = backbone is None
        self._given = (None, None)
        self.register_backbone("backbone", model, callers=callers)
        self._model_ready = True
        return model

    @property
    def value_range(self) -> tuple[float, float]:
        """The range of the per-sample scores for this metric's variant: ``[-1, 1]`` for late and early fusion
        (cosine), ``(-inf, 0]`` for mid fusion (a negative weighted distance). The card's range is their union."""
        variant = self.model().variant if self._model_ready else self.variant
        return VALUE_RANGE[variant]

    def model(self) -> Any:
        """The underlying :class:`~genmetrics.tpips.model.TPIPSModel` (loads default weights on first use)."""
        return self.backbone("backbone") if self._model_ready else self._build()

    # -- inputs ------------------------------------------------------------------------------------
    @property
    def input_transform(self) -> Any:
        """What the input pipeline's workers do per decoded file: the RGB conversion ``image_modes`` names
        (the model's own when the metric is built without it)."""
        mode = self.image_modes or getattr(self.model(), "image_modes", "official")
        return official_rgb_uint8 if mode == "official" else rgb_uint8

    def _images(self, images: Any, name: str) -> list[Any]:
        """Checked (decoded) now, before any weights load; a PIL image or file whose RGB depends on
        ``image_modes`` is kept as given and converted by the model, every other one as a tensor."""
        items = as_image_list(images, name=name)
        if not items:
            raise InputError(f"{name}: the batch is empty; expected at least one image")
        out: list[Any] = []
        for i, x in enumerate(items):
            label = str(x) if isinstance(x, (str, os.PathLike)) else f"{name}[{i}]"
            if mode_sensitive(x):
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")  # the model warns when it converts it
                    qwen_image(x, image_modes=self.image_modes or "official", name=label)
                out.append(x)
            else:
                out.append(to_tensor(x, data_range=self.data_range, name=label).cpu())
        return out

    def prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        """Check and convert one batch of inputs into what :meth:`score_batch` of TPIPS similarity reads (the
        :meth:`~genmetrics.core.sample_metric.SampleMetric.prepare` hook)."""
        if reference is None:
            raise InputError(
                "tpips: reference images are required (each candidate is compared with its reference)"
            )
        if candidates is None:
            raise InputError(
                "tpips: candidates are required: one image per reference, or K images per reference"
            )
        ref = self._images(reference, "reference")
        n = len(ref)
        nested = (isinstance(candidates, torch.Tensor) and candidates.ndim == 5) or (
            isinstance(candidates, Sequence)
            and not isinstance(candidates, (str, bytes))
            and len(candidates) > 0
            and isinstance(candidates[0], (list, tuple))
        )
        if nested:
            rows = list(candidates.unbind(0)) if isinstance(candidates, torch.Tensor) else list(candidates)
            if len(rows) != n:
                raise InputError(
                    f"candidates: got {len(rows)} rows of candidates for {n} references; pass one row of K "
                    "candidates per reference"
                )
            ks = {len(as_image_list(r, name="candidates")) for r in rows}
            if len(ks) != 1 or 0 in ks:
                raise InputError(
                    f"candidates: every reference needs the same number K >= 1 of candidates, got {sorted(ks)}"
                )
            k = ks.pop()
            cand: list[Any] = [self._images(r, f"candidates[{i}]") for i, r in enumerate(rows)]
        else:
            cand = self._images(candidates, "candidates")
            if len(cand) != n:
                raise InputError(
                    f"mismatched input lengths (reference={n}, candidates={len(cand)}); pass one candidate "
                    "per reference, or a list of K candidates per reference"
                )
            k = 0
        if self._candidate_k is not None and self._candidate_k != k and len(self.scores):
            desc = lambda v: "one candidate per reference" if v == 0 else f"{v} candidates per reference"  # noqa: E731
            raise InputError(
                f"candidates: this metric already holds scores for {desc(self._candidate_k)}; got "
                f"{desc(k)}; reset() first or use a separate metric"
            )
        self._pending_k: int | None = k
        if condition is None:
            if self.aspect is None:
                raise InputError(
                    "tpips: condition (the aspect text) is required, e.g. condition='lighting' or "
                    "'overall' for overall similarity; or create the metric with aspect='...'"
                )
            condition = self.aspect
        asp = check_aspects(condition, n, name="condition")
        return {"reference": ref, "candidates": cand, "condition": asp}

    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        """Per-sample TPIPS similarity of one prepared batch (the
        :meth:`~genmetrics.core.sample_metric.SampleMetric.score_batch` hook)."""
        model = self.model()
        ref, cand, asp = batch["reference"], batch["candidates"], batch["condition"]
        # a caller's model under training is scored in eval mode, its mode kept
        with (
            eval_mode(model),
            precision_autocast(self.precision, self.device),
            cached_weight_scope(model, keep=self._keep_cast),
        ):
            if cand and isinstance(cand[0], list):
                k = len(cand[0])
                a = [r for r in ref for _ in range(k)]
                b = [c for row in cand for c in row]
                s = model.similarity(a, b, [x for x in asp for _ in range(k)])
                return s.reshape(len(ref), k)
            return model.similarity(ref, cand, asp)

    def _peak_bytes(self, batch: dict[str, list[Any]]) -> Any:
        """On a CUDA device, the memory model's peak for ``b`` pairs of these images (at the size the model
        resizes them to), so the first batch fits the device (docs/real_size.md); None on the CPU."""
        if device_memory(self.device) is None:
            return None
        model = self.model()
        entry = real_config_from_model(model.backbone)
        if entry is None:
            return None
        cand = batch["candidates"]
        k = len(cand[0]) if cand and isinstance(cand[0], list) else 1
        flat = [c for row in cand for c in row] if k > 1 or (cand and isinstance(cand[0], list)) else cand
        sizes = [model.resize.target(*image_hw(x)) for x in [*batch["reference"], *flat]]
        early = model.variant == "early"
        return batch_peak_bytes(
            entry,
            sizes,
            sequences_per_item=k * (1 if early else 2),  # late / mid: one sequence per image
            images_per_item=2 if early else 1,
            text_tokens=model.max_aspect_tokens + 32,  # the aspect and the prompt template
            variant=model.variant,
            dtype_bytes=next(model.backbone.parameters()).element_size(),
            device="cuda",
        )

    def update(
        self, reference: Any = None, candidates: Any = None, condition: Any = None, *, ids: Any = None
    ) -> None:
        """Score ``candidates`` against ``reference`` under ``condition`` (the aspect texts), as
        :meth:`Metric.update`; text truncation warnings are collected into one per call."""
        n_before = sum(int(t.shape[0]) for t in self.scores) if isinstance(self.scores, list) else 0
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            super().update(reference, candidates, condition, ids=ids)
        cut = [w for w in caught if "tokens truncated to" in str(w.message)]
        for w in caught:
            if w not in cut:
                warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
        self._candidate_k = self._pending_k
        n_new = sum(int(t.shape[0]) for t in self.scores) - n_before
        asp = condition if condition is not None else self.aspect
        assert asp is not None  # prepare refused a missing condition
        asp = [asp] * n_new if isinstance(asp, str) else list(asp)
        if cut:  # one warning per update naming how many aspects were cut (the model warns per call)
            model = self.model()
            tok, limit = getattr(model, "tokenizer", None), getattr(model, "max_aspect_tokens", None)
            uniq = list(dict.fromkeys(asp))
            long = [
                a
                for a in uniq
                if tok is not None and limit and len(tok(a, add_special_tokens=False)["input_ids"]) > limit
            ] or uniq[:1]
            warnings.warn(
                f"tpips: {len(long)} aspect text(s) exceed the model's {limit} aspect tokens and were "
                f"truncated by the tokenizer (first: {long[0][:60]!r}); shorten them to use all of the text",
                UserWarning,
                stacklevel=2,
            )
        if self._last_kept is not None and not isinstance(
            condition if condition is not None else self.aspect, str
        ):
            asp = [asp[j] for j in self._last_kept]  # ids already scored were dropped: their aspects too
        hashed = []
        for a in asp:
            h = hash_id(a) & ((1 << 62) - 1)
            self._aspect_names[h] = a
            hashed.append(h)
        self.aspect_ids.append(torch.tensor(hashed, dtype=torch.long, device=self.device))

    def reset(self) -> None:
        """Clear the scores and ids, as :meth:`Metric.reset`, and forget the candidate count of the last update."""
        super().reset()
        self._candidate_k = None

    # -- results -----------------------------------------------------------------------------------
    def per_aspect(self) -> dict[str, torch.Tensor]:
        """Accumulated mean similarity per aspect: ``{aspect: tensor}`` (scalar, or ``[K]``)."""
        scores, ids, asp = self.scores, self.sample_ids, self.aspect_ids
        if isinstance(scores, list):
            if not scores:
                raise InputError("tpips: per_aspect() called before any update()")
            scores, ids, asp = torch.cat(scores), torch.cat(ids), torch.cat(asp)
        keep = keep_index(ids)  # padded copies of named ids once; unnamed samples all kept
        scores, asp = scores[keep], asp[keep]
        out: dict[str, torch.Tensor] = {}
        for h in dict.fromkeys(asp.tolist()):
            name = self._aspect_names.get(h, f"aspect#{h:x}")
            out[name] = scores[asp == h].mean(0)
        return out

    def similarities(self, reference: Any, candidates: Any, condition: Any = None) -> torch.Tensor:
        """One-shot per-sample similarities ``[B]`` or ``[B,K]`` (float64) of just these inputs."""
        held, pending = self._candidate_k, getattr(self, "_pending_k", None)
        self._candidate_k = None  # one-shot: neither checked against nor recorded in the accumulated state
        try:
            batch = self.prepare(reference, candidates, condition)
        finally:
            self._candidate_k, self._pending_k = held, pending
        n = batch_len(batch)
        parts = map_batches(
            lambda sl: self.score_batch(slice_batch(batch, sl)),
            n,
            self.batch_size,
            peak_bytes=self._peak_bytes(batch),  # the memory model's first batch on a GPU, as update()
            device=self.device,
        )
        return torch.cat(parts, 0).double()


__all__ = ["DEFAULT_WEIGHTS", "TPIPS"]
