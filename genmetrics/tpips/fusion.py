"""What a TPIPS fusion variant is: a :class:`Fusion` turns the shared runtime (:class:`~genmetrics.tpips.base.VLMBase`,
used through its public API only) into pair similarities ``f(a, b | c)``, and owns the parameters that live
outside the backbone (the mid-fusion MLPs, the early-fusion register vector).

:class:`~genmetrics.tpips.model.TPIPSModel` holds one fusion and delegates to it, so a new variant is a new
subclass registered in :data:`FUSIONS`, not a branch in the model. The hooks:

* :meth:`Fusion.pair_scores` -- ``[B]`` similarities of loaded images (the one hook every variant writes);
* :meth:`Fusion.triplet_scores` -- Eq. 2's ``s_bar`` from three pair columns (one shared call by default);
* :meth:`Fusion.embed` -- per-image embeddings (late fusion only);
* :meth:`Fusion.head_state_dict` / :meth:`Fusion.load_head_state_dict` / :meth:`Fusion.config` /
  :meth:`Fusion.options_from_config` -- what an adapter folder stores for the variant.

:class:`EncodedFusion` is the common shape of late and mid fusion: each distinct (image, aspect) is encoded
once (:meth:`EncodedFusion.encode`), then encodings are compared (:meth:`EncodedFusion.compare`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

import torch
from torch import nn

from genmetrics.errors import InputError
from genmetrics.tpips.base import VLMBase

__all__ = ["EncodedFusion", "Fusion", "FusionOptions", "check_head_tensors"]


@dataclass(frozen=True)
class FusionOptions:
    """The constructor options of :class:`~genmetrics.tpips.model.TPIPSModel` that a fusion may read.

    >>> FusionOptions(temperature=0.05).probe_layers
    20
    """

    temperature: float
    probe_layers: int | Sequence[int] = 20
    mid_hidden: int = 256
    mid_init: float | None = None
    mid_text_norm: str = "layer"


def check_head_tensors(
    state: dict[str, torch.Tensor], expected: dict[str, torch.Tensor], *, source: str
) -> dict[str, torch.Tensor]:
    """``state`` checked against the ``expected`` names and shapes: a missing, extra, wrongly shaped or
    non-finite tensor raises one :class:`~genmetrics.errors.InputError` naming ``source`` and the tensor.
    The placeholder ``_empty`` (written for variants without head tensors) is ignored.

    >>> ok = {"w": torch.zeros(2)}
    >>> sorted(check_head_tensors({"w": torch.ones(2)}, ok, source="h.safetensors"))
    ['w']
    >>> check_head_tensors({"w": torch.tensor([1.0, float("nan")])}, ok, source="h.safetensors")
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: h.safetensors: tensor 'w' holds 1 NaN or infinite value(s); the file is corrupt or was saved from a diverged run: retrain or restore it
    """
    state = {k: v for k, v in state.items() if k != "_empty"}
    missing = sorted(set(expected) - set(state))
    extra = sorted(set(state) - set(expected))
    if missing:
        raise InputError(
            f"{source}: tensor {missing[0]!r} is missing ({len(missing)} missing in all); the file was not "
            "saved for this variant and these options (variant, probe layers, MLP width): pass the "
            "adapter folder it was saved with"
        )
    if extra:
        raise InputError(
            f"{source}: unexpected tensor {extra[0]!r} ({len(extra)} unexpected in all); the file was saved "
            "for another variant or other options: pass the adapter folder it was saved with"
        )
    for k, want in expected.items():
        got = state[k]
        if tuple(got.shape) != tuple(want.shape):
            raise InputError(
                f"{source}: tensor {k!r} has shape {tuple(got.shape)}, expected {tuple(want.shape)} for this "
                "backbone and these options; the file was saved for another backbone or other options"
            )
        if got.is_floating_point():
            bad = int((~torch.isfinite(got)).sum())
            if bad:
                raise InputError(
                    f"{source}: tensor {k!r} holds {bad} NaN or infinite value(s); the file is corrupt or was "
                    "saved from a diverged run: retrain or restore it"
                )
    return state


class Fusion(nn.Module):
    """One TPIPS variant over the public :class:`~genmetrics.tpips.base.VLMBase` API (see module docstring).

    The base class gives Eq. 2's triplet columns from :meth:`pair_scores`, refuses :meth:`embed`, and stores
    no head tensors; a subclass sets ``name`` and ``value_range`` and writes :meth:`pair_scores`.

    >>> from genmetrics.testing import random_images, tiny_tpips
    >>> model = tiny_tpips("early")
    >>> isinstance(model.fusion, Fusion), model.fusion.name, model.fusion.value_range
    (True, 'early', (-1.0, 1.0))
    >>> x = model.load_images(random_images(3, 64, seed=1))
    >>> with torch.no_grad():
    ...     s = model.fusion.triplet_scores(model, [x[0]], [x[0]], [x[2]], ["color"])  # x1 = x2: f(x1, x2) = 1
    >>> round(float(s[0, 2]), 5)
    1.0
    """

    name: ClassVar[str] = ""
    value_range: ClassVar[tuple[float, float]] = (-1.0, 1.0)

    def pair_scores(
        self, base: VLMBase, a: list[torch.Tensor], b: list[torch.Tensor], aspects: list[str]
    ) -> torch.Tensor:
        """``[B]`` similarities ``f(a_i, b_i | aspects_i)`` of loaded images (keeps the autograd graph)."""
        raise NotImplementedError

    def triplet_scores(
        self,
        base: VLMBase,
        x1: list[torch.Tensor],
        x2: list[torch.Tensor],
        x3: list[torch.Tensor],
        aspects: list[str],
    ) -> torch.Tensor:
        """``[B,3]`` ``s_bar = [f(x2,x3), f(x1,x3), f(x1,x2)]`` (column k leaves image k out), from one
        :meth:`pair_scores` call over the three columns (each distinct image is encoded once)."""
        n = len(x1)
        s = self.pair_scores(
            base, list(x2) + list(x1) + list(x1), list(x3) + list(x3) + list(x2), list(aspects) * 3
        )
        return torch.stack([s[:n], s[n : 2 * n], s[2 * n :]], 1)

    def embed(self, base: VLMBase, images: list[torch.Tensor], aspects: list[str]) -> torch.Tensor:
        """Per-image embeddings; only late fusion has them."""
        raise InputError(f"embed() is defined for late fusion only; this model is variant={self.name!r}")

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """The tensors an adapter folder stores for this variant (``tpips_head.safetensors``)."""
        return {}

    def load_head_state_dict(self, state: dict[str, torch.Tensor], *, source: str = "head state") -> None:
        """Load :meth:`head_state_dict`'s tensors, refusing missing, extra, misshaped or non-finite ones."""
        check_head_tensors(state, self.head_state_dict(), source=source)

    def config(self) -> dict[str, Any]:
        """The variant's entries of ``tpips.json``."""
        return {}

    @classmethod
    def options_from_config(cls, config: dict[str, Any]) -> dict[str, Any]:
        """TPIPSModel keyword options recorded in a ``tpips.json`` (inverse of :meth:`config`)."""
        return {}


class EncodedFusion(Fusion):
    """Late and mid fusion: both images of a pair are encoded on their own under the aspect, then compared.

    Each distinct (image content, aspect) in a call is encoded once, so an image shared by several pairs (a
    triplet's columns, a reference scored against K candidates) costs one language-tower row per aspect. The
    distinct rows are encoded in a canonical order (by content hash and aspect), so swapping the two images
    of every pair, or reordering the pairs, runs the identical computation: ``f(a, b) = f(b, a)`` bitwise.

    >>> from genmetrics.testing import random_images, tiny_tpips
    >>> model = tiny_tpips("late")
    >>> x = model.load_images(random_images(2, 64, seed=1))
    >>> with torch.no_grad():  # without gradients: the exact cosine of the unit embeddings
    ...     s = model.fusion.pair_scores(model, [x[0], x[0]], [x[0], x[1]], ["color", "color"])
    >>> float(s[0]), bool(s[1] < 1)
    (1.0, True)
    """

    def pair_images(
        self, base: VLMBase, a: list[torch.Tensor], b: list[torch.Tensor]
    ) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """Both columns under the resize policy (each image on its own by default)."""
        return base.resized(a), base.resized(b)

    def encode(
        self, base: VLMBase, images: list[torch.Tensor], aspects: list[str], *, keys: list[str]
    ) -> Any:
        """Encodings of resized images under their aspects, one row per image."""
        raise NotImplementedError

    def compare(self, encoding: Any, rows_a: list[int], rows_b: list[int]) -> torch.Tensor:
        """``[B]`` similarities of the encoded rows ``rows_a[i]`` and ``rows_b[i]``."""
        raise NotImplementedError

    def pair_scores(
        self, base: VLMBase, a: list[torch.Tensor], b: list[torch.Tensor], aspects: list[str]
    ) -> torch.Tensor:
        """``[B]`` distances of the image pairs ``(a[i], b[i])`` under ``aspects[i]``: each distinct (image,
        aspect) encoded once, in a canonical order, so the score is symmetric in ``a`` and ``b`` bit
        for bit."""
        ra, rb = self.pair_images(base, list(a), list(b))
        images, asp = ra + rb, list(aspects) * 2
        keys = base.content_keys(images)
        first: dict[tuple[str, str], int] = {}
        for i, rowkey in enumerate(zip(keys, asp)):
            first.setdefault(rowkey, i)
        # encoded in a canonical order (by content and aspect): the batch, and so every rounding, is the same
        # whatever the order of the pairs or of the two images in a pair, so f(a, b) = f(b, a) bitwise
        uniq = sorted(first)
        row = {rowkey: r for r, rowkey in enumerate(uniq)}
        enc = self.encode(
            base, [images[first[u]] for u in uniq], [u[1] for u in uniq], keys=[u[0] for u in uniq]
        )
        index = [row[rowkey] for rowkey in zip(keys, asp)]
        n = len(ra)
        return self.compare(enc, index[:n], index[n:])
