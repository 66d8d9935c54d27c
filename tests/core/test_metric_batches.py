"""The inputs of one update (genmetrics.core.metric_batches): a batch's length is the common length of its
given inputs (else one error naming each), slices of a batch put back together give the batch, meta tensors
are found three levels deep, and ``eval_mode`` restores every submodule's mode, also after an error."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from genmetrics.core.metric_batches import batch_len, eval_mode, has_meta, meta_message, slice_batch
from genmetrics.errors import InputError


def test_eval_mode_restores_each_submodule_s_mode_after_an_error():
    net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5), nn.Sequential(nn.BatchNorm1d(2), nn.Dropout()))
    net.train()
    net[2][0].eval()  # a mixed state: frozen batch norm inside a model under training
    before = [m.training for m in net.modules()]
    with pytest.raises(RuntimeError, match="inside"), eval_mode(net) as m:
        assert m is net and not any(x.training for x in net.modules()) and not torch.is_grad_enabled()
        raise RuntimeError("inside")
    assert [m.training for m in net.modules()] == before and torch.is_grad_enabled()


@pytest.mark.parametrize("n,size", [(1, 1), (7, 3), (8, 4), (5, 10)])
def test_slices_put_back_together_give_the_batch(n, size):
    batch = {
        "reference": None,
        "candidates": [f"{i}.png" for i in range(n)],
        "condition": [str(i) for i in range(n)],
    }
    assert batch_len(batch) == n
    parts = [slice_batch(batch, slice(i, i + size)) for i in range(0, n, size)]
    assert all(p["reference"] is None for p in parts)
    for key in ("candidates", "condition"):
        assert [x for p in parts for x in p[key]] == batch[key]
    assert sum(batch_len(p) for p in parts) == n


@pytest.mark.parametrize(
    "batch,says",
    [
        ({"candidates": ["a"], "condition": ["x", "y"], "reference": None}, "(candidates=1, condition=2)"),
        ({"candidates": None}, "no inputs given"),
        ({"candidates": []}, "the batch is empty"),
    ],
)
def test_a_batch_without_one_length_is_named(batch, says):
    with pytest.raises(InputError) as info:
        batch_len(batch)
    assert says in str(info.value)


def test_has_meta_looks_three_levels_deep():
    meta = torch.empty(1, device="meta")
    assert has_meta(meta) and has_meta({"a": [(meta,)]}) and not has_meta([[torch.zeros(1)]])
    assert not has_meta([[[[meta]]]])  # deeper than three levels: not searched
    assert meta_message("reference").startswith("reference: got a meta tensor")
