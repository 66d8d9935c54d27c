"""Test scaffolding (genmetrics/testing/__init__.py): seeded builders give the same weights and images for the
same seed and different ones for another, written images read back bit for bit, the toy leaderboard and MIB
pairs are what their loaders read, the backbone provider answers each kind with the right tiny model, and
``spawn_gloo`` returns every rank's result."""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from genmetrics import testing as T


def test_random_images_are_seeded_uint8():
    a, b = T.random_images(3, 16, seed=1), T.random_images(3, 16, seed=1)
    assert a.dtype == torch.uint8 and a.shape == (3, 3, 16, 16) and torch.equal(a, b)
    assert not torch.equal(a, T.random_images(3, 16, seed=2))
    assert T.random_images(2, 16, height=8).shape == (2, 3, 8, 16)


def test_write_images_reads_back_bit_for_bit(tmp_path):
    x = T.random_images(3, 12, seed=4, height=7)
    paths = T.write_images(tmp_path / "a" / "b", x)
    assert [p.name for p in paths] == ["000.png", "001.png", "002.png"]
    back = torch.stack(
        [torch.from_numpy(np.array(Image.open(p).convert("RGB"))).permute(2, 0, 1) for p in paths]
    )
    assert torch.equal(back, x)


def test_toy_leaderboard_copy_is_the_references_and_noisy_is_within_64_levels(tmp_path):
    cfg = T.toy_leaderboard(tmp_path, n=4, size=16, seed=3)

    def read(folder):
        return torch.stack(
            [
                torch.from_numpy(np.array(Image.open(p))).permute(2, 0, 1)
                for p in sorted((tmp_path / folder).iterdir())
            ]
        ).int()

    refs, copy, noisy = read("refs"), read("copy"), read("noisy")
    assert torch.equal(refs, copy) and torch.equal(refs, T.random_images(4, 16, seed=3).int())
    assert 0 < (noisy - refs).abs().max() <= 64
    assert {g["images"] for g in cfg["generators"]} == {"copy", "noisy"} and cfg["data"][
        "references"
    ] == "refs"


def test_toy_mib_pairs_are_what_the_loader_reads(tmp_path):
    from genmetrics.data.jsonl import load_mib_pairs

    pairs = load_mib_pairs(T.toy_mib_pairs(tmp_path, 3, seed=2))
    assert [p.preference for p in pairs] == [0, 1, 0]
    for p in pairs:
        assert len(p.references) == 2 and len(p.candidates) == 2 and p.generators == ("gen_a", "gen_b")
        assert all(Image.open(c).size == (64, 64) for c in p.candidates)


def test_tiny_clip_is_seeded():
    (m1, _), (m2, _), (m3, _) = T.tiny_clip(seed=0), T.tiny_clip(seed=0), T.tiny_clip(seed=1)
    p1, p2, p3 = (torch.cat([p.flatten() for p in m.parameters()]) for m in (m1, m2, m3))
    assert torch.equal(p1, p2) and not torch.equal(p1, p3)


@pytest.mark.parametrize(
    "kind,weights,options,expect",
    [
        ("open_clip", "ViT-B-32/openai", {}, "CLIP"),
        ("dino", "facebook/dinov2-base", {}, "Dinov2Model"),
        ("vlm", "Qwen/Qwen3-VL-Embedding-2B", {}, "Qwen3VLModel"),
        ("vlm", "Qwen/Qwen3.5-4B", {}, "Qwen3_5Model"),
        ("vlm", "Qwen/Qwen3.5-4B", {"vlm_kind": "qwen3vl"}, "Qwen3VLModel"),  # the stated kind wins
        ("qwen35", "x", {"for_generation": True}, "Qwen3_5ForConditionalGeneration"),
        ("something-else", "x", {}, None),
    ],
)
def test_tiny_backbones_answers_each_kind(kind, weights, options, expect):
    got = T.tiny_backbones(kind, weights, **options)
    if expect is None:
        assert got is None
        return
    model = got[0] if isinstance(got, tuple) else got
    assert type(model).__name__ == expect


def _rank_sum(rank, world_size, offset):
    import torch.distributed as dist

    t = torch.tensor([float(rank + offset)])
    dist.all_reduce(t)
    return {"rank": rank, "world": world_size, "sum": t}


@pytest.mark.distributed
def test_spawn_gloo_returns_every_rank_s_result():
    out = T.spawn_gloo(_rank_sum, 3, args=(10,))
    assert [r["rank"] for r in out] == [0, 1, 2] and all(r["world"] == 3 for r in out)
    assert all(float(r["sum"]) == 10 + 11 + 12 for r in out)
