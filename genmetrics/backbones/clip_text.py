"""open_clip text embeddings: the context cut after the longest text (exact for causal towers), an
optional float64 tower, and a per-text cache so each distinct prompt is encoded once per metric."""

from __future__ import annotations

from collections import OrderedDict
from itertools import chain
from typing import Any

import torch
import torch.nn.functional as F
from open_clip.transformer import text_global_pool
from torch.func import functional_call

from genmetrics.accel.clip_blocks import SdpaBlock, is_plain_block
from genmetrics.backbones._openclip_compat import has_embeds, text_embeds
from genmetrics.backbones.clip_preprocess import model_device
from genmetrics.backbones.clip_tokens import pad_id, tokenize, trim_padding
from genmetrics.data.text.inputs import as_text_list


def causal_text_tower(model: Any) -> tuple[Any, str, int | None] | None:
    """``(tower, pool_type, eos_id)`` when ``model``'s text tower is open_clip's causal transformer (the
    ``CLIP`` class, or a ``TextTransformer`` without an appended class token), else None.

    Only then may the padding after the end token be cut: with a causal mask no position attends to a
    later one, so the outputs at and before the end token do not depend on what follows it, and the
    pooled token (``argmax`` = the end token, ``eos``, ``first``) is one of those.

    >>> from genmetrics.testing import tiny_clip
    >>> model = tiny_clip()[0]
    >>> tower, pool, eos = causal_text_tower(model)
    >>> tower is model, pool
    (True, 'argmax')
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
        if getattr(tower, "cls_emb", None) is not None or not has_embeds(tower):
            return None  # CoCa-style towers pool a class token appended after the padding
        pool, eos = getattr(tower, "pool_type", "argmax"), getattr(tower, "eos_id", None)
    mask = tower.attn_mask
    if mask is None or pool not in ("argmax", "eos", "first"):
        return None
    return tower, pool, eos


def _call_in(module: Any, dtype: Any, *args: Any, **kwargs: Any) -> Any:
    """``module(*args, **kwargs)`` with its floating-point parameters and buffers converted to ``dtype``
    for this call only (``torch.func.functional_call``; the module keeps its own weights)."""
    if dtype is None:
        return module(*args, **kwargs)
    state = {
        k: t.to(dtype) if t.is_floating_point() else t
        for k, t in chain(module.named_parameters(), module.named_buffers())
    }
    return functional_call(module, state, args, kwargs)


def _run_blocks(tower: Any, x: torch.Tensor, mask: Any, dtype: Any) -> torch.Tensor:
    """The tower's blocks on ``x``, in ``dtype`` (one block's weights converted at a time) when given."""
    if dtype is None:
        return tower.transformer(x, attn_mask=mask)
    blocks = list(tower.transformer.resblocks)
    if (mask is None or (mask.dim() == 2 and mask.is_floating_point())) and all(
        is_plain_block(b) for b in blocks
    ):
        m = None if mask is None else mask.to(dtype)
        for block in blocks:  # SDPA instead of nn.MultiheadAttention's float64 slow path
            x = _call_in(SdpaBlock(block), dtype, x, attn_mask=m)
        return x
    first = getattr(tower.transformer, "batch_first", True)
    x = x if first else x.transpose(0, 1)
    for block in blocks:
        x = _call_in(block, dtype, x, attn_mask=None if mask is None else mask.to(dtype))
    return x if first else x.transpose(0, 1)


def encode_text_ids(
    model: Any, ids: torch.Tensor, *, pad_id: int | None = 0, dtype: Any = None
) -> torch.Tensor:
    """``model.encode_text(ids)`` run on the ids cut after the longest text in the batch.

    Equal to the full-context call for open_clip's causal text towers (see :func:`causal_text_tower`;
    tested on the tiny models, incl. the pad-mask variant); any other text tower gets the full ``ids``.
    ``dtype`` (e.g. ``torch.float64``): run such a tower in that precision, converting one block's
    weights at a time (the model is not modified); other towers ignore it.

    >>> from genmetrics.testing import tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> ids = tokenize(tokenizer, ["a cat", "a photo of a red car"])
    >>> torch.allclose(encode_text_ids(model, ids), model.encode_text(ids), atol=1e-5)  # same, on fewer columns
    True
    """
    found = causal_text_tower(model)
    short = trim_padding(ids, pad_id) if found is not None else ids
    if found is None or (short is ids and dtype is None):
        return model.encode_text(ids)
    tower, pool, eos = found
    n = short.shape[-1]
    if tower is model:
        mask = tower.attn_mask[:n, :n]
    else:
        _, mask = text_embeds(tower, short)  # slices the position table; builds the pad mask at this length
        if mask is not None and mask.shape[-1] != n:
            mask = mask[..., :n, :n]
    cast = dtype or tower.transformer.get_cast_dtype()
    x = tower.token_embedding(short).to(cast) + tower.positional_embedding[:n].to(cast)
    x = _run_blocks(tower, x, mask, dtype)
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

    >>> from genmetrics.testing import tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> cache = TextEmbeddingCache()
    >>> emb = cache.embed(model, tokenizer, ["a cat", "a dog", "a cat"])
    >>> _ = cache.embed(model, tokenizer, ["a dog"])  # seen: not encoded again
    >>> tuple(emb.shape), len(cache), cache.encoded, bool((emb[0] == emb[2]).all())
    ((3, 32), 2, 2, True)
    """

    def __init__(self, max_entries: int = 50_000, *, dtype: Any = None) -> None:
        self.max_entries = int(max_entries)
        self.dtype = dtype
        self._store: OrderedDict[str, Any] = OrderedDict()
        self._owner: tuple | None = None
        self.encoded = 0  # texts sent through the text tower (for tests and benchmarks)

    def __len__(self) -> int:
        return len(self._store)

    def clear(self) -> None:
        """Forget every embedding."""
        self._store.clear()

    def embed(
        self, model: Any, tokenizer: Any, texts: Any, *, name: str = "text", normalize: bool = False
    ) -> torch.Tensor:
        """``[N,E]`` embeddings of ``texts`` on the model's device (L2-normalised if asked): float32, or
        ``self.dtype`` when set."""
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
            ids = tokenize(tokenizer, todo, name=name, positions=list(where.values())).to(model_device(model))
            with torch.inference_mode():
                emb = encode_text_ids(model, ids, pad_id=pad_id(tokenizer), dtype=self.dtype)
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
