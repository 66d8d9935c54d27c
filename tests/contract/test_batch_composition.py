"""Batch composition never changes a score, for every registered per-candidate metric, found
through the registry and its test recipe: a new metric is covered by registering it.

Each row's images are made different from the other rows' (PIL mode and size per row; the row's reference
and candidate get the same treatment, so pixel metrics still compare equal sizes), then:

* every row of the mixed batch scores as it does alone (one-row update);
* ``batch_size`` 1, 3 and "all" give the same per-sample scores.

Tolerance: a row's score is a reduction over its own pixels / tokens only; what a batch may change is the
kernel a library picks for a batched product (docs/performance.md), whose rounding differs by at most a few
float32 epsilons per reduction step. ``1e-5`` relative (about 80 eps) bounds that for the tiny backbones'
reductions (at most ~10^3 terms, error ~ sqrt(n) eps ~ 4e-6) with a margin for the score's own scale.
"""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from tests.contract import tester as T

MODES = ("RGB", "L", "RGBA", "P", "CMYK", "LA", "I;16")
SIZES = ((40, 40), (48, 32), (32, 40), (56, 56))
NAMES = [n for n in T.NAMES if T.per_candidate(n)]


def _pil(img: torch.Tensor, row: int) -> Image.Image:
    arr = img.permute(1, 2, 0).contiguous().numpy()
    pil = Image.fromarray(arr).resize(SIZES[row % len(SIZES)], Image.Resampling.BILINEAR)
    mode = MODES[row % len(MODES)]
    if mode == "I;16":
        return pil.convert("L").convert("I;16")
    return pil.convert(mode)


def _mix(value, row: int):
    if isinstance(value, torch.Tensor) and value.dtype == torch.uint8 and value.dim() == 3:
        return _pil(value, row)
    if isinstance(value, (list, tuple)) and value and all(isinstance(v, torch.Tensor) for v in value):
        return [_mix(v, row) for v in value]
    return value


def mixed_batch(name: str) -> dict:
    """The recipe's batches as one, each row in its own PIL mode and size (shared helper of this suite)."""
    batch = T.merged(T.batches(name))
    out = {}
    for key, v in batch.items():
        rows = list(v.unbind(0)) if isinstance(v, torch.Tensor) else list(v)
        out[key] = [_mix(r, i) for i, r in enumerate(rows)]
    return out


def _scores(name: str, batch: dict, **override) -> torch.Tensor:
    m = T.build(name, **override)
    m.update(**batch)
    return m.per_sample()["scores"].double()


def _close(a: torch.Tensor, b: torch.Tensor, what: str) -> None:
    torch.testing.assert_close(a, b, rtol=1e-5, atol=1e-5, equal_nan=True, msg=lambda m: f"{what}: {m}")


@pytest.mark.parametrize("name", NAMES)
def test_a_row_in_a_mixed_batch_scores_as_it_does_alone(name):
    batch = mixed_batch(name)
    n = len(next(iter(batch.values())))
    together = _scores(name, batch)
    alone = torch.cat([_scores(name, {k: v[i : i + 1] for k, v in batch.items()}) for i in range(n)])
    _close(together, alone, f"{name}: mixed batch vs rows alone")


@pytest.mark.parametrize("name", NAMES)
def test_batch_sizes_one_three_and_all_agree(name):
    batch = mixed_batch(name)
    n = len(next(iter(batch.values())))
    ref = _scores(name, batch, batch_size=n)
    for bs in (1, 3):
        _close(_scores(name, batch, batch_size=bs), ref, f"{name}: batch_size={bs} vs {n}")
