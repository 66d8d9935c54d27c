"""Small inputs for genmetrics' contract tests (``RECIPES``, found next to the card's factory)."""

from __future__ import annotations

from typing import Any


def _mae() -> dict[str, Any]:
    import torch

    g = torch.Generator().manual_seed(0)
    ref = torch.randint(0, 256, (5, 3, 16, 16), generator=g, dtype=torch.uint8)
    noise = torch.randint(-40, 41, (5, 3, 16, 16), generator=g)
    cand = (ref.int() + noise).clamp(0, 255).to(torch.uint8)
    return {
        "kwargs": {},
        "updates": [
            {"reference": ref[:3], "candidates": cand[:3]},
            {"reference": ref[3:], "candidates": cand[3:]},
        ],
    }


RECIPES = {"mae": _mae}
