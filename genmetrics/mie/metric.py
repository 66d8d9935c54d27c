"""The registered ``mie`` metric: per-sample MIE scores and diagnostics behind the common contract.

``update(reference, candidates, condition, ids=...)``:

* ``reference`` — one list of 1..8 reference subject images per candidate (``list[list[image]]``); a flat
  list (or a tensor ``[k,3,H,W]``) of images is one reference set shared by every candidate;
* ``candidates`` — the generated images (list or tensor ``[B,3,H,W]``);
* ``condition`` — the prompts, one per candidate (or one string for all).

``compute()`` is the mean rank-head score; :meth:`MIEMetric.per_sample` gives every score with its
diagnostics logits, :meth:`MIEMetric.per_generator` the mean per generator when ids are written
``"<generator>/<sample>"``.
"""

from __future__ import annotations

import copy
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any, cast

import torch
from PIL import Image

from genmetrics.accel.cast_weights import cached_weight_scope
from genmetrics.backbones.memory_model import batch_peak_bytes, image_hw, real_config_from_model
from genmetrics.backbones.qwen_vl import smart_resize
from genmetrics.core.metric import SampleMetric
from genmetrics.core.options import integer
from genmetrics.core.sample_ids import drop_duplicate_ids
from genmetrics.data.device import check_precision, precision_autocast
from genmetrics.data.io.batching import device_memory
from genmetrics.data.io.images import as_image_list
from genmetrics.errors import InputError
from genmetrics.mie.checkpoint import resolve_heads
from genmetrics.mie.common import (
    DIMENSIONS,
    FROM_CHECKPOINT,
    MAX_REFERENCES,
    build_backbone,
    image_size_option,
)
from genmetrics.mie.hints import no_heads_error
from genmetrics.mie.model import MIEModel, validate_inputs


def _is_image(x: Any) -> bool:
    return isinstance(x, (str, os.PathLike, Image.Image)) or (isinstance(x, torch.Tensor) and x.ndim == 3)


class MIEMetric(SampleMetric):
    """``create_metric("mie", heads=DIR_OR_HUB_ID)`` or ``create_metric("mie", backbone=vlm,
    processor=proc, heads=DIR)`` or ``create_metric("mie", model=MIEModel(...))``.

    Args:
        backbone, processor: a caller-built Qwen3.5 / Qwen3-VL VLM and its processor (the metric works on a
            copy, since the adapter is injected in place). Without them, the backbone named in the heads
            checkpoint is loaded on first use (``weights=`` overrides it).
        heads: folder (or hub id) of trained MIE heads + adapter, as written by ``genmetrics train mie``.
            Required unless ``model=`` is given: creating the metric without it is an error that says how
            to train heads.
        model: a ready :class:`~genmetrics.mie.MIEModel` (trained or not; used as is: its trainable
            parameters stay trainable and its train/eval mode is kept, so a model under training can be
            validated with the metric).
        weights: backbone alias / hub id / folder to load instead of the checkpoint's backbone.
        token_budget: padded tokens per forward batch; vision_cache_size: reference features kept across
            calls (references repeat across generators).
        image_size: ``"checkpoint"`` (default): the checkpoint's own (genmetrics' format: the size it was
            trained with; the authors' layout: unresized, as their code scores); an integer: the longer image
            side in px (aspect kept); ``None``: unresized (only the processor's pixel budget applies). On the
            command line: ``genmetrics score mie --option image_size=512`` (or ``=null``).
        precision: ``"fp32"`` (default) or ``"bf16"``: the backbone's forward under bfloat16 autocast (the
            heads stay float32; slower than fp32 on a CPU without bf16 units); ``"fp32"`` switches autocast off.

    With an untrained model on the tiny Qwen3.5 (``create_metric("mie", heads="OUT/final")`` for trained
    heads); ids ``"<generator>/<sample>"`` group the results per generator:

    >>> import genmetrics as gm
    >>> from genmetrics.mie import MIEModel
    >>> from genmetrics.testing import random_images, tiny_qwen35, tiny_qwen35_processor
    >>> mie = gm.create_metric("mie", model=MIEModel(tiny_qwen35(), tiny_qwen35_processor(), unfreeze_layers=1))
    >>> refs, cands = random_images(2, 64, seed=1), random_images(2, 64, seed=2)
    >>> mie.update(reference=[list(refs), [refs[0]]], candidates=cands, condition=["a cat and a dog", "a cat"],
    ...            ids=["gen_a/1", "gen_b/1"])
    >>> ps = mie.per_sample()
    >>> tuple(ps["diagnostics"].shape), ps["dimensions"], sorted(mie.per_generator())
    ((2, 3), ('existence', 'appearance', 'interaction'), ['gen_a', 'gen_b'])
    """

    sample_states = ("diagnostics",)  # one row per sample

    def __init__(
        self,
        backbone: Any = None,
        processor: Any = None,
        heads: str | os.PathLike | None = None,
        *,
        model: MIEModel | None = None,
        weights: str | None = None,
        token_budget: int = 16384,
        vision_cache_size: int = 256,
        image_size: int | str | None = FROM_CHECKPOINT,
        dtype: Any = None,
        precision: str = "fp32",
        batch_size: int = 32,
        device: Any = None,
        **kwargs: Any,
    ) -> None:
        super().__init__(batch_size=batch_size, device=device, **kwargs)
        self.add_state("diagnostics", default=[], dist_reduce_fx="cat")
        if model is not None and not isinstance(model, MIEModel):
            raise InputError(f"model: expected a genmetrics.mie.MIEModel, got {type(model).__name__}")
        if backbone is not None and processor is None and model is None:
            raise InputError(
                "processor: pass the backbone's processor together with backbone= (load both with "
                "genmetrics.backbones.hf.load_vlm)"
            )
        if model is None and heads is None:
            raise no_heads_error()
        self._heads = heads
        self._weights = weights
        # not ``self._dtype``: that is torchmetrics' own dtype attribute, which ``.to()`` / ``set_dtype``
        # overwrite (the backbone would then load in the states' float32, and ``metric.dtype`` read None)
        self._backbone_dtype = dtype
        self.precision = check_precision(precision, owner="mie")
        self._token_budget = integer("token_budget", token_budget, lo=1, owner="mie")
        self._vision_cache_size = integer("vision_cache_size", vision_cache_size, lo=0, owner="mie")
        self._image_size = image_size_option(image_size, allow_checkpoint=True)
        if backbone is not None and model is None:
            # MIEModel injects the adapter and loads trained layers into its backbone in place; the metric
            # works on its own copy so the caller's model is never altered.
            backbone = copy.deepcopy(backbone)
        self._pending = (backbone, processor)
        self.max_references = MAX_REFERENCES
        if model is not None:
            self._install(model, callers=True)
        elif heads is not None and (
            Path(os.fspath(heads)).expanduser().exists() or os.fspath(heads).startswith((".", "/", "~"))
        ):
            resolve_heads(heads)  # a local path is checked now (cheap); hub ids resolve on first use

    def _install(self, model: MIEModel, *, callers: bool = False) -> None:
        """Keep ``model`` as the metric's backbone. A caller's model (``model=``) keeps its trainable
        parameters and its train/eval mode: it may be a model under training that the metric validates
        (scoring itself runs in eval mode without gradients and restores the mode)."""
        model.token_budget = self._token_budget
        model.vision_cache_size = self._vision_cache_size
        if self._image_size != FROM_CHECKPOINT:
            model.image_size = self._image_size
        self.max_references = model.max_references
        # weights the metric loaded: frozen and in eval mode; a caller's model: flags and mode left as they are,
        # and no cast copy of its weights is kept (its owner may still change them)
        self._keep_cast = not callers
        self.register_backbone("mie", model, callers=callers)
        self._pending = (None, None)

    def mie_model(self) -> MIEModel:
        """The underlying :class:`MIEModel` (loaded on first call)."""
        if "mie" not in self._backbones:
            backbone, processor = self._pending
            if backbone is None and self._weights is not None:
                backbone, processor = build_backbone(
                    self._weights, device=self._device, dtype=self._backbone_dtype
                )
            if self._heads is None:  # heads=None only comes with model=, installed at construction
                raise no_heads_error()
            model = MIEModel.from_pretrained(
                self._heads,
                backbone,
                processor,
                device=self._device,
                dtype=self._backbone_dtype,
                token_budget=self._token_budget,
                vision_cache_size=self._vision_cache_size,
            )
            self._install(model)
        return cast(MIEModel, self._backbones["mie"])

    # ------------------------------------------------------------------ hooks
    def prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        """Check and convert one batch of inputs into what :meth:`score_batch` of MIE (the ranking head's
        score) reads (the :meth:`~genmetrics.core.sample_metric.SampleMetric.prepare` hook)."""
        if candidates is None:
            raise InputError("candidates: missing; mie scores generated images (pass candidates=)")
        cands = as_image_list(candidates, name="candidates")
        if (
            reference is not None
            and not isinstance(reference, torch.Tensor)
            and isinstance(reference, Sequence)
            and not isinstance(reference, (str, bytes))
            and reference
            and all(_is_image(r) for r in reference)
        ):
            # a flat list of images: one reference set shared by every candidate
            reference = [list(reference)] * len(cands)
        elif isinstance(reference, torch.Tensor) and reference.ndim == 4:
            reference = [list(reference.unbind(0))] * len(cands)
        refs, prompts, cands = validate_inputs(
            reference, condition, cands, max_references=self.max_references
        )
        return {"reference": refs, "candidates": cands, "condition": prompts}

    def score_batch(self, batch: dict[str, list[Any]]) -> dict[str, torch.Tensor]:
        """Per-sample MIE (the ranking head's score) of one prepared batch (the
        :meth:`~genmetrics.core.sample_metric.SampleMetric.score_batch` hook)."""
        model = self.mie_model()
        with (
            precision_autocast(self.precision, self.device),
            cached_weight_scope(model, keep=self._keep_cast),
        ):
            out = model.score(batch["reference"], batch["condition"], batch["candidates"])
        return {"score": out.score, "diagnostics": out.diagnostics}

    def _peak_bytes(self, batch: dict[str, list[Any]]) -> Any:
        """On a CUDA device, the memory model's peak for ``b`` items of these images (fitted to
        ``image_size`` and the processor's pixel budget), so the first batch fits the device
        (docs/real_size.md); None on the CPU."""
        if device_memory(self.device) is None:
            return None
        model = self.mie_model()
        entry = real_config_from_model(model.vlm)
        if entry is None:
            return None
        v = entry.config["vision_config"]
        budget = getattr(model.processor.image_processor, "size", None) or {}
        lo, hi = budget.get("shortest_edge"), budget.get("longest_edge")

        def seen(x: Any) -> tuple[int, int]:
            h, w = image_hw(x)
            if model.image_size is not None and max(h, w) > model.image_size:  # fit_image's downscale
                scale = model.image_size / max(h, w)
                h, w = max(1, round(h * scale)), max(1, round(w * scale))
            return smart_resize(h, w, v["patch_size"] * v["spatial_merge_size"], lo, hi)

        sizes = [seen(x) for refs in batch["reference"] for x in refs] + [
            seen(x) for x in batch["candidates"]
        ]
        return batch_peak_bytes(
            entry,
            sizes,
            images_per_item=1 + max(len(refs) for refs in batch["reference"]),
            text_tokens=128,  # the template and the prompt
            variant="mie",
            dtype_bytes=next(model.vlm.parameters()).element_size(),
            device="cuda",
        )

    # ------------------------------------------------------------------ results
    def _gathered_all(self) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        scores, diags, ids = self.scores, self.diagnostics, self.sample_ids
        if isinstance(scores, list):
            if not scores:
                raise InputError("mie: compute() called before any update(); nothing to score")
            scores, diags, ids = torch.cat(scores), torch.cat(diags), torch.cat(ids)
        if scores.numel() == 0:
            raise InputError("mie: no samples were scored")
        both, ids = drop_duplicate_ids(
            torch.cat([scores[:, None], diags.reshape(-1, len(DIMENSIONS))], 1), ids
        )
        return both[:, 0], both[:, 1:], ids

    def per_sample(self, *, sync: bool = True) -> dict[str, Any]:
        """``{"ids": [str|None], "scores": [N], "diagnostics": [N,3] logits, "dimensions": (...)}``, gathered
        from every process when running distributed (``sync=True``)."""
        with self._synced(sync) as id_names:
            scores, diags, ids = self._gathered_all()
        names = [id_names.get(int(i)) if int(i) >= 0 else None for i in ids]
        return {"ids": names, "scores": scores, "diagnostics": diags, "dimensions": DIMENSIONS}

    def per_generator(self, sep: str = "/") -> dict[str, dict[str, Any]]:
        """Mean score, mean diagnostic probabilities and count per generator, for ids written
        ``"<generator><sep><sample>"`` (samples without such an id are grouped under ``""``)."""
        ps = self.per_sample()
        groups: dict[str, list[int]] = {}
        for i, name in enumerate(ps["ids"]):
            gen = name.split(sep, 1)[0] if name and sep in name else ""
            groups.setdefault(gen, []).append(i)
        out = {}
        for gen, idx in sorted(groups.items()):
            ix = torch.tensor(idx)
            probs = torch.sigmoid(ps["diagnostics"][ix]).mean(0)
            out[gen] = {
                "n": len(idx),
                "score": float(ps["scores"][ix].mean()),
                **{f"p_{d}": float(p) for d, p in zip(DIMENSIONS, probs)},
            }
        return out
