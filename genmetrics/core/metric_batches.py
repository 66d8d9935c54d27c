"""Helpers for the inputs of one update: the length and the chunks of a prepared batch, meta tensors
refused by role, and :func:`eval_mode` for scoring a caller's model that may be under training.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import torch
from torch import nn

from genmetrics.errors import InputError


@contextmanager
def eval_mode(module: nn.Module) -> Iterator[nn.Module]:
    """``module`` in eval mode and without gradients inside the block; the train/eval mode of each of its
    submodules is restored after it: how a metric scores a caller's model that may be under training.

    >>> net = nn.Sequential(nn.Linear(2, 2), nn.Dropout(0.5)).train()
    >>> with eval_mode(net):
    ...     net.training, net[1].training, torch.is_grad_enabled()
    (False, False, False)
    >>> net.training, net[1].training
    (True, True)
    """
    modes = [(m, m.training) for m in module.modules()]
    module.eval()
    try:
        with torch.no_grad():
            yield module
    finally:
        for m, mode in modes:
            m.train(mode)


def batch_len(batch: dict[str, list[Any]]) -> int:
    """The number of samples of a prepared batch (``{input name: list or None}``): the common length of its
    given inputs; mismatched lengths, an empty batch or no input at all are an ``InputError``.

    >>> batch_len({"reference": None, "candidates": ["a.png", "b.png"], "condition": ["cat", "dog"]})
    2
    >>> batch_len({"candidates": ["a.png", "b.png"], "condition": ["cat"]})
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: mismatched input lengths (candidates=2, condition=1); every input needs one entry per sample
    """
    lengths = {k: len(v) for k, v in batch.items() if v is not None}
    if not lengths:
        raise InputError(
            "no inputs given; pass candidates (and reference/condition where the metric needs them)"
        )
    if len(set(lengths.values())) != 1:
        desc = ", ".join(f"{k}={v}" for k, v in lengths.items())
        raise InputError(f"mismatched input lengths ({desc}); every input needs one entry per sample")
    n = next(iter(lengths.values()))
    if n == 0:
        raise InputError("the batch is empty; pass at least one sample")
    return n


def slice_batch(batch: dict[str, Any], sl: slice) -> dict[str, Any]:
    """The samples ``sl`` of every given input of a prepared batch (absent inputs stay None): the chunks
    :class:`SampleMetric` scores ``batch_size`` at a time.

    >>> slice_batch({"reference": None, "candidates": ["a", "b", "c"]}, slice(1, 3))
    {'reference': None, 'candidates': ['b', 'c']}
    """
    return {k: (v[sl] if v is not None else None) for k, v in batch.items()}


def has_meta(value: Any, depth: int = 0) -> bool:
    """Whether ``value`` (a tensor, or lists / tuples / dicts of them, three levels deep) holds a meta tensor.

    >>> has_meta([torch.zeros(1), {"x": torch.empty(2, device="meta")}]), has_meta("a.png")
    (True, False)
    """
    if isinstance(value, torch.Tensor):
        return value.is_meta
    if isinstance(value, (list, tuple)) and depth < 3:
        return any(has_meta(v, depth + 1) for v in value)
    if isinstance(value, dict) and depth < 3:
        return any(has_meta(v, depth + 1) for v in value.values())
    return False


def meta_message(role: str) -> str:
    """The error for a meta tensor given as ``role``.

    >>> meta_message("candidates").split(":")[0]
    'candidates'
    """
    return (
        f"{role}: got a meta tensor (a shape without data), so there is nothing to score; materialise it "
        "first (load the data, or .to_empty(device=...) and fill it)"
    )
