"""Poisoned feature caches (issue 22.3): an entry whose dimension is not the model's, that is non-finite,
not unit-norm, holds extra or missing tensors, or is not a safetensors file is never served; the score
equals the uncached one (it used to return clip_i = 3.0 for planted 3-d entries)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import genmetrics as gm
from genmetrics.data.cache import FeatureCache, content_hash
from genmetrics.testing import random_images, tiny_clip, tiny_dino


def _metric(name: str, cache_dir: Path):
    backbone = tiny_clip()[0] if name == "clip_i" else tiny_dino()  # the same weights every time (seeded)
    return gm.create_metric(name, backbone=backbone, cache_dir=cache_dir)


def _entry_paths(metric, images) -> list[Path]:
    cache = metric._cache
    return [cache.dir / (h := content_hash(x))[:2] / f"{h}.safetensors" for x in images]


class Payload:
    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


FAULTS = {
    "wrong-dim": lambda dim, tmp: {"embedding": torch.ones(3)},  # the old clip_i = 3.0
    "nan": lambda dim, tmp: {"embedding": torch.full((dim,), float("nan"))},
    "inf": lambda dim, tmp: {"embedding": torch.full((dim,), float("inf"))},
    "not-unit": lambda dim, tmp: {"embedding": torch.ones(dim)},  # would score clip_i = dim
    "extra": lambda dim, tmp: {
        "embedding": torch.nn.functional.normalize(torch.ones(dim), dim=0),
        "x": torch.ones(1),
    },
    "missing": lambda dim, tmp: {"other": torch.ones(dim)},
    "int": lambda dim, tmp: {"embedding": torch.zeros(dim, dtype=torch.int64)},
    "pickle": lambda dim, tmp: Payload(tmp / "pwned"),
}


@pytest.mark.parametrize("name", ["clip_i", "dino"])
@pytest.mark.parametrize("fault", list(FAULTS))
def test_a_poisoned_entry_is_recomputed_never_served(tmp_path, name, fault):
    ref, cand = random_images(2, seed=1), random_images(2, seed=2)
    truth = _metric(name, tmp_path / "fresh").score(ref, cand)
    m = _metric(name, tmp_path / "cache")
    m.score(ref, cand)  # fills the cache
    dim = int(m._cache.get(ref[0])["embedding"].shape[0])
    for p in _entry_paths(m, list(ref) + list(cand)):
        bad = FAULTS[fault](dim, tmp_path)
        if isinstance(bad, Payload):
            torch.save({"embedding": bad}, p)  # a pickle with code, under the safetensors name
        else:
            save_file(bad, str(p))
    again = _metric(name, tmp_path / "cache")  # a new process reading the planted cache
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        got = again.score(ref, cand)
    torch.testing.assert_close(got, truth, atol=1e-6, rtol=0)
    assert not (tmp_path / "pwned").exists()
    if fault != "pickle":  # an unreadable file is a plain miss (a torn write looks the same)
        assert again._cache.rejected == 4
        msgs = [str(x.message) for x in w if "feature cache" in str(x.message)]
        assert len(msgs) == 1 and "recomputed" in msgs[0]
    # the planted entries were overwritten with good ones: a third reader is served from the cache
    third = _metric(name, tmp_path / "cache")
    torch.testing.assert_close(third.score(ref, cand), truth, atol=1e-6, rtol=0)
    assert third._cache.hits == 4 and third._cache.rejected == 0


def test_another_model_never_reads_these_entries(tmp_path):
    """The cache folder is keyed by a fingerprint of the weights (not ``id(model)``, reused across
    processes) and by data_range: another model or another data_range misses."""
    img = random_images(1, seed=4)
    a = _metric("clip_i", tmp_path)
    a.embed(img)
    same = _metric("clip_i", tmp_path)  # same weights, new object
    same.embed(img)
    assert same._cache.dir == a._cache.dir and same._cache.hits == 1
    other = gm.create_metric("clip_i", backbone=tiny_clip(seed=1)[0], cache_dir=tmp_path)
    other.embed(img)
    scaled = gm.create_metric("clip_i", backbone=tiny_clip()[0], cache_dir=tmp_path, data_range=255.0)
    scaled.embed(img)
    assert len({a._cache.dir, other._cache.dir, scaled._cache.dir}) == 3
    assert other._cache.hits == 0 and scaled._cache.hits == 0


def test_the_size_comes_from_the_model_not_the_cache(tmp_path):
    """A model without a declared size learns it from one fresh embedding, never from a cached entry."""
    m = _metric("clip_i", tmp_path)
    m._embed_dim = lambda model: None  # e.g. a provider's model without visual.output_dim
    img = random_images(1, seed=3)
    m.embed(img)
    p = _entry_paths(m, [img[0]])[0]
    save_file({"embedding": torch.ones(3) / 3**0.5}, str(p))  # unit norm, wrong size
    out = m.embed(img)
    assert out.shape[-1] == 32 and m._cache.rejected == 0  # recomputed (fresh), then overwritten
    assert FeatureCache(m._cache.model_id, tmp_path).get(img[0])["embedding"].shape == (32,)
