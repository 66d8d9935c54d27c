"""Adapter folders written by an earlier genmetrics (main @ a90c8f4, before the fusion variants became classes)
load and score as they did then. The folders and the scores the saving code gave are in
``tests/tpips/data/legacy_adapters`` (made by ``data/make_legacy_adapters.py``: LoRA r=4 and every head tensor
perturbed, on the seeded tiny Qwen3-VL, which the test rebuilds)."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import torch

from genmetrics.errors import InputError
from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor
from genmetrics.tpips.loading import load_tpips
from genmetrics.tpips.model import TPIPSModel

DATA = Path(__file__).resolve().parent / "data" / "legacy_adapters"
EXPECTED = json.loads((DATA / "expected.json").read_text())

# The same float32 operations as the saving code, one pair per call: only the order of reductions inside
# the kernels may differ (torch versions, CPUs). Each similarity is a cosine / weighted distance of O(1)
# values through a 2-layer, 64-wide tiny model: a reordering moves a dot product of length n <= 256 by about
# sqrt(n) * 2**-24 ~ 1e-6 relative, a few such steps stay below 1e-5.
TOL = 1e-5


def image(h: int, w: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def pairs() -> tuple[list[torch.Tensor], list[torch.Tensor], list[str]]:
    a = [image(*spec[0]) for spec in EXPECTED["pairs"]]
    b = [image(*spec[1]) for spec in EXPECTED["pairs"]]
    return a, b, list(EXPECTED["aspects"])


def load(variant: str) -> TPIPSModel:
    return load_tpips(DATA / variant, backbone=tiny_qwen3vl(seed=0), processor=tiny_qwen3vl_processor())


@pytest.mark.parametrize("variant", ["late", "mid", "early"])
def test_adapter_saved_by_main_loads_and_scores_identically(variant):
    model = load(variant)
    assert model.variant == variant and model.resize.mode == "smart"
    a, b, aspects = pairs()
    alone = torch.cat([model.similarity([x], [y], [c]) for x, y, c in zip(a, b, aspects)])
    expected = torch.tensor(EXPECTED[variant])
    assert torch.allclose(alone, expected, rtol=0, atol=TOL), (alone, expected)
    # the perturbed LoRA and head matter: the same backbone without them scores differently
    bare = TPIPSModel(tiny_qwen3vl(seed=0), tiny_qwen3vl_processor(), variant, probe_layers=2, mid_hidden=16)
    bare_scores = torch.cat([bare.similarity([x], [y], [c]) for x, y, c in zip(a, b, aspects)])
    assert (bare_scores - expected).abs().max() > 10 * TOL


@pytest.mark.parametrize("variant", ["mid", "early"])
def test_legacy_head_is_required_and_checked(variant, tmp_path):
    """The same folder with the head file of another variant is refused, naming the file and the tensor
    (the earlier loader took a mid-fusion head partially and ignored unknown tensors)."""
    folder = tmp_path / variant
    shutil.copytree(DATA / variant, folder)
    other = "early" if variant == "mid" else "mid"
    shutil.copy(DATA / other / "tpips_head.safetensors", folder / "tpips_head.safetensors")
    with pytest.raises(InputError, match=r"tpips_head\.safetensors: tensor '[^']+' is missing"):
        load_tpips(folder, backbone=tiny_qwen3vl(seed=0), processor=tiny_qwen3vl_processor())
