"""Two gloo processes with uneven shards give the one-process sad / pad / rsad (states reduce by sum)."""

from __future__ import annotations

import pytest
import torch

import genmetrics as gm
from genmetrics.testing import random_images, spawn_gloo, tiny_clip

ATTRS = ["smiling", "wearing hat", "a red car"]


def _data():
    real = random_images(7, 32, seed=51)
    gen = (random_images(5, 32, seed=52).int() * 2 // 3).to(torch.uint8)
    return real, gen


def _metrics():
    model, tok = tiny_clip()
    return {
        n: gm.create_metric(n, backbone=model, tokenizer=tok, attributes=ATTRS, batch_size=2)
        for n in ("sad", "pad", "rsad")
    }


def _worker(rank, world_size):
    real, gen = _data()
    # uneven shards, no padding: rank 0 gets 5 real / 1 generated, rank 1 gets 2 real / 4 generated
    r = real[:5] if rank == 0 else real[5:]
    g = gen[:1] if rank == 0 else gen[1:]
    out = {}
    for name, m in _metrics().items():
        if rank == 0:
            m.update(candidates=g)
            m.update(reference=r[:2])
            m.update(reference=r[2:])
        else:
            m.update(reference=r, candidates=g)
        out[name] = {k: v.tolist() for k, v in m.compute().items()}
    return out


@pytest.mark.distributed
def test_two_processes_equal_one():
    real, gen = _data()
    single = {}
    for name, m in _metrics().items():
        m.update(reference=real, candidates=gen)
        single[name] = m.compute()
    results = spawn_gloo(_worker, 2)
    for res in results:
        for name, value in single.items():
            for k, v in value.items():
                torch.testing.assert_close(
                    torch.tensor(res[name][k], dtype=torch.float64), v, rtol=1e-5, atol=1e-6
                )
