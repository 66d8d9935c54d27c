"""Tiny-backbone recipe for the contract test (see ``tests.recipes.metric_recipe``)."""

from __future__ import annotations

import tempfile
from typing import Any

from genmetrics.data.output.write_rule import make_folder


def tiny_backbone(seed: int = 0) -> Any:
    """The tiny Qwen3.5 of the MIE recipes: 2 text layers (one Gated-DeltaNet, one full attention).

    >>> tiny_backbone().config.text_config.layer_types
    ['linear_attention', 'full_attention']
    """
    from genmetrics.testing import tiny_qwen35

    return tiny_qwen35(
        seed, text_config={"num_hidden_layers": 2, "layer_types": ["linear_attention", "full_attention"]}
    )


def tiny_heads_dir(seed: int = 0, *, tuning: str = "lora_layer", unfreeze_layers: int = 1) -> str:
    """Save an (untrained, seeded) tiny MIE checkpoint in a temporary folder and return its path.

    >>> import shutil
    >>> from pathlib import Path
    >>> folder = tiny_heads_dir(0)
    >>> sorted(p.name for p in Path(folder).iterdir())
    ['mie_config.json', 'mie_weights.safetensors']
    >>> shutil.rmtree(folder)
    """
    import torch

    from genmetrics.mie.model import MIEModel
    from genmetrics.testing import tiny_qwen35_processor

    with torch.random.fork_rng(devices=[]):  # LoRA and head initialisation draw from the global RNG
        torch.manual_seed(seed)
        model = MIEModel(
            tiny_backbone(seed),
            tiny_qwen35_processor(),
            tuning=tuning,
            unfreeze_layers=unfreeze_layers,
            backbone_name="Qwen/Qwen3.5-0.8B",
        )
    with torch.no_grad():  # move LoRA B off zero so the adapter matters
        g = torch.Generator().manual_seed(seed + 1)
        for n, p in model.named_parameters():
            if "lora_B" in n:
                p.copy_(torch.randn(p.shape, generator=g) * 0.05)
    folder = tempfile.mkdtemp(prefix="genmetrics-mie-tiny-")
    model.save_pretrained(make_folder(folder))  # the write rule (genmetrics/data/output/)
    return folder


def _mie() -> dict[str, Any]:
    from genmetrics.testing import random_images, tiny_qwen35_processor

    imgs = random_images(14, 64, seed=5)
    refs = [
        [imgs[0], imgs[1]],
        [imgs[2], imgs[3], imgs[4]],
        [imgs[0], imgs[1], imgs[5], imgs[6]],
        [imgs[7], imgs[8]],
        [imgs[2]],
    ]
    cands = imgs[9:14]
    prompts = [
        "a dog and a cat",
        "three friends on a bench",
        "a dog, a cat, a chair and a lamp",
        "a woman holding a cup",
        "a teapot",
    ]
    return {
        "kwargs": {
            "backbone": tiny_backbone(0),
            "processor": tiny_qwen35_processor(),
            "heads": tiny_heads_dir(0),
        },
        "updates": [
            {"reference": refs[:3], "candidates": cands[:3], "condition": prompts[:3]},
            {"reference": refs[3:], "candidates": cands[3:], "condition": prompts[3:]},
        ],
    }


RECIPES = {"mie": _mie}
