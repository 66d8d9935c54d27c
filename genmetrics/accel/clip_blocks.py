"""open_clip's plain ``ResidualAttentionBlock`` run with ``F.scaled_dot_product_attention`` and a fused
QuickGELU: the block arithmetic shared by the fast image tower (:mod:`genmetrics.backbones.clip_vision`)
and the float64 text tower (:mod:`genmetrics.backbones.clip_text`).

Only open_clip's own block class with a packed ``nn.MultiheadAttention`` qualifies (:func:`is_plain_block`);
anything else keeps its own forward.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F
from open_clip.transformer import QuickGELU, ResidualAttentionBlock

from genmetrics.accel.cast_weights import autocast_weight as aw

#: QuickGELU ``h * sigmoid(1.702 h)`` == ``silu(1.702 h) / 1.702``
QUICKGELU_ALPHA = 1.702


def is_plain_block(blk: Any) -> bool:
    """Whether ``blk`` is open_clip's plain ``ResidualAttentionBlock`` (self-attention through a packed
    ``nn.MultiheadAttention`` without extra keys, MLP ``c_fc -> gelu -> c_proj``), which
    :func:`sdpa_block` reproduces.

    >>> from genmetrics.testing import tiny_clip
    >>> blocks = tiny_clip()[0].visual.transformer.resblocks
    >>> is_plain_block(blocks[0]), is_plain_block(torch.nn.Linear(2, 2))
    (True, False)
    """
    attn = getattr(blk, "attn", None)
    return not (
        type(blk) is not ResidualAttentionBlock
        or hasattr(blk, "ln_1_kv")
        or type(attn) is not torch.nn.MultiheadAttention
        or attn.in_proj_weight is None
        or attn.bias_k is not None
        or attn.add_zero_attn
        or [name for name, _ in blk.mlp.named_children()] != ["c_fc", "gelu", "c_proj"]
    )


def _linear(lin: Any, x: torch.Tensor) -> torch.Tensor:
    """``lin(x)`` for a stock ``nn.Linear``, its weights through :func:`~genmetrics.accel.cast_weights.autocast_weight`
    (the bfloat16 copy kept under CPU autocast); any other module's own forward."""
    if type(lin).forward is not torch.nn.Linear.forward:
        return lin(x)
    return F.linear(x, aw(lin.weight), None if lin.bias is None else aw(lin.bias))


def fused_mlp(mlp: Any, x: torch.Tensor) -> torch.Tensor:
    """``mlp(x)``; QuickGELU ``h * sigmoid(1.702 h)`` as ``silu(1.702 h) / 1.702`` with both scalings inside
    the matrix products (one fused pass instead of three over the widest activation).

    >>> from genmetrics.testing import tiny_clip
    >>> mlp = tiny_clip()[0].visual.transformer.resblocks[0].mlp
    >>> x = torch.randn(2, 3, 64, generator=torch.Generator().manual_seed(0))
    >>> with torch.no_grad():
    ...     torch.allclose(fused_mlp(mlp, x), mlp(x), atol=1e-5)
    True
    """
    fc, proj = mlp.c_fc, mlp.c_proj
    if type(mlp.gelu) is not QuickGELU:
        return _linear(proj, mlp.gelu(_linear(fc, x)))
    a = QUICKGELU_ALPHA
    shape = x.shape
    h = torch.addmm(aw(fc.bias), x.reshape(-1, shape[-1]), aw(fc.weight).t(), beta=a, alpha=a)
    F.silu(h, inplace=True)
    y = torch.addmm(aw(proj.bias), h, aw(proj.weight).t(), alpha=1.0 / a)
    return y.reshape(*shape[:-1], y.shape[-1])


def sdpa_block(blk: Any, x: torch.Tensor, *, first_only: bool = False, attn_mask: Any = None) -> torch.Tensor:
    """One plain ``ResidualAttentionBlock`` on ``x [B,L,D]`` with ``F.scaled_dot_product_attention``; with
    ``first_only`` only the first token's output ``[B,1,D]`` is computed (keys/values still use all).
    ``attn_mask``: an additive ``[L,L]`` float mask, as open_clip's causal text tower passes it (a boolean
    mask would mean the opposite to SDPA and to ``nn.MultiheadAttention``, so callers never pass one).

    The first-token rows go through their matrix products one image at a time: a product over B rows may
    round differently for different B, and a score must not depend on what else is in the batch.

    >>> from genmetrics.testing import tiny_clip
    >>> blk = tiny_clip()[0].visual.transformer.resblocks[0]
    >>> x = torch.randn(2, 5, 64, generator=torch.Generator().manual_seed(0))
    >>> with torch.no_grad():
    ...     full, first = sdpa_block(blk, x), sdpa_block(blk, x, first_only=True)
    ...     same = torch.allclose(full, blk(x), atol=1e-5) and torch.allclose(first, full[:, :1], atol=1e-5)
    >>> same
    True
    """
    attn = blk.attn
    b, n, d = x.shape
    heads = attn.num_heads
    h = blk.ln_1(x)
    w, bias = aw(attn.in_proj_weight), None if attn.in_proj_bias is None else aw(attn.in_proj_bias)
    if not first_only:
        q, k, v = F.linear(h, w, bias).view(b, n, 3, heads, -1).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask).transpose(1, 2).reshape(b, n, d)
        x = x + blk.ls_1(_linear(attn.out_proj, o))
        return x + blk.ls_2(fused_mlp(blk.mlp, blk.ln_2(x)))
    k, v = (
        F.linear(h, w[d:], None if bias is None else bias[d:]).view(b, n, 2, heads, -1).permute(2, 0, 3, 1, 4)
    )
    bq = None if bias is None else bias[:d]
    q = torch.stack([F.linear(h[i, :1], w[:d], bq) for i in range(b)]).view(b, 1, heads, -1).transpose(1, 2)
    o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, 1, d)
    rows = []
    for i in range(b):
        y = x[i, :1] + blk.ls_1(_linear(attn.out_proj, o[i]))
        rows.append(y + blk.ls_2(fused_mlp(blk.mlp, blk.ln_2(y))))
    return torch.stack(rows)


class SdpaBlock(torch.nn.Module):
    """A module that runs :func:`sdpa_block` on a wrapped plain block (the block is not modified), so that
    ``torch.func.functional_call`` can run it with converted weights (the float64 text tower).

    >>> from genmetrics.testing import tiny_clip
    >>> blk = tiny_clip()[0].transformer.resblocks[0]
    >>> x = torch.randn(1, 4, 32, generator=torch.Generator().manual_seed(0))
    >>> with torch.no_grad():
    ...     torch.allclose(SdpaBlock(blk)(x), blk(x), atol=1e-5)
    True
    """

    def __init__(self, blk: Any) -> None:
        super().__init__()
        self.blk = blk

    def forward(self, x: torch.Tensor, attn_mask: Any = None) -> torch.Tensor:
        """The wrapped residual attention block on ``x``, attention through fused SDPA (:func:`sdpa_block`)."""
        return sdpa_block(self.blk, x, attn_mask=attn_mask)
