"""The open_clip ViT image tower run block by block for inference: SDPA attention, a fused
QuickGELU, only the class token's row through the last block, and the packed products where this machine
runs them faster (:mod:`genmetrics.accel.clip_packed`). Anything else calls ``model.encode_image``."""

from __future__ import annotations

from typing import Any

import torch
from open_clip import model as oc_model
from open_clip import transformer as oc_t

from genmetrics.accel.cast_weights import autocast_weight, cached_weight_scope
from genmetrics.accel.clip_blocks import is_plain_block, sdpa_block
from genmetrics.accel.clip_packed import packed_block, packed_vision_blocks
from genmetrics.backbones._openclip_compat import has_embeds, vision_embeds


def fast_vision_tower(model: Any) -> Any | None:
    """``model.visual`` when :func:`encode_image` may run it block by block, else None.

    Only open_clip's own classes with their own forwards qualify (``CLIP``/``CustomTextCLIP.encode_image``,
    ``VisionTransformer`` with class-token or mean pooling and no attention pooler, plain
    ``ResidualAttentionBlock`` self-attention blocks), in eval mode without autograd; a subclass or any
    other tower keeps its own ``encode_image``.

    >>> from genmetrics.testing import tiny_clip, tiny_clip_resnet
    >>> model = tiny_clip()[0]
    >>> with torch.no_grad():
    ...     fast_vision_tower(model) is model.visual, fast_vision_tower(tiny_clip_resnet()[0])
    (True, None)
    """
    enc = getattr(type(model), "encode_image", None)
    if enc not in (oc_model.CLIP.encode_image, oc_model.CustomTextCLIP.encode_image):
        return None
    v: Any = getattr(model, "visual", None)
    if type(v) is not oc_t.VisionTransformer or v.training or torch.is_grad_enabled():
        return None
    if getattr(v, "attn_pool", None) is not None or getattr(v, "output_tokens", False):
        return None
    if getattr(v, "pool_type", None) not in ("tok", "avg") or not has_embeds(v):
        return None
    return v if all(is_plain_block(blk) for blk in v.transformer.resblocks) else None


def vision_tower_flops(visual: Any) -> int:
    """Floating-point operations (multiply and add counted apart) of one image through an open_clip ViT
    tower's full forward: patch embedding, every block's four products and two attention products, the
    projection: 35.1 GFLOP for ViT-B/16 at 224 px (197 tokens, width 768, 12 blocks).

    The tiny test tower (16 patches of 8 px + [CLS], width 64, MLP 128, 3 blocks, projection to 32):

    >>> from genmetrics.testing import tiny_clip
    >>> block = 2 * 17 * 64 * (4 * 64 + 2 * 128) + 4 * 17 * 17 * 64
    >>> vision_tower_flops(tiny_clip()[0].visual) == 2 * 16 * 3 * 8 * 8 * 64 + 3 * block + 2 * 64 * 32
    True
    """
    d = int(visual.conv1.out_channels)
    patch = visual.conv1.kernel_size
    gh, gw = (int(g) for g in visual.grid_size)
    n = gh * gw + 1
    flops = 2 * (n - 1) * 3 * int(patch[0]) * int(patch[1]) * d
    for blk in visual.transformer.resblocks:
        hidden = int(blk.mlp.c_fc.out_features)
        flops += 2 * n * d * (3 * d + d + 2 * hidden) + 4 * n * n * d
    proj = getattr(visual, "proj", None)
    if proj is not None:
        flops += 2 * d * int(proj.shape[-1] if isinstance(proj, torch.Tensor) else proj.out_features)
    return flops


def encode_image(model: Any, pixels: torch.Tensor) -> torch.Tensor:
    """``model.encode_image(pixels)`` for inference, faster on open_clip ViTs.

    Under ``torch.no_grad()``/``inference_mode`` on an eval-mode open_clip ``VisionTransformer`` (see
    :func:`fast_vision_tower`) the blocks run with ``F.scaled_dot_product_attention`` instead of
    ``nn.MultiheadAttention``'s fast path (bmm + softmax), QuickGELU as one fused ``silu`` pass, and --
    with class-token pooling -- the last block only for the class token (layer norm, MLP and attention
    rows are per token, so no other output feeds the pooled one). On the CPU, in float32 or under bfloat16
    autocast, the products run on packed oneDNN weights where that measured faster on this machine. Equal to ``model.encode_image`` up
    to float32 rounding (the bound is derived in tests/backbones/test_clip_vision.py); anything else, or
    with gradients enabled, calls ``model.encode_image``. The model itself is not modified.

    >>> from genmetrics.testing import random_images, tiny_clip
    >>> from genmetrics.backbones.clip_preprocess import clip_image_batch
    >>> model, tokenizer = tiny_clip()
    >>> x = clip_image_batch(random_images(2), model)
    >>> with torch.no_grad():
    ...     torch.allclose(encode_image(model, x), model.encode_image(x), atol=1e-5)
    True
    """
    v = fast_vision_tower(model)
    if v is None:
        return model.encode_image(pixels)
    with cached_weight_scope(v.conv1):  # the patch embedding's weights: the kept bfloat16 copy under autocast
        x = vision_embeds(v, pixels)
    blocks = list(v.transformer.resblocks)
    cls_only = v.pool_type == "tok"
    packed = packed_vision_blocks(v) if x.device.type == "cpu" else None  # float32 weights: fp32 or bf16
    for i, blk in enumerate(blocks[:-1] if cls_only else blocks):
        x = sdpa_block(blk, x) if packed is None else packed_block(blk, x, packed[i])
    if cls_only and blocks:
        x = sdpa_block(blocks[-1], x, first_only=True)
    if cls_only:
        pooled = v.ln_post(x[:, 0])  # layer norm is per token: before or after pooling is the same
    elif getattr(v, "final_ln_after_pool", False):
        pooled = v.ln_post(x[:, 1:].mean(dim=1))
    else:
        pooled = v.ln_post(x)[:, 1:].mean(dim=1)
    proj = v.proj
    if proj is not None:
        # one image at a time, like the last block's rows: a one-row product runs another kernel (gemv)
        # than a B-row one and rounds differently, and an embedding must not depend on its batch
        rows = [pooled[i : i + 1] for i in range(pooled.shape[0])]
        if not isinstance(proj, torch.nn.Module):
            proj = autocast_weight(proj)
        pooled = torch.cat([proj(r) if isinstance(proj, torch.nn.Module) else r @ proj for r in rows])
    return pooled
