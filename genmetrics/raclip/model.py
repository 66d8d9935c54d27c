"""RA-CLIPScore scorer (DESIGN section 3, Eq. 3-9) and the CLIPScore / HCS baselines (Eq. 1-2).

One forward pass of an open_clip ViT image tower:

* blocks ``1..L-1`` run as usual, but their attention is computed by hand (``q·k``, softmax) so the
  head-averaged attention weights ``A^l`` are available (open_clip's own blocks may use SDPA, which
  returns no weights); their patch-to-patch part is summed on the fly (Eq. 8 needs only the mean);
* block ``L`` runs once with the Eq. 7 mask: the [CLS] row attends to every token (so the global
  embedding equals ``encode_image``), every patch row only to itself, so patch token ``j`` becomes
  ``h_j + out_proj(V(ln_1 h_j)) + MLP(...)`` (Eq. 6). A diagonal-only softmax row is exactly 1, so the
  masked attention is evaluated in closed form (the [CLS] row by hand, the patch rows as ``V``), which
  equals running the block with the mask and costs less than the unmasked block;
* ``ln_post`` and ``proj`` map every token into the joint space.

Then Eq. 4 (dual prompts, per token), Eq. 8 (attention refinement of the patch scores) and Eq. 9
(aggregation with softmax weights from ``s * cos(z_j, T+)``).
"""

from __future__ import annotations

import math
import weakref
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from genmetrics.accel._torch_internals import weight_identity
from genmetrics.accel.cast_weights import autocast_weight, cached_weight_scope
from genmetrics.accel.clip_blocks import fused_mlp
from genmetrics.accel.clip_packed import packed_vision_blocks
from genmetrics.backbones._openclip_compat import has_embeds, vision_embeds
from genmetrics.backbones.clip_text import TextEmbeddingCache
from genmetrics.core.options import template
from genmetrics.data.device import check_precision, precision_autocast
from genmetrics.errors import InputError
from genmetrics.raclip._checks import check_attributes

POSITIVE_TEMPLATE = "This is a photo of {}."
NEGATIVE_TEMPLATE = "This is a photo without {}."
HCS_TEMPLATE = "a photo of {}"


@dataclass
class RAOutput:
    """What :class:`RegionAttributeScorer` returns (float32 tensors on the model's device).

    >>> import dataclasses
    >>> [f.name for f in dataclasses.fields(RAOutput)]
    ['score', 'global_score', 'patch_scores', 'grid']
    """

    score: torch.Tensor  # [B,C] Eq. 9 RA-CLIPScore
    global_score: (
        torch.Tensor
    )  # [B,C] r̂_0, the global token's Eq. 4 score ([CLS] of block L; L-1 with global_token=False)
    patch_scores: torch.Tensor  # [B,P,C] refined patch scores r̃_j, j>=1 (Eq. 8), row-major over the grid
    grid: tuple[int, int]  # (gh, gw), gh*gw == P


# ---------------------------------------------------------------------------------- validation
def check_vit(model: Any, *, what: str = "RA-CLIPScore") -> Any:
    """The open_clip ViT image tower of ``model``, or an :class:`InputError` saying why it cannot be used.

    >>> from genmetrics.testing import tiny_clip, tiny_clip_resnet
    >>> model = tiny_clip()[0]
    >>> check_vit(model) is model.visual
    True
    >>> check_vit(tiny_clip_resnet()[0])  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: ...ModifiedResNet...
    """
    visual = getattr(model, "visual", None)
    if visual is None or not hasattr(model, "encode_image") or not hasattr(model, "encode_text"):
        raise InputError(
            f"backbone: expected an open_clip CLIP model (with .visual, .encode_image and .encode_text), got "
            f"{type(model).__name__}; build one with open_clip.create_model_and_transforms or genmetrics.testing.tiny_clip"
        )
    transformer = getattr(visual, "transformer", None)
    blocks = getattr(transformer, "resblocks", None)
    if blocks is None or not hasattr(visual, "class_embedding") or not hasattr(visual, "conv1"):
        raise InputError(
            f"backbone: {what} needs an open_clip VisionTransformer image tower (patch tokens and a [CLS] token), "
            f"got {type(visual).__name__}; ResNet towers (RN50, ...) and timm towers (SigLIP, EVA, ...) have no "
            "[CLS]-plus-patch layout. Use a ViT CLIP such as ViT-B-32/openai, ViT-B-16/openai or ViT-L-14/openai"
        )
    if getattr(visual, "attn_pool", None) is not None or getattr(visual, "pool_type", "tok") != "tok":
        raise InputError(
            f"backbone: {what} needs a ViT whose image embedding is its [CLS] token (pool_type='tok', no attention "
            f"pooling); this tower pools with {getattr(visual, 'pool_type', '?')!r}"
            f"{' and an attentional pooler' if getattr(visual, 'attn_pool', None) is not None else ''}"
        )
    if len(blocks) < 2:
        raise InputError(
            f"backbone: {what} needs at least 2 transformer blocks (Eq. 8 averages all but the last), "
            f"got {len(blocks)}"
        )
    for i, blk in enumerate(blocks):
        attn = getattr(blk, "attn", None)
        ok = (
            attn is not None
            and getattr(attn, "in_proj_weight", None) is not None
            and hasattr(attn, "out_proj")
        )
        if isinstance(attn, nn.MultiheadAttention):
            ok = (
                ok
                and attn.bias_k is None
                and not attn.add_zero_attn
                and attn.kdim == attn.vdim == attn.embed_dim
            )
        if not ok or not hasattr(blk, "ln_1") or not hasattr(blk, "mlp") or hasattr(blk, "ln_1_kv"):
            raise InputError(
                f"backbone: block {i} of the image tower ({type(blk).__name__}) is not an open_clip residual attention "
                "block with a packed q/k/v projection; RA-CLIPScore supports open_clip ViT towers"
            )
    return visual


# ------------------------------------------------------------------------------ hand attention
# Blocks and attention layers are duck-typed open_clip modules (nn.MultiheadAttention or open_clip's own
# Attention, checked by check_vit), so they are typed Any: nn.Module's __getattr__ would give Tensor | Module.
def _heads(attn: Any) -> int:
    return int(attn.num_heads)


def _qkv(attn: Any, y: torch.Tensor, packed: Any = None) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    b, n, d = y.shape
    h = _heads(attn)
    if packed is None:  # the kept bfloat16 copies under CPU autocast (genmetrics.accel.cast_weights)
        bias = attn.in_proj_bias
        qkv = F.linear(
            y, autocast_weight(attn.in_proj_weight), None if bias is None else autocast_weight(bias)
        )
    else:
        qkv = packed.in_proj(y)
    q, k, v = qkv.chunk(3, dim=-1)
    q, k, v = (t.reshape(b, n, h, d // h).transpose(1, 2) for t in (q, k, v))  # [B,H,N,hd]
    return q, k, v


def _logits(attn: Any, q: torch.Tensor, k: torch.Tensor) -> torch.Tensor:
    """Attention logits ``[B,H,Nq,Nk]`` for open_clip's nn.MultiheadAttention and its custom Attention."""
    if getattr(attn, "logit_scale", None) is not None and getattr(attn, "scaled_cosine", False):
        scale = torch.clamp(attn.logit_scale, max=attn.logit_scale_max).exp()
        return (F.normalize(q, dim=-1) @ F.normalize(k, dim=-1).transpose(-1, -2)) * scale
    ln_q = getattr(attn, "ln_q", None)
    if ln_q is not None:  # open_clip's qk-norm: ln_q and ln_k come together
        q, k = ln_q(q), attn.ln_k(k)
    return (q * (q.shape[-1] ** -0.5)) @ k.transpose(-1, -2)


def _merge(attn: Any, o: torch.Tensor, packed: Any = None) -> torch.Tensor:
    """Per-head outputs ``[B,H,N,hd]`` -> block attention output ``[B,N,D]`` (head scale, inner norm, out_proj)."""
    head_scale = getattr(attn, "head_scale", None)
    if head_scale is not None:
        o = o * head_scale
    b, h, n, hd = o.shape
    o = o.transpose(1, 2).reshape(b, n, h * hd)
    ln_inner = getattr(attn, "ln_inner", None)
    if ln_inner is not None:
        o = ln_inner(o)
    return attn.out_proj(o) if packed is None else packed.out_proj(o)


def _mlp(blk: Any, h: torch.Tensor, packed: Any) -> torch.Tensor:
    """The block's MLP: packed products, else open_clip's ``c_fc -> gelu -> c_proj`` with QuickGELU fused
    into the products when no gradient is recorded (the in-place ``silu`` would break autograd), else the
    module itself."""
    if packed is not None:
        return packed.mlp(h)
    if not torch.is_grad_enabled() and [n for n, _ in blk.mlp.named_children()] == ["c_fc", "gelu", "c_proj"]:
        return fused_mlp(blk.mlp, h)
    return blk.mlp(h)


def _finish_block(blk: Any, x: torch.Tensor, a: torch.Tensor, packed: Any = None) -> torch.Tensor:
    ln_attn = getattr(blk, "ln_attn", None)
    if ln_attn is not None:
        a = ln_attn(a)
    x = x + blk.ls_1(a)
    return x + blk.ls_2(_mlp(blk, blk.ln_2(x), packed))


def block_with_attention(blk: Any, x: torch.Tensor, packed: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
    """One unmasked block ``[B,N,D] -> [B,N,D]`` plus its head-averaged attention weights ``[B,N,N]``.
    ``packed``: the block's :class:`~genmetrics.backbones.openclip.PackedBlock` (faster products on the CPU).

    >>> from genmetrics.testing import tiny_clip
    >>> block = tiny_clip()[0].visual.transformer.resblocks[0]
    >>> y, attn = block_with_attention(block, torch.randn(2, 5, 64, generator=torch.Generator().manual_seed(0)))
    >>> tuple(y.shape), tuple(attn.shape), torch.allclose(attn.sum(-1), torch.ones(2, 5))  # rows are softmaxes
    ((2, 5, 64), (2, 5, 5), True)
    """
    q, k, v = _qkv(blk.attn, blk.ln_1(x), packed)
    w = (
        _logits(blk.attn, q, k).float().softmax(dim=-1)
    )  # fp32 softmax, as SDPA does, also for bf16/fp16 towers
    out = _finish_block(blk, x, _merge(blk.attn, w.to(v.dtype) @ v, packed), packed)
    return out, w.mean(1)


def last_block_masked(blk: Any, x: torch.Tensor, packed: Any = None) -> torch.Tensor:
    """Block ``L`` under the Eq. 7 mask: [CLS] attends to all tokens, each patch only to itself.
    ``packed`` as in :func:`block_with_attention`.

    A patch token's output then does not depend on the other patches:

    >>> from genmetrics.testing import tiny_clip
    >>> block = tiny_clip()[0].visual.transformer.resblocks[-1]
    >>> x = torch.randn(1, 5, 64, generator=torch.Generator().manual_seed(0))
    >>> y = x.clone()
    >>> y[0, 2] += 1.0  # change patch 2 only
    >>> with torch.no_grad():
    ...     a, b = last_block_masked(block, x), last_block_masked(block, y)
    >>> torch.allclose(a[0, 3], b[0, 3]), torch.allclose(a[0, 2], b[0, 2])
    (True, False)
    """
    q, k, v = _qkv(blk.attn, blk.ln_1(x), packed)
    w0 = _logits(blk.attn, q[:, :, :1], k).float().softmax(dim=-1).to(v.dtype)  # [B,H,1,N]
    o = torch.cat([w0 @ v, v[:, :, 1:]], dim=2)  # diagonal softmax rows are exactly 1: patch output = V
    return _finish_block(blk, x, _merge(blk.attn, o, packed), packed)


def eq7_mask(n_tokens: int, *, dtype: torch.dtype = torch.float32, device: Any = None) -> torch.Tensor:
    """The Eq. 7 additive mask ``[N,N]``: row 0 all zeros, patch rows ``-inf`` except the diagonal.

    >>> eq7_mask(3).tolist()
    [[0.0, 0.0, 0.0], [-inf, 0.0, -inf], [-inf, -inf, 0.0]]
    """
    m = torch.full((n_tokens, n_tokens), float("-inf"), dtype=dtype, device=device)
    m.fill_diagonal_(0.0)
    m[0] = 0.0
    return m


def _embed(visual: Any, images: torch.Tensor) -> torch.Tensor:
    """Patch embedding + [CLS] + positions + ln_pre (open_clip's ``VisionTransformer._embeds``)."""
    if has_embeds(visual):
        return vision_embeds(visual, images)
    x = visual.conv1(images)
    x = x.reshape(x.shape[0], x.shape[1], -1).permute(0, 2, 1)
    cls = visual.class_embedding.to(x.dtype).view(1, 1, -1).expand(x.shape[0], -1, -1)
    x = torch.cat([cls, x], dim=1) + visual.positional_embedding.to(x.dtype)
    x = visual.patch_dropout(x)
    return visual.ln_pre(x)


def dense_tokens(
    model: Any,
    images: torch.Tensor,
    *,
    global_layer: str = "last",
) -> tuple[torch.Tensor, torch.Tensor, tuple[int, int]]:
    """The single masked pass (Eq. 5-7).

    Returns ``z [B,1+P,E]`` (projected tokens: ``z[:,0]`` equals ``encode_image``, ``z[:,1:]`` the dense
    patch tokens of Eq. 6), ``attn [B,P,P]`` (the patch-to-patch head-averaged attention summed over
    blocks ``1..L-1``) and the patch grid. ``global_layer="penultimate"`` (Table 2, "w/o GE") takes
    ``z[:,0]`` from the [CLS] token that leaves block ``L-1`` (through the tower's ``ln_post`` and
    ``proj``, the only map into the joint space) instead of block ``L``; the patch tokens are unchanged.

    >>> from genmetrics.backbones.openclip import clip_image_batch
    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> images = clip_image_batch(random_images(2), model)
    >>> with torch.no_grad():
    ...     z, attn, grid = dense_tokens(model, images)
    ...     same = torch.allclose(z[:, 0], model.encode_image(images), atol=1e-5)
    >>> tuple(z.shape), tuple(attn.shape), grid, same  # [CLS] = encode_image; 4 x 4 patches
    ((2, 17, 32), (2, 16, 16), (4, 4), True)
    """
    if global_layer not in ("last", "penultimate"):
        raise InputError(f"global_layer: expected 'last' or 'penultimate', got {global_layer!r}")
    visual = check_vit(model)
    expected = (
        tuple(int(s) for s in visual.image_size)
        if isinstance(visual.image_size, (tuple, list))
        else (int(visual.image_size), int(visual.image_size))
    )
    if not isinstance(images, torch.Tensor) or images.ndim != 4 or images.shape[1] != 3:
        raise InputError(
            f"images: expected a preprocessed float tensor [B,3,H,W], got "
            f"{tuple(images.shape) if isinstance(images, torch.Tensor) else type(images).__name__}; "
            "use genmetrics.backbones.openclip.clip_image_batch(images, model) to preprocess"
        )
    if tuple(images.shape[-2:]) != expected:
        raise InputError(
            f"images: got size {tuple(images.shape[-2:])}, the model's input size is {expected}; use "
            "genmetrics.backbones.openclip.clip_image_batch(images, model) to resize and normalise"
        )
    blocks = visual.transformer.resblocks
    x = _embed(visual, images.to(dtype=visual.conv1.weight.dtype))
    # None: the modules' own products (not the CPU, not float32, or packed measured slower here)
    packed = packed_vision_blocks(visual) if x.device.type == "cpu" else None
    attn_sum = None
    for i, blk in enumerate(blocks[:-1]):
        x, w = block_with_attention(blk, x, None if packed is None else packed[i])
        wp = w[:, 1:, 1:]
        attn_sum = wp if attn_sum is None else attn_sum + wp
    cls_penultimate = x[:, :1]
    x = last_block_masked(blocks[-1], x, None if packed is None else packed[-1])
    if global_layer == "penultimate":
        x = torch.cat([cls_penultimate, x[:, 1:]], dim=1)
    x = visual.ln_post(x)
    z = x @ autocast_weight(visual.proj) if visual.proj is not None else x
    gh, gw = (int(g) for g in visual.grid_size)
    assert attn_sum is not None  # check_vit: at least 2 blocks
    return z, attn_sum, (gh, gw)


# -------------------------------------------------------------------------------- Eq. 4, 8, 9
def token_scores(
    cos_pos: torch.Tensor, cos_neg: torch.Tensor | None, scale: float | torch.Tensor
) -> torch.Tensor:
    """Eq. 4: ``r̂ = softmax([s cos+, s cos-])[0] = sigmoid(s (cos+ - cos-))``; without dual prompt, ``cos+``.

    >>> token_scores(torch.tensor([0.3]), torch.tensor([0.3]), 100.0).tolist()  # undecided: 1/2
    [0.5]
    >>> round(token_scores(torch.tensor([0.31]), torch.tensor([0.30]), 100.0).item(), 4)  # sigmoid(100 * 0.01)
    0.7311
    """
    if cos_neg is None:
        return cos_pos
    return torch.sigmoid(scale * (cos_pos - cos_neg))


def refine(r_hat_patches: torch.Tensor, attn_mean: torch.Tensor) -> torch.Tensor:
    """Eq. 8: ``r̃_j = Σ_k A[j,k] r̂_k`` over patches (``attn_mean [B,P,P]`` = mean over ψ, rows as they are).

    >>> r_hat = torch.tensor([[[1.0], [0.0]]])  # [B=1, P=2 patches, C=1]
    >>> refine(r_hat, torch.tensor([[[0.5, 0.5], [0.0, 1.0]]])).tolist()  # patch 0 averages, patch 1 keeps
    [[[0.5], [0.0]]]
    """
    return attn_mean.to(r_hat_patches.dtype) @ r_hat_patches


def aggregate(
    r_tilde: torch.Tensor,
    cos_pos: torch.Tensor,
    scale: float | torch.Tensor,
    *,
    temperature: float = 1.0,
    local_tokens: bool = True,
) -> torch.Tensor:
    """Eq. 9: ``Σ_j softmax_j(s cos(z_j, T+) / τ) r̃_j`` over all tokens (``local_tokens=False``, "w/o LT":
    the [CLS] token only, so the score is ``r̃_0``). Inputs ``[B,1+P,C]`` -> ``[B,C]``.

    Equal cosines give equal weights, so the score is the mean of the token scores:

    >>> r_tilde = torch.tensor([[[0.2], [0.4], [0.9]]])  # [B=1, 1+P=3, C=1]
    >>> round(aggregate(r_tilde, torch.zeros(1, 3, 1), 100.0).item(), 4), aggregate(r_tilde, torch.zeros(1, 3, 1),
    ...       100.0, local_tokens=False).item()
    (0.5, 0.20000000298023224)
    """
    sl = slice(0, None) if local_tokens else slice(0, 1)
    w = torch.softmax(scale * cos_pos[:, sl] / temperature, dim=1)
    return (w * r_tilde[:, sl]).sum(1)


# -------------------------------------------------------------------------------- text helpers
@torch.no_grad()
def encode_texts(
    model: Any,
    tokenizer: Any,
    texts: list[str],
    *,
    name: str = "attributes",
    normalize: bool = True,
    dtype: torch.dtype | None = None,
) -> torch.Tensor:
    """Text embeddings ``[N,E]`` on the model's device, L2-normalised unless ``normalize=False``.

    Each distinct text is encoded once, with the context cut after the longest text (exact for
    open_clip's causal text towers: :func:`genmetrics.backbones.openclip.encode_text_ids`).
    ``dtype=None``: the model's precision, returned as float32; ``dtype=torch.float64``: the text tower
    runs in float64 and float64 embeddings are returned (the exact value of the untrimmed tower, within
    ~1e-14; what the raclip family uses for attribute texts). No cache across calls: the metrics keep a
    :class:`~genmetrics.backbones.openclip.TextEmbeddingCache` per instance instead.

    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> emb = encode_texts(model, tokenizer, ["smiling", "wearing hat"])
    >>> tuple(emb.shape), emb.dtype, torch.allclose(emb.norm(dim=-1), torch.ones(2))
    ((2, 32), torch.float32, True)
    >>> encode_texts(model, tokenizer, ["smiling"], dtype=torch.float64).dtype
    torch.float64
    """
    return TextEmbeddingCache(dtype=dtype).embed(model, tokenizer, texts, name=name, normalize=normalize)


def logit_scale_of(model: Any) -> float:
    """The model's softmax scale ``s = exp(logit_scale)`` (100 for OpenAI CLIP; 100 when the model has none).

    >>> round(logit_scale_of(torch.nn.Linear(1, 1)), 3)
    100.0
    """
    ls = getattr(model, "logit_scale", None)
    if ls is None:
        return 100.0
    if not isinstance(ls, torch.Tensor):
        return float(math.exp(ls))
    # read from the device once per value of the parameter (its storage and version counter: an in-place change
    # or ``logit_scale.data = ...``), not once per batch
    try:
        key = (weight_identity(ls), str(ls.device), ls.dtype)
    except RuntimeError:  # an inference tensor has no version counter: read it each time
        return float(ls.detach().float().exp())
    hit = _LOGIT_SCALES.get(id(ls))
    if hit is None or hit[0]() is not ls or hit[1] != key:
        if len(_LOGIT_SCALES) >= 64:
            _LOGIT_SCALES.clear()
        hit = _LOGIT_SCALES[id(ls)] = (weakref.ref(ls), key, float(ls.detach().float().exp()))
    return hit[2]


#: ``id(logit_scale)`` -> (a weak reference to it, its version, device and dtype, ``exp`` of it as a float)
_LOGIT_SCALES: dict[int, tuple[Any, tuple[Any, ...], float]] = {}


def _check_template(t: str, name: str) -> str:
    return template(name, t, slots=1)


SCORER_DEFAULTS: dict[str, Any] = dict(
    dual_prompt=True,
    local_tokens=True,
    global_token=True,
    temperature=1.0,
    positive_template=POSITIVE_TEMPLATE,
    negative_template=NEGATIVE_TEMPLATE,
)


def scorer_options(*, owner: str = "RA-CLIPScore", **given: Any) -> dict[str, Any]:
    """The scorer options with defaults filled in, after checks; ``None`` means "not given".

    Refuses (naming the option) a value that is invalid and an option that would change nothing:
    ``temperature`` with ``local_tokens=False`` (one token, softmax weight 1) and ``negative_template``
    with ``dual_prompt=False`` (no negative prompt is encoded).

    >>> scorer_options()["positive_template"], scorer_options(dual_prompt=False)["dual_prompt"]
    ('This is a photo of {}.', False)
    >>> scorer_options(local_tokens=False, temperature=0.5)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: ...temperature...
    """
    unknown = set(given) - set(SCORER_DEFAULTS)
    if unknown:
        raise InputError(
            f"{owner}: unknown scorer option(s) {sorted(unknown)}; expected {sorted(SCORER_DEFAULTS)}"
        )
    opts: dict[str, Any] = {
        k: (given.get(k) if given.get(k) is not None else v) for k, v in SCORER_DEFAULTS.items()
    }
    for k in ("dual_prompt", "local_tokens", "global_token"):
        if not isinstance(opts[k], bool):
            raise InputError(f"{owner}: option {k}: expected True or False, got {opts[k]!r}")
    if not opts["local_tokens"] and given.get("temperature") is not None:
        raise InputError(
            f"{owner}: option temperature has no effect with local_tokens=False (w/o LT scores the "
            "[CLS] token alone, whose softmax weight is 1); drop temperature="
        )
    if not opts["dual_prompt"] and given.get("negative_template") is not None:
        raise InputError(
            f"{owner}: option negative_template has no effect with dual_prompt=False (w/o DP encodes "
            "only the positive prompt); drop negative_template="
        )
    t = opts["temperature"]
    if not isinstance(t, (int, float)) or isinstance(t, bool) or not t > 0 or not math.isfinite(t):
        raise InputError(f"{owner}: option temperature: expected a finite number > 0, got {t!r}")
    opts["temperature"] = float(t)
    _check_template(opts["positive_template"], "positive_template")
    _check_template(opts["negative_template"], "negative_template")
    return opts


class RegionAttributeScorer(nn.Module):
    """RA-CLIPScore of images for a list of attributes (DESIGN section 3, Eq. 3-9).

    ``model``: an open_clip CLIP with a ViT image tower; ``tokenizer``: its tokenizer. Options:

    * ``dual_prompt`` (default True; False = the "w/o DP" ablation: ``r̂_j = cos(z_j, T+)`` in [-1, 1]);
    * ``local_tokens`` (default True; False = "w/o LT": aggregate the [CLS] token only, score = r̂_0);
    * ``global_token`` (default True; False = "w/o GE" as in Table 2: the global token is the [CLS]
      token leaving block ``L-1`` instead of block ``L``; it is still aggregated with the patch tokens);
    * ``temperature`` τ of the Eq. 9 softmax, ``softmax(s cos(z_j, T+) / τ)`` (default 1; with
      ``local_tokens=False`` one token is left and τ changes nothing, so it is refused there);
    * ``positive_template`` / ``negative_template``: the Eq. 3 prompts (the negative one only with
      ``dual_prompt=True``; otherwise it is unused and refused);
    * ``precision``: ``"fp32"`` (default) or ``"bf16"``: the image tower under bfloat16 autocast
      (:func:`~genmetrics.data.device.precision_autocast`); the prompts, Eq. 3-9 and the score stay in
      float32 / float64 either way;
    * ``keep_cast_weights`` (default False): keep the bfloat16 (and packed) copies of ``model``'s weights
      across calls (:mod:`genmetrics.accel.cast_weights`). Only for a model whose weights change where
      torch's version counter sees it (an EMA update through ``p.data`` does not); the RA-CLIPScore metrics
      pass True for the model they loaded themselves.

    Options that would change nothing are refused with an :class:`InputError` naming them.

    ``forward(images, attributes)``: ``images`` preprocessed ``[B,3,H,W]`` at the model's input size
    (see :func:`genmetrics.backbones.openclip.clip_image_batch`); returns :class:`RAOutput`. Scoring
    runs without autograd (``torch.no_grad``).

    Prompts: each distinct prompt text is encoded once per scorer (:attr:`text_cache`, a
    :class:`~genmetrics.backbones.openclip.TextEmbeddingCache` keyed by the text, so lists that share
    attributes share their encodings), with the context cut after the longest prompt of the call and the
    text tower in float64 (the exact value of the untrimmed tower; attributes are few, so this costs
    little). The normalised prompt vectors are then rounded once to float32, the precision the image
    side is scored in; the last ``cache_size`` attribute lists keep those float32 tensors.

    >>> from genmetrics.backbones.openclip import clip_image_batch
    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> scorer = RegionAttributeScorer(model, tokenizer)
    >>> out = scorer(clip_image_batch(random_images(2), model), ["smiling", "wearing hat"])
    >>> tuple(out.score.shape), tuple(out.patch_scores.shape), out.grid
    ((2, 2), (2, 16, 2), (4, 4))
    """

    def __init__(
        self,
        model: Any,
        tokenizer: Any,
        *,
        dual_prompt: bool = True,
        local_tokens: bool = True,
        global_token: bool = True,
        temperature: float | None = None,
        positive_template: str = POSITIVE_TEMPLATE,
        negative_template: str | None = None,
        cache_size: int = 8,
        precision: str = "fp32",
        keep_cast_weights: bool = False,
    ) -> None:
        super().__init__()
        check_vit(model)
        #: keep bfloat16 / packed copies of ``model``'s weights across calls (:mod:`genmetrics.accel.cast_weights`):
        #: only for a model whose weights change where torch counts it (not through ``p.data``)
        self.keep_cast_weights = bool(keep_cast_weights)
        self.precision = check_precision(precision, owner="RA-CLIPScore")
        if tokenizer is None or not callable(tokenizer):
            raise InputError(
                "tokenizer: expected the open_clip tokenizer of the model (callable), got "
                f"{type(tokenizer).__name__}; e.g. open_clip.get_tokenizer('ViT-B-32')"
            )
        opts = scorer_options(
            dual_prompt=dual_prompt,
            local_tokens=local_tokens,
            global_token=global_token,
            temperature=temperature,
            positive_template=positive_template,
            negative_template=negative_template,
        )
        dual_prompt, local_tokens, global_token = (
            opts["dual_prompt"],
            opts["local_tokens"],
            opts["global_token"],
        )
        temperature, positive_template = opts["temperature"], opts["positive_template"]
        negative_template = opts["negative_template"]
        self.model = model
        self.tokenizer = tokenizer
        self.dual_prompt = bool(dual_prompt)
        self.local_tokens = bool(local_tokens)
        self.global_token = bool(global_token)
        self.temperature = float(temperature)
        self.positive_template = _check_template(positive_template, "positive_template")
        self.negative_template = _check_template(negative_template, "negative_template")
        self.cache_size = int(cache_size)
        self.text_cache = TextEmbeddingCache(dtype=torch.float64)  # per prompt text, float64
        self._text_cache: OrderedDict[tuple, tuple[torch.Tensor, torch.Tensor | None]] = (
            OrderedDict()
        )  # per list

    @property
    def grid(self) -> tuple[int, int]:
        """The image tower's patch grid ``(rows, columns)``, e.g. ``(14, 14)`` for ViT-B/16 at 224 px."""
        gh, gw = self.model.visual.grid_size
        return int(gh), int(gw)

    def text_embeddings(self, attributes: Sequence[str]) -> tuple[torch.Tensor, torch.Tensor | None]:
        """``(T+ [C,E], T- [C,E] or None)``: normalised in float64, then float32 (see the class docstring)."""
        attrs = tuple(check_attributes(attributes))
        p = next(self.model.parameters())  # like text_cache: another device or dtype encodes afresh
        key = (
            attrs,
            str(p.device),
            str(p.dtype),
            self.dual_prompt,
            self.positive_template,
            self.negative_template,
        )
        hit = self._text_cache.get(key)
        if hit is not None:
            self._text_cache.move_to_end(key)
            return hit
        texts = [self.positive_template.format(a) for a in attrs]
        if self.dual_prompt:
            texts += [self.negative_template.format(a) for a in attrs]
        # one call: one truncation warning; texts seen before (in any list) are not encoded again
        emb = self.text_cache.embed(self.model, self.tokenizer, texts, name="prompts", normalize=True).float()
        pos, neg = emb[: len(attrs)], (emb[len(attrs) :] if self.dual_prompt else None)
        self._text_cache[key] = (pos, neg)
        while len(self._text_cache) > self.cache_size:
            self._text_cache.popitem(last=False)
        return pos, neg

    @torch.no_grad()
    def forward(self, images: torch.Tensor, attributes: Sequence[str]) -> RAOutput:
        """Score ``images [B, 3, H, W]`` (preprocessed for the tower) against ``attributes`` (C texts): the
        :class:`RAOutput` of Eq. 3-9, in float32 whatever precision the tower ran in."""
        with precision_autocast("fp32", images.device):  # the prompts: float64 tower, never autocast
            t_pos, t_neg = self.text_embeddings(attributes)
        with (
            precision_autocast(self.precision, images.device),
            cached_weight_scope(self.model, keep=self.keep_cast_weights),
        ):
            z, attn_sum, grid = dense_tokens(
                self.model, images, global_layer="last" if self.global_token else "penultimate"
            )
        with precision_autocast("fp32", images.device):  # Eq. 3-9 in float32, whatever the tower ran in
            return self._score(z, attn_sum, grid, t_pos, t_neg)

    def _score(
        self,
        z: torch.Tensor,
        attn_sum: torch.Tensor,
        grid: tuple[int, int],
        t_pos: torch.Tensor,
        t_neg: torch.Tensor | None,
    ) -> RAOutput:
        zn = F.normalize(z.float(), dim=-1)
        s = logit_scale_of(self.model)
        cos_pos = zn @ t_pos.T  # [B,1+P,C]
        cos_neg = zn @ t_neg.T if t_neg is not None else None
        r_hat = token_scores(cos_pos, cos_neg, s)
        n_psi = len(self.model.visual.transformer.resblocks) - 1
        patches = refine(r_hat[:, 1:], attn_sum.float() / n_psi)
        r_tilde = torch.cat([r_hat[:, :1], patches], dim=1)
        score = aggregate(r_tilde, cos_pos, s, temperature=self.temperature, local_tokens=self.local_tokens)
        return RAOutput(score=score, global_score=r_hat[:, 0], patch_scores=patches, grid=grid)


# ------------------------------------------------------------------------------ CLIPScore, HCS
def clipscore(image_emb: torch.Tensor, text_emb: torch.Tensor) -> torch.Tensor:
    """Eq. 1: ``100 cos(E_v(x), E_t(t))`` for every image/text pair -> ``[B,T]`` float64 (no clamp, no 2.5
    weight). The cosine is taken in float64, like :func:`hcs`: in float32 it alone rounds by ~1e-6 score
    units, as much as the float32 text tower's own error.

    >>> clipscore(torch.tensor([[1.0, 0.0]]), torch.tensor([[2.0, 0.0], [0.0, 1.0], [-1.0, 0.0]])).tolist()
    [[100.0, 0.0, -100.0]]
    """
    return 100.0 * F.normalize(image_emb.double(), dim=-1) @ F.normalize(text_emb.double(), dim=-1).T


def hcs(
    image_emb: torch.Tensor, text_emb: torch.Tensor, image_center: torch.Tensor, text_center: torch.Tensor
) -> torch.Tensor:
    """Eq. 2: ``100 cos(E_v(x) - C_img, E_t(t_i) - C_text)`` -> ``[B,C]`` (embeddings unnormalised).

    Centring on the mean of two text vectors makes their scores exact negatives:

    >>> texts = torch.tensor([[1.0, 0.0], [0.0, 1.0]])
    >>> s = hcs(torch.tensor([[0.9, 0.2]]), texts, torch.zeros(2), texts.mean(0))
    >>> bool(s[0, 0] == -s[0, 1]), round(s[0, 0].item(), 2)
    (True, 53.69)
    """
    xi = F.normalize(image_emb.double() - image_center.double(), dim=-1)
    xt = F.normalize(text_emb.double() - text_center.double(), dim=-1)
    return 100.0 * xi @ xt.T
