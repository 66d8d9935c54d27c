"""genmetrics.tpips.baselines: the 0-10 pairwise score baseline (range, symmetry, refusal without an LM
head)."""

from __future__ import annotations

import pytest
import torch

from genmetrics.errors import InputError
from genmetrics.tpips.model import PairwiseScoreModel

from .conftest import SIZE


def test_pairwise_score_baseline(gen_model, processor, images, vlm):
    pm = PairwiseScoreModel(gen_model, processor, image_size=SIZE)
    s = pm.score(images[:2], images[2:4], ["color", "overall"])
    assert ((s >= 0) & (s <= 10)).all()
    assert torch.allclose(s, pm.score(images[2:4], images[:2], ["color", "overall"]), atol=1e-6)
    with pytest.raises(InputError, match="LM head"):
        PairwiseScoreModel(vlm, processor, image_size=SIZE)
