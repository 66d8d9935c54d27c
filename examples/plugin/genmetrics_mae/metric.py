"""The ``mae`` metric class: two hooks, :meth:`~MeanAbsoluteError.prepare` and
:meth:`~MeanAbsoluteError.score_batch`; genmetrics' ``SampleMetric`` does the rest (chunking by
``batch_size``, per-sample scores with ids, ``compute()`` as the mean, distributed sync)."""

from __future__ import annotations

from typing import Any

import torch

from genmetrics.core.metric import SampleMetric
from genmetrics.core.options import number
from genmetrics.data.images import as_image_list, check_same_size, to_tensor
from genmetrics.errors import InputError


class MeanAbsoluteError(SampleMetric):
    """Mean over pixels and channels of ``|candidate - reference|``, images scaled to [0, 1].

    >>> import torch, genmetrics as gm
    >>> m = MeanAbsoluteError()
    >>> ref = torch.zeros(2, 3, 4, 4)
    >>> float(m(preds=ref + 0.25, target=ref))  # torchmetrics' keywords: preds = candidates
    0.25
    """

    is_differentiable = False

    def __init__(self, *, data_range: float = 1.0, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        #: the largest value of a float image (uint8 images are divided by 255 regardless)
        self.data_range = number("data_range", data_range, lo=0.0, lo_open=True, owner="mae")

    def prepare(self, reference: Any, candidates: Any, condition: Any) -> dict[str, list[Any]]:
        """One reference per candidate, of the same size; no condition. Checks only headers (no decoding)."""
        if condition is not None:
            raise InputError("mae: takes no condition (text); pass reference= and candidates= only")
        refs = as_image_list(reference, name="reference")
        cands = as_image_list(candidates, name="candidates")
        if len(refs) != len(cands):
            raise InputError(
                f"mae: got {len(cands)} candidates and {len(refs)} references; give one reference per candidate"
            )
        check_same_size(refs, cands, fix="resize the candidate to its reference's size")
        return {"reference": refs, "candidates": cands}

    def score_batch(self, batch: dict[str, list[Any]]) -> torch.Tensor:
        """One score per pair, in float64 (images in one chunk may differ in size)."""

        def load(x: Any, role: str) -> torch.Tensor:
            return to_tensor(x, data_range=self.data_range, name=role).to(self.device, torch.float64)

        return torch.stack(
            [
                (load(c, "candidates") - load(r, "reference")).abs().mean()
                for r, c in zip(batch["reference"], batch["candidates"])
            ]
        )
