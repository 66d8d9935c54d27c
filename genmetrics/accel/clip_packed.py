"""The products of open_clip's plain vision blocks on oneDNN weights packed once: a bit-changing fast path,
taken only when asked for (``GENMETRICS_FAST_PATHS=onednn_packed_linear`` or ``all``;
:mod:`genmetrics.accel.fastpath`), and then only where this machine runs it faster than ``F.linear``.

Packing reorders each linear weight once into oneDNN's blocked layout (the kernels ``torch.compile`` emits
for CPU linears; the private torch calls live in :mod:`genmetrics.accel._torch_internals`). Whether that
pays depends on the CPU and on the number of rows: 1.37x ``F.linear`` on ViT-B/16's products on an AMD EPYC
with AVX-512, 0.93-1.05x on an Intel Xeon (AVX-512, AMX), and on an AMD EPYC Zen 3 (AVX2) about 1.2-1.3x at
one image's 197 rows but 0.85-0.97x from about 1000 rows on. So :func:`packed_products_pay_off` times one
block's four products both ways on the running machine at :data:`MEASURE_ROWS` rows (a batch's worth:
:func:`genmetrics.accel.fastpath.choose_path`, once per process, width and thread count) and the
packed path is taken only where it measured at least 5% faster. The two kernels round differently (about
1e-6 relative in float32; bfloat16 weights rounded once when packed), so a score's last bits depend on
whether it runs: hence off unless asked for.

The choice does not depend on the batch being scored: the two kernels round differently, and an image's
score must not depend on the rest of its batch. Rows of either kernel did not depend on the number of rows
on the two AMD CPUs measured (0 difference from one image's 197 rows up), so scores there are the same bits
whatever the batch; on the Intel Xeon the packed rows did (4e-6). The tests check that property on the
machine they run on and fall back to the float32 rounding bound where it does not hold.
"""

from __future__ import annotations

import weakref
from typing import Any

import torch
import torch.nn.functional as F
from open_clip.transformer import QuickGELU

from genmetrics.accel._torch_internals import (
    linear_pointwise,
    onednn_linear_available,
    reorder_linear_weight,
    weight_identity,
)
from genmetrics.accel.cast_weights import weights_may_be_kept
from genmetrics.accel.clip_blocks import QUICKGELU_ALPHA, is_plain_block
from genmetrics.accel.fastpath import choose_path

#: the name under which the choice is kept (``GENMETRICS_FAST_PATHS`` names it to allow the path;
#: ``fastpath.force_path(PACKED_LINEAR, "packed")`` forces it)
PACKED_LINEAR = "onednn_packed_linear"
_PACK_HINT = 32 * 197  # rows the layout is chosen for (fixed, so every call uses the same packed weights)
#: rows the choice is measured at: a batch's worth (both kernels are at their steady throughput from about
#: 1000 rows on; the default batch of 32 ViT-B/16 images has 6304)
MEASURE_ROWS = 1024
#: per precision (float32, bfloat16), at most one vision tower: {dtype: {"tower": weakref, "key": ..., "blocks": [...]}}
_packed: dict[torch.dtype, dict[str, Any]] = {}


class PackedBlock:
    """The matrix products of one plain open_clip ``ResidualAttentionBlock`` (in-projection, out-projection,
    MLP) on oneDNN weights packed once; see :func:`packed_vision_blocks`. Inputs ``[..., D]``.

    >>> from genmetrics.accel._torch_internals import onednn_linear_available
    >>> from genmetrics.testing import tiny_clip
    >>> model, _ = tiny_clip()
    >>> blk = model.visual.transformer.resblocks[0]
    >>> x = torch.randn(2, 5, 64, generator=torch.Generator().manual_seed(0))
    >>> with torch.no_grad():
    ...     same = not onednn_linear_available() or torch.allclose(PackedBlock(blk).mlp(x), blk.mlp(x), atol=1e-5)
    >>> same
    True
    """

    def __init__(self, blk: Any, dtype: torch.dtype = torch.float32) -> None:
        attn, mlp = blk.attn, blk.mlp
        self.quick = type(mlp.gelu) is QuickGELU
        self.dtype = dtype
        a = QUICKGELU_ALPHA if self.quick else 1.0  # silu(a h) / a: a inside c_fc, 1/a inside c_proj

        def pack(w: torch.Tensor, b: Any) -> tuple[torch.Tensor, Any]:
            # scaled in float32, then rounded once to ``dtype`` (a no-op for float32)
            return reorder_linear_weight(w.to(dtype), _PACK_HINT), None if b is None else b.to(dtype)

        self._gelu = mlp.gelu
        self._in = pack(attn.in_proj_weight, attn.in_proj_bias)
        self._out = pack(attn.out_proj.weight, attn.out_proj.bias)
        self._fc = pack(mlp.c_fc.weight * a, None if mlp.c_fc.bias is None else mlp.c_fc.bias * a)
        self._proj = pack(mlp.c_proj.weight / a, mlp.c_proj.bias)

    def in_proj(self, h: torch.Tensor) -> torch.Tensor:
        """``[..., D] -> [..., 3D]``: q, k, v as ``nn.MultiheadAttention`` packs them."""
        return linear_pointwise(h.to(self.dtype), *self._in)

    def out_proj(self, o: torch.Tensor) -> torch.Tensor:
        """The attention's output projection ``[..., D] -> [..., D]``."""
        return linear_pointwise(o.to(self.dtype), *self._out)

    def mlp(self, h: torch.Tensor) -> torch.Tensor:
        """``c_proj(gelu(c_fc(h)))``; QuickGELU's silu fused into the ``c_fc`` product."""
        h = h.to(self.dtype)
        if self.quick:
            return linear_pointwise(linear_pointwise(h, *self._fc, "swish"), *self._proj)
        return linear_pointwise(self._gelu(linear_pointwise(h, *self._fc)).to(self.dtype), *self._proj)


def _pack_key(v: Any) -> tuple | None:
    """Identity of ``v``'s current weights: storage (itself, not only its address), in-place version and
    shape of every parameter (:func:`~genmetrics.accel._torch_internals.weight_identity`); None when a
    parameter is an inference tensor (made under ``torch.inference_mode``), which has no version counter,
    so an in-place change could not be seen: such towers are packed again at every call."""
    params = list(v.parameters())
    if any(p.is_inference() for p in params):
        return None
    return tuple((weight_identity(p), p.dtype) for p in params)


def packed_products_pay_off(blk: Any, dtype: torch.dtype = torch.float32) -> bool:
    """Whether the packed products of blocks shaped like ``blk`` are allowed (a bit-changing fast path:
    :func:`~genmetrics.accel.fastpath.fast_path_allowed`) and measured at least 5% faster than
    ``F.linear`` on this machine (one block's four products both ways on :data:`MEASURE_ROWS` random rows
    in ``dtype``, weights already in ``dtype`` on both sides, interleaved, best of three; measured once per
    process, width, thread count and dtype).

    >>> from genmetrics.accel.fastpath import force_path
    >>> from genmetrics.testing import tiny_clip
    >>> blk = tiny_clip()[0].visual.transformer.resblocks[0]
    >>> force_path(PACKED_LINEAR, "plain")  # e.g. to compare with the plain products
    >>> packed_products_pay_off(blk)
    False
    >>> force_path(PACKED_LINEAR, None)
    """
    d, hidden = int(blk.attn.embed_dim), int(blk.mlp.c_fc.out_features)
    key: tuple = (PACKED_LINEAR, d, hidden, torch.get_num_threads())
    if dtype != torch.float32:
        key = (*key, str(dtype))
    with torch.no_grad(), torch.autocast("cpu", enabled=False):
        return (
            choose_path(
                key, lambda: _product_candidates(blk, MEASURE_ROWS, dtype), baseline="plain", exact=False
            ).path
            == "packed"
        )


def _product_candidates(blk: Any, m: int, dtype: torch.dtype = torch.float32) -> dict[str, Any]:
    """The timed work: ``blk``'s four products on ``m`` random rows in ``dtype``, with ``F.linear`` and
    packed."""
    g = torch.Generator().manual_seed(0)
    attn, mlp = blk.attn, blk.mlp
    x = torch.randn(m, int(attn.embed_dim), generator=g).to(dtype)
    wide = torch.randn(m, int(mlp.c_fc.out_features), generator=g).to(dtype)

    def cast(w: Any) -> Any:
        return None if w is None else w.to(dtype)

    plain = [
        (x, cast(attn.in_proj_weight), cast(attn.in_proj_bias)),
        (x, cast(attn.out_proj.weight), cast(attn.out_proj.bias)),
        (x, cast(mlp.c_fc.weight), cast(mlp.c_fc.bias)),
        (wide, cast(mlp.c_proj.weight), cast(mlp.c_proj.bias)),
    ]
    packed = [(a, reorder_linear_weight(w, _PACK_HINT), b) for a, w, b in plain]
    return {
        "plain": lambda: [F.linear(*p) for p in plain],
        "packed": lambda: [linear_pointwise(*p) for p in packed],
    }


def packed_dtype() -> torch.dtype | None:
    """The precision a float32 tower's packed products run in here: float32 without CPU autocast, bfloat16
    under CPU bfloat16 autocast (a metric's ``precision="bf16"``), None under another autocast dtype.

    >>> with torch.autocast("cpu", dtype=torch.bfloat16):
    ...     packed_dtype()
    torch.bfloat16
    >>> packed_dtype()
    torch.float32
    """
    if not torch.is_autocast_enabled("cpu"):
        return torch.float32
    dt = torch.get_autocast_dtype("cpu")
    return dt if dt == torch.bfloat16 else None


def packed_vision_blocks(visual: Any) -> list[PackedBlock] | None:
    """One :class:`PackedBlock` per block of the open_clip ``VisionTransformer`` ``visual``, when its
    products may run on packed oneDNN weights and that is faster here: float32 weights on the CPU, without
    autograd, outside autocast or under CPU bfloat16 autocast (:func:`packed_dtype`: the weights are then
    rounded to bfloat16 once, when packed, and the products take and return bfloat16, accumulating in
    float32 inside oneDNN, as autocast's own products do), every block plain (:func:`~genmetrics.accel.clip_blocks.is_plain_block`), a torch build with
    oneDNN's packed linear, and :func:`packed_products_pay_off` (measured on this machine; the same for
    every batch); else None (use the blocks' own modules).

    The packed copy is kept, per precision, for the last tower seen while its parameters are unchanged
    (storage and in-place version of each: an optimizer step or ``load_state_dict`` repacks), one extra copy
    of its linear weights (about 340 MB for ViT-B/16 in float32, 170 MB in bfloat16; :func:`release_packed_weights` frees it). Weights made under
    ``torch.inference_mode`` have no version counter: they are packed at every call, never kept; so are the
    weights of a caller's model (inside ``cached_weight_scope(..., keep=False)``,
    :func:`~genmetrics.accel.cast_weights.weights_may_be_kept`).

    >>> from genmetrics.testing import tiny_clip
    >>> model, _ = tiny_clip()
    >>> with torch.enable_grad():
    ...     packed_vision_blocks(model.visual) is None  # autograd: the modules' own products
    True
    """
    blocks = list(getattr(getattr(visual, "transformer", None), "resblocks", []))
    p = next(visual.parameters(), None)
    dtype = packed_dtype()
    if (
        p is None
        or dtype is None
        or not blocks
        or p.device.type != "cpu"
        or p.dtype != torch.float32
        or torch.is_grad_enabled()
        or not all(is_plain_block(b) for b in blocks)
        or not onednn_linear_available()
    ):
        return None
    if not packed_products_pay_off(blocks[0], dtype):
        return None
    key = _pack_key(visual) if weights_may_be_kept() else None  # a caller's weights: packed now, not kept
    entry = _packed.get(dtype, {})
    ref = entry.get("tower")
    if key is not None and ref is not None and ref() is visual and entry.get("key") == key:
        return entry["blocks"]
    _packed.pop(dtype, None)  # a different tower or changed weights: drop the old copy before the new one
    with torch.autocast("cpu", enabled=False):
        out = [PackedBlock(blk, dtype) for blk in blocks]
    if key is not None:
        _packed[dtype] = {"tower": weakref.ref(visual), "key": key, "blocks": out}
    return out


def packed_tower(dtype: torch.dtype = torch.float32) -> Any:
    """The vision tower whose packed copy in ``dtype`` is kept (None when none is).

    >>> release_packed_weights() in (True, False), packed_tower()
    (True, None)
    """
    ref = _packed.get(dtype, {}).get("tower")
    return None if ref is None else ref()


def release_packed_weights() -> bool:
    """Free the packed copies (every precision) of the last open_clip vision tower run on the CPU (they are
    rebuilt on the next call); True when there was one.

    >>> from genmetrics.accel.fastpath import force_path
    >>> from genmetrics.backbones.clip_vision import encode_image
    >>> from genmetrics.testing import tiny_clip
    >>> model, _ = tiny_clip()
    >>> force_path(PACKED_LINEAR, "packed")  # take the packed path whatever it measures here
    >>> with torch.no_grad():
    ...     _ = encode_image(model, torch.zeros(1, 3, 32, 32))
    >>> force_path(PACKED_LINEAR, None)
    >>> release_packed_weights() == onednn_linear_available(), release_packed_weights()
    (True, False)
    """
    had = bool(_packed)
    _packed.clear()
    return had


def packed_block(blk: Any, x: torch.Tensor, packed: PackedBlock) -> torch.Tensor:
    """:func:`~genmetrics.accel.clip_blocks.sdpa_block` (all rows, no mask) with the products on
    packed oneDNN weights.

    >>> from genmetrics.accel.clip_blocks import sdpa_block
    >>> from genmetrics.testing import tiny_clip
    >>> blk = tiny_clip()[0].visual.transformer.resblocks[0]
    >>> x = torch.randn(2, 5, 64, generator=torch.Generator().manual_seed(0))
    >>> with torch.no_grad():
    ...     same = not onednn_linear_available() or torch.allclose(
    ...         packed_block(blk, x, PackedBlock(blk)), sdpa_block(blk, x), atol=1e-5)
    >>> same
    True
    """
    b, n, d = x.shape
    q, k, v = packed.in_proj(blk.ln_1(x)).view(b, n, 3, blk.attn.num_heads, -1).permute(2, 0, 3, 1, 4)
    o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
    x = x + blk.ls_1(packed.out_proj(o))
    return x + blk.ls_2(packed.mlp(blk.ln_2(x)))
