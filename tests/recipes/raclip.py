"""Tiny-backbone recipes for the contract test (see ``tests.recipes.metric_recipe``)."""

from __future__ import annotations

from typing import Any

ATTRS = ["smiling", "wearing hat", "a red car"]


def _clip() -> dict[str, Any]:
    from genmetrics.testing import tiny_clip

    model, tok = tiny_clip()
    return {"backbone": model, "tokenizer": tok}


def _images(n: int, seed: int):
    from genmetrics.testing import random_images

    return random_images(n, 32, seed=seed)


def _per_image() -> list[dict[str, Any]]:
    imgs = _images(5, 11)
    return [{"candidates": imgs[:2]}, {"candidates": imgs[2:]}]


def _sets() -> list[dict[str, Any]]:
    real, gen = _images(5, 21), _images(4, 22)
    gen = (gen.int() // 2).to(gen.dtype)  # a darker generated set, so divergences are not ~0
    return [{"reference": real[:3]}, {"candidates": gen[:2]}, {"reference": real[3:], "candidates": gen[2:]}]


def _raclip() -> dict[str, Any]:
    return {"kwargs": {**_clip(), "attributes": ATTRS}, "updates": _per_image()}


def _clipscore() -> dict[str, Any]:
    return {"kwargs": {**_clip(), "attributes": ATTRS}, "updates": _per_image()}


def _hcs() -> dict[str, Any]:
    real, gen = _images(4, 31), _images(4, 32)
    return {
        "kwargs": {**_clip(), "attributes": ATTRS},
        "updates": [
            {"candidates": gen[:2]},
            {"reference": real[:2], "candidates": gen[2:]},
            {"reference": real[2:]},
        ],
    }


def _sad() -> dict[str, Any]:
    return {"kwargs": {**_clip(), "attributes": ATTRS}, "updates": _sets()}


def _pad() -> dict[str, Any]:
    return {"kwargs": {**_clip(), "attributes": ATTRS}, "updates": _sets()}


def _rsad() -> dict[str, Any]:
    return {"kwargs": {**_clip(), "attributes": ATTRS}, "updates": _sets()}


RECIPES = {"raclip": _raclip, "clipscore": _clipscore, "hcs": _hcs, "sad": _sad, "pad": _pad, "rsad": _rsad}
