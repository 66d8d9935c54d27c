"""Two gloo processes with uneven shards and sampler padding give the one-process result."""

from __future__ import annotations

import pytest
import torch

import genmetrics as gm
from genmetrics.testing import random_images, spawn_gloo

N = 7


def _data():
    return random_images(N, 16, seed=1), random_images(N, 16, seed=2), [f"img{i}" for i in range(N)]


def _shard(rank, world_size):
    # DistributedSampler-style: pad by repeating the first samples so every rank has ceil(N/W)
    per = -(-N // world_size)
    order = list(range(N)) + list(range(per * world_size - N))
    return order[rank::world_size]


def _worker(rank, world_size, name):
    ref, cand, ids = _data()
    idx = _shard(rank, world_size)
    m = gm.create_metric(name, batch_size=2)
    for part in (idx[:1], idx[1:]):  # uneven update calls
        if part:
            m.update(ref[part], cand[part], ids=[ids[i] for i in part])
    value = m.compute()
    per = m.per_sample()
    return value.item(), per["scores"].tolist(), per["ids"]


@pytest.mark.distributed
@pytest.mark.parametrize("name", ["psnr", "ssim"])
def test_two_processes_equal_one(name):
    ref, cand, ids = _data()
    single = gm.create_metric(name)
    single.update(ref, cand, ids=ids)
    expected = single.compute().item()
    results = spawn_gloo(_worker, 2, (name,))
    for value, per, names in results:
        assert value == pytest.approx(expected, abs=1e-9)
        assert len(per) == N and sorted(names) == sorted(ids)
    assert sorted(results[0][1]) == pytest.approx(sorted(single.per_sample()["scores"].tolist()))
    assert torch.isfinite(torch.tensor(expected))
