"""open_clip loading with genmetrics' weights policy.

OpenAI weights were trained with QuickGELU: their tags map to the ``-quickgelu`` configs, otherwise the
activations are silently wrong. Each weights record carries its preprocessing (open_clip's own).
"""

from __future__ import annotations

import functools
import logging
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genmetrics.backbones.weights import genmetrics_home, offline, weights_unavailable


@dataclass(frozen=True)
class ClipWeights:
    """An open_clip model name plus a pretrained tag, hub id (``hf-hub:org/name``) or local file.

    >>> str(ClipWeights("ViT-B-32-quickgelu", "openai"))
    'ViT-B-32-quickgelu/openai'
    """

    model: str
    pretrained: str

    def __str__(self) -> str:
        return f"{self.model}/{self.pretrained}"


DEFAULT_CLIP = ClipWeights("ViT-B-32-quickgelu", "openai")


def parse_clip_weights(spec: str | ClipWeights | None) -> ClipWeights:
    """``"ViT-B-16/openai"``, ``"hf-hub:org/name"`` or ``"ViT-B-16:/path/ckpt.safetensors"``.

    OpenAI ViT weights get the QuickGELU architecture they were trained with:

    >>> parse_clip_weights("ViT-B-16/openai"), parse_clip_weights("ViT-B-32:/ckpt.safetensors").pretrained
    (ClipWeights(model='ViT-B-16-quickgelu', pretrained='openai'), '/ckpt.safetensors')
    """
    if spec is None:
        return DEFAULT_CLIP
    if isinstance(spec, ClipWeights):
        return _quickgelu(spec)
    if spec.startswith("hf-hub:"):
        return ClipWeights(spec, "")
    # MODEL:PATH first: the path keeps its leading '/' (absolute) and '~' is expanded
    model, s, tag = spec.partition(":")
    if s and model and tag and "/" not in model and "\\" not in model and len(model) > 1:
        from genmetrics.options import expand_user

        return _quickgelu(
            ClipWeights(model, str(expand_user(tag, what="--weights")) if tag.startswith("~") else tag)
        )
    if spec.startswith(("/", "./", "../", "~", "\\")) or Path(spec).expanduser().is_file():
        from genmetrics.errors import InputError

        raise InputError(
            f"--weights {spec!r}: a local open_clip checkpoint needs its architecture; write "
            f"MODEL:PATH, e.g. 'ViT-B-32:{spec}' (see `open_clip.list_models()`)"
        )
    model, s, tag = spec.partition("/")
    if s and model and tag:
        return _quickgelu(ClipWeights(model, tag))
    return _quickgelu(ClipWeights(spec, "openai"))


def _quickgelu(w: ClipWeights) -> ClipWeights:
    if w.pretrained == "openai" and not w.model.endswith("-quickgelu") and w.model.startswith(("ViT-", "RN")):
        return ClipWeights(w.model + "-quickgelu", w.pretrained)
    return w


def load_open_clip(spec: str | ClipWeights | None = None, *, device: Any = "cpu", precision: str = "fp32"):
    """Return ``(model, preprocess, tokenizer)`` for open_clip weights, honouring the offline policy.

    An installed backbone provider (:mod:`genmetrics.backbones.provider`, kind ``"open_clip"``) is asked
    first; its ``(model, tokenizer)`` is returned as ``(model, None, tokenizer)`` (genmetrics preprocesses
    with :func:`clip_image_batch`, never with open_clip's ``preprocess``).

    >>> from genmetrics.backbones.provider import use_provider
    >>> from genmetrics.testing import tiny_backbones
    >>> with use_provider(tiny_backbones):  # nothing downloads: the provider answers
    ...     model, preprocess, tokenizer = load_open_clip("ViT-B-32/openai")
    >>> type(model).__name__, preprocess, type(tokenizer).__name__
    ('CLIP', None, 'SimpleTokenizer')

    The model is built outside ``torch.inference_mode`` even when called inside it (a metric loading its
    weights lazily during ``update``), so its weights are ordinary tensors with version counters and
    :func:`encode_image` can keep their packed copy.
    """
    import torch

    with torch.inference_mode(False):
        return _load_open_clip(spec, device=device, precision=precision)


def _load_open_clip(spec: str | ClipWeights | None, *, device: Any, precision: str):
    import open_clip

    from genmetrics.backbones.provider import provide

    w = parse_clip_weights(spec)
    provided = provide("open_clip", str(w))
    if provided is not None:
        model, tokenizer = provided
        return model.to(device).eval(), None, tokenizer
    cache_dir = str(genmetrics_home() / "open_clip")
    looked = [cache_dir]
    if w.pretrained and (os.sep in w.pretrained or w.pretrained.endswith((".bin", ".pt", ".safetensors"))):
        if not Path(w.pretrained).exists():
            raise weights_unavailable(str(w), w.pretrained, "backbone=... or --weights MODEL:/path/to/ckpt")
        looked = [w.pretrained]
    try:
        if offline():
            os.environ.setdefault("HF_HUB_OFFLINE", "1")
        # open_clip logs its own download failure on the root logger before raising; the error raised
        # below carries that message, so the log line would only print it twice.
        previous = logging.root.manager.disable
        logging.disable(logging.ERROR)
        try:
            model, _, preprocess = open_clip.create_model_and_transforms(
                w.model,
                pretrained=w.pretrained or None,
                device=device,
                precision=precision,
                cache_dir=cache_dir,
                weights_only=True,
            )
        finally:
            logging.disable(previous)
    except RuntimeError as e:
        msg = str(e).lower()
        if any(k in msg for k in ("unknown model", "not found", "download", "pretrained", "checkpoint")):
            raise weights_unavailable(str(w), looked, "backbone=... or --weights MODEL/TAG", e) from None
        raise
    except (OSError, ValueError) as e:
        raise weights_unavailable(str(w), looked, "backbone=... or --weights MODEL/TAG", e) from None
    tokenizer = open_clip.get_tokenizer(w.model)
    model.eval()
    return model, preprocess, tokenizer


# ------------------------------------------------------------------------------------------- helpers
OPENAI_MEAN = (0.48145466, 0.4578275, 0.40821073)
OPENAI_STD = (0.26862954, 0.26130258, 0.27577711)


def clip_preprocess_cfg(model: Any) -> dict[str, Any]:
    """The model's preprocessing: ``size (h, w)``, ``mean``, ``std``, ``interpolation``, ``resize_mode``.

    Read from ``model.visual.preprocess_cfg`` (open_clip >= 2.23) or the legacy ``image_size`` /
    ``image_mean`` / ``image_std`` attributes; mean/std default to OpenAI's when the model has none
    (models built in code, e.g. :func:`genmetrics.testing.tiny_clip`).

    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> cfg = clip_preprocess_cfg(model)
    >>> cfg["size"], cfg["resize_mode"], cfg["mean"][0]
    ((32, 32), 'shortest', 0.48145466)
    """
    visual = getattr(model, "visual", model)
    cfg = dict(getattr(visual, "preprocess_cfg", None) or {})
    size = cfg.get("size", getattr(visual, "image_size", 224))
    if isinstance(size, int):
        size = (size, size)
    mean = cfg.get("mean") or getattr(visual, "image_mean", None) or OPENAI_MEAN
    std = cfg.get("std") or getattr(visual, "image_std", None) or OPENAI_STD
    return {
        "size": (int(size[0]), int(size[1])),
        "mean": tuple(float(m) for m in mean),
        "std": tuple(float(s) for s in std),
        "interpolation": cfg.get("interpolation", "bicubic"),
        "resize_mode": cfg.get("resize_mode", "shortest"),
        "fill_color": cfg.get("fill_color", 0),
    }


def _model_device(model: Any) -> Any:
    import torch

    for p in model.parameters():
        return p.device
    return torch.device("cpu")


def clip_image_batch(
    images: Any,
    model: Any,
    *,
    data_range: float = 1.0,
    name: str = "images",
    device: Any = None,
    dtype: Any = None,
):
    """Images in any form of the image contract -> the model's input tensor ``[B,3,h,w]`` (float32).

    Resizes with the model's preprocessing config (``shortest``: shorter side to the input size then
    centre crop, like open_clip's ``preprocess``; ``longest``: fit inside and pad; ``squash``: resize
    without keeping the aspect ratio), then normalises with the model's mean/std (OpenAI's when the
    model carries none). The tensor lands on ``device`` (default: the model's device) as ``dtype``
    (default: the dtype of the model's floating-point weights, so bf16/fp16 models get matching input).

    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> x = clip_image_batch([random_images(1, 48)[0], random_images(1, 64, height=40)[0]], model)
    >>> tuple(x.shape), x.dtype  # both at the model's 32 px input
    ((2, 3, 32, 32), torch.float32)
    """
    import torch
    import torch.nn.functional as F

    from genmetrics.data.images import load_batch

    cfg = clip_preprocess_cfg(model)
    th, tw = cfg["size"]
    mode = "bilinear" if cfg["interpolation"] == "bilinear" else "bicubic"

    def resize(x: torch.Tensor, hw: tuple[int, int]) -> torch.Tensor:
        if tuple(x.shape[-2:]) == hw:
            return x
        y = F.interpolate(x.unsqueeze(0), size=hw, mode=mode, antialias=True, align_corners=False)
        return y.squeeze(0).clamp_(0.0, 1.0)

    out = []
    for x in load_batch(images, data_range=data_range, name=name):
        h, w = int(x.shape[-2]), int(x.shape[-1])
        if cfg["resize_mode"] == "squash":
            y = resize(x, (th, tw))
        elif cfg["resize_mode"] == "longest":
            scale = min(th / h, tw / w)
            nh, nw = max(1, round(h * scale)), max(1, round(w * scale))
            y = torch.full((3, th, tw), float(cfg["fill_color"]) / 255.0, dtype=x.dtype, device=x.device)
            top, left = (th - nh) // 2, (tw - nw) // 2
            y[:, top : top + nh, left : left + nw] = resize(x, (nh, nw))
        else:  # "shortest": resize so the image covers the target, then centre-crop
            scale = max(th / h, tw / w)
            nh, nw = max(th, round(h * scale)), max(tw, round(w * scale))
            y = resize(x, (nh, nw))
            top, left = (nh - th) // 2, (nw - tw) // 2
            y = y[:, top : top + th, left : left + tw]
        out.append(y)
    batch = torch.stack(out, 0)
    mean = torch.tensor(cfg["mean"], dtype=batch.dtype).view(1, 3, 1, 1)
    std = torch.tensor(cfg["std"], dtype=batch.dtype).view(1, 3, 1, 1)
    batch = (batch - mean) / std
    if dtype is None:
        dtype = next((p.dtype for p in model.parameters() if p.is_floating_point()), torch.float32)
    return batch.to(device=device if device is not None else _model_device(model), dtype=dtype)


def _token_count(tokenizer: Any, text: str) -> int | None:
    """Tokens ``text`` needs including start/end tokens, or None when the tokenizer cannot say."""
    try:
        if hasattr(tokenizer, "encode") and hasattr(tokenizer, "eot_token_id"):  # open_clip SimpleTokenizer
            return len(tokenizer.encode(text)) + 2
        inner = getattr(tokenizer, "tokenizer", None)  # open_clip HFTokenizer wraps a transformers tokenizer
        if inner is not None and callable(inner):
            return len(inner(text, truncation=False)["input_ids"])
    except Exception:  # noqa: BLE001 - counting is best effort; tokenizing below is what matters
        return None
    return None


def tokenize(tokenizer: Any, texts: Any, *, name: str = "text", positions: list[list[int]] | None = None):
    """Tokenize ``texts`` (a string or a list of strings) -> ``LongTensor [N, context_length]``.

    Text longer than the tokenizer's context is truncated **by the tokenizer**, which keeps the end
    token (open_clip's ``SimpleTokenizer`` puts it back at the last position, Hugging Face tokenizers
    truncate inside the special tokens); ids are never sliced here. A ``UserWarning`` names every text
    that was truncated. ``positions`` (for de-duplicated texts): where each text occurs in the caller's
    list, so the warning counts and names those places.

    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> ids = tokenize(tokenizer, ["a cat", "a photo of a red car"])
    >>> tuple(ids.shape), int((ids[0] != 0).sum()) < int((ids[1] != 0).sum())  # [N, context_length]
    ((2, 16), True)
    """
    import warnings

    from genmetrics.metric import as_text_list

    texts = as_text_list(texts, name=name)
    ctx = getattr(tokenizer, "context_length", None)
    ids = tokenizer(texts)
    if ctx is None:
        ctx = int(ids.shape[-1])
    long: list[tuple[int, str, int | None]] = []  # (row, text, token count if known)
    pad = _pad_id(tokenizer)
    for i, t in enumerate(texts):
        if pad is not None and int(ids[i, -1]) == pad:
            continue  # the row ends in padding: the text fit (no second tokenization needed)
        n = _token_count(tokenizer, t)
        if n is None:  # unknown: a full row may mean truncation
            if int(ids[i, -1]) != 0:
                long.append((i, t, None))
        elif n > ctx:
            long.append((i, t, n))
    if long and positions is not None:
        long = sorted((p, t, n) for i, t, n in long for p in positions[i])
    if long:
        first = long[0]
        what = f"{first[2]} tokens" if first[2] is not None else "possibly more tokens than fit"
        warnings.warn(
            f"{name}: {len(long)} text(s) exceed the text encoder's context of {ctx} tokens and were truncated "
            f"(first: {name}[{first[0]}] {first[1][:60]!r}, {what}); the end token is kept. Shorten the text "
            "to score all of it.",
            UserWarning,
            stacklevel=2,
        )
    return ids


def _pad_id(tokenizer: Any) -> int | None:
    """The id that pads a row after the end token: 0 for open_clip's ``SimpleTokenizer``, the wrapped
    tokenizer's ``pad_token_id`` for Hugging Face tokenizers; None when unknown."""
    if hasattr(tokenizer, "encode") and hasattr(tokenizer, "eot_token_id"):
        return 0
    inner = getattr(tokenizer, "tokenizer", None)
    pad = getattr(inner, "pad_token_id", None)
    return int(pad) if isinstance(pad, int) else None


# ------------------------------------------------------------------------------ text encoding
def _text_tower(model: Any) -> tuple[Any, str, int | None] | None:
    """``(tower, pool_type, eos_id)`` when ``model``'s text tower is open_clip's causal transformer (the
    ``CLIP`` class, or a ``TextTransformer`` without an appended class token), else None.

    Only then may the padding after the end token be cut: with a causal mask no position attends to a
    later one, so the outputs at and before the end token do not depend on what follows it, and the
    pooled token (``argmax`` = the end token, ``eos``, ``first``) is one of those.
    """
    tower = (
        model
        if hasattr(model, "token_embedding") and hasattr(model, "transformer")
        else getattr(model, "text", None)
    )
    if tower is None or not all(
        hasattr(tower, a)
        for a in ("token_embedding", "positional_embedding", "transformer", "ln_final", "attn_mask")
    ):
        return None
    if tower is model:
        pool, eos = getattr(model, "text_pool_type", "argmax"), getattr(model, "text_eos_id", None)
    else:
        if getattr(tower, "cls_emb", None) is not None or not hasattr(tower, "_embeds"):
            return None  # CoCa-style towers pool a class token appended after the padding
        pool, eos = getattr(tower, "pool_type", "argmax"), getattr(tower, "eos_id", None)
    mask = tower.attn_mask
    if mask is None or pool not in ("argmax", "eos", "first"):
        return None
    return tower, pool, eos


def trim_padding(ids: Any, pad_id: int | None) -> Any:
    """Drop the trailing columns that are padding in every row (``ids`` unchanged when nothing to cut).

    >>> import torch
    >>> trim_padding(torch.tensor([[5, 6, 0, 0], [5, 0, 0, 0]]), 0).tolist()
    [[5, 6], [5, 0]]
    """
    if pad_id is None or ids.shape[-1] == 0:
        return ids
    used = (ids != pad_id).any(0).nonzero()
    n = int(used[-1]) + 1 if used.numel() else 1
    return ids if n == ids.shape[-1] else ids[:, :n]


def _call_in(module: Any, dtype: Any, *args: Any, **kwargs: Any) -> Any:
    """``module(*args, **kwargs)`` with its floating-point parameters and buffers converted to ``dtype``
    for this call only (``torch.func.functional_call``; the module keeps its own weights)."""
    if dtype is None:
        return module(*args, **kwargs)
    from itertools import chain

    from torch.func import functional_call

    state = {
        k: t.to(dtype) if t.is_floating_point() else t
        for k, t in chain(module.named_parameters(), module.named_buffers())
    }
    return functional_call(module, state, args, kwargs)


def encode_text_ids(model: Any, ids: Any, *, pad_id: int | None = 0, dtype: Any = None):
    """``model.encode_text(ids)`` run on the ids cut after the longest text in the batch.

    Equal to the full-context call for open_clip's causal text towers (see :func:`_text_tower`; tested
    on the tiny models, incl. the pad-mask variant); any other text tower gets the full ``ids``.
    ``dtype`` (e.g. ``torch.float64``): run such a tower in that precision, converting one block's
    weights at a time (the model is not modified); other towers ignore it.

    >>> import torch
    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> ids = tokenize(tokenizer, ["a cat", "a photo of a red car"])
    >>> torch.allclose(encode_text_ids(model, ids), model.encode_text(ids), atol=1e-5)  # same, on fewer columns
    True
    """
    import torch

    found = _text_tower(model)
    short = trim_padding(ids, pad_id) if found is not None else ids
    if found is None or (short is ids and dtype is None):
        return model.encode_text(ids)
    tower, pool, eos = found
    from open_clip.transformer import text_global_pool

    n = short.shape[-1]
    if tower is model:
        mask = tower.attn_mask[:n, :n]
    else:
        _, mask = tower._embeds(short)  # slices the position table; builds the pad mask at this length
        if mask is not None and mask.shape[-1] != n:
            mask = mask[..., :n, :n]
    cast = dtype or tower.transformer.get_cast_dtype()
    x = tower.token_embedding(short).to(cast) + tower.positional_embedding[:n].to(cast)
    if dtype is None:
        x = tower.transformer(x, attn_mask=mask)
    else:
        blocks = list(tower.transformer.resblocks)
        if (mask is None or (mask.dim() == 2 and mask.is_floating_point())) and all(
            _plain_block(b) for b in blocks
        ):
            wrap = _sdpa_block_module()  # SDPA instead of nn.MultiheadAttention's float64 slow path
            m = None if mask is None else mask.to(dtype)
            for block in blocks:  # one block's weights converted at a time
                x = _call_in(wrap(block), dtype, x, attn_mask=m)
        else:
            first = getattr(tower.transformer, "batch_first", True)
            x = x if first else x.transpose(0, 1)
            for block in blocks:
                x = _call_in(block, dtype, x, attn_mask=None if mask is None else mask.to(dtype))
            x = x if first else x.transpose(0, 1)
    x = _call_in(tower.ln_final, dtype, x)
    x = text_global_pool(x, short, pool, eos_token_id=eos)
    proj = tower.text_projection
    if proj is not None:
        x = _call_in(proj, dtype, x) if isinstance(proj, torch.nn.Module) else x @ proj.to(x.dtype)
    return x


class TextEmbeddingCache:
    """Text embeddings keyed by the text, so each distinct prompt or attribute is encoded once per metric.

    :meth:`embed` tokenizes only the texts it has not seen (one truncation warning for those), encodes
    them in one call with the context cut to the longest (:func:`encode_text_ids`), and keeps the
    embeddings (at most ``max_entries``, least recently used dropped first). ``dtype=None``: the model's
    precision, kept as float32; ``dtype=torch.float64``: the text tower runs in float64 (see
    :func:`encode_text_ids`) and float64 embeddings are kept. A different model, device or dtype starts
    a fresh cache.

    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> cache = TextEmbeddingCache()
    >>> emb = cache.embed(model, tokenizer, ["a cat", "a dog", "a cat"])
    >>> _ = cache.embed(model, tokenizer, ["a dog"])  # seen: not encoded again
    >>> tuple(emb.shape), len(cache), cache.encoded, bool((emb[0] == emb[2]).all())
    ((3, 32), 2, 2, True)
    """

    def __init__(self, max_entries: int = 50_000, *, dtype: Any = None) -> None:
        from collections import OrderedDict

        self.max_entries = int(max_entries)
        self.dtype = dtype
        self._store: OrderedDict[str, Any] = OrderedDict()
        self._owner: tuple | None = None
        self.encoded = 0  # texts sent through the text tower (for tests and benchmarks)

    def __len__(self) -> int:
        return len(self._store)

    def clear(self) -> None:
        self._store.clear()

    def embed(self, model: Any, tokenizer: Any, texts: Any, *, name: str = "text", normalize: bool = False):
        """``[N,E]`` embeddings of ``texts`` on the model's device (L2-normalised if asked): float32, or
        ``self.dtype`` when set."""
        import torch
        import torch.nn.functional as F

        from genmetrics.metric import as_text_list

        texts = as_text_list(texts, name=name)
        p = next(iter(model.parameters()), None)
        owner = (id(model), str(p.device) if p is not None else "cpu", str(p.dtype) if p is not None else "")
        if owner != self._owner:
            self._store.clear()
            self._owner = owner
        where: dict[str, list[int]] = {}
        for i, t in enumerate(texts):
            if t not in self._store:
                where.setdefault(t, []).append(i)
        todo = list(where)
        if todo:
            ids = tokenize(tokenizer, todo, name=name, positions=list(where.values())).to(
                _model_device(model)
            )
            with torch.inference_mode():
                emb = encode_text_ids(model, ids, pad_id=_pad_id(tokenizer), dtype=self.dtype)
                emb = emb.float() if self.dtype is None else emb.to(self.dtype)
            self.encoded += len(todo)
            for t, e in zip(todo, emb):
                self._store[t] = e
        out = []
        for t in texts:
            self._store.move_to_end(t)
            out.append(self._store[t])
        while len(self._store) > self.max_entries:
            self._store.popitem(last=False)
        x = torch.stack(out)
        return F.normalize(x, dim=-1) if normalize else x


# ------------------------------------------------------------------------------ image encoding
_QUICKGELU_ALPHA = 1.702


def _fast_vision_tower(model: Any) -> Any | None:
    """``model.visual`` when :func:`encode_image` may run it block by block, else None.

    Only open_clip's own classes with their own forwards qualify (``CLIP``/``CustomTextCLIP.encode_image``,
    ``VisionTransformer`` with class-token or mean pooling and no attention pooler, plain
    ``ResidualAttentionBlock`` self-attention blocks); a subclass or any other tower keeps its own
    ``encode_image``.
    """
    import torch
    from open_clip import model as oc_model
    from open_clip import transformer as oc_t

    enc = getattr(type(model), "encode_image", None)
    if enc not in (oc_model.CLIP.encode_image, oc_model.CustomTextCLIP.encode_image):
        return None
    v: Any = getattr(model, "visual", None)
    if type(v) is not oc_t.VisionTransformer or v.training or torch.is_grad_enabled():
        return None
    if getattr(v, "attn_pool", None) is not None or getattr(v, "output_tokens", False):
        return None
    if getattr(v, "pool_type", None) not in ("tok", "avg") or not hasattr(v, "_embeds"):
        return None
    return v if all(_plain_block(blk) for blk in v.transformer.resblocks) else None


def _plain_block(blk: Any) -> bool:
    """Whether ``blk`` is open_clip's plain ``ResidualAttentionBlock`` (self-attention through a packed
    ``nn.MultiheadAttention`` without extra keys, MLP ``c_fc -> gelu -> c_proj``), which
    :func:`_vision_block` reproduces."""
    import torch
    from open_clip import transformer as oc_t

    attn = getattr(blk, "attn", None)
    return not (
        type(blk) is not oc_t.ResidualAttentionBlock
        or hasattr(blk, "ln_1_kv")
        or type(attn) is not torch.nn.MultiheadAttention
        or attn.in_proj_weight is None
        or attn.bias_k is not None
        or attn.add_zero_attn
        or list(blk.mlp._modules) != ["c_fc", "gelu", "c_proj"]
    )


@functools.cache
def _sdpa_block_module() -> Any:
    """A module class wrapping one plain block so that :func:`_call_in` can run :func:`_vision_block` on
    it with converted weights (``wrap(block)(x, attn_mask)``; the block is not modified)."""
    import torch

    class SdpaBlock(torch.nn.Module):
        def __init__(self, blk: Any) -> None:
            super().__init__()
            self.blk = blk

        def forward(self, x: Any, attn_mask: Any = None) -> Any:
            return _vision_block(self.blk, x, attn_mask=attn_mask)

    return SdpaBlock


def _mlp(mlp: Any, x: Any) -> Any:
    """``mlp(x)``; QuickGELU ``h * sigmoid(1.702 h)`` as ``silu(1.702 h) / 1.702`` with both scalings inside
    the matrix products (one fused pass instead of three over the widest activation)."""
    import torch
    import torch.nn.functional as F
    from open_clip.transformer import QuickGELU

    fc, proj = mlp.c_fc, mlp.c_proj
    if type(mlp.gelu) is not QuickGELU:
        return proj(mlp.gelu(fc(x)))
    a = _QUICKGELU_ALPHA
    shape = x.shape
    h = torch.addmm(fc.bias, x.reshape(-1, shape[-1]), fc.weight.t(), beta=a, alpha=a)
    F.silu(h, inplace=True)
    y = torch.addmm(proj.bias, h, proj.weight.t(), alpha=1.0 / a)
    return y.reshape(*shape[:-1], y.shape[-1])


# oneDNN linear with weights reordered once into its blocked layout: about 12% less time than MKL's sgemm
# (``F.linear``) for ViT-B/16's products on this machine's AVX-512 CPU, and each output row is the same
# whatever the number of rows (tested down to one row), so scores stay independent of the batch.
_PACK_HINT = 32 * 197  # rows the layout is chosen for (fixed, so every call uses the same packed weights)
_packed: dict[str, Any] = {}  # at most one vision tower: {"tower": weakref, "key": ..., "blocks": {id: ...}}


def _onednn_linear() -> bool:
    """Whether ``torch.ops.mkldnn`` has the packed-weight linear (it exists in current torch CPU builds)."""
    import torch

    try:
        ops = torch.ops.mkldnn
        if not torch.backends.mkldnn.is_available():
            return False
        w = ops._reorder_linear_weight(torch.ones(2, 3), 4)
        y = ops._linear_pointwise(torch.ones(1, 3), w, torch.zeros(2), "none", [], "")
        return bool(torch.equal(y, torch.full((1, 2), 3.0)))
    except Exception:  # noqa: BLE001 - an older or different build: the plain products are used
        return False


_onednn_ok = functools.cache(_onednn_linear)


def _pack_key(v: Any) -> tuple | None:
    """Identity of ``v``'s current weights: storage and in-place version of every parameter; None when a
    parameter is an inference tensor (made under ``torch.inference_mode``), which has no version counter,
    so an in-place change could not be seen: such towers are packed again at every call."""
    params = list(v.parameters())
    if any(p.is_inference() for p in params):
        return None
    return tuple((p.data_ptr(), p._version, p.dtype) for p in params)


class PackedBlock:
    """The matrix products of one plain open_clip ``ResidualAttentionBlock`` (in-projection, out-projection,
    MLP) on oneDNN weights packed once; see :func:`packed_vision_blocks`. Inputs ``[..., D]``.

    >>> import torch
    >>> from genmetrics.testing import tiny_clip
    >>> model, _ = tiny_clip()
    >>> blk = model.visual.transformer.resblocks[0]
    >>> x = torch.randn(2, 5, 64, generator=torch.Generator().manual_seed(0))
    >>> with torch.no_grad():
    ...     packed = packed_vision_blocks(model.visual)
    ...     same = packed is None or torch.allclose(packed[0].mlp(x), blk.mlp(x), atol=1e-5)
    >>> same
    True
    """

    def __init__(self, blk: Any) -> None:
        import torch
        from open_clip.transformer import QuickGELU

        reorder = torch.ops.mkldnn._reorder_linear_weight
        attn, mlp = blk.attn, blk.mlp
        self.quick = type(mlp.gelu) is QuickGELU
        a = _QUICKGELU_ALPHA if self.quick else 1.0  # silu(a h) / a: a inside c_fc, 1/a inside c_proj
        self._gelu = mlp.gelu
        self._in = (reorder(attn.in_proj_weight.contiguous(), _PACK_HINT), attn.in_proj_bias)
        self._out = (reorder(attn.out_proj.weight.contiguous(), _PACK_HINT), attn.out_proj.bias)
        self._fc = (
            reorder((mlp.c_fc.weight * a).contiguous(), _PACK_HINT),
            None if mlp.c_fc.bias is None else mlp.c_fc.bias * a,
        )
        self._proj = (reorder((mlp.c_proj.weight / a).contiguous(), _PACK_HINT), mlp.c_proj.bias)

    @staticmethod
    def _lin(x: Any, wb: tuple, act: str = "none") -> Any:
        import torch

        return torch.ops.mkldnn._linear_pointwise(x, wb[0], wb[1], act, [], "")

    def in_proj(self, h: Any) -> Any:
        """``[..., D] -> [..., 3D]``: q, k, v as ``nn.MultiheadAttention`` packs them."""
        return self._lin(h, self._in)

    def out_proj(self, o: Any) -> Any:
        return self._lin(o, self._out)

    def mlp(self, h: Any) -> Any:
        """``c_proj(gelu(c_fc(h)))``; QuickGELU's silu fused into the ``c_fc`` product."""
        if self.quick:
            return self._lin(self._lin(h, self._fc, "swish"), self._proj)
        return self._lin(self._gelu(self._lin(h, self._fc)), self._proj)


def packed_vision_blocks(visual: Any) -> list[PackedBlock] | None:
    """One :class:`PackedBlock` per block of the open_clip ``VisionTransformer`` ``visual``, when its
    products may run on packed oneDNN weights: float32 on the CPU, without autograd, every block plain
    (see :func:`_plain_block`) and a torch build with oneDNN's packed linear; else None (use the blocks'
    own modules). About 12% faster than ``F.linear`` on ViT-B/16's products on an AVX-512 CPU, and each
    output row is the same whatever the number of rows, so results do not depend on the batch.

    The packed copy is kept for the last tower seen while its parameters are unchanged (storage and
    in-place version of each: an optimizer step or ``load_state_dict`` repacks), one extra copy of its
    linear weights (about 340 MB for ViT-B/16; :func:`release_packed_weights` frees it). Weights made under
    ``torch.inference_mode`` have no version counter: they are packed at every call, never kept.

    >>> import torch
    >>> from genmetrics.testing import tiny_clip
    >>> model, _ = tiny_clip()
    >>> with torch.enable_grad():
    ...     packed_vision_blocks(model.visual) is None  # autograd: the modules' own products
    True
    """
    import weakref

    import torch

    blocks = list(getattr(getattr(visual, "transformer", None), "resblocks", []))
    p = next(visual.parameters(), None)
    if (
        p is None
        or not blocks
        or p.device.type != "cpu"
        or p.dtype != torch.float32
        or torch.is_grad_enabled()
        or not all(_plain_block(b) for b in blocks)
        or not _onednn_ok()
    ):
        return None
    key = _pack_key(visual)
    ref = _packed.get("tower")
    if key is not None and ref is not None and ref() is visual and _packed.get("key") == key:
        return _packed["blocks"]
    _packed.clear()  # a different tower or changed weights: drop the old copy before building the new one
    out = [PackedBlock(blk) for blk in blocks]
    if key is not None:
        _packed.update(tower=weakref.ref(visual), key=key, blocks=out)
    return out


def release_packed_weights() -> bool:
    """Free the packed copy of the last open_clip vision tower :func:`encode_image` ran on the CPU
    (it is rebuilt on the next call); True when there was one.

    >>> import torch
    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, _ = tiny_clip()
    >>> with torch.no_grad():
    ...     _ = encode_image(model, clip_image_batch(random_images(1), model))
    >>> release_packed_weights(), release_packed_weights()
    (True, False)
    """
    had = bool(_packed)
    _packed.clear()
    return had


def _packed_mlp_block(blk: Any, x: Any, packed: PackedBlock) -> Any:
    """:func:`_vision_block` (all rows, no mask) with the products on packed oneDNN weights."""
    import torch.nn.functional as F

    b, n, d = x.shape
    q, k, v = packed.in_proj(blk.ln_1(x)).view(b, n, 3, blk.attn.num_heads, -1).permute(2, 0, 3, 1, 4)
    o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, n, d)
    x = x + blk.ls_1(packed.out_proj(o))
    return x + blk.ls_2(packed.mlp(blk.ln_2(x)))


def _vision_block(blk: Any, x: Any, *, first_only: bool = False, attn_mask: Any = None) -> Any:
    """One ``ResidualAttentionBlock`` on ``x [B,L,D]`` with ``F.scaled_dot_product_attention``; with
    ``first_only`` only the first token's output ``[B,1,D]`` is computed (keys/values still use all).
    ``attn_mask``: an additive ``[L,L]`` float mask, as open_clip's causal text tower passes it (a boolean
    mask would mean the opposite to SDPA and to ``nn.MultiheadAttention``, so callers never pass one).

    The first-token rows go through their matrix products one image at a time: a product over B rows
    rounds differently for different B, and a score must not depend on what else is in the batch.
    """
    import torch
    import torch.nn.functional as F

    attn = blk.attn
    b, n, d = x.shape
    heads = attn.num_heads
    h = blk.ln_1(x)
    w, bias = attn.in_proj_weight, attn.in_proj_bias
    if not first_only:
        q, k, v = F.linear(h, w, bias).view(b, n, 3, heads, -1).permute(2, 0, 3, 1, 4)
        o = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask).transpose(1, 2).reshape(b, n, d)
        x = x + blk.ls_1(attn.out_proj(o))
        return x + blk.ls_2(_mlp(blk.mlp, blk.ln_2(x)))
    k, v = (
        F.linear(h, w[d:], None if bias is None else bias[d:]).view(b, n, 2, heads, -1).permute(2, 0, 3, 1, 4)
    )
    bq = None if bias is None else bias[:d]
    q = torch.stack([F.linear(h[i, :1], w[:d], bq) for i in range(b)]).view(b, 1, heads, -1).transpose(1, 2)
    o = F.scaled_dot_product_attention(q, k, v).transpose(1, 2).reshape(b, 1, d)
    rows = []
    for i in range(b):
        y = x[i, :1] + blk.ls_1(attn.out_proj(o[i]))
        rows.append(y + blk.ls_2(_mlp(blk.mlp, blk.ln_2(y))))
    return torch.stack(rows)


def encode_image(model: Any, pixels: Any) -> Any:
    """``model.encode_image(pixels)`` for inference, faster on open_clip ViTs (issue 16).

    Under ``torch.no_grad()``/``inference_mode`` on an eval-mode open_clip ``VisionTransformer`` (see
    :func:`_fast_vision_tower`) the blocks run with ``F.scaled_dot_product_attention`` instead of
    ``nn.MultiheadAttention``'s fast path (bmm + softmax), QuickGELU as one fused ``silu`` pass, and --
    with class-token pooling -- the last block only for the class token (layer norm, MLP and attention
    rows are per token, so no other output feeds the pooled one). Equal to ``model.encode_image`` up to
    float32 rounding (tested within 1e-5); anything else, or with gradients enabled, calls
    ``model.encode_image``. The model itself is not modified.

    >>> import torch
    >>> from genmetrics.testing import random_images, tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> x = clip_image_batch(random_images(2), model)
    >>> with torch.no_grad():
    ...     torch.allclose(encode_image(model, x), model.encode_image(x), atol=1e-5)
    True
    """
    import torch

    v = _fast_vision_tower(model)
    if v is None:
        return model.encode_image(pixels)
    x = v._embeds(pixels)
    blocks = list(v.transformer.resblocks)
    cls_only = v.pool_type == "tok"
    packed = packed_vision_blocks(v) if x.dtype == torch.float32 and x.device.type == "cpu" else None
    for i, blk in enumerate(blocks[:-1] if cls_only else blocks):
        x = _vision_block(blk, x) if packed is None else _packed_mlp_block(blk, x, packed[i])
    if cls_only and blocks:
        x = _vision_block(blocks[-1], x, first_only=True)
    if cls_only:
        pooled = v.ln_post(x[:, 0])  # layer norm is per token: before or after pooling is the same
    elif getattr(v, "final_ln_after_pool", False):
        pooled = v.ln_post(x[:, 1:].mean(dim=1))
    else:
        pooled = v.ln_post(x)[:, 1:].mean(dim=1)
    proj = v.proj
    if proj is not None:
        pooled = proj(pooled) if isinstance(proj, torch.nn.Module) else pooled @ proj
    return pooled
