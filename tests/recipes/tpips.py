"""Contract-test recipes (``tests/test_contract.py``): the ``tpips`` metric on the tiny random Qwen3-VL."""

from __future__ import annotations

from typing import Any


def _tpips() -> dict[str, Any]:
    from genmetrics.testing import random_images, tiny_qwen3vl, tiny_qwen3vl_processor

    return {
        "kwargs": {
            "backbone": tiny_qwen3vl(seed=0),
            "processor": tiny_qwen3vl_processor(64),
            "variant": "late",
            "image_size": 64,
        },
        "updates": [
            {
                "reference": random_images(2, 64, seed=1),
                "candidates": random_images(2, 64, seed=2),
                "condition": ["lighting", "overall"],
            },
            {
                "reference": random_images(3, 64, seed=3),
                "candidates": random_images(3, 64, seed=4),
                "condition": ["pose of the cat", "color", "lighting"],
            },
        ],
    }


RECIPES = {"tpips": _tpips}
