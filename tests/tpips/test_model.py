"""genmetrics.tpips.model: TPIPSModel refuses bad input in one line naming it (the variants' own behaviour
is tested in test_late.py, test_mid.py, test_early.py and test_fusion.py)."""

from __future__ import annotations

import pytest

from genmetrics.errors import InputError
from genmetrics.tpips.model import (
    TPIPSModel,
)


def test_bad_inputs(models, vlm, processor, images):
    m = models["late"]
    with pytest.raises(InputError, match="empty"):
        m.similarity(images[:2], images[2:4], ["lighting", "  "])
    with pytest.raises(InputError, match="images_a has 2 images but images_b has 3"):
        m.similarity(images[:2], images[2:5], "lighting")
    with pytest.raises(InputError, match="3 aspects for 2"):
        m.similarity(images[:2], images[2:4], ["a", "b", "c"])
    with pytest.raises(InputError):
        m.similarity([object()], [images[0]], ["lighting"])
    with pytest.raises(InputError, match="multiple of"):
        TPIPSModel(vlm, processor, "late", image_size=50)
    with pytest.raises(InputError, match="variant"):
        TPIPSModel(vlm, processor, "fusion")
    with pytest.raises(InputError, match="processor"):
        TPIPSModel(vlm, None, "late")
    with pytest.raises(InputError, match="late fusion only"):
        models["mid"].embed(images[:1], "lighting")
