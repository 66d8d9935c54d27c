"""Tiny-backbone recipes for the contract test (see ``tests.recipes.metric_recipe``)."""

from __future__ import annotations

from typing import Any


def _pairs(size: int = 32, n: int = 5) -> list[dict[str, Any]]:
    from genmetrics.testing import random_images

    ref, cand = random_images(n, size, seed=1), random_images(n, size, seed=2)
    # make candidates partially similar to references so scores vary
    cand = ((ref.int() * 3 + cand.int()) // 4).to(ref.dtype)
    return [{"reference": ref[:3], "candidates": cand[:3]}, {"reference": ref[3:], "candidates": cand[3:]}]


def _psnr() -> dict[str, Any]:
    return {"kwargs": {}, "updates": _pairs()}


def _ssim() -> dict[str, Any]:
    return {"kwargs": {}, "updates": _pairs()}


def _ms_ssim() -> dict[str, Any]:
    return {"kwargs": {"betas": (0.3, 0.4, 0.3), "kernel_size": 7}, "updates": _pairs(32)}


def _clip_i() -> dict[str, Any]:
    from genmetrics.testing import tiny_clip

    model, _ = tiny_clip()
    return {"kwargs": {"backbone": model}, "updates": _pairs()}


def _dino() -> dict[str, Any]:
    from genmetrics.testing import tiny_dino

    return {"kwargs": {"backbone": tiny_dino()}, "updates": _pairs()}


RECIPES = {"psnr": _psnr, "ssim": _ssim, "ms_ssim": _ms_ssim, "clip_i": _clip_i, "dino": _dino}
