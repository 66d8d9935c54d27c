"""genmetrics.accel.clip_blocks: which blocks count as open_clip's plain block, and the SDPA block, the
fused QuickGELU MLP and the first-token rows against the block's own modules, run in float64 (the second
computation), within a float64 rounding bound derived from the longest reduction."""

from __future__ import annotations

import copy
from collections import OrderedDict

import pytest
import torch
from open_clip.transformer import QuickGELU

from genmetrics.accel.clip_blocks import SdpaBlock, fused_mlp, is_plain_block, sdpa_block
from genmetrics.testing import tiny_clip

EPS64 = torch.finfo(torch.float64).eps


def float64_bound(stages: int, k_max: int) -> float:
    """Norm-wise relative error two float64 evaluations of the same block may each have against the exact
    value: ``4 * eps * sqrt(stages * K)`` (random-walk rounding of a length-``K`` reduction over ``stages``
    products, 4 standard deviations; the derivation is ``float32_bound``'s in tests/baselines/test_clip_image.py)."""
    return 4.0 * EPS64 * (stages * k_max) ** 0.5


def _rel(a: torch.Tensor, b: torch.Tensor) -> float:
    return float(((a - b).norm(dim=-1) / b.norm(dim=-1)).max())


def _block(tower: str = "visual", seed: int = 3):
    """A float64 copy of a tiny open_clip block with random (non-zero) attention and MLP biases, so that a
    dropped or misplaced bias shows."""
    model = copy.deepcopy(tiny_clip()[0]).double()
    blk = (model.visual.transformer if tower == "visual" else model.transformer).resblocks[0]
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in blk.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.1 * torch.randn(p.shape, generator=g, dtype=torch.float64))
    return blk


def _bound(blk) -> float:
    return float64_bound(4, max(int(blk.mlp.c_fc.out_features), int(blk.attn.embed_dim)))


def _x(b: int, n: int, d: int, seed: int = 0) -> torch.Tensor:
    return torch.randn(b, n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)


def test_open_clip_blocks_are_plain_and_changed_ones_are_not():
    model = tiny_clip()[0]
    blocks = [*model.visual.transformer.resblocks, *model.transformer.resblocks]
    assert all(is_plain_block(b) for b in blocks)
    assert not is_plain_block(torch.nn.Linear(4, 4))

    extra = copy.deepcopy(blocks[0])  # an MLP with a module more than c_fc -> gelu -> c_proj
    extra.mlp.add_module("drop", torch.nn.Dropout(0.0))
    assert not is_plain_block(extra)
    swapped = copy.deepcopy(blocks[0])  # the same modules in another order
    m = swapped.mlp
    swapped.mlp = torch.nn.Sequential(OrderedDict(gelu=m.gelu, c_fc=m.c_fc, c_proj=m.c_proj))
    assert not is_plain_block(swapped)
    biased = copy.deepcopy(blocks[0])  # extra keys (bias_k) are not what sdpa_block computes
    biased.attn.bias_k = torch.nn.Parameter(torch.zeros(1, 1, biased.attn.embed_dim))
    assert not is_plain_block(biased)


@pytest.mark.parametrize("quick", [True, False])
def test_fused_mlp_equals_the_mlp(quick):
    blk = _block()
    if not quick:
        blk.mlp.gelu = torch.nn.GELU()
    assert (type(blk.mlp.gelu) is QuickGELU) is quick
    x = _x(2, 5, blk.attn.embed_dim)
    with torch.no_grad():
        got, want = fused_mlp(blk.mlp, x), blk.mlp(x)
    if not quick:
        assert torch.equal(got, want)  # another activation: the module's own forward
    assert _rel(got, want) <= 2 * float64_bound(2, int(blk.mlp.c_fc.out_features))


@pytest.mark.parametrize("tower", ["visual", "text"])
def test_sdpa_block_equals_the_block(tower):
    blk = _block(tower)
    d = blk.attn.embed_dim
    x = _x(3, 7, d)
    mask = None
    if tower == "text":  # open_clip's causal text mask: additive float, -inf above the diagonal
        mask = torch.full((7, 7), float("-inf"), dtype=torch.float64).triu_(1)
    with torch.no_grad():
        got, want = sdpa_block(blk, x, attn_mask=mask), blk(x, attn_mask=mask)
        wrapped = SdpaBlock(blk)(x, attn_mask=mask)
    assert _rel(got, want) <= 2 * _bound(blk)
    assert torch.equal(wrapped, got)
    if mask is not None:  # causal: a token's output does not depend on later tokens
        with torch.no_grad():
            head = sdpa_block(blk, x[:, :4], attn_mask=mask[:4, :4])
        assert _rel(head, got[:, :4]) <= 2 * _bound(blk)


def test_first_only_rows_are_the_full_blocks_first_rows_whatever_the_batch():
    blk = _block()
    x = _x(4, 6, blk.attn.embed_dim, seed=1)
    with torch.no_grad():
        full = sdpa_block(blk, x)
        first = sdpa_block(blk, x, first_only=True)
        alone = torch.cat([sdpa_block(blk, x[i : i + 1], first_only=True) for i in range(4)])
    assert first.shape == (4, 1, blk.attn.embed_dim)
    assert _rel(first[:, 0], full[:, 0]) <= 2 * _bound(blk)
    assert _rel(first[:, 0], alone[:, 0]) <= 2 * _bound(blk)
