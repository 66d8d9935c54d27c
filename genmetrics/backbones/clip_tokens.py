"""Tokenising text for open_clip: truncation by the tokenizer (the end token survives) with one warning,
the padding id of each tokenizer kind, and cutting the all-padding columns."""

from __future__ import annotations

import warnings
from typing import Any

import torch

from genmetrics.data.text.inputs import as_text_list


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


def pad_id(tokenizer: Any) -> int | None:
    """The id that pads a row after the end token: 0 for open_clip's ``SimpleTokenizer``, the wrapped
    tokenizer's ``pad_token_id`` for Hugging Face tokenizers; None when unknown.

    >>> from genmetrics.testing import tiny_clip
    >>> pad_id(tiny_clip()[1]), pad_id(object())
    (0, None)
    """
    if hasattr(tokenizer, "encode") and hasattr(tokenizer, "eot_token_id"):
        return 0
    inner = getattr(tokenizer, "tokenizer", None)
    pad = getattr(inner, "pad_token_id", None)
    return int(pad) if isinstance(pad, int) else None


def tokenize(
    tokenizer: Any, texts: Any, *, name: str = "text", positions: list[list[int]] | None = None
) -> torch.Tensor:
    """Tokenize ``texts`` (a string or a list of strings) -> ``LongTensor [N, context_length]``.

    Text longer than the tokenizer's context is truncated **by the tokenizer**, which keeps the end
    token (open_clip's ``SimpleTokenizer`` puts it back at the last position, Hugging Face tokenizers
    truncate inside the special tokens); ids are never sliced here. A ``UserWarning`` names every text
    that was truncated. ``positions`` (for de-duplicated texts): where each text occurs in the caller's
    list, so the warning counts and names those places.

    >>> from genmetrics.testing import tiny_clip
    >>> model, tokenizer = tiny_clip()
    >>> ids = tokenize(tokenizer, ["a cat", "a photo of a red car"])
    >>> tuple(ids.shape), int((ids[0] != 0).sum()) < int((ids[1] != 0).sum())  # [N, context_length]
    ((2, 16), True)
    """
    texts = as_text_list(texts, name=name)
    ctx = getattr(tokenizer, "context_length", None)
    ids = tokenizer(texts)
    if ctx is None:
        ctx = int(ids.shape[-1])
    long: list[tuple[int, str, int | None]] = []  # (row, text, token count if known)
    pad = pad_id(tokenizer)
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


def trim_padding(ids: torch.Tensor, pad_id: int | None) -> torch.Tensor:
    """Drop the trailing columns that are padding in every row (``ids`` unchanged when nothing to cut).

    >>> trim_padding(torch.tensor([[5, 6, 0, 0], [5, 0, 0, 0]]), 0).tolist()
    [[5, 6], [5, 0]]
    """
    if pad_id is None or ids.shape[-1] == 0:
        return ids
    used = (ids != pad_id).any(0).nonzero()
    n = int(used[-1]) + 1 if used.numel() else 1
    return ids if n == ids.shape[-1] else ids[:, :n]
