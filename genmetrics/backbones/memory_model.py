"""Peak memory of a scoring forward, predicted from the backbone's config, the image sizes and the batch.

``peak = weights + activations + kv`` (bytes, inference without gradients):

* **weights**: parameters (:func:`~genmetrics.backbones.real_configs.count_parameters`) x bytes per
  element; on the CPU in float32 the open_clip vision tower also keeps one packed oneDNN copy of its linear
  weights (``genmetrics.backbones.openclip.packed_vision_blocks``), and the process keeps the heap of the
  scaled MLP copy each block's packing frees (glibc; counted because peak RSS includes it).
* **activations**: the tensors alive at the widest point of one layer, per token, times the tokens of one
  forward. A transformer layer without gradients frees each intermediate after use, so the peak is one
  layer's working set: for the vision tower (per patch) the input patch row ``C*T*P*P``, the residual
  stream, the norm output, ``q, k, v``, the attention output and the MLP's two wide tensors; for the
  language tower (per token) the input embeddings and residual stream, ``q`` (twice for Qwen3.5's gated
  attention), the MLP's three wide tensors (gate, up, product), and for the Gated-DeltaNet layers the
  projected ``q,k,v`` and their convolved copy plus ``z``. Mid fusion also keeps its probe layers' states,
  early fusion its ``S x S`` boolean mask and, on the CPU (whose SDPA takes a dense mask through the math
  path), one layer's ``heads x S x S`` float attention weights.
* **kv**: the keys and values one softmax-attention layer holds for the whole sequence (``use_cache=False``:
  one layer at a time; expanded to the query heads for SDPA's grouped-query path).

Attention never materialises ``S x S`` weights without a mask (flash / memory-efficient SDPA on CPU and
GPU). The model is checked against measured CPU peaks (RSS increments) by ``benchmarks/real_size.py``
(docs/performance.md, "Real size") and gives :func:`genmetrics.data.io.batching.safe_batch_size` its
predictions.

Late-fusion TPIPS on the 2B model, one 1024 x 768 image per sequence (768 merged tokens), batch 8, bfloat16:

>>> est = predict_memory("Qwen3-VL-Embedding-2B", batch=8, image_size=(768, 1024), text_tokens=30,
...                      dtype_bytes=2, device="cuda")
>>> round(est.weights / 2**30, 2), est.total > est.weights
(3.96, True)
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import Any

from genmetrics.backbones.real_configs import REAL_CONFIGS, RealConfig, count_parameters, reduced_config

__all__ = [
    "MemoryEstimate",
    "batch_peak_bytes",
    "image_hw",
    "image_tokens",
    "predict_memory",
    "real_config_from_model",
]

#: the CUDA context and allocator reserve that sit outside the tensors (about 0.5 GiB on recent GPUs)
CUDA_OVERHEAD_BYTES = 512 * 2**20


@dataclass(frozen=True)
class MemoryEstimate:
    """Predicted peak bytes: ``weights + activations + kv (+ overhead)``.

    >>> e = MemoryEstimate(weights=100, activations=30, kv=5, overhead=0)
    >>> e.total, e.as_dict()["total"]
    (135, 135)
    """

    weights: int
    activations: int
    kv: int
    overhead: int = 0

    @property
    def total(self) -> int:
        """Predicted peak in bytes: weights + activations + kv cache + overhead."""
        return self.weights + self.activations + self.kv + self.overhead

    def as_dict(self) -> dict[str, int]:
        """The four parts and ``total``, in bytes, as a JSON-ready dict."""
        return {**asdict(self), "total": self.total}


def image_tokens(entry: RealConfig | str, image_size: tuple[int, int]) -> tuple[int, int]:
    """``(patches, merged tokens)`` of one image already at its final size (``(height, width)``).

    >>> image_tokens("Qwen3-VL-Embedding-2B", (768, 1024)), image_tokens("ViT-L-14-quickgelu", (224, 224))
    ((3072, 768), (257, 257))
    """
    e = REAL_CONFIGS[entry] if isinstance(entry, str) else entry
    h, w = image_size
    if e.kind == "open_clip":
        p = e.config["vision_cfg"]["patch_size"]
        n = (h // p) * (w // p) + 1
        return n, n
    v = e.config["vision_config"]
    p, m = v["patch_size"], v["spatial_merge_size"]
    patches = (h // p) * (w // p)
    return patches, patches // (m * m)


def _clip(e: RealConfig, batch: int, image_size: tuple[int, int], nbytes: int, cpu_fp32: bool) -> tuple:
    v = e.config["vision_cfg"]
    w, layers = v["width"], v["layers"]
    tokens = batch * image_tokens(e, image_size)[0]
    # residual, ln, q/k/v, attention out, MLP hidden + activation (4w each), the block output
    per_token = w * (1 + 1 + 3 + 1 + 4 + 4 + 1)
    pixels = batch * 3 * image_size[0] * image_size[1]
    # CPU float32: the packed oneDNN copy of the blocks' linear weights (12 w^2 per block), and the scaled
    # MLP matrix the packing makes per block (4 w^2): freed, but glibc keeps it in its heap (RSS), which
    # malloc_trim(0) gives back (ViT-B/16: +442 MB after packing, +331 MB after the trim)
    extra = layers * (12 + 4) * w * w * 4 if cpu_fp32 else 0
    return tokens * per_token * nbytes + pixels * 4, 0, extra


def _vision(v: dict[str, Any], patches: int, nbytes: int) -> int:
    d, i = v["hidden_size"], v["intermediate_size"]
    row = v["in_channels"] * v["temporal_patch_size"] * v["patch_size"] ** 2
    # pixel rows (float32 from the processor + a model-dtype copy), position embeddings, residual, norm,
    # q/k/v and their rotated copies, attention out, MLP fc1 + activation, DeepStack outputs (merged rows)
    deep = len(v.get("deepstack_visual_indexes") or []) * v["out_hidden_size"] / 4
    per_patch = row * (4 + nbytes) / nbytes + d * (1 + 1 + 1 + 3 + 2 + 1) + 2 * i + deep
    return int(patches * per_patch * nbytes)


def _language(
    t: dict[str, Any], kind: str, tokens: int, seq: int, batch: int, nbytes: int, variant: str, cpu: bool
) -> tuple[int, int]:
    h, hd, i = t["hidden_size"], t["head_dim"], t["intermediate_size"]
    nh = t["num_attention_heads"]
    gate = 2 if kind == "qwen3_5" else 1
    attn = nh * hd * (gate + 1)  # q (+ the output gate), attention output
    lin = 0
    if kind == "qwen3_5":
        conv = 2 * t["linear_num_key_heads"] * t["linear_key_head_dim"]
        conv += t["linear_num_value_heads"] * t["linear_value_head_dim"]
        lin = 2 * conv + 2 * t["linear_num_value_heads"] * t["linear_value_head_dim"]  # qkv, conv, z, core
    per_token = h * 4 + max(attn, lin) + 3 * i  # embeds, residual, norm, layer out; widest mixer; MLP
    act = tokens * per_token * nbytes
    kv = batch * seq * nh * hd * 2 * nbytes  # one full-attention layer's k, v expanded to the query heads
    if variant == "mid":
        act += 20 * tokens * h * nbytes  # the probe layers' states (20 by default)
    if variant == "early":
        act += batch * seq * seq  # boolean 4D mask
        if cpu:
            act += batch * nh * seq * seq * 4  # math SDPA's attention weights of one layer (float32)
    return int(act), int(kv)


def predict_memory(
    name: str | RealConfig,
    *,
    batch: int,
    image_size: tuple[int, int],
    images_per_item: int = 1,
    text_tokens: int = 32,
    variant: str = "late",
    dtype_bytes: int = 4,
    device: str = "cpu",
    reduced: bool = False,
) -> MemoryEstimate:
    """Peak bytes of one scoring forward on ``batch`` items.

    Args:
        name: a :data:`~genmetrics.backbones.real_configs.REAL_CONFIGS` entry (or the entry itself).
        batch: items per forward (images for CLIP; sequences for TPIPS / MIE).
        image_size: ``(height, width)`` the vision tower sees (after resizing).
        images_per_item: images in one sequence (TPIPS early fusion: 2; MIE: references + 1).
        text_tokens: the non-image tokens of one sequence.
        variant: ``"late"`` | ``"mid"`` | ``"early"`` (TPIPS) or anything else (no extra terms).
        dtype_bytes: 4 (float32) or 2 (bfloat16 / float16) for weights and activations.
        device: ``"cpu"`` or ``"cuda"`` (adds the CUDA context; the CPU's packed CLIP weights and dense-mask
            attention).
        reduced: the entry's :func:`~genmetrics.backbones.real_configs.reduced_config` instead.

    >>> one = predict_memory("Qwen3.5-0.8B", batch=1, image_size=(1024, 1024), images_per_item=4, text_tokens=60)
    >>> two = predict_memory("Qwen3.5-0.8B", batch=2, image_size=(1024, 1024), images_per_item=4, text_tokens=60)
    >>> two.weights == one.weights, two.activations > one.activations
    (True, True)
    """
    e = REAL_CONFIGS[name] if isinstance(name, str) else name
    if reduced:
        e = RealConfig(**{**e.__dict__, "config": reduced_config(e)})
    if batch < 1:
        raise ValueError(f"batch must be >= 1, got {batch}")
    nbytes = int(dtype_bytes)
    cpu = device == "cpu"
    weights = count_parameters(e, reduced=False) * nbytes
    overhead = 0 if cpu else CUDA_OVERHEAD_BYTES
    if e.kind == "open_clip":
        act, kv, packed = _clip(e, batch, image_size, nbytes, cpu and nbytes == 4)
        return MemoryEstimate(weights + packed, int(act), kv, overhead)
    cfg = e.config
    patches, merged = image_tokens(e, image_size)
    n_images = batch * images_per_item
    vision = _vision(dict(cfg["vision_config"]), n_images * patches, nbytes)
    seq = images_per_item * merged + text_tokens
    lang, kv = _language(dict(cfg["text_config"]), e.kind, batch * seq, seq, batch, nbytes, variant, cpu)
    # the vision features of the batch stay alive while the language tower runs
    feats = n_images * merged * cfg["vision_config"]["out_hidden_size"] * nbytes
    deep = len(cfg["vision_config"].get("deepstack_visual_indexes") or [])
    feats *= 1 + deep
    if vision >= lang + feats + kv:  # the vision pass is the widest point: no text keys / values yet
        return MemoryEstimate(weights, int(vision), 0, overhead)
    return MemoryEstimate(weights, int(lang + feats), int(kv), overhead)


def _plain(value: Any) -> Any:
    """A config as plain dicts / lists (HF ``PretrainedConfig`` objects have ``to_dict``)."""
    if hasattr(value, "to_dict"):
        value = value.to_dict()
    if isinstance(value, Mapping):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [_plain(v) for v in value]
    return value


def _covers(entry: Mapping[str, Any], loaded: Mapping[str, Any]) -> bool:
    """Every typed number of ``entry`` equals the loaded config's (which has more keys: HF defaults)."""
    for k, v in entry.items():
        if isinstance(v, Mapping):
            if not isinstance(loaded.get(k), Mapping) or not _covers(v, loaded[k]):
                return False
        elif _plain(v) != loaded.get(k):
            return False
    return True


def real_config_from_model(model: Any, *, name: str | None = None) -> RealConfig | None:
    """The memory model's entry for a loaded Qwen backbone (a ``transformers`` model, its ``config``, or the
    config as a dict): the :data:`~genmetrics.backbones.real_configs.REAL_CONFIGS` entry whose typed numbers
    it matches, else a :class:`~genmetrics.backbones.real_configs.RealConfig` built from the config itself
    (a fine-tune or another size of the same architecture); ``None`` for an architecture the memory model
    does not know (then the batching keeps its plain back-off).

    >>> from genmetrics.testing.real_models import build_real_model
    >>> real = build_real_model("Qwen3.5-0.8B", device="meta")
    >>> real_config_from_model(real).name
    'Qwen3.5-0.8B'
    >>> from genmetrics.testing import tiny_qwen3vl
    >>> e = real_config_from_model(tiny_qwen3vl())
    >>> e.kind, e.name, e.config["vision_config"]["patch_size"]
    ('qwen3_vl', 'qwen3_vl (loaded config)', 16)
    >>> real_config_from_model({"model_type": "llama"}) is None
    True
    """
    cfg = getattr(model, "config", model)
    plain = _plain(cfg)
    if not isinstance(plain, Mapping):
        return None
    kind = plain.get("model_type")
    if kind not in ("qwen3_vl", "qwen3_5") or not {"vision_config", "text_config"} <= set(plain):
        return None
    for entry in REAL_CONFIGS.values():  # the towers' numbers (token ids follow the tokenizer)
        towers = (
            {k: entry.config[k] for k in ("vision_config", "text_config")} if entry.kind == kind else None
        )
        if towers is not None and _covers(towers, plain):
            return entry
    cfg_dict = {"vision_config": plain["vision_config"], "text_config": plain["text_config"]}
    try:  # a config lacking a number the closed forms need is not one the memory model can size
        count_parameters(RealConfig(kind, "", kind, cfg_dict, "", 0, "", {}))
    except (KeyError, TypeError):
        return None
    return RealConfig(
        name=name or f"{kind} (loaded config)",
        family="",
        kind=kind,
        config=cfg_dict,
        config_source="the loaded model's config",
        published_params=0,
        params_source="",
        image={},
    )


def image_hw(image: Any) -> tuple[int, int]:
    """``(height, width)`` of a ``[..., H, W]`` tensor / array, a PIL image, or an image file (header only).

    >>> import torch
    >>> from PIL import Image
    >>> image_hw(torch.zeros(3, 48, 80)), image_hw(Image.new("RGB", (80, 48)))
    ((48, 80), (48, 80))
    """
    if isinstance(image, (str, os.PathLike)):
        from PIL import Image

        with Image.open(image) as im:  # reads the header, not the pixels
            return int(im.size[1]), int(im.size[0])
    if hasattr(image, "shape"):
        return int(image.shape[-2]), int(image.shape[-1])
    w, h = image.size  # PIL
    return int(h), int(w)


def batch_peak_bytes(
    entry: str | RealConfig,
    image_sizes: Sequence[tuple[int, int]],
    *,
    sequences_per_item: int = 1,
    images_per_item: int = 1,
    text_tokens: int = 32,
    variant: str = "late",
    dtype_bytes: int = 4,
    device: str = "cuda",
) -> Callable[[int], float]:
    """``peak(b)``: the predicted peak bytes of scoring ``b`` items, for
    :func:`genmetrics.data.io.batching.map_batches` (``peak_bytes=``) and
    :func:`~genmetrics.data.io.batching.safe_batch_size`. Every image is sized as the largest (by area) of
    ``image_sizes`` (the sizes the vision tower sees, after the model's resize), so the batch chosen fits
    whichever items it takes; an item is ``sequences_per_item`` sequences of ``images_per_item`` images.

    >>> peak = batch_peak_bytes("Qwen3-VL-Embedding-2B", [(512, 512), (768, 1024)], dtype_bytes=2)
    >>> peak(8) == predict_memory("Qwen3-VL-Embedding-2B", batch=8, image_size=(768, 1024), dtype_bytes=2,
    ...                           device="cuda").total
    True
    """
    if not image_sizes:
        raise ValueError("batch_peak_bytes needs at least one image size")
    size = max(image_sizes, key=lambda hw: (hw[0] * hw[1], hw))

    def peak(b: int) -> float:
        return predict_memory(
            entry,
            batch=b * sequences_per_item,
            image_size=size,
            images_per_item=images_per_item,
            text_tokens=text_tokens,
            variant=variant,
            dtype_bytes=dtype_bytes,
            device=device,
        ).total

    return peak
