"""The on-disk feature cache (genmetrics.data.caches.features): keyed by model identity and image content, a torn
entry is recomputed."""

from __future__ import annotations

import torch

from genmetrics.data.caches.features import FeatureCache, content_hash


def test_cache_round_trip_and_invalidation(tmp_path):
    from PIL import Image

    img = tmp_path / "a.png"
    Image.new("RGB", (8, 8), (1, 2, 3)).save(img)
    cache = FeatureCache("model-x", tmp_path / "cache")
    assert cache.get(img) is None
    emb = torch.randn(5)
    cache.put(img, {"embedding": emb})
    assert torch.equal(cache.get(img)["embedding"], emb)
    assert len(cache) == 1
    # another model identity does not see it
    assert FeatureCache("model-y", tmp_path / "cache").get(img) is None
    # changing the bytes changes the key
    Image.new("RGB", (8, 8), (1, 2, 4)).save(img)
    assert cache.get(img) is None
    # tensors hash by content
    t = torch.zeros(3, 4, 4, dtype=torch.uint8)
    assert content_hash(t) == content_hash(t.clone()) != content_hash(t + 1)


def test_torn_cache_file_is_recomputed(tmp_path):
    cache = FeatureCache("m", tmp_path)
    x = torch.ones(3, 2, 2)
    cache.put(x, {"e": torch.ones(2)})
    path = next(tmp_path.rglob("*.safetensors"))
    path.write_bytes(path.read_bytes()[:10])
    assert cache.get(x) is None
