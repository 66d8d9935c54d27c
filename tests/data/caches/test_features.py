"""The on-disk feature cache (genmetrics.data.caches.features): keyed by model identity and image content, a torn
entry is recomputed."""

from __future__ import annotations

import os
import warnings

import torch

from genmetrics.data.caches.features import FeatureCache, content_hash
from genmetrics.errors import InputError
from tests.reliability.hostile import Cases, Ctx, _plant_link, _read_only, _umount


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


# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case("h-cache-entry-pickle", "pickle", "feature cache: an entry replaced by a pickle is a miss")
def _(ctx):
    from genmetrics.data.caches.features import FeatureCache

    cache = FeatureCache("m", root=ctx.out)
    cache.put(b"img", {"embedding": torch.nn.functional.normalize(torch.ones(4), dim=0)})
    entry = next(cache.dir.rglob("*.safetensors"))
    ctx.payload(entry)
    ctx.freeze()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        assert FeatureCache("m", root=ctx.out).get(b"img", expect={"embedding": (4,)}) is None


@case("h-link-cache-shard", "link", "a feature-cache shard folder is a link to a folder outside")
def _(ctx):
    from genmetrics.data.caches.features import FeatureCache, content_hash

    cache = FeatureCache("m", root=ctx.out)
    shard = cache.dir / content_hash(b"img")[:2]
    _plant_link(shard, ctx.outside_dir)
    ctx.freeze()
    try:
        cache.put(b"img", {"embedding": torch.ones(4) / 2})
    except InputError as e:
        assert "link" in str(e) or "outside" in str(e)
    assert sorted(os.listdir(ctx.outside_dir)) == ["precious.txt"]


def _cache_poison(ctx: Ctx, entry: dict[str, torch.Tensor]) -> None:
    from genmetrics.data.caches.features import FeatureCache

    cache = FeatureCache("m", root=ctx.out)
    cache.put(b"img", entry)
    ctx.freeze()
    fresh = FeatureCache("m", root=ctx.out)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        assert fresh.get(b"img", expect={"embedding": (4,)}) is None
    assert fresh.rejected == 1 and any("feature cache" in str(w.message) for w in seen)


@case("h-cache-wrong-dim", "poison", "feature cache: a 3-d entry where the model gives 4-d")
def _(ctx):
    _cache_poison(ctx, {"embedding": torch.ones(3) / 3**0.5})


@case("h-cache-nan", "poison", "feature cache: an entry holding NaN")
def _(ctx):
    _cache_poison(ctx, {"embedding": torch.tensor([float("nan"), 0.0, 0.0, 1.0])})


@case("h-cache-extra-tensor", "poison", "feature cache: an entry with an extra tensor")
def _(ctx):
    _cache_poison(ctx, {"embedding": torch.ones(4) / 2, "evil": torch.zeros(1)})


@case("h-cache-int-dtype", "poison", "feature cache: an integer entry")
def _(ctx):
    _cache_poison(ctx, {"embedding": torch.ones(4, dtype=torch.int64)})


@case("h-readonly-feature-cache", "fault", "a feature cache on a read-only disk: served uncached, warned")
def _(ctx):
    from genmetrics.data.caches.features import FeatureCache

    mnt = _read_only(ctx)
    try:
        ctx.freeze()
        cache = FeatureCache("m", root=mnt)
        with warnings.catch_warnings(record=True) as seen:
            warnings.simplefilter("always")
            cache.put(b"img", {"embedding": torch.ones(4) / 2})
        assert cache.read_only and any("not writable" in str(w.message) for w in seen)
        assert cache.get(b"img") is None
    finally:
        _umount(mnt)


test_hostile = HOSTILE.test()
