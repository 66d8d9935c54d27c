"""Decoding is all an input worker has to do: every metric given the decoded uint8 tensors
(:func:`genmetrics.data.io.images.decode_uint8`) computes exactly what it computes from the files, because
resizing, cropping and normalising happen inside the metric (on its device)."""

from __future__ import annotations

from typing import Any

import pytest
import torch

from genmetrics.data.io.images import decode_uint8
from genmetrics.testing import write_images
from tests.contract import tester as T


def _as_files(u: dict[str, Any], folder, tag: str) -> dict[str, Any]:
    out = {}
    for k, v in u.items():
        if isinstance(v, torch.Tensor) and v.dtype == torch.uint8 and v.ndim == 4:
            out[k] = [str(p) for p in write_images(folder / f"{tag}_{k}", v)]
        else:
            out[k] = v
    return out


def _decoded(u: dict[str, Any]) -> dict[str, Any]:
    return {
        k: [decode_uint8(p) for p in v]
        if k in ("reference", "candidates") and isinstance(v, list) and v and isinstance(v[0], str)
        else v
        for k, v in u.items()
    }


def _equal(a: Any, b: Any) -> bool:
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_equal(a[k], b[k]) for k in a)
    return torch.equal(torch.as_tensor(a), torch.as_tensor(b)) or bool(
        torch.isnan(torch.as_tensor(a)).all() and torch.isnan(torch.as_tensor(b)).all()
    )


#: TPIPS and MIE decode with their own PIL mode rules and resize with PIL; psnr takes its exact integer path for
#: uint8 input and the float32 one for files (the two agree to float32 rounding: tests/functional)
OWN_PATH = ("tpips", "mie", "psnr")


@pytest.mark.parametrize("name", [n for n in T.NAMES if n not in OWN_PATH])
def test_decoded_uint8_scores_as_the_files(name, tmp_path):
    files = [_as_files(u, tmp_path, str(i)) for i, u in enumerate(T.batches(name))]
    by_file, by_tensor = T.build(name), T.build(name)
    for u in files:
        by_file.update(**u)
        by_tensor.update(**_decoded(u))
    assert _equal(by_file.compute(), by_tensor.compute())
