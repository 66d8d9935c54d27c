"""The text input contract shared by metrics and backbones: a string or a list of non-empty strings.

It sits below both ``genmetrics.core.metric`` and ``genmetrics.backbones`` (it imports only
:mod:`genmetrics.errors`), so a tokenizer helper can check its input without importing the metric base
class.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from genmetrics.errors import InputError


def as_text_list(texts: Any, *, name: str = "condition", allow_empty: bool = False) -> list[str]:
    """A string or a list of strings -> list of stripped-checked strings (empty ones are an error).

    >>> as_text_list("a cat"), as_text_list(["a cat", "a dog"], name="prompts")
    (['a cat'], ['a cat', 'a dog'])
    >>> as_text_list(["a cat", " "], name="prompts")
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: prompts[1]: the text is empty or whitespace only; give a non-empty text
    """
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(texts, Sequence) or isinstance(texts, (bytes, bytearray)):
        raise InputError(f"{name}: expected a string or a list of strings, got {type(texts).__name__}")
    out = []
    for i, t in enumerate(texts):
        if not isinstance(t, str):
            raise InputError(f"{name}[{i}]: expected a string, got {type(t).__name__} {t!r}"[:200])
        if not allow_empty and not t.strip():
            raise InputError(f"{name}[{i}]: the text is empty or whitespace only; give a non-empty text")
        out.append(t)
    return out
