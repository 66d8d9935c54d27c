"""The Qwen-VL runtime shared by the TPIPS and MIE families (Qwen3-VL and Qwen3.5 in transformers 5).

One module for what both families need around a ``Qwen3VLModel`` / ``Qwen3_5Model`` (or a
``*ForConditionalGeneration`` / ``peft.PeftModel`` around one):

* :func:`resolve_parts` / :func:`core_vlm`: the base VLM (``.visual`` + ``.language_model``), the LM head;
  :func:`linear_attention_layers` (Qwen3.5 Gated-DeltaNet layers), :func:`attn_implementation`;
* :func:`token_ids`: the special token ids (image, vision start/end, pad);
* :func:`official_rgb` / :func:`qwen_image`: PIL modes to RGB as the official embedder does
  (``qwen_vl_utils.to_rgb``) or by the genmetrics image contract (option ``image_modes``);
* :func:`smart_resize` and :class:`QwenResize`: the official Qwen3-VL(-Embedding) image policy (both sides
  multiples of 32, between ``4*32*32`` and ``1800*32*32`` pixels, aspect ratio kept, PIL bicubic on 8-bit
  RGB, the processor then told not to resize again) and the older fixed-square policy;
* :func:`image_key`, :class:`VisionFeatures`, :class:`VisionCache`, :class:`VisionEncoder`: the frozen
  vision tower run once per distinct image (content hash), its merged tokens **and DeepStack levels**
  kept in an LRU cache keyed by content, dtype and device (:func:`feature_scope`);
* :func:`scatter_features`, :func:`run_language_model`: the language tower called with ``inputs_embeds``,
  explicit ``(3,B,S)`` M-RoPE positions and the DeepStack features at the image positions (hooks capture
  chosen layer outputs); :func:`mm_encoder_outputs`: cached features in the form the standard forward
  takes back (``vlm(..., mm_encoder_outputs={"image": ...})``);
* :func:`resolve_folder`: a trained adapter or heads folder, local path first, then a hub id.

Nothing here downloads at import time.
"""

from __future__ import annotations

import hashlib
import math
import os
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from huggingface_hub import snapshot_download
from PIL import Image
from torch import nn
from transformers.modeling_outputs import BaseModelOutputWithPooling
from transformers.models.qwen3_vl.modeling_qwen3_vl import BaseModelOutputWithDeepstackFeatures

from genmetrics.backbones._transformers_compat import attn_implementation_of
from genmetrics.backbones.hf import hf_cache_dir, unavailable_error
from genmetrics.backbones.hub import hub_calls
from genmetrics.backbones.precheck import missing_folder
from genmetrics.backbones.weights import offline
from genmetrics.data.device import autocast_scope
from genmetrics.data.io.images import ResizePolicy, load_image, pil_to_tensor, to_tensor
from genmetrics.data.io.pipeline import rgb_uint8
from genmetrics.errors import InputError

__all__ = [
    "IMAGE_MODES",
    "OFFICIAL_MAX_TOKENS",
    "OFFICIAL_MIN_TOKENS",
    "QwenResize",
    "TokenIds",
    "VLMParts",
    "VisionCache",
    "VisionEncoder",
    "VisionFeatures",
    "attn_implementation",
    "core_vlm",
    "feature_scope",
    "image_key",
    "linear_attention_layers",
    "mm_encoder_outputs",
    "mode_sensitive",
    "official_rgb",
    "qwen_image",
    "resolve_folder",
    "resolve_parts",
    "run_language_model",
    "scatter_features",
    "smart_resize",
    "token_ids",
]

#: Qwen3-VL-Embedding's image budget in merged tokens of ``factor x factor`` pixels (factor = patch 16 x
#: merge 2 = 32): ``MIN_PIXELS = 4 * 32 * 32`` and ``MAX_PIXELS = 1800 * 32 * 32``.
OFFICIAL_MIN_TOKENS = 4
OFFICIAL_MAX_TOKENS = 1800
MAX_ASPECT_RATIO = 200


# --------------------------------------------------------------------------------------------- parts
@dataclass
class VLMParts:
    """The pieces of a Qwen-VL model: ``base`` has ``.visual`` and ``.language_model``.

    >>> from genmetrics.testing import tiny_qwen3vl_for_generation
    >>> parts = resolve_parts(tiny_qwen3vl_for_generation())
    >>> type(parts.base).__name__, type(parts.lm_head).__name__, parts.config.model_type
    ('Qwen3VLModel', 'Linear', 'qwen3_vl')
    """

    base: Any  # a transformers model (duck-typed: .visual, .language_model, .config), not analysed by mypy
    lm_head: nn.Module | None
    config: Any


def resolve_parts(backbone: Any, *, what: str = "backbone") -> VLMParts:
    """Find the base VLM and LM head inside a model, a ``*ForConditionalGeneration`` or a ``peft.PeftModel``.

    >>> from genmetrics.backbones.hf import add_lora
    >>> from genmetrics.testing import tiny_qwen3vl_for_generation
    >>> parts = resolve_parts(add_lora(tiny_qwen3vl_for_generation(), r=4))  # through peft and the LM wrapper
    >>> type(parts.base).__name__, parts.lm_head is not None
    ('Qwen3VLModel', True)
    >>> resolve_parts(nn.Linear(2, 2))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: backbone: Linear is not a Qwen-VL-style vision-language model ...
    """
    if not isinstance(backbone, nn.Module):
        raise InputError(
            f"{what}: expected a transformers Qwen3-VL / Qwen3.5 model (nn.Module), got "
            f"{type(backbone).__name__}"
        )
    m = backbone
    if hasattr(m, "get_base_model") and callable(m.get_base_model):  # peft.PeftModel
        m = m.get_base_model()
    lm_head = getattr(m, "lm_head", None)
    for _ in range(3):
        if hasattr(m, "visual") and hasattr(m, "language_model"):
            return VLMParts(base=m, lm_head=lm_head, config=m.config)
        inner = getattr(m, "model", None)
        if not isinstance(inner, nn.Module):
            break
        m = inner
    raise InputError(
        f"{what}: {type(backbone).__name__} is not a Qwen-VL-style vision-language model (expected .visual and "
        ".language_model, e.g. transformers.Qwen3VLModel, Qwen3VLForConditionalGeneration or Qwen3_5Model); load "
        "one with genmetrics.backbones.hf.load_vlm"
    )


def core_vlm(backbone: Any, *, what: str = "backbone") -> Any:
    """The base VLM (``.visual`` + ``.language_model``) inside ``backbone``.

    >>> from genmetrics.testing import tiny_qwen35_for_generation
    >>> type(core_vlm(tiny_qwen35_for_generation())).__name__
    'Qwen3_5Model'
    """
    return resolve_parts(backbone, what=what).base


def linear_attention_layers(backbone: Any) -> list[int]:
    """Indices of language-tower layers that are not softmax attention (e.g. Qwen3.5 Gated-DeltaNet).

    >>> from genmetrics.testing import tiny_qwen3vl, tiny_qwen35
    >>> linear_attention_layers(tiny_qwen35()), linear_attention_layers(tiny_qwen3vl())  # 3:1 pattern; none
    ([0, 1, 2], [])
    """
    parts = resolve_parts(backbone)
    tc = getattr(parts.config, "text_config", parts.config)
    types = list(getattr(tc, "layer_types", None) or [])
    out = {
        i for i, t in enumerate(types) if t != "full_attention" and ("linear" in str(t) or "delta" in str(t))
    }
    for i, layer in enumerate(getattr(parts.base.language_model, "layers", [])):
        if hasattr(layer, "linear_attn") or not hasattr(layer, "self_attn"):
            out.add(i)
    return sorted(out)


def attn_implementation(parts: VLMParts) -> str:
    """The language tower's attention implementation (``"sdpa"`` when the config names none).

    >>> from genmetrics.testing import tiny_qwen3vl
    >>> attn_implementation(resolve_parts(tiny_qwen3vl()))
    'sdpa'
    """
    tc = getattr(parts.config, "text_config", None)
    impl = (attn_implementation_of(tc) if tc is not None else None) or attn_implementation_of(parts.config)
    return impl or "sdpa"


@dataclass(frozen=True)
class TokenIds:
    """The special token ids the runtime needs (see :func:`token_ids`).

    >>> TokenIds(image=12, vision_start=9, vision_end=10, pad=0).image
    12
    """

    image: int
    vision_start: int
    vision_end: int
    pad: int


def token_ids(config: Any, tokenizer: Any) -> TokenIds:
    """Special token ids from the model config (image / vision start / vision end) and the tokenizer (pad).

    >>> from genmetrics.testing import tiny_qwen3vl_config, tiny_tokenizer
    >>> token_ids(tiny_qwen3vl_config(), tiny_tokenizer())
    TokenIds(image=12, vision_start=9, vision_end=10, pad=0)
    """
    pad = getattr(tokenizer, "pad_token_id", None)
    return TokenIds(
        image=int(config.image_token_id),
        vision_start=int(config.vision_start_token_id),
        vision_end=int(config.vision_end_token_id),
        pad=int(pad if pad is not None else 0),
    )


# --------------------------------------------------------------------------------------------- resizing
def smart_resize(
    height: int, width: int, factor: int = 32, min_pixels: int | None = None, max_pixels: int | None = None
) -> tuple[int, int]:
    """Qwen-VL's ``smart_resize``: ``(h, w)`` both multiples of ``factor``, ``min_pixels <= h*w <= max_pixels``
    (defaults ``4*factor**2`` and ``1800*factor**2``, Qwen3-VL-Embedding's), aspect ratio kept as closely
    as possible (round to the nearest multiple; scale down with floor / up with ceil when out of range).

    >>> smart_resize(96, 160)
    (96, 160)
    >>> smart_resize(100, 1000)
    (96, 992)
    """
    lo = OFFICIAL_MIN_TOKENS * factor * factor if min_pixels is None else int(min_pixels)
    hi = OFFICIAL_MAX_TOKENS * factor * factor if max_pixels is None else int(max_pixels)
    if height <= 0 or width <= 0:
        raise InputError(f"image of {width}x{height} pixels: both sides must be positive")
    if max(height, width) / min(height, width) > MAX_ASPECT_RATIO:
        raise InputError(
            f"image of {width}x{height} pixels: aspect ratio above {MAX_ASPECT_RATIO} is not supported "
            "by the Qwen-VL image policy; crop it first"
        )
    h = max(factor, round(height / factor) * factor)
    w = max(factor, round(width / factor) * factor)
    if h * w > hi:
        beta = math.sqrt(height * width / hi)
        h = max(factor, math.floor(height / beta / factor) * factor)
        w = max(factor, math.floor(width / beta / factor) * factor)
    elif h * w < lo:
        beta = math.sqrt(lo / (height * width))
        h = math.ceil(height * beta / factor) * factor
        w = math.ceil(width * beta / factor) * factor
    return h, w


@dataclass(frozen=True)
class QwenResize:
    """How an image reaches the vision tower.

    * ``"smart"`` (default): the official Qwen3-VL-Embedding policy: :func:`smart_resize` of the image's own
      size, resampled with PIL bicubic on the 8-bit RGB image (as ``qwen_vl_utils.fetch_image`` does), so an
      image keeps its aspect ratio and the embedder sees the pixels the official one sees. Float tensors are
      rounded to 8 bit first (exact for images that came from 8-bit files).
    * ``"square"``: bicubic (antialiased) resize of the float image to ``size x size``, aspect not kept
      (genmetrics' earlier policy; every image gets the same token grid).

    :meth:`pair_size` gives the one size both images of a pair take when a variant compares them token by
    token (mid and early fusion): :func:`smart_resize` of the mean of the two sizes (symmetric; each image's
    own smart size when both have the same size).

    >>> QwenResize().target(100, 1000), QwenResize("square", 64).target(100, 1000)
    ((96, 992), (64, 64))
    >>> tuple(QwenResize().apply(torch.rand(3, 50, 70)).shape)  # smart: multiples of 32, aspect kept
    (3, 64, 64)
    >>> QwenResize("square", 50)
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: image_size=50: the square policy needs a positive multiple of patch_size*merge_size = 32 (e.g. 448)
    """

    mode: str = "smart"
    size: int | None = None
    factor: int = 32
    min_pixels: int | None = None
    max_pixels: int | None = None

    def __post_init__(self) -> None:
        if self.mode not in ("smart", "square"):
            raise InputError(
                f"resize={self.mode!r}: expected 'smart' (the official Qwen3-VL-Embedding policy) or "
                "'square' (fixed image_size x image_size)"
            )
        if self.mode == "square" and (self.size is None or self.size <= 0 or self.size % self.factor):
            raise InputError(
                f"image_size={self.size!r}: the square policy needs a positive multiple of "
                f"patch_size*merge_size = {self.factor} (e.g. 448)"
            )

    def target(self, height: int, width: int) -> tuple[int, int]:
        """The ``(height, width)`` in pixels an image of ``height x width`` is resized to: ``size x size`` for
        the square policy, else Qwen's ``smart_resize`` (multiples of ``factor`` within the pixel
        budget)."""
        if self.mode == "square":
            return int(self.size), int(self.size)  # type: ignore[arg-type]
        return smart_resize(height, width, self.factor, self.min_pixels, self.max_pixels)

    def pair_size(self, a: torch.Tensor, b: torch.Tensor) -> tuple[int, int]:
        """One common ``(height, width)`` for a pair of ``[..., H, W]`` images: :meth:`target` of their mean
        height and width, so both sides of a comparison share one token grid."""
        ha, wa = int(a.shape[-2]), int(a.shape[-1])
        hb, wb = int(b.shape[-2]), int(b.shape[-1])
        return self.target(round((ha + hb) / 2), round((wa + wb) / 2))

    def apply(self, x: torch.Tensor, size: tuple[int, int] | None = None) -> torch.Tensor:
        """A float ``[3,H,W]`` image in [0,1] -> the resized float image (unchanged when already that size)."""
        h, w = int(x.shape[-2]), int(x.shape[-1])
        th, tw = size if size is not None else self.target(h, w)
        if (h, w) == (th, tw):
            return x
        if self.mode == "square":
            return ResizePolicy("resize", th).apply_one(x) if th == tw else _torch_resize(x, (th, tw))
        return _pil_bicubic(x, (th, tw))


def _torch_resize(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    return F.interpolate(x[None], size=size, mode="bicubic", antialias=True, align_corners=False)[0].clamp_(
        0, 1
    )


def _pil_bicubic(x: torch.Tensor, size: tuple[int, int]) -> torch.Tensor:
    arr = (x.detach().cpu().float().permute(1, 2, 0).numpy() * 255.0 + 0.5).clip(0, 255).astype(np.uint8)
    im = Image.fromarray(arr, mode="RGB").resize((size[1], size[0]), Image.Resampling.BICUBIC)
    return torch.from_numpy(np.asarray(im, dtype=np.uint8).copy()).permute(2, 0, 1).float().div_(255.0)


# --------------------------------------------------------------------------------------------- PIL modes
#: ``image_modes``: how a PIL image (or file) of another mode than RGB becomes RGB
IMAGE_MODES = ("official", "genmetrics")
#: modes whose RGB is the same under both rules (``Image.convert("RGB")``, RGBA composited on white)
_SAME_RGB = frozenset({"1", "L", "RGB", "RGBA", "RGBX", "CMYK", "YCbCr", "LAB", "HSV"})


def official_rgb(im: Image.Image) -> Image.Image:
    """RGB as the official Qwen3-VL-Embedding embedder makes it (``qwen_vl_utils.to_rgb``): an RGBA image is
    pasted on white with its alpha channel as the mask; every other mode goes through ``Image.convert("RGB")``,
    which drops the alpha of LA / PA images and the transparency of palette images, and clips the values of
    16-bit, 32-bit and float images to 0..255 (a 16-bit image above 255 turns white).

    >>> official_rgb(Image.new("RGBA", (1, 1), (255, 0, 0, 0))).getpixel((0, 0))  # transparent: white
    (255, 255, 255)
    >>> official_rgb(Image.new("LA", (1, 1), (100, 0))).getpixel((0, 0))  # LA: the alpha is dropped
    (100, 100, 100)
    >>> official_rgb(Image.new("I;16", (1, 1), 1000)).getpixel((0, 0))  # 16-bit: clipped at 255
    (255, 255, 255)
    """
    if im.mode == "RGBA":
        out = Image.new("RGB", im.size, (255, 255, 255))
        out.paste(im, mask=im.getchannel("A"))
        return out
    return im.convert("RGB")


def _same_rgb(im: Image.Image) -> bool:
    return im.mode in _SAME_RGB or (im.mode == "P" and "transparency" not in im.info)


def mode_sensitive(x: Any) -> bool:
    """Whether ``image_modes`` changes how ``x`` becomes RGB: a PIL image, or an image file (header only), of
    mode LA / PA / I / I;16 / F, or a palette image with transparency. Tensors never are.

    >>> mode_sensitive(Image.new("LA", (1, 1))), mode_sensitive(Image.new("RGBA", (1, 1))), mode_sensitive(torch.zeros(3, 1, 1))
    (True, False, False)
    """
    if isinstance(x, Image.Image):
        return not _same_rgb(x)
    if isinstance(x, (str, os.PathLike)):
        try:
            with Image.open(x) as head:
                return not _same_rgb(head)
        except (OSError, ValueError):  # not readable: the shared loader reports it
            return False
    return False


def _official_loss(im: Image.Image) -> str | None:
    """What :func:`official_rgb` loses from this image (None when nothing): for the warning."""
    if im.mode in ("LA", "La", "PA", "RGBa"):
        alpha = np.asarray(im.getchannel("A"))
        return "drops its alpha channel" if alpha.size and int(alpha.min()) < 255 else None
    if im.mode == "P" and "transparency" in im.info:
        return "ignores its palette transparency"
    if im.mode.startswith("I") or im.mode == "F":
        arr = np.asarray(im, dtype=np.float64)
        if arr.size and (arr.min() < 0 or arr.max() > 255 or (im.mode == "F" and (arr % 1).any())):
            return f"clips its values ({arr.min():.4g}..{arr.max():.4g}) to 8-bit integers 0..255"
    return None


def _official_rgb_noted(im: Image.Image, name: str) -> Image.Image:
    """:func:`official_rgb`, with a warning naming what it loses from this image (if anything)."""
    loss = _official_loss(im)
    if loss is not None:
        warnings.warn(
            f"{name}: an image of mode {im.mode}: image_modes='official' (the Qwen3-VL-Embedding preprocessing) "
            f"{loss}; pass image_modes='genmetrics' to composite alpha on white and rescale 16/32-bit and float "
            "images by their sample type (`genmetrics info tpips` lists the option)",
            UserWarning,
            stacklevel=4,
        )
    return official_rgb(im)


def qwen_image(
    x: Any, *, image_modes: str = "official", data_range: float = 1.0, name: str = "image"
) -> torch.Tensor:
    """One image (path, PIL, uint8 or float tensor) -> float ``[3,H,W]`` in [0,1], converting PIL modes by
    ``image_modes``: ``"official"`` (:func:`official_rgb`, the Qwen3-VL-Embedding embedder's conversion) or
    ``"genmetrics"`` (the project's image contract: alpha composited on white, 16/32-bit and float images
    scaled by their sample type; :func:`genmetrics.data.io.images.to_rgb`). The two differ only for LA / PA
    images, palette images with transparency and 16/32-bit / float images; files are checked and
    EXIF-rotated by :func:`genmetrics.data.io.images.load_image` under both. A warning names what the official
    conversion loses when it loses something (alpha below 255, values outside 0..255).

    >>> la = Image.new("LA", (2, 2), (100, 0))  # grey 100, fully transparent
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")  # the warning: "... drops its alpha channel ..."
    ...     official = qwen_image(la)
    >>> official[:, 0, 0].mul(255).round().tolist(), qwen_image(la, image_modes="genmetrics")[:, 0, 0].tolist()
    ([100.0, 100.0, 100.0], [1.0, 1.0, 1.0])
    """
    if image_modes not in IMAGE_MODES:
        raise InputError(
            f"image_modes={image_modes!r}: expected 'official' (the Qwen3-VL-Embedding conversion) or "
            "'genmetrics' (alpha on white, 16-bit rescaled)"
        )
    if image_modes == "genmetrics" or not isinstance(x, (str, os.PathLike, Image.Image)):
        return to_tensor(x, data_range=data_range, name=name)
    if isinstance(x, Image.Image):
        return to_tensor(x, name=name) if _same_rgb(x) else pil_to_tensor(_official_rgb_noted(x, name))
    if not mode_sensitive(x):
        return to_tensor(x, name=name)
    # the shared loader's checks (existence, size guard, decoding errors, frames, EXIF), the official conversion
    rgb = load_image(x, convert=lambda im: _official_rgb_noted(im, str(x)))
    return pil_to_tensor(rgb)


def official_rgb_uint8(im: Image.Image, name: str) -> torch.Tensor:
    """The input pipeline's per-image transform for ``image_modes="official"``: a decoded file converted as
    :func:`qwen_image` converts it, as ``uint8 [3,H,W]`` (``qwen_image`` of the result equals ``qwen_image``
    of the file).

    >>> import warnings
    >>> la = Image.new("LA", (2, 2), (100, 0))
    >>> with warnings.catch_warnings():
    ...     warnings.simplefilter("ignore")
    ...     torch.equal(official_rgb_uint8(la, "x").float() / 255, qwen_image(la))
    True
    """
    rgb = im if _same_rgb(im) else _official_rgb_noted(im, name)
    return rgb_uint8(rgb, name)


# --------------------------------------------------------------------------------------------- vision
def image_key(x: Any) -> str:
    """Content hash of an image: a tensor (shape + float32 values) or a PIL image (size, mode, pixels).

    >>> a, b = torch.zeros(3, 8, 8), torch.ones(3, 8, 8)
    >>> image_key(a) == image_key(a.clone()), image_key(a) == image_key(b), len(image_key(a))
    (True, False, 32)
    """
    h = hashlib.blake2b(digest_size=16)
    if isinstance(x, torch.Tensor):
        t = x.detach().to("cpu", torch.float32).contiguous()
        h.update(str(tuple(t.shape)).encode())
        h.update(t.numpy().tobytes())
    else:
        h.update(f"{x.size[0]}x{x.size[1]}:{x.mode}".encode())
        h.update(x.tobytes())
    return h.hexdigest()


@dataclass
class VisionFeatures:
    """The frozen vision tower's output for one image: merged tokens ``[N,D]`` and DeepStack levels.

    A 64 px image is a 4 x 4 grid of 16 px patches, merged 2 x 2 into 4 tokens (one DeepStack level in the
    tiny Qwen3-VL):

    >>> from genmetrics.testing import tiny_vlm_inputs
    >>> t = tiny_vlm_inputs()  # the tiny Qwen3-VL, its processor, a 64 px image and a one-turn chat batch
    >>> vlm, proc, image, batch = t["model"], t["processor"], t["image"], t["batch"]
    >>> encoder = VisionEncoder(vlm.visual, proc.image_processor)
    >>> f = encoder.features([image])[0]
    >>> f.grid, f.n_tokens, tuple(f.embeds.shape), len(f.deepstack)
    ((2, 2), 4, (4, 64), 1)
    """

    embeds: torch.Tensor
    deepstack: tuple[torch.Tensor, ...]
    grid: tuple[int, int]  # (rows, cols) of the merged token grid; N = rows * cols

    @property
    def n_tokens(self) -> int:
        """Number of merged image tokens (rows of ``embeds``) the image takes in the language sequence."""
        return int(self.embeds.shape[0])


class VisionCache:
    """LRU cache ``image content hash -> VisionFeatures`` (``max_items=0`` keeps nothing across calls).

    ``get`` / ``put`` take the ``scope`` the features were computed in (:func:`feature_scope`: the vision tower's
    dtype and device), part of the key: features cached in float32 are never served to the tower once it runs
    in bfloat16 or on another device. Every user of the cache (TPIPS' :class:`VisionEncoder`, MIE) keys it
    this way.

    >>> cache = VisionCache(2)
    >>> cache.put("a", 1); cache.put("b", 2)
    >>> cache.get("a")  # "a" is now the most recently used
    1
    >>> cache.put("c", 3)  # over capacity: the least recently used ("b") goes
    >>> "a" in cache, "b" in cache, len(cache), cache.hits
    (True, False, 2, 1)
    >>> cache.put("a", "fp32 features", scope="torch.float32@cpu")
    >>> cache.get("a", scope="torch.bfloat16@cpu") is None, cache.get("a", scope="torch.float32@cpu")
    (True, 'fp32 features')
    """

    def __init__(self, max_items: int = 64):
        self.max_items = int(max_items)
        self._d: OrderedDict[str, Any] = OrderedDict()
        self.hits = 0
        self.misses = 0

    @staticmethod
    def _key(key: str, scope: str) -> str:
        return f"{key}|{scope}" if scope else key

    def get(self, key: str, *, scope: str = "") -> Any:
        """The cached value for ``key`` under ``scope`` (marked most recently used, a hit counted), or None."""
        k = self._key(key, scope)
        v = self._d.get(k)
        if v is not None:
            self._d.move_to_end(k)
            self.hits += 1
        return v

    def put(self, key: str, v: Any, *, scope: str = "") -> None:
        """Store ``v`` for ``key`` under ``scope``, dropping the least recently used entries beyond ``max_items``
        (nothing is kept when ``max_items`` is 0)."""
        if self.max_items <= 0:
            return
        k = self._key(key, scope)
        self._d[k] = v
        self._d.move_to_end(k)
        while len(self._d) > self.max_items:
            self._d.popitem(last=False)

    def clear(self) -> None:
        """Drop every cached entry (the hit and miss counters are kept)."""
        self._d.clear()

    def __len__(self) -> int:
        return len(self._d)

    def __contains__(self, key: str) -> bool:
        return key in self._d


def feature_scope(tower: nn.Module) -> str:
    """``dtype@device`` of a vision tower's weights, and the autocast state of that device
    (:func:`~genmetrics.data.device.autocast_scope`: a metric's ``precision="bf16"``): the
    :class:`VisionCache` scope of the features it makes.

    >>> from genmetrics.testing import tiny_qwen3vl
    >>> tower = tiny_qwen3vl().visual
    >>> feature_scope(tower), feature_scope(tower.to(torch.bfloat16))
    ('torch.float32@cpu', 'torch.bfloat16@cpu')
    >>> with torch.autocast("cpu", dtype=torch.bfloat16):
    ...     feature_scope(tower.float())
    'torch.float32@cpu+autocast:torch.bfloat16'
    """
    p = next(tower.parameters())
    return f"{p.dtype}@{p.device}{autocast_scope(p.device)}"


def _is_fast_processor(processor: Any) -> bool:
    """Whether ``processor`` is one of transformers' torchvision-based image processors (they take ``device=``).

    >>> _is_fast_processor(object())
    False
    """
    try:
        from transformers.image_processing_utils_fast import BaseImageProcessorFast
    except ImportError:  # a transformers release without fast image processors
        return False
    return isinstance(processor, BaseImageProcessorFast)


class VisionEncoder:
    """Images (float ``[3,H,W]`` in [0,1], already at their final size) -> :class:`VisionFeatures`, each
    distinct image through the tower once per call, an LRU :class:`VisionCache` across calls.

    ``calls`` counts the images pushed through the tower (for tests and benchmarks). Cache entries are keyed
    by the image content **and** the tower's dtype and device (:attr:`scope`): after ``model.to(torch.bfloat16)``
    or a move to another device the features are computed again, never served from the old precision.

    The same image twice in one call, then again in a second call: the tower runs once:

    >>> from genmetrics.testing import tiny_vlm_inputs
    >>> t = tiny_vlm_inputs()  # the tiny Qwen3-VL, its processor, a 64 px image and a one-turn chat batch
    >>> vlm, proc, image, batch = t["model"], t["processor"], t["image"], t["batch"]
    >>> encoder = VisionEncoder(vlm.visual, proc.image_processor)
    >>> _ = encoder.features([image, image.clone()])
    >>> _ = encoder.features([image])
    >>> encoder.calls, encoder.cache.hits
    (1, 1)
    """

    def __init__(
        self, visual: nn.Module, image_processor: Any, *, cache_size: int = 64, batch_size: int = 32
    ):
        self.visual = visual
        self.image_processor = image_processor
        self.patch_size = int(getattr(image_processor, "patch_size", 16))
        self.merge_size = int(getattr(image_processor, "merge_size", 2))
        self.batch_size = int(batch_size)
        self.cache = VisionCache(cache_size)
        self.calls = 0

    @property
    def factor(self) -> int:
        """Side in pixels of one merged image token: ``patch_size * merge_size`` (32 for Qwen3-VL)."""
        return self.patch_size * self.merge_size

    @property
    def scope(self) -> str:
        """``dtype@device`` of the tower's weights, part of every cache key.

        >>> from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor
        >>> encoder = VisionEncoder(tiny_qwen3vl().visual, tiny_qwen3vl_processor().image_processor)
        >>> encoder.scope
        'torch.float32@cpu'
        """
        return feature_scope(self.visual)

    def pixels(self, images: list[torch.Tensor], device: Any = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``pixel_values`` (on ``device``, default the images') and ``image_grid_thw`` (on the CPU) from the
        processor, told not to resize or rescale again. The normalisation ``(x - mean) / std`` (two correctly
        rounded operations) and the patch layout (a permutation) give the same bits on every device, so the
        images are moved first and processed where the tower is."""
        for i, x in enumerate(images):
            if int(x.shape[-2]) % self.factor or int(x.shape[-1]) % self.factor:
                raise InputError(
                    f"image {i}: {tuple(x.shape[-2:])} is not a multiple of patch_size*merge_size = "
                    f"{self.factor}; resize it with QwenResize first"
                )
        # a torchvision-based ("fast") processor works on the device; an older, numpy-based one (transformers
        # releases whose Qwen2VLImageProcessor is not fast) takes no device: it works on the CPU and its
        # pixel_values are moved after
        on_device = device is not None and _is_fast_processor(self.image_processor)
        kwargs = {"device": torch.device(device)} if on_device else {}
        out = self.image_processor(
            images=images, do_resize=False, do_rescale=False, return_tensors="pt", **kwargs
        )
        pixel_values = out["pixel_values"]
        if device is not None and not on_device:
            pixel_values = pixel_values.to(device)
        return pixel_values, out["image_grid_thw"].cpu()

    @torch.no_grad()
    def encode(self, images: list[torch.Tensor]) -> list[VisionFeatures]:
        """Run the tower on ``images`` (no caching) in chunks of ``batch_size``."""
        p = next(self.visual.parameters())
        out: list[VisionFeatures] = []
        for i in range(0, len(images), self.batch_size):
            chunk = images[i : i + self.batch_size]
            pix, grid = self.pixels(chunk, device=p.device)
            res = self.visual(pix.to(p.dtype), grid_thw=grid.to(p.device), return_dict=True)
            self.calls += len(chunk)
            sizes = (grid.prod(-1) // self.merge_size**2).tolist()
            embeds = torch.split(res.pooler_output, sizes)
            ds = [torch.split(f, sizes) for f in (getattr(res, "deepstack_features", None) or [])]
            for j, e in enumerate(embeds):
                g = grid[j].tolist()
                out.append(
                    VisionFeatures(
                        embeds=e.detach(),
                        deepstack=tuple(level[j].detach() for level in ds),
                        grid=(int(g[1]) // self.merge_size, int(g[2]) // self.merge_size),
                    )
                )
        return out

    def features(
        self, images: list[torch.Tensor], *, keys: list[str] | None = None, use_cache: bool = True
    ) -> list[VisionFeatures]:
        """Features for each image; every distinct image (content key) goes through the tower once."""
        keys = keys_of(images) if keys is None else keys
        scope = self.scope
        found: dict[str, VisionFeatures] = {}
        todo: dict[str, torch.Tensor] = {}
        for k, x in zip(keys, images):
            if k in found or k in todo:
                continue
            hit = self.cache.get(k, scope=scope) if use_cache else None
            if hit is not None:
                found[k] = hit
            else:
                todo[k] = x
        if todo:
            self.cache.misses += len(todo)
            for k, f in zip(todo, self.encode(list(todo.values()))):
                found[k] = f
                if use_cache:
                    self.cache.put(k, f, scope=scope)
        return [found[k] for k in keys]


def keys_of(images: list[Any]) -> list[str]:
    """Content keys; an object repeated in the list is hashed once."""
    memo: dict[int, str] = {}
    out = []
    for x in images:
        k = memo.get(id(x))
        if k is None:
            k = memo[id(x)] = image_key(x)
        out.append(k)
    return out


def mm_encoder_outputs(
    features: Sequence[VisionFeatures], *, device: Any, dtype: torch.dtype, deepstack: bool = True
) -> Any:
    """Cached features in the form ``vlm(..., mm_encoder_outputs={"image": obj})`` takes back (in the
    sequence's image order): ``BaseModelOutputWithDeepstackFeatures`` for Qwen3-VL, else
    ``BaseModelOutputWithPooling`` (Qwen3.5 has no DeepStack).

    Cached features given back to the standard forward reproduce it:

    >>> from genmetrics.testing import tiny_vlm_inputs
    >>> t = tiny_vlm_inputs()  # the tiny Qwen3-VL, its processor, a 64 px image and a one-turn chat batch
    >>> vlm, proc, image, batch = t["model"], t["processor"], t["image"], t["batch"]
    >>> encoder = VisionEncoder(vlm.visual, proc.image_processor)
    >>> image_tokens = t["image_tokens"]
    >>> cached = mm_encoder_outputs(encoder.features([image]), device="cpu", dtype=torch.float32)
    >>> with torch.no_grad():
    ...     full = vlm(**batch).last_hidden_state
    ...     reused = vlm(**{k: v for k, v in batch.items() if k != "pixel_values"},
    ...                  mm_encoder_outputs={"image": cached}).last_hidden_state
    >>> type(cached).__name__, torch.allclose(full, reused, atol=1e-5)
    ('BaseModelOutputWithDeepstackFeatures', True)
    """
    pooled = tuple(f.embeds.to(device, dtype) for f in features)
    if deepstack and features and features[0].deepstack:
        levels = [
            tuple(f.deepstack[lvl].to(device, dtype) for f in features)
            for lvl in range(len(features[0].deepstack))
        ]
        return BaseModelOutputWithDeepstackFeatures(pooler_output=pooled, deepstack_features=levels)
    return BaseModelOutputWithPooling(pooler_output=pooled)


# --------------------------------------------------------------------------------------------- language tower
# ``language_model`` is a transformers text model (``embed_tokens``, ``layers``), not analysed by mypy: Any.
def scatter_features(
    language_model: Any,
    input_ids: torch.Tensor,
    visual_mask: torch.Tensor,
    features: Sequence[VisionFeatures],
) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
    """Token embeddings with the image features written at ``visual_mask`` (in order), and the DeepStack
    levels concatenated in the same order (None when the backbone has none).

    >>> from genmetrics.testing import tiny_vlm_inputs
    >>> t = tiny_vlm_inputs()  # the tiny Qwen3-VL, its processor, a 64 px image and a one-turn chat batch
    >>> vlm, proc, image, batch = t["model"], t["processor"], t["image"], t["batch"]
    >>> encoder = VisionEncoder(vlm.visual, proc.image_processor)
    >>> image_tokens = t["image_tokens"]
    >>> features = encoder.features([image])
    >>> with torch.no_grad():
    ...     embeds, deepstack = scatter_features(vlm.language_model, batch["input_ids"], image_tokens, features)
    >>> torch.equal(embeds[image_tokens], features[0].embeds), len(deepstack)
    (True, 1)
    """
    embeds = language_model.embed_tokens(input_ids)
    deepstack = None
    if features:
        vis = torch.cat([f.embeds for f in features], 0).to(embeds.device, embeds.dtype)
        embeds = embeds.masked_scatter(visual_mask.unsqueeze(-1), vis)
        if features[0].deepstack:
            deepstack = [
                torch.cat([f.deepstack[lvl] for f in features], 0).to(embeds.device, embeds.dtype)
                for lvl in range(len(features[0].deepstack))
            ]
    return embeds, deepstack


def run_language_model(
    language_model: Any,
    embeds: torch.Tensor,
    attention_mask: torch.Tensor,
    position_ids: torch.Tensor,
    visual_mask: torch.Tensor,
    deepstack: list[torch.Tensor] | None,
    capture: Sequence[int] = (),
) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
    """The language tower on ``inputs_embeds`` with explicit ``(3,B,S)`` positions (and DeepStack at the
    image positions): ``(last_hidden_state, {layer: output of that decoder layer})``.

    >>> from genmetrics.testing import tiny_vlm_inputs
    >>> t = tiny_vlm_inputs()  # the tiny Qwen3-VL, its processor, a 64 px image and a one-turn chat batch
    >>> vlm, proc, image, batch = t["model"], t["processor"], t["image"], t["batch"]
    >>> encoder = VisionEncoder(vlm.visual, proc.image_processor)
    >>> image_tokens = t["image_tokens"]
    >>> positions = torch.arange(batch["input_ids"].shape[1]).expand(3, 1, -1)  # text-style M-RoPE positions
    >>> with torch.no_grad():
    ...     embeds, deepstack = scatter_features(vlm.language_model, batch["input_ids"], image_tokens,
    ...                                          encoder.features([image]))
    ...     args = (vlm.language_model, embeds, batch["attention_mask"], positions, image_tokens, deepstack)
    ...     last, layers = run_language_model(*args, capture=[0])
    ...     again, none = run_language_model(*args)  # the capture hooks are gone again
    >>> tuple(last.shape) == (1, batch["input_ids"].shape[1], 64), sorted(layers), torch.equal(last, again), none
    (True, [0], True, {})
    """
    kwargs: dict[str, Any] = {
        "inputs_embeds": embeds,
        "attention_mask": attention_mask,
        "position_ids": position_ids,
        "use_cache": False,
    }
    if deepstack is not None:
        kwargs["visual_pos_masks"] = visual_mask
        kwargs["deepstack_visual_embeds"] = deepstack
    captured: dict[int, torch.Tensor] = {}
    hooks = []
    for li in capture:

        def hook(_m, _inp, out, li=li):
            captured[li] = out[0] if isinstance(out, tuple) else out

        hooks.append(language_model.layers[li].register_forward_hook(hook))
    try:
        out = language_model(**kwargs)
    finally:
        for h in hooks:
            h.remove()
    return out.last_hidden_state, captured


# --------------------------------------------------------------------------------------------- folders
def resolve_folder(path_or_id: str | os.PathLike, marker: str, *, what: str, hint: str) -> Path:
    """A trained adapter / heads folder: an existing local folder holding ``marker``, else a hub id
    downloaded (snapshot) into the genmetrics cache. Raises ``WeightsUnavailableError`` naming where it
    looked and ``hint`` (how to make or point at one).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:  # doctest: +ELLIPSIS
    ...     _ = (Path(d) / "heads.json").write_text("{}")
    ...     found = resolve_folder(d, "heads.json", what="heads", hint="Train heads first.")
    ...     try:
    ...         resolve_folder(d, "adapter_config.json", what="adapter", hint="Train an adapter first.")
    ...     except Exception as e:
    ...         print(type(e).__name__, str(e).split(". ", 1)[1])
    WeightsUnavailableError Looked in: ... The folder has no adapter_config.json. Train an adapter first.
    >>> found.is_absolute()
    True
    """
    s = os.fspath(path_or_id)
    missing = missing_folder(s, what=what, hint=hint, marker=marker)  # the pre-check's words
    if missing is not None:
        raise missing
    p = Path(s).expanduser()
    if p.is_dir():
        return p.resolve()
    why: str | None = None
    try:
        with hub_calls(offline=offline()) as why:
            return Path(snapshot_download(s, cache_dir=str(hf_cache_dir()), local_files_only=offline()))
    except Exception as e:  # noqa: BLE001 - any hub failure becomes one clear error
        raise unavailable_error(
            s, [str(hf_cache_dir()), "the Hugging Face Hub"], cause=e, hint=hint, why=why
        ) from None
