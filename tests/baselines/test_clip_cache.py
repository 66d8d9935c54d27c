"""Poisoned feature caches: an entry whose dimension is not the model's, that is non-finite,
not unit-norm, holds extra or missing tensors, or is not a safetensors file is never served; the score
equals the uncached one (it used to return clip_i = 3.0 for planted 3-d entries)."""

from __future__ import annotations

import warnings
from pathlib import Path

import pytest
import torch
from safetensors.torch import save_file

import genmetrics as gm
from genmetrics.data.caches.features import FeatureCache, content_hash
from genmetrics.testing import random_images, tiny_clip, tiny_dino


def _metric(name: str, cache_dir: Path):
    backbone = tiny_clip()[0] if name == "clip_i" else tiny_dino()  # the same weights every time (seeded)
    return gm.create_metric(name, backbone=backbone, cache_dir=cache_dir)


def _entry_paths(metric, images) -> list[Path]:
    cache = metric._feature_cache
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
    dim = int(m._feature_cache.get(ref[0])["embedding"].shape[0])
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
        assert again._feature_cache.rejected == 4
        msgs = [str(x.message) for x in w if "feature cache" in str(x.message)]
        assert len(msgs) == 1 and "recomputed" in msgs[0]
    # the planted entries were overwritten with good ones: a third reader is served from the cache
    third = _metric(name, tmp_path / "cache")
    torch.testing.assert_close(third.score(ref, cand), truth, atol=1e-6, rtol=0)
    assert third._feature_cache.hits == 4 and third._feature_cache.rejected == 0


def test_another_model_never_reads_these_entries(tmp_path):
    """The cache folder is keyed by a fingerprint of the weights (not ``id(model)``, reused across
    processes) and by data_range: another model or another data_range misses."""
    img = random_images(1, seed=4)
    a = _metric("clip_i", tmp_path)
    a.embed(img)
    same = _metric("clip_i", tmp_path)  # same weights, new object
    same.embed(img)
    assert same._feature_cache.dir == a._feature_cache.dir and same._feature_cache.hits == 1
    other = gm.create_metric("clip_i", backbone=tiny_clip(seed=1)[0], cache_dir=tmp_path)
    other.embed(img)
    scaled = gm.create_metric("clip_i", backbone=tiny_clip()[0], cache_dir=tmp_path, data_range=255.0)
    scaled.embed(img)
    assert len({a._feature_cache.dir, other._feature_cache.dir, scaled._feature_cache.dir}) == 3
    assert other._feature_cache.hits == 0 and scaled._feature_cache.hits == 0


def test_the_size_comes_from_the_model_not_the_cache(tmp_path):
    """A model without a declared size learns it from one fresh embedding, never from a cached entry."""
    m = _metric("clip_i", tmp_path)
    m._embed_dim = lambda model: None  # e.g. a provider's model without visual.output_dim
    img = random_images(1, seed=3)
    m.embed(img)
    p = _entry_paths(m, [img[0]])[0]
    save_file({"embedding": torch.ones(3) / 3**0.5}, str(p))  # unit norm, wrong size
    out = m.embed(img)
    assert out.shape[-1] == 32 and m._feature_cache.rejected == 0  # recomputed (fresh), then overwritten
    assert FeatureCache(m._feature_cache.model_id, tmp_path).get(img[0])["embedding"].shape == (32,)


def test_the_feature_cache_and_torchmetrics_sync_keep_apart(tmp_path):
    """torchmetrics keeps its pre-sync copy of the states in ``Metric._cache`` (``sync()`` sets it, ``unsync()``
    and ``reset()`` clear it). The feature cache used to live under that name: a synced metric then took
    torchmetrics' dict for the feature cache (``embed`` raised TypeError) and a synced ``compute()`` dropped
    the feature cache. Here a fake two-process gather (the other process scored the same pairs at twice the
    score) syncs the metric; the synced value, the restored local states and the cache hits are checked."""
    ref, cand = random_images(3, seed=1), random_images(3, seed=2)
    calls: list[torch.dtype] = []

    def gather(t: torch.Tensor, group=None) -> list[torch.Tensor]:
        calls.append(t.dtype)
        return [t, 2 * t if t.is_floating_point() else t]  # unnamed ids: never de-duplicated

    def distributed() -> bool:
        return True

    m = gm.create_metric(
        "clip_i",
        backbone=tiny_clip()[0],
        cache_dir=tmp_path,
        dist_sync_fn=gather,
        distributed_available_fn=distributed,
    )
    m.update(ref, cand)
    fc = m._feature_cache
    local = m.per_sample(sync=False)["scores"]
    assert fc is not None and fc.hits == 0 and local.shape == (3,)

    value = m.compute()  # synced: sync() -> compute -> unsync()
    assert calls, "the fake gather was not used: nothing was synced"
    torch.testing.assert_close(value, torch.cat([local, 2 * local]).mean(), rtol=0, atol=0)
    assert m._feature_cache is fc and m._cache is None and not m._is_synced
    assert torch.equal(m.per_sample(sync=False)["scores"], local)  # local states restored

    m.sync(dist_sync_fn=gather, distributed_available=distributed)
    assert isinstance(m._cache, dict) and {"scores", "sample_ids"} <= set(m._cache)  # torchmetrics' copy
    emb = m.embed(ref)  # while synced: served from the feature cache, not from torchmetrics' dict
    assert fc.hits == 3 and emb.shape == (3, 32)
    torch.testing.assert_close(emb.norm(dim=-1), torch.ones(3))
    m.unsync()
    assert torch.equal(m.per_sample(sync=False)["scores"], local)

    m.update(cand, ref)  # every image is in the cache now
    assert fc.hits == 3 + 6
    both = m.per_sample(sync=False)["scores"]
    torch.testing.assert_close(m.compute(), torch.cat([both, 2 * both]).mean(), rtol=0, atol=0)
    m.reset()
    assert m._feature_cache is fc and m._cache is None
