"""TPIPS models on the Qwen3-VL family (Wang et al., "The Many Senses of Visual Similarity").

* :class:`TPIPSModel` — aspect-conditioned pairwise similarity ``f(x1, x2 | c)`` in three variants:

  - ``"late"`` (embeddings): prompt "Represent the similarity of the image based on <c>." in the system
    turn, the image in the user turn (the Qwen3-VL-Embedding format), embedding = L2-normalised final
    hidden state of the last real token; ``f`` = cosine. Right padding.
  - ``"mid"`` (Eq. 3): the same prompt (text before the image, so image tokens are conditioned on it);
    per probe layer ``l`` the image-token states are unit-normalised (``phi_l``), channel weights
    ``w_l(c) = softplus(MLP_l(mean instruction-token state at layer l))`` and
    ``f = -sum_l mean_t ||w_l * (phi_l(x1) - phi_l(x2))||^2``.
  - ``"early"`` (Appendix C.2): one sequence ``[text | x1 patches | x2 patches | r1 | r2]`` with a custom
    boolean 4D mask (text causal among itself; patches see the text and both images; ``r_k`` sees the text,
    the patches of ``x_k`` and itself), M-RoPE positions built here (text ``(t,0,0)`` for ``t = 1..M``,
    patches of both images ``(0,h,w)``, both registers ``(M+1,0,0)``), one learned register vector;
    ``f = cos(h_r1, h_r2)``. Symmetric and ``f(x,x) = 1`` by construction. Needs full attention in every
    layer: backbones with linear-attention layers (Qwen3.5's Gated-DeltaNet) are refused.

* :class:`TPIPSTripletModel` — the triplet-head variant of Appendix B.1 (and the zero-shot triplet baseline
  of Appendix C.3): the three images side by side, the question "which is the most different", answer
  logits for left / middle / right read by a 3-way head initialised from the LM head rows of the answer
  tokens, averaged over the 6 orders.
* :class:`PairwiseScoreModel` — the zero-shot pairwise 0-10 score baseline of Appendix C.3 (expected
  digit from the digit-token probabilities, averaged over both orders).

The vision tower is frozen and aspect-independent: its output (merged tokens and Qwen3-VL's DeepStack
features) is computed once per distinct image and reused across aspects, pairs and calls (an LRU cache of
``vision_cache_size`` images; per call every distinct image is encoded once whatever the cache size).
The language tower is then called directly with ``inputs_embeds``, explicit ``(3,B,S)`` M-RoPE positions
and the DeepStack features at the image positions, which reproduces the standard ``Qwen3VLModel``
forward exactly (``tests/tpips/test_model.py``).

Images: anything :func:`genmetrics.data.images.load_batch` accepts; every image is resized to
``image_size x image_size`` (bicubic, antialiased, aspect ratio not kept; policy
``ResizePolicy("resize", image_size)``) so both images of a pair have the same token grid.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import math
import os
import warnings
from collections import OrderedDict
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from genmetrics.data.images import ResizePolicy, as_image_list, to_tensor
from genmetrics.errors import InputError

__all__ = [
    "DEFAULT_TEMPERATURE",
    "DEFAULT_WEIGHTS",
    "PairwiseScoreModel",
    "TPIPSModel",
    "TPIPSTripletModel",
    "VARIANTS",
    "WEIGHTS_8B",
    "check_aspects",
    "load_tpips",
    "prompt_for",
]

DEFAULT_WEIGHTS = "Qwen/Qwen3-VL-Embedding-2B"
WEIGHTS_8B = "Qwen/Qwen3-VL-Embedding-8B"
TRIPLET_WEIGHTS = "Qwen/Qwen3-VL-8B-Instruct"
VARIANTS = ("late", "mid", "early")
DEFAULT_TEMPERATURE = {"late": 0.05, "early": 0.05, "mid": 0.0025}
DEFAULT_IMAGE_SIZE = 448
CONFIG_NAME = "tpips.json"
HEAD_NAME = "tpips_head.safetensors"
FORMAT = "genmetrics.tpips/1"

#: (template with {aspect}, template for the "overall" aspect) per prompt family (Appendix C.1, C.3)
PROMPTS: dict[str, tuple[str, str]] = {
    "late": ("Represent the similarity of the image based on {aspect}.", "Represent the similarity of the image."),
    "mid": ("Represent the similarity of the image based on {aspect}.", "Represent the similarity of the image."),
    "early": ("Measure the similarity between the two images based on {aspect}.",
              "Measure the similarity between the two images."),
    # Appendix C.3 zero-shot embedding baseline (Qwen3-VL-Embedding).
    "embedding_baseline": ("Represent the visual similarity of this image in terms of {aspect}.",
                           "Represent the visual similarity of this image."),
    "triplet": ("I provide three horizontally concatenated images (left, middle, right). Which image is the most "
                "different among the three in terms of {aspect}? You need to choose: left, middle, right. Answer:",
                "I provide three horizontally concatenated images (left, middle, right). Which image is the most "
                "different among the three? You need to choose: left, middle, right. Answer:"),
    "triplet_2afc": ("I provide three horizontally concatenated images. The center image is the reference. Which "
                     "candidate (left or right) is more similar to the reference in terms of {aspect}? Answer with "
                     "one word: left or right. Answer:",
                     "I provide three horizontally concatenated images. The center image is the reference. Which "
                     "candidate (left or right) is more similar to the reference? Answer with one word: left or "
                     "right. Answer:"),
    "pairwise": ("I show you two images placed side by side (left and right). Rate how similar these two images "
                 "are in terms of {aspect} on a scale of 0 to 10, where 0 means completely different and 10 means "
                 "identical. Answer with a single number from 0 to 10. Answer:",
                 "I show you two images placed side by side (left and right). Rate how similar these two images "
                 "are overall on a scale of 0 to 10, where 0 means completely different and 10 means identical. "
                 "Answer with a single number from 0 to 10. Answer:"),
}

MAX_ASPECT_TOKENS = 128


# --------------------------------------------------------------------------------------------- helpers
def is_overall(aspect: str) -> bool:
    return aspect.strip().rstrip(".").strip().lower() == "overall"


def prompt_for(family: str, aspect: str, prompts: tuple[str, str] | None = None) -> str:
    """The instruction for ``aspect`` (``"overall"`` drops the "based on <c>" part)."""
    template, overall = prompts if prompts is not None else PROMPTS[family]
    if is_overall(aspect):
        return overall
    a = aspect.strip()
    while a.endswith("."):
        a = a[:-1].rstrip()
    return template.format(aspect=a)


def check_aspects(aspects: Any, n: int, *, name: str = "aspects") -> list[str]:
    """A string (used for all ``n`` samples) or a list of ``n`` non-empty strings -> list of ``n`` strings."""
    if isinstance(aspects, str):
        aspects = [aspects] * n
    if not isinstance(aspects, Sequence) or isinstance(aspects, (bytes, bytearray)):
        raise InputError(f"{name}: expected a string or a list of strings, got {type(aspects).__name__}")
    aspects = list(aspects)
    if len(aspects) != n:
        raise InputError(f"{name}: got {len(aspects)} aspects for {n} image pairs; pass one aspect per pair "
                         "(or a single string for all)")
    for i, a in enumerate(aspects):
        if not isinstance(a, str):
            raise InputError(f"{name}[{i}]: expected a string, got {type(a).__name__} {a!r}"[:200])
        if not a.strip():
            raise InputError(f"{name}[{i}]: the aspect is empty or whitespace only; give a text such as "
                             "'lighting' or 'overall'")
    return aspects


def _image_key(x: torch.Tensor) -> str:
    t = x.detach().to("cpu", torch.float32).contiguous()
    h = hashlib.blake2b(digest_size=16)
    h.update(str(tuple(t.shape)).encode())
    h.update(t.numpy().tobytes())
    return h.hexdigest()


def _unit_cosine(a: torch.Tensor, b: torch.Tensor) -> torch.Tensor:
    """Cosine of the rows of ``a`` and ``b`` as ``1 - ||u - v||^2 / 2`` of the float64 unit vectors: exactly 1
    for bitwise-equal inputs and exactly symmetric, in [-1, 1]."""
    u = F.normalize(a.double(), dim=-1, eps=1e-300)
    v = F.normalize(b.double(), dim=-1, eps=1e-300)
    return (1.0 - 0.5 * ((u - v) ** 2).sum(-1)).clamp(-1.0, 1.0)


@dataclass
class VisionFeatures:
    """The frozen vision tower's output for one image: merged tokens ``[N,D]`` and DeepStack levels."""

    embeds: torch.Tensor
    deepstack: tuple[torch.Tensor, ...]
    grid: tuple[int, int]  # (rows, cols) of the merged token grid; N = rows * cols

    @property
    def n_tokens(self) -> int:
        return int(self.embeds.shape[0])


class VisionCache:
    """LRU cache ``image content hash -> VisionFeatures`` (``max_items=0`` keeps nothing across calls)."""

    def __init__(self, max_items: int = 64):
        self.max_items = int(max_items)
        self._d: OrderedDict[str, VisionFeatures] = OrderedDict()
        self.hits = 0
        self.misses = 0

    def get(self, key: str) -> VisionFeatures | None:
        v = self._d.get(key)
        if v is not None:
            self._d.move_to_end(key)
            self.hits += 1
        return v

    def put(self, key: str, v: VisionFeatures) -> None:
        if self.max_items <= 0:
            return
        self._d[key] = v
        self._d.move_to_end(key)
        while len(self._d) > self.max_items:
            self._d.popitem(last=False)

    def clear(self) -> None:
        self._d.clear()

    def __len__(self) -> int:
        return len(self._d)


@dataclass
class _Parts:
    base: nn.Module  # has .visual and .language_model
    lm_head: nn.Module | None
    config: Any


def _resolve_parts(backbone: Any) -> _Parts:
    if not isinstance(backbone, nn.Module):
        raise InputError(f"backbone: expected a transformers Qwen3-VL model (nn.Module), got {type(backbone).__name__}")
    m = backbone
    if hasattr(m, "get_base_model") and callable(m.get_base_model):  # peft.PeftModel
        m = m.get_base_model()
    lm_head = getattr(m, "lm_head", None)
    inner = getattr(m, "model", None)
    if isinstance(inner, nn.Module) and hasattr(inner, "visual") and hasattr(inner, "language_model"):
        base = inner
    elif hasattr(m, "visual") and hasattr(m, "language_model"):
        base = m
    else:
        raise InputError(
            f"backbone: {type(m).__name__} is not a Qwen3-VL-style vision-language model (expected .visual and "
            ".language_model, e.g. transformers.Qwen3VLModel or Qwen3VLForConditionalGeneration)"
        )
    return _Parts(base=base, lm_head=lm_head, config=base.config)


def linear_attention_layers(backbone: Any) -> list[int]:
    """Indices of language-tower layers that are not softmax attention (e.g. Qwen3.5 Gated-DeltaNet)."""
    parts = _resolve_parts(backbone)
    tc = getattr(parts.config, "text_config", parts.config)
    types = list(getattr(tc, "layer_types", None) or [])
    out = {i for i, t in enumerate(types) if t != "full_attention" and ("linear" in str(t) or "delta" in str(t))}
    for i, layer in enumerate(getattr(parts.base.language_model, "layers", [])):
        if hasattr(layer, "linear_attn") or not hasattr(layer, "self_attn"):
            out.add(i)
    return sorted(out)


def _attn_impl(parts: _Parts) -> str:
    tc = getattr(parts.config, "text_config", None)
    impl = getattr(tc, "_attn_implementation", None) or getattr(parts.config, "_attn_implementation", None)
    return str(impl or "sdpa")


# --------------------------------------------------------------------------------------------- base
class _VLMBase(nn.Module):
    """Shared machinery: images -> cached vision features -> language tower with explicit positions."""

    def __init__(self, backbone: nn.Module, processor: Any, *, image_size: int | None = None,
                 vision_cache_size: int = 64, batch_size: int = 16, vision_batch_size: int = 32,
                 data_range: float = 1.0, max_aspect_tokens: int = MAX_ASPECT_TOKENS) -> None:
        super().__init__()
        self.backbone = backbone
        self._parts = _resolve_parts(backbone)
        if processor is None or not hasattr(processor, "tokenizer") or not hasattr(processor, "image_processor"):
            raise InputError("processor: expected the model's transformers processor (with .tokenizer and "
                             f".image_processor, e.g. Qwen3VLProcessor), got {type(processor).__name__}")
        self.processor = processor
        self.tokenizer = processor.tokenizer
        ip = processor.image_processor
        self.patch_size = int(getattr(ip, "patch_size", 16))
        self.merge_size = int(getattr(ip, "merge_size", 2))
        factor = self.patch_size * self.merge_size
        size = DEFAULT_IMAGE_SIZE if image_size is None else int(image_size)
        if size <= 0 or size % factor:
            raise InputError(f"image_size={image_size!r}: must be a positive multiple of patch_size*merge_size = "
                             f"{factor} so that every image gets the same token grid (e.g. 448)")
        self.image_size = size
        self.resize = ResizePolicy("resize", size)
        self.data_range = float(data_range)
        self.batch_size = int(batch_size)
        self.vision_batch_size = int(vision_batch_size)
        self.max_aspect_tokens = int(max_aspect_tokens)
        self.vision_cache = VisionCache(vision_cache_size)
        cfg = self._parts.config
        self.image_token_id = int(cfg.image_token_id)
        self.vision_start_id = int(cfg.vision_start_token_id)
        self.vision_end_id = int(cfg.vision_end_token_id)
        pad = getattr(self.tokenizer, "pad_token_id", None)
        self.pad_id = int(pad if pad is not None else 0)
        self._tok_cache: dict[str, list[int]] = {}
        vis = self._parts.base.visual
        self._has_deepstack = len(getattr(vis, "deepstack_visual_indexes", None) or []) > 0
        self.vision_calls = 0  # number of images pushed through the vision tower (for tests/benchmarks)

    # -- basic properties --------------------------------------------------------------------------
    @property
    def language_model(self) -> nn.Module:
        return self._parts.base.language_model

    @property
    def device(self) -> torch.device:
        return self.language_model.embed_tokens.weight.device

    @property
    def dtype(self) -> torch.dtype:
        return self.language_model.embed_tokens.weight.dtype

    @property
    def hidden_size(self) -> int:
        return int(self.language_model.embed_tokens.weight.shape[1])

    def train(self, mode: bool = True) -> _VLMBase:
        super().train(mode)
        self._parts.base.visual.eval()  # frozen tower: never dropout
        return self

    # -- text --------------------------------------------------------------------------------------
    def _ids(self, text: str) -> list[int]:
        ids = self._tok_cache.get(text)
        if ids is None:
            ids = list(self.tokenizer(text, add_special_tokens=False)["input_ids"])
            if len(self._tok_cache) < 4096:
                self._tok_cache[text] = ids
        return ids

    def _clip_aspect(self, aspect: str) -> str:
        """Truncate an over-long aspect with the tokenizer (never by slicing the prompt's ids)."""
        enc = self.tokenizer(aspect, add_special_tokens=False, truncation=True, max_length=self.max_aspect_tokens)
        ids = enc["input_ids"]
        if len(ids) >= self.max_aspect_tokens:
            full = len(self.tokenizer(aspect, add_special_tokens=False)["input_ids"])
            if full > self.max_aspect_tokens:
                warnings.warn(f"aspect of {full} tokens truncated to {self.max_aspect_tokens} tokens by the tokenizer",
                              stacklevel=3)
                return self.tokenizer.decode(ids)
        return aspect

    # -- images ------------------------------------------------------------------------------------
    def _is_prepared(self, images: Any) -> bool:
        """A list of float ``[3,S,S]`` tensors as :meth:`load_images` returns (used as is by ``forward``)."""
        return isinstance(images, list) and all(
            isinstance(t, torch.Tensor) and t.is_floating_point() and t.ndim == 3
            and tuple(t.shape[-2:]) == (self.image_size, self.image_size) for t in images)

    def load_images(self, images: Any, *, name: str = "images") -> list[torch.Tensor]:
        """Any accepted batch -> list of float ``[3,S,S]`` tensors in [0,1] (resized by the documented policy).
        An input object repeated in the batch is decoded once (the same tensor is returned for each)."""
        items = as_image_list(images, name=name)
        if not items:
            raise InputError(f"{name}: the batch is empty; expected at least one image")
        done: dict[int, torch.Tensor] = {}
        out = []
        for i, x in enumerate(items):
            t = done.get(id(x))
            if t is None:
                label = str(x) if isinstance(x, (str, os.PathLike)) else f"{name}[{i}]"
                t = done[id(x)] = self.resize.apply_one(to_tensor(x, data_range=self.data_range, name=label).cpu())
            out.append(t)
        return out

    @staticmethod
    def _keys(images: list[torch.Tensor]) -> list[str]:
        """Content keys; a tensor object repeated in the list is hashed once."""
        memo: dict[int, str] = {}
        out = []
        for x in images:
            k = memo.get(id(x))
            if k is None:
                k = memo[id(x)] = _image_key(x)
            out.append(k)
        return out

    def _preprocess(self, images: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        out = self.processor.image_processor(images=images, do_resize=False, do_rescale=False, return_tensors="pt")
        return out["pixel_values"], out["image_grid_thw"]

    @torch.no_grad()
    def _encode_images(self, images: list[torch.Tensor]) -> list[VisionFeatures]:
        """Run the vision tower on ``images`` (no caching) in chunks of ``vision_batch_size``."""
        visual = self._parts.base.visual
        vdev = next(visual.parameters()).device
        vdtype = next(visual.parameters()).dtype
        out: list[VisionFeatures] = []
        for i in range(0, len(images), self.vision_batch_size):
            chunk = images[i:i + self.vision_batch_size]
            pix, grid = self._preprocess(chunk)
            res = visual(pix.to(vdev, vdtype), grid_thw=grid.to(vdev), return_dict=True)
            self.vision_calls += len(chunk)
            sizes = (grid.prod(-1) // self.merge_size ** 2).tolist()
            embeds = torch.split(res.pooler_output, sizes)
            ds = [torch.split(f, sizes) for f in (getattr(res, "deepstack_features", None) or [])]
            for j, e in enumerate(embeds):
                g = grid[j].tolist()
                out.append(VisionFeatures(
                    embeds=e.detach(), deepstack=tuple(level[j].detach() for level in ds),
                    grid=(int(g[1]) // self.merge_size, int(g[2]) // self.merge_size)))
        return out

    def vision_features(self, images: list[torch.Tensor], *, use_cache: bool = True,
                        keys: list[str] | None = None) -> list[VisionFeatures]:
        """Features for each image; every distinct image goes through the vision tower once."""
        keys = self._keys(images) if keys is None else keys
        found: dict[str, VisionFeatures] = {}
        todo: list[str] = []
        todo_set: set[str] = set()
        todo_imgs: list[torch.Tensor] = []
        for k, x in zip(keys, images):
            if k in found or k in todo_set:
                continue
            hit = self.vision_cache.get(k) if use_cache else None
            if hit is not None:
                found[k] = hit
            else:
                todo.append(k)
                todo_set.add(k)
                todo_imgs.append(x)
        if todo:
            self.vision_cache.misses += len(todo)
            for k, f in zip(todo, self._encode_images(todo_imgs)):
                found[k] = f
                if use_cache:
                    self.vision_cache.put(k, f)
        return [found[k] for k in keys]

    # -- sequences ---------------------------------------------------------------------------------
    def _build_single(self, items: list[list[tuple[str, Any]]]) -> dict[str, Any]:
        """Right-padded batch of sequences made of ``("text", str)`` / ``("image", VisionFeatures)``
        segments, with the standard Qwen3-VL layout (``<|vision_start|>`` image tokens ``<|vision_end|>``)
        and M-RoPE positions as ``Qwen3VLModel.get_rope_index`` computes them."""
        seqs, poss, vis_masks, feats, spans = [], [], [], [], []
        for segs in items:
            ids: list[int] = []
            pos: list[tuple[int, int, int]] = []
            vmask: list[bool] = []
            fs: list[VisionFeatures] = []
            span: dict[str, tuple[int, int]] = {}
            p = 0
            for kind, val in segs:
                if kind in ("text", "instruction"):
                    t = self._ids(val)
                    if kind == "instruction":
                        span["instruction"] = (len(ids), len(ids) + len(t))
                    ids += t
                    pos += [(p + i, p + i, p + i) for i in range(len(t))]
                    vmask += [False] * len(t)
                    p += len(t)
                else:
                    f: VisionFeatures = val
                    ids.append(self.vision_start_id)
                    pos.append((p, p, p))
                    vmask.append(False)
                    p += 1
                    gh, gw = f.grid
                    start = len(ids)
                    ids += [self.image_token_id] * (gh * gw)
                    pos += [(p, p + r, p + c) for r in range(gh) for c in range(gw)]
                    vmask += [True] * (gh * gw)
                    span.setdefault("images", [])  # type: ignore[arg-type]
                    span["images"].append((start, start + gh * gw))  # type: ignore[union-attr]
                    p += max(gh, gw)
                    fs.append(f)
                    ids.append(self.vision_end_id)
                    pos.append((p, p, p))
                    vmask.append(False)
                    p += 1
            seqs.append(ids)
            poss.append(pos)
            vis_masks.append(vmask)
            feats.append(fs)
            spans.append(span)
        B = len(seqs)
        S = max(len(s) for s in seqs)
        dev = self.device
        input_ids = torch.full((B, S), self.pad_id, dtype=torch.long)
        attn = torch.zeros((B, S), dtype=torch.long)
        position_ids = torch.zeros((3, B, S), dtype=torch.long)
        vmask_t = torch.zeros((B, S), dtype=torch.bool)
        for b in range(B):
            n = len(seqs[b])
            input_ids[b, :n] = torch.tensor(seqs[b])
            attn[b, :n] = 1
            pt = torch.tensor(poss[b], dtype=torch.long).T
            position_ids[:, b, :n] = pt
            last = int(pt[:, -1].max()) if n else 0
            position_ids[:, b, n:] = torch.arange(last + 1, last + 1 + S - n)
            vmask_t[b, :n] = torch.tensor(vis_masks[b])
        return {
            "input_ids": input_ids.to(dev), "attention_mask": attn.to(dev), "position_ids": position_ids.to(dev),
            "visual_mask": vmask_t.to(dev), "features": [f for fs in feats for f in fs],
            "lengths": [len(s) for s in seqs], "spans": spans,
        }

    def _embed(self, input_ids: torch.Tensor, visual_mask: torch.Tensor, features: list[VisionFeatures]
               ) -> tuple[torch.Tensor, list[torch.Tensor] | None]:
        lm = self.language_model
        embeds = lm.embed_tokens(input_ids)
        deepstack = None
        if features:
            vis = torch.cat([f.embeds for f in features], 0).to(embeds.device, embeds.dtype)
            embeds = embeds.masked_scatter(visual_mask.unsqueeze(-1), vis)
            if self._has_deepstack and features[0].deepstack:
                deepstack = [torch.cat([f.deepstack[lvl] for f in features], 0).to(embeds.device, embeds.dtype)
                             for lvl in range(len(features[0].deepstack))]
        return embeds, deepstack

    def _run_lm(self, embeds: torch.Tensor, attention_mask: torch.Tensor, position_ids: torch.Tensor,
                visual_mask: torch.Tensor, deepstack: list[torch.Tensor] | None,
                capture: Sequence[int] = ()) -> tuple[torch.Tensor, dict[int, torch.Tensor]]:
        lm = self.language_model
        kwargs: dict[str, Any] = {"inputs_embeds": embeds, "attention_mask": attention_mask,
                                  "position_ids": position_ids, "use_cache": False}
        if deepstack is not None:
            kwargs["visual_pos_masks"] = visual_mask
            kwargs["deepstack_visual_embeds"] = deepstack
        captured: dict[int, torch.Tensor] = {}
        hooks = []
        for li in capture:
            def hook(_m, _inp, out, li=li):
                captured[li] = out[0] if isinstance(out, tuple) else out
            hooks.append(lm.layers[li].register_forward_hook(hook))
        try:
            out = lm(**kwargs)
        finally:
            for h in hooks:
                h.remove()
        return out.last_hidden_state, captured


# --------------------------------------------------------------------------------------------- TPIPS
class MidFusionHead(nn.Module):
    """Text-conditioned channel weights ``w_l(c) = softplus(MLP_l(mean text state))`` per probe layer.

    The last linear layer starts at zero weight and bias ``log(e - 1)``, so every weight starts at 1
    (Eq. 3 then starts as the plain LPIPS-style distance of unit-normalised features)."""

    def __init__(self, hidden_size: int, n_layers: int, mlp_hidden: int = 256):
        super().__init__()
        self.mlps = nn.ModuleList()
        for _ in range(n_layers):
            mlp = nn.Sequential(nn.Linear(hidden_size, mlp_hidden), nn.GELU(), nn.Linear(mlp_hidden, hidden_size))
            nn.init.zeros_(mlp[2].weight)
            nn.init.constant_(mlp[2].bias, math.log(math.e - 1.0))
            self.mlps.append(mlp)

    def forward(self, text_means: list[torch.Tensor]) -> list[torch.Tensor]:
        return [F.softplus(mlp(t.float())) for mlp, t in zip(self.mlps, text_means)]


def _probe_indices(n_layers: int, probe_layers: int | Sequence[int]) -> list[int]:
    if isinstance(probe_layers, int):
        if probe_layers <= 0:
            raise InputError(f"probe_layers must be positive, got {probe_layers}")
        k = min(probe_layers, n_layers)
        if k == 1:
            return [n_layers - 1]
        return sorted({round(i * (n_layers - 1) / (k - 1)) for i in range(k)})
    idx = sorted({int(i) % n_layers for i in probe_layers})
    if not idx:
        raise InputError("probe_layers: empty list")
    return idx


class TPIPSModel(_VLMBase):
    """Aspect-conditioned similarity ``f(x1, x2 | c)``; see the module docstring for the three variants.

    Args:
        backbone: a Qwen3-VL model (``Qwen3VLModel``, ``Qwen3VLForConditionalGeneration``, or a
            ``peft.PeftModel`` around one). Qwen3.5 works for ``late`` and ``mid`` only.
        processor: its ``Qwen3VLProcessor``.
        variant: ``"late"`` | ``"mid"`` | ``"early"``.
        image_size: square side every image is resized to (multiple of 32; default 448).
        temperature: Eq. 2's ``tau`` (default 0.05 late/early, 0.0025 mid).
        prompts: ``(template with {aspect}, overall template)`` to override the paper's prompt (e.g.
            ``PROMPTS["embedding_baseline"]`` for the zero-shot Qwen3-VL-Embedding baseline of App. C.3).
        probe_layers: mid fusion: number of evenly spaced probe layers (default 20, capped at the
            number of layers) or explicit layer indices.
        mid_hidden: hidden width of each mid-fusion MLP.
        vision_cache_size: images kept in the vision-feature LRU across calls.
        batch_size: sequences per language-tower call.
    """

    def __init__(self, backbone: nn.Module, processor: Any, variant: str = "late", *, image_size: int | None = None,
                 temperature: float | None = None, prompts: tuple[str, str] | None = None,
                 probe_layers: int | Sequence[int] = 20, mid_hidden: int = 256, vision_cache_size: int = 64,
                 batch_size: int = 16, vision_batch_size: int = 32, data_range: float = 1.0,
                 max_aspect_tokens: int = MAX_ASPECT_TOKENS) -> None:
        if variant not in VARIANTS:
            raise InputError(f"variant={variant!r}: expected one of {', '.join(VARIANTS)} (the triplet-head variant "
                             "is TPIPSTripletModel)")
        super().__init__(backbone, processor, image_size=image_size, vision_cache_size=vision_cache_size,
                         batch_size=batch_size, vision_batch_size=vision_batch_size, data_range=data_range,
                         max_aspect_tokens=max_aspect_tokens)
        self.variant = variant
        self.temperature = float(DEFAULT_TEMPERATURE[variant] if temperature is None else temperature)
        if self.temperature <= 0:
            raise InputError(f"temperature must be positive, got {temperature!r}")
        self.prompts = tuple(prompts) if prompts is not None else PROMPTS[variant]
        if len(self.prompts) != 2 or "{aspect}" not in self.prompts[0]:
            raise InputError("prompts: expected (template containing '{aspect}', template for 'overall')")
        n_layers = len(self.language_model.layers)
        self.probe_layers: list[int] = []
        self.head: nn.Module | None = None
        self.register_vector: nn.Parameter | None = None
        if variant == "early":
            linear = linear_attention_layers(backbone)
            if linear:
                raise InputError(
                    f"early fusion needs softmax attention in every language layer, but this backbone has "
                    f"{len(linear)} linear-attention layers (e.g. Qwen3.5's Gated-DeltaNet, layers {linear[:8]}) that "
                    "ignore custom attention masks, so the Appendix C.2 mask cannot be applied; use variant='late' "
                    "or 'mid', or a Qwen3-VL backbone (Qwen/Qwen3-VL-Embedding-2B)"
                )
            impl = _attn_impl(self._parts)
            if impl not in ("sdpa", "eager"):
                raise InputError(f"early fusion needs attn_implementation 'sdpa' (or 'eager') for its custom 4D mask; "
                                 f"the backbone uses {impl!r}: load it with attn_implementation='sdpa'")
            with torch.no_grad():
                init = self.language_model.embed_tokens.weight.float().mean(0)
            self.register_vector = nn.Parameter(init.clone())
        elif variant == "mid":
            self.probe_layers = _probe_indices(n_layers, probe_layers)
            self.head = MidFusionHead(self.hidden_size, len(self.probe_layers), mid_hidden)
            self.head.to(self.device)
        self.mid_hidden = int(mid_hidden)
        if self.register_vector is not None:
            self.register_vector.data = self.register_vector.data.to(self.device)

    # -- public API --------------------------------------------------------------------------------
    def similarity(self, images_a: Any, images_b: Any, aspects: Any) -> torch.Tensor:
        """``[B]`` float32 similarities ``f(a_i, b_i | aspects_i)`` (no gradient).

        ``aspects`` is a list of ``B`` non-empty strings or one string for all pairs. Late and early
        fusion give a cosine in [-1, 1]; mid fusion a negative weighted distance (<= 0).
        """
        a = self.load_images(images_a, name="images_a")
        b = self.load_images(images_b, name="images_b")
        if len(a) != len(b):
            raise InputError(f"images_a has {len(a)} images but images_b has {len(b)}; pass one pair per row")
        asp = check_aspects(aspects, len(a))
        with torch.no_grad():
            return self.pair_scores(a, b, asp).float()

    def embed(self, images: Any, aspects: Any) -> torch.Tensor:
        """Late fusion: ``[B, D]`` L2-normalised float32 embeddings (cosine = similarity)."""
        if self.variant != "late":
            raise InputError(f"embed() is defined for late fusion only; this model is variant={self.variant!r}")
        imgs = self.load_images(images)
        asp = check_aspects(aspects, len(imgs))
        with torch.no_grad():
            return self._late_embed(imgs, asp).float()

    def odd_one_out(self, images1: Any, images2: Any, images3: Any, aspects: Any) -> torch.Tensor:
        """``[B,3]`` Eq. 2 probabilities that each image is the odd one out (float64, no gradient)."""
        x = [self.load_images(im, name=f"images{i + 1}") for i, im in enumerate((images1, images2, images3))]
        if not (len(x[0]) == len(x[1]) == len(x[2])):
            raise InputError(f"triplets: got {len(x[0])}, {len(x[1])} and {len(x[2])} images; pass one of each per row")
        asp = check_aspects(aspects, len(x[0]))
        with torch.no_grad():
            return torch.softmax(self.triplet_scores(*x, asp).double() / self.temperature, dim=1)

    def forward(self, images1: Any, images2: Any, images3: Any, aspects: list[str]) -> torch.Tensor:
        """Training forward: ``[B,3]`` logits ``s_bar / tau`` of Eq. 2 (gradients flow to LoRA and heads)."""
        x = [im if self._is_prepared(im) else self.load_images(im) for im in (images1, images2, images3)]
        return self.triplet_scores(*x, list(aspects)) / self.temperature

    # -- scores (gradient-enabled) -----------------------------------------------------------------
    def pair_scores(self, a: list[torch.Tensor], b: list[torch.Tensor], aspects: list[str]) -> torch.Tensor:
        """``[B]`` similarities of preprocessed image lists (keeps the autograd graph when enabled)."""
        if self.variant == "early":
            return self._early_pairs(a, b, aspects)
        enc = self._encode_unique(list(a) + list(b), list(aspects) + list(aspects))
        n = len(a)
        return self._pair_from_enc(enc, list(range(n)), list(range(n, 2 * n)))

    def triplet_scores(self, x1: list[torch.Tensor], x2: list[torch.Tensor], x3: list[torch.Tensor],
                       aspects: list[str]) -> torch.Tensor:
        """``[B,3]`` ``s_bar = [f(x2,x3), f(x1,x3), f(x1,x2)]`` (column k leaves image k out)."""
        n = len(x1)
        if self.variant == "early":
            s23 = self._early_pairs(x2, x3, aspects)
            s13 = self._early_pairs(x1, x3, aspects)
            s12 = self._early_pairs(x1, x2, aspects)
            return torch.stack([s23, s13, s12], 1)
        enc = self._encode_unique(list(x1) + list(x2) + list(x3), list(aspects) * 3)
        i1, i2, i3 = list(range(n)), list(range(n, 2 * n)), list(range(2 * n, 3 * n))
        return torch.stack([self._pair_from_enc(enc, i2, i3), self._pair_from_enc(enc, i1, i3),
                            self._pair_from_enc(enc, i1, i2)], 1)

    # -- late / mid encodings ----------------------------------------------------------------------
    def _single_items(self, feats: list[VisionFeatures], aspects: list[str]) -> list[list[tuple[str, Any]]]:
        items = []
        for f, a in zip(feats, aspects):
            instr = prompt_for("late", self._clip_aspect(a), self.prompts)
            items.append([("text", "<|im_start|>system\n"), ("instruction", instr),
                          ("text", "<|im_end|>\n<|im_start|>user\n"), ("image", f),
                          ("text", "<|im_end|>\n<|im_start|>assistant\n")])
        return items

    def _encode_unique(self, images: list[torch.Tensor], aspects: list[str]) -> dict[str, Any]:
        """Encode each distinct (image, aspect) once. Returns ``{"index": [i -> row], "enc": ...}``."""
        keys = self._keys(images)
        rows: dict[tuple[str, str], int] = {}
        index, uniq_imgs, uniq_keys, uniq_asp = [], [], [], []
        for k, x, a in zip(keys, images, aspects):
            r = rows.get((k, a))
            if r is None:
                r = rows[(k, a)] = len(uniq_imgs)
                uniq_imgs.append(x)
                uniq_keys.append(k)
                uniq_asp.append(a)
            index.append(r)
        if self.variant == "late":
            enc: Any = self._late_embed(uniq_imgs, uniq_asp, keys=uniq_keys)
        else:
            enc = self._mid_features(uniq_imgs, uniq_asp, keys=uniq_keys)
        return {"index": index, "enc": enc}

    def _pair_from_enc(self, enc: dict[str, Any], ia: list[int], ib: list[int]) -> torch.Tensor:
        ra = [enc["index"][i] for i in ia]
        rb = [enc["index"][i] for i in ib]
        if self.variant == "late":
            z = enc["enc"]
            if torch.is_grad_enabled() and z.requires_grad:
                return (z[ra] * z[rb]).sum(-1)
            return _unit_cosine(z[ra], z[rb])
        return self._mid_distance(enc["enc"], ra, rb)

    def _late_embed(self, images: list[torch.Tensor], aspects: list[str], *, keys: list[str] | None = None
                    ) -> torch.Tensor:
        feats = self.vision_features(images, keys=keys)
        outs = []
        for i in range(0, len(images), self.batch_size):
            batch = self._build_single(self._single_items(feats[i:i + self.batch_size], aspects[i:i + self.batch_size]))
            embeds, ds = self._embed(batch["input_ids"], batch["visual_mask"], batch["features"])
            hidden, _ = self._run_lm(embeds, batch["attention_mask"], batch["position_ids"], batch["visual_mask"], ds)
            last = torch.tensor([n - 1 for n in batch["lengths"]], device=hidden.device)
            h = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
            outs.append(F.normalize(h.float(), dim=-1))
        return torch.cat(outs, 0)

    def _mid_features(self, images: list[torch.Tensor], aspects: list[str], *, keys: list[str] | None = None
                      ) -> dict[str, list]:
        """Per (image, aspect): unit-normalised image-token states ``[N,d]`` and the instruction-token
        mean per probe layer."""
        feats = self.vision_features(images, keys=keys)
        phis: list[list[torch.Tensor]] = [[] for _ in self.probe_layers]
        texts: list[list[torch.Tensor]] = [[] for _ in self.probe_layers]
        for i in range(0, len(images), self.batch_size):
            batch = self._build_single(self._single_items(feats[i:i + self.batch_size], aspects[i:i + self.batch_size]))
            embeds, ds = self._embed(batch["input_ids"], batch["visual_mask"], batch["features"])
            _, cap = self._run_lm(embeds, batch["attention_mask"], batch["position_ids"], batch["visual_mask"], ds,
                                  capture=self.probe_layers)
            for j, li in enumerate(self.probe_layers):
                h = cap[li].float()
                for b, span in enumerate(batch["spans"]):
                    s0, s1 = span["images"][0]
                    t0, t1 = span["instruction"]
                    phis[j].append(F.normalize(h[b, s0:s1], dim=-1))
                    texts[j].append(h[b, t0:t1].mean(0))
        return {"phi": phis, "text": texts}

    def _mid_distance(self, enc: dict[str, list], ra: list[int], rb: list[int]) -> torch.Tensor:
        total = None
        assert self.head is not None
        for j, mlp in enumerate(self.head.mlps):
            phi_a = torch.stack([enc["phi"][j][r] for r in ra])
            phi_b = torch.stack([enc["phi"][j][r] for r in rb])
            ta = torch.stack([enc["text"][j][r] for r in ra])
            tb = torch.stack([enc["text"][j][r] for r in rb])
            # The instruction precedes the image and attention is causal, so both passes see the same text
            # states; averaging the two weights makes f exactly symmetric in floating point as well.
            w = 0.5 * (F.softplus(mlp(ta.float())) + F.softplus(mlp(tb.float())))
            d = ((w.unsqueeze(1) * (phi_a - phi_b)) ** 2).sum(-1).mean(-1)
            total = d if total is None else total + d
        return 0.0 - total  # type: ignore[operator]  (0 - x: no negative zero for identical images)

    # -- early fusion ------------------------------------------------------------------------------
    def _early_pairs(self, a: list[torch.Tensor], b: list[torch.Tensor], aspects: list[str]) -> torch.Tensor:
        fa = self.vision_features(list(a))
        fb = self.vision_features(list(b))
        outs = []
        for i in range(0, len(a), self.batch_size):
            outs.append(self._early_batch(fa[i:i + self.batch_size], fb[i:i + self.batch_size],
                                          aspects[i:i + self.batch_size]))
        return torch.cat(outs, 0)

    def early_inputs(self, fa: list[VisionFeatures], fb: list[VisionFeatures], aspects: list[str]) -> dict[str, Any]:
        """The Appendix C.2 inputs for a batch of pairs: ids, 4D bool mask ``[B,1,S,S]`` (True = may attend),
        positions ``(3,B,S)``, patch/register masks and the register indices."""
        texts = []
        for a in aspects:
            instr = prompt_for("early", self._clip_aspect(a), self.prompts)
            texts.append(self._ids("<|im_start|>system\n") + self._ids(instr) + self._ids("<|im_end|>\n<|im_start|>user\n"))
        B = len(aspects)
        for x, y in zip(fa, fb):
            if x.grid != y.grid:
                raise InputError(f"early fusion needs both images on the same token grid, got {x.grid} and {y.grid}")
        lens = [len(t) + fa[i].n_tokens + fb[i].n_tokens + 2 for i, t in enumerate(texts)]
        S = max(lens)
        ids = torch.full((B, S), self.pad_id, dtype=torch.long)
        pos = torch.zeros((3, B, S), dtype=torch.long)
        mask = torch.zeros((B, 1, S, S), dtype=torch.bool)
        patch = torch.zeros((B, S), dtype=torch.bool)
        reg = torch.zeros((B, S), dtype=torch.bool)
        r_idx = torch.zeros((B, 2), dtype=torch.long)
        for i, t in enumerate(texts):
            M, N = len(t), fa[i].n_tokens
            gh, gw = fa[i].grid
            x1, x2, r1, r2 = M, M + N, M + 2 * N, M + 2 * N + 1
            ids[i, :M] = torch.tensor(t)
            ids[i, x1:r1] = self.image_token_id
            patch[i, x1:r1] = True
            reg[i, r1] = reg[i, r2] = True
            r_idx[i] = torch.tensor([r1, r2])
            # positions: text (t, 0, 0) with t = 1..M; patches (0, h, w) for both images; registers (M+1, 0, 0)
            pos[0, i, :M] = torch.arange(1, M + 1)
            hh = torch.arange(gh).repeat_interleave(gw)
            ww = torch.arange(gw).repeat(gh)
            for s in (x1, x2):
                pos[1, i, s:s + N] = hh
                pos[2, i, s:s + N] = ww
            pos[0, i, r1] = pos[0, i, r2] = M + 1
            m = mask[i, 0]
            m[:M, :M] = torch.tril(torch.ones(M, M, dtype=torch.bool))  # text: causal among itself
            m[x1:r1, :M] = True  # patches: all text ...
            m[x1:r1, x1:r1] = True  # ... and both images
            m[r1, :M] = m[r2, :M] = True  # registers: text ...
            m[r1, x1:x2] = True  # ... r1 -> x1 patches
            m[r2, x2:r1] = True  # ... r2 -> x2 patches
            m[r1, r1] = m[r2, r2] = True  # ... and itself
            for p in range(lens[i], S):  # padding attends to itself only; nothing attends to padding
                m[p, p] = True
        dev = self.device
        return {"input_ids": ids.to(dev), "mask": mask.to(dev), "position_ids": pos.to(dev),
                "patch_mask": patch.to(dev), "register_mask": reg.to(dev), "register_index": r_idx.to(dev),
                "lengths": lens}

    def _early_batch(self, fa: list[VisionFeatures], fb: list[VisionFeatures], aspects: list[str]) -> torch.Tensor:
        inp = self.early_inputs(fa, fb, aspects)
        features = [f for pair in zip(fa, fb) for f in pair]  # sequence order: x1 then x2 per row
        embeds, ds = self._embed(inp["input_ids"], inp["patch_mask"], features)
        assert self.register_vector is not None
        embeds = torch.where(inp["register_mask"].unsqueeze(-1), self.register_vector.to(embeds.dtype), embeds)
        mask = inp["mask"]
        if _attn_impl(self._parts) == "eager":  # eager adds the mask: give it 0 / -inf
            mask = torch.zeros(mask.shape, dtype=embeds.dtype, device=mask.device).masked_fill(
                ~mask, torch.finfo(embeds.dtype).min)
        hidden, _ = self._run_lm(embeds, mask, inp["position_ids"], inp["patch_mask"], ds)
        rows = torch.arange(hidden.shape[0], device=hidden.device)
        h1 = hidden[rows, inp["register_index"][:, 0]].float()
        h2 = hidden[rows, inp["register_index"][:, 1]].float()
        if torch.is_grad_enabled() and h1.requires_grad:
            return F.cosine_similarity(h1, h2, dim=-1, eps=1e-12)
        return _unit_cosine(h1, h2)

    # -- persistence -------------------------------------------------------------------------------
    def head_state_dict(self) -> dict[str, torch.Tensor]:
        """The TPIPS parameters that live outside the backbone (register vector, mid-fusion MLPs)."""
        out: dict[str, torch.Tensor] = {}
        if self.register_vector is not None:
            out["register"] = self.register_vector.detach().cpu().contiguous()
        if self.head is not None:
            out.update({f"head.{k}": v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()})
        return out

    def load_head_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        if self.register_vector is not None:
            if "register" not in sd:
                raise InputError("the saved TPIPS head has no register vector; was it trained for early fusion?")
            self.register_vector.data.copy_(sd["register"].to(self.register_vector.device, self.register_vector.dtype))
        if self.head is not None:
            head = {k[5:]: v for k, v in sd.items() if k.startswith("head.")}
            missing = self.head.load_state_dict(head, strict=False)
            if missing.missing_keys:
                raise InputError(f"the saved TPIPS head lacks {missing.missing_keys[:3]}; was it trained for mid fusion "
                                 "with the same probe layers?")
            self.head.to(self.device)

    def config_dict(self, base_weights: str | None = None) -> dict[str, Any]:
        return {"format": FORMAT, "variant": self.variant, "image_size": self.image_size,
                "temperature": self.temperature, "prompts": list(self.prompts), "probe_layers": self.probe_layers,
                "mid_hidden": self.mid_hidden, "base_weights": base_weights}

    def save_pretrained(self, path: str | os.PathLike, *, base_weights: str | None = None) -> Path:
        """Write the adapter folder: peft adapter (if the backbone is a PeftModel), ``tpips.json`` and
        ``tpips_head.safetensors``. Reload with :func:`load_tpips` / :meth:`from_pretrained`."""
        from safetensors.torch import save_file

        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        _save_peft(self.backbone, out)
        save_file(self.head_state_dict() or {"_empty": torch.zeros(1)}, str(out / HEAD_NAME))
        (out / CONFIG_NAME).write_text(json.dumps(self.config_dict(base_weights), indent=2))
        return out

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, *, backbone: nn.Module | None = None, processor: Any = None,
                        weights: str | None = None, device: Any = None, dtype: Any = None, **kwargs: Any) -> TPIPSModel:
        """Load a saved TPIPS adapter folder or hub id (see :func:`load_tpips`)."""
        m = load_tpips(path, backbone=backbone, processor=processor, weights=weights, device=device, dtype=dtype,
                       **kwargs)
        if not isinstance(m, TPIPSModel):
            raise InputError(f"{path!s} holds a triplet-head model; use TPIPSTripletModel.from_pretrained")
        return m


# --------------------------------------------------------------------------------------------- generative
ANSWERS_3 = ("left", "middle", "right")


def _concat(images: list[torch.Tensor]) -> torch.Tensor:
    return torch.cat(images, dim=-1)


def _mean_over_orders(fn, columns: list[list[torch.Tensor]], orders: list[tuple[int, ...]]) -> torch.Tensor:
    """Average ``fn(ordered columns) -> [B,k]`` probabilities mapped back to the original positions."""
    total = None
    for order in orders:
        probs = fn([columns[j] for j in order])
        back = torch.zeros_like(probs)
        for pos, orig in enumerate(order):
            back[:, orig] = probs[:, pos]
        total = back if total is None else total + back
    return total / len(orders)  # type: ignore[operator]


class TPIPSTripletModel(_VLMBase):
    """Appendix B.1 triplet head (trainable) and Appendix C.3 zero-shot triplet baseline.

    The three images (each resized to ``image_size``) are concatenated horizontally into one image; the
    model answers which one is the most different. A 3-way linear head over the final hidden state of the
    last prompt token, initialised from the LM-head rows (or tied input embeddings) of the answer tokens
    ``left`` / ``middle`` / ``right``, gives the logits; untrained it reproduces the zero-shot answer
    probabilities. Inference averages the probabilities over all 6 orders (2 for 2AFC) mapped back to the
    original positions; training permutes each triplet at random (permutation augmentation).
    """

    variant = "triplet"

    def __init__(self, backbone: nn.Module, processor: Any, *, image_size: int | None = None,
                 prompts: tuple[str, str] | None = None, two_afc_prompts: tuple[str, str] | None = None,
                 vision_cache_size: int = 8, batch_size: int = 8, data_range: float = 1.0,
                 max_aspect_tokens: int = MAX_ASPECT_TOKENS) -> None:
        super().__init__(backbone, processor, image_size=image_size, vision_cache_size=vision_cache_size,
                         batch_size=batch_size, data_range=data_range, max_aspect_tokens=max_aspect_tokens)
        self.prompts = tuple(prompts) if prompts is not None else PROMPTS["triplet"]
        self.two_afc_prompts = tuple(two_afc_prompts) if two_afc_prompts is not None else PROMPTS["triplet_2afc"]
        self.answer_ids = self._answer_token_ids(ANSWERS_3)
        weight = self._answer_rows(self.answer_ids)
        self.head = nn.Linear(self.hidden_size, 3, bias=True)
        with torch.no_grad():
            self.head.weight.copy_(weight.float())
            self.head.bias.zero_()
        self.head.to(self.device)
        self.temperature = 1.0

    def _answer_token_ids(self, words: Sequence[str]) -> list[int]:
        ids = [self._ids(w)[0] for w in words]
        if len(set(ids)) != len(ids):
            raise InputError(f"the tokenizer maps the answers {list(words)} to clashing first tokens {ids}")
        return ids

    def _answer_rows(self, ids: list[int]) -> torch.Tensor:
        head = self._parts.lm_head
        w = head.weight if head is not None and hasattr(head, "weight") else self.language_model.embed_tokens.weight
        return w.detach()[ids].clone()

    def _logits(self, images: list[torch.Tensor], aspects: list[str], prompts: tuple[str, str]) -> torch.Tensor:
        feats = self.vision_features(images, use_cache=self.vision_cache.max_items > 0)
        outs = []
        for i in range(0, len(images), self.batch_size):
            items = [[("text", "<|im_start|>user\n"), ("image", f),
                      ("text", prompt_for("triplet", self._clip_aspect(a), prompts)),
                      ("text", "<|im_end|>\n<|im_start|>assistant\n")]
                     for f, a in zip(feats[i:i + self.batch_size], aspects[i:i + self.batch_size])]
            batch = self._build_single(items)
            embeds, ds = self._embed(batch["input_ids"], batch["visual_mask"], batch["features"])
            hidden, _ = self._run_lm(embeds, batch["attention_mask"], batch["position_ids"], batch["visual_mask"], ds)
            last = torch.tensor([n - 1 for n in batch["lengths"]], device=hidden.device)
            h = hidden[torch.arange(hidden.shape[0], device=hidden.device), last]
            outs.append(self.head(h.to(self.head.weight.dtype)))
        return torch.cat(outs, 0)

    def ordered_logits(self, x1: list[torch.Tensor], x2: list[torch.Tensor], x3: list[torch.Tensor],
                       aspects: list[str]) -> torch.Tensor:
        """``[B,3]`` answer logits for the images in the given (left, middle, right) order."""
        return self._logits([_concat([a, b, c]) for a, b, c in zip(x1, x2, x3)], aspects, self.prompts)

    def forward(self, images1: Any, images2: Any, images3: Any, aspects: list[str],
                permutations: list[tuple[int, int, int]] | None = None) -> torch.Tensor:
        """Training forward: ``[B,3]`` logits over the original positions; each row ``i`` is shown in the
        order ``permutations[i]`` (identity if None)."""
        cols = [im if self._is_prepared(im) else self.load_images(im) for im in (images1, images2, images3)]
        n = len(cols[0])
        perms = permutations or [(0, 1, 2)] * n
        shown = [[cols[perms[i][p]][i] for i in range(n)] for p in range(3)]
        logits = self.ordered_logits(*shown, list(aspects))
        back = torch.empty_like(logits)
        for i, order in enumerate(perms):
            for pos, orig in enumerate(order):
                back[i, orig] = logits[i, pos]
        return back

    def odd_one_out(self, images1: Any, images2: Any, images3: Any, aspects: Any) -> torch.Tensor:
        """``[B,3]`` probability that each image is the odd one out, averaged over the 6 orders."""
        cols = [self.load_images(im, name=f"images{i + 1}") for i, im in enumerate((images1, images2, images3))]
        if not (len(cols[0]) == len(cols[1]) == len(cols[2])):
            raise InputError(f"triplets: got {len(cols[0])}, {len(cols[1])} and {len(cols[2])} images")
        asp = check_aspects(aspects, len(cols[0]))
        with torch.no_grad():
            return _mean_over_orders(lambda c: torch.softmax(self.ordered_logits(*c, asp).double(), 1), cols,
                                     list(itertools.permutations(range(3)))).float()

    def two_afc(self, reference: Any, candidates0: Any, candidates1: Any, aspects: Any) -> torch.Tensor:
        """``[B,2]`` probability that each candidate is more similar to the reference (reference in the
        centre, both left/right orders averaged)."""
        ref = self.load_images(reference, name="reference")
        c0 = self.load_images(candidates0, name="candidates0")
        c1 = self.load_images(candidates1, name="candidates1")
        if not (len(ref) == len(c0) == len(c1)):
            raise InputError(f"2AFC: got {len(ref)} references and {len(c0)}/{len(c1)} candidates")
        asp = check_aspects(aspects, len(ref))

        def probs(cands: list[list[torch.Tensor]]) -> torch.Tensor:
            imgs = [_concat([x, r, y]) for x, r, y in zip(cands[0], ref, cands[1])]
            lg = self._logits(imgs, asp, self.two_afc_prompts)
            return torch.softmax(lg[:, [0, 2]].double(), 1)  # left / right

        with torch.no_grad():
            return _mean_over_orders(probs, [c0, c1], [(0, 1), (1, 0)]).float()

    def save_pretrained(self, path: str | os.PathLike, *, base_weights: str | None = None) -> Path:
        from safetensors.torch import save_file

        out = Path(path)
        out.mkdir(parents=True, exist_ok=True)
        _save_peft(self.backbone, out)
        save_file({f"head.{k}": v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()},
                  str(out / HEAD_NAME))
        cfg = {"format": FORMAT, "variant": "triplet", "image_size": self.image_size, "prompts": list(self.prompts),
               "base_weights": base_weights}
        (out / CONFIG_NAME).write_text(json.dumps(cfg, indent=2))
        return out

    def head_state_dict(self) -> dict[str, torch.Tensor]:
        return {f"head.{k}": v.detach().cpu().contiguous() for k, v in self.head.state_dict().items()}

    def load_head_state_dict(self, sd: dict[str, torch.Tensor]) -> None:
        self.head.load_state_dict({k[5:]: v for k, v in sd.items() if k.startswith("head.")})
        self.head.to(self.device)

    @classmethod
    def from_pretrained(cls, path: str | os.PathLike, **kwargs: Any) -> TPIPSTripletModel:
        m = load_tpips(path, **kwargs)
        if not isinstance(m, TPIPSTripletModel):
            raise InputError(f"{path!s} holds a {m.variant}-fusion TPIPS model, not a triplet head")
        return m


class PairwiseScoreModel(_VLMBase):
    """Appendix C.3 pairwise 0-10 score: both images side by side, the rating question, and the expected
    digit ``E[d] = sum_d d * P(d)`` from the digit-token probabilities (renormalised over 0..9; when "10"
    is not a single token, ``P(10) = P("1") * P("0" | "1")`` is read in the same forward pass by appending
    "1"). Averaged over both left/right orders. Needs a backbone with an LM head."""

    def __init__(self, backbone: nn.Module, processor: Any, *, image_size: int | None = None,
                 prompts: tuple[str, str] | None = None, vision_cache_size: int = 64, batch_size: int = 8,
                 data_range: float = 1.0) -> None:
        super().__init__(backbone, processor, image_size=image_size, vision_cache_size=vision_cache_size,
                         batch_size=batch_size, data_range=data_range)
        if self._parts.lm_head is None:
            raise InputError("the pairwise 0-10 score baseline needs a generative backbone with an LM head "
                             "(e.g. Qwen3VLForConditionalGeneration / Qwen3-VL-8B-Instruct)")
        self.prompts = tuple(prompts) if prompts is not None else PROMPTS["pairwise"]
        digit_ids = []
        for d in range(10):
            t = self._ids(str(d))
            if len(t) != 1:
                raise InputError(f"the tokenizer does not have a single token for the digit {d}")
            digit_ids.append(t[0])
        self.digit_ids = digit_ids
        ten = self._ids("10")
        self.ten_id = ten[0] if len(ten) == 1 else None

    @torch.no_grad()
    def _expected(self, left: list[torch.Tensor], right: list[torch.Tensor], aspects: list[str]) -> torch.Tensor:
        feats = self.vision_features([_concat([a, b]) for a, b in zip(left, right)])
        head = self._parts.lm_head
        outs = []
        for i in range(0, len(feats), self.batch_size):
            items = [[("text", "<|im_start|>user\n"), ("image", f),
                      ("text", prompt_for("pairwise", self._clip_aspect(a), self.prompts)),
                      ("text", "<|im_end|>\n<|im_start|>assistant\n")]
                     + ([("text", "1")] if self.ten_id is None else [])
                     for f, a in zip(feats[i:i + self.batch_size], aspects[i:i + self.batch_size])]
            batch = self._build_single(items)
            embeds, ds = self._embed(batch["input_ids"], batch["visual_mask"], batch["features"])
            hidden, _ = self._run_lm(embeds, batch["attention_mask"], batch["position_ids"], batch["visual_mask"], ds)
            rows = torch.arange(hidden.shape[0], device=hidden.device)
            last = torch.tensor([n - 1 for n in batch["lengths"]], device=hidden.device)
            if self.ten_id is None:
                first = head(hidden[rows, last - 1]).double()
                nxt = torch.softmax(head(hidden[rows, last]).double(), -1)[:, self.digit_ids[0]]  # P("0" | "1")
                p = torch.softmax(first[:, self.digit_ids], -1)
                values = torch.arange(10, dtype=torch.float64, device=p.device)
                e = (p * values).sum(-1) - p[:, 1] * 1.0 + p[:, 1] * ((1 - nxt) * 1.0 + nxt * 10.0)
            else:
                first = head(hidden[rows, last]).double()
                p = torch.softmax(first[:, self.digit_ids + [self.ten_id]], -1)
                e = (p * torch.arange(11, dtype=torch.float64, device=p.device)).sum(-1)
            outs.append(e)
        return torch.cat(outs, 0)

    def score(self, images_a: Any, images_b: Any, aspects: Any) -> torch.Tensor:
        """``[B]`` expected 0-10 similarity rating, averaged over (a, b) and (b, a)."""
        a = self.load_images(images_a, name="images_a")
        b = self.load_images(images_b, name="images_b")
        if len(a) != len(b):
            raise InputError(f"images_a has {len(a)} images but images_b has {len(b)}")
        asp = check_aspects(aspects, len(a))
        return (0.5 * (self._expected(a, b, asp) + self._expected(b, a, asp))).float()

    similarity = score


# --------------------------------------------------------------------------------------------- loading
def _save_peft(backbone: Any, out: Path) -> None:
    if hasattr(backbone, "peft_config"):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", FutureWarning)
            backbone.save_pretrained(str(out))


def _adapter_folder(path_or_id: str | os.PathLike) -> Path:
    """A local folder, or a hub id downloaded (snapshot) under the genmetrics cache."""
    from genmetrics.backbones.hf import _unavailable, hf_cache_dir
    from genmetrics.backbones.weights import offline

    p = Path(os.fspath(path_or_id)).expanduser()
    if p.is_dir():
        if not (p / CONFIG_NAME).is_file():
            raise _unavailable(str(p), [str(p)], hint=f"The folder has no {CONFIG_NAME}; pass the folder written by "
                               "`genmetrics train tpips` (OUT/adapter) or TPIPSModel.save_pretrained.")
        return p
    if p.exists() or os.fspath(path_or_id).startswith((".", "/", "~")):
        raise _unavailable(str(p), [str(p)], hint="Fix: pass an existing adapter folder (adapter=... / --adapter).")
    try:
        from huggingface_hub import snapshot_download

        return Path(snapshot_download(os.fspath(path_or_id), cache_dir=str(hf_cache_dir()), local_files_only=offline()))
    except Exception as e:  # noqa: BLE001
        raise _unavailable(os.fspath(path_or_id), [str(hf_cache_dir()), "the Hugging Face Hub"], cause=e) from e


def load_tpips(adapter: str | os.PathLike | None = None, *, backbone: nn.Module | None = None, processor: Any = None,
               weights: str | None = None, variant: str | None = None, device: Any = None, dtype: Any = None,
               image_size: int | None = None, **kwargs: Any) -> TPIPSModel | TPIPSTripletModel:
    """Build a TPIPS model.

    * ``adapter`` (a folder written by training / ``save_pretrained``, or a hub id): its ``tpips.json``
      gives the variant, image size, prompts and base weights; the peft adapter is applied to the backbone
      and the head parameters are loaded.
    * without ``adapter``: the zero-shot model of ``variant`` (default ``"late"``) on ``weights``.
    * ``backbone``/``processor`` given: used as is (no download); otherwise ``weights`` (or the adapter's
      base weights, or ``Qwen/Qwen3-VL-Embedding-2B``) are loaded with
      :func:`genmetrics.backbones.hf.load_vlm` (raises ``WeightsUnavailableError`` when offline and absent).
    """
    from genmetrics.backbones.hf import load_peft_adapter, load_vlm

    cfg: dict[str, Any] = {}
    folder = None
    if adapter is not None:
        folder = _adapter_folder(adapter)
        cfg = json.loads((folder / CONFIG_NAME).read_text())
        if cfg.get("format") != FORMAT:
            raise InputError(f"{folder / CONFIG_NAME}: unknown format {cfg.get('format')!r}; expected {FORMAT!r}")
        if variant is not None and variant != cfg["variant"]:
            raise InputError(f"variant={variant!r} but the adapter at {adapter!s} was trained as {cfg['variant']!r}")
    v = variant or cfg.get("variant") or "late"
    if v not in VARIANTS + ("triplet",):
        raise InputError(f"variant={v!r}: expected late, mid, early or triplet")
    if backbone is None:
        w = weights or cfg.get("base_weights") or (TRIPLET_WEIGHTS if v == "triplet" else DEFAULT_WEIGHTS)
        backbone, loaded_proc = load_vlm(w, dtype=dtype, device=device, for_generation=(v == "triplet"))
        processor = processor or loaded_proc
    elif processor is None:
        raise InputError("processor: pass the backbone's processor together with backbone=")
    if folder is not None and (folder / "adapter_config.json").is_file():
        with warnings.catch_warnings():  # peft calls a deprecated transformers alias (is_gradient_checkpointing)
            warnings.filterwarnings("ignore", message=".*is_gradient_checkpointing.*", category=FutureWarning)
            backbone = load_peft_adapter(backbone, folder, is_trainable=False)
    size = image_size or cfg.get("image_size")
    if v == "triplet":
        model: TPIPSModel | TPIPSTripletModel = TPIPSTripletModel(
            backbone, processor, image_size=size, prompts=tuple(cfg["prompts"]) if cfg.get("prompts") else None,
            **{k: kwargs[k] for k in ("vision_cache_size", "batch_size", "data_range") if k in kwargs})
    else:
        extra = dict(kwargs)
        if cfg:
            extra.setdefault("temperature", cfg.get("temperature"))
            if cfg.get("prompts"):
                extra.setdefault("prompts", tuple(cfg["prompts"]))
            if cfg.get("probe_layers"):
                extra.setdefault("probe_layers", cfg["probe_layers"])
            if cfg.get("mid_hidden"):
                extra.setdefault("mid_hidden", cfg["mid_hidden"])
        model = TPIPSModel(backbone, processor, v, image_size=size, **extra)
    if folder is not None and (folder / HEAD_NAME).is_file():
        from genmetrics.backbones.weights import load_state_dict

        model.load_head_state_dict(load_state_dict(folder / HEAD_NAME))
    if device is not None:
        model.to(device)
    return model.eval()
