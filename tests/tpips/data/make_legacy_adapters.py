"""Write the adapter folders of ``tests/tpips/test_legacy_adapters.py`` and the scores the saving code gave.

Run once with the genmetrics whose adapters must keep loading (here main @ a90c8f4, before the fusion
variants became classes): ``PYTHONPATH=<that checkout> python tests/tpips/data/make_legacy_adapters.py``.
Everything is drawn from seeded generators on the tiny random Qwen3-VL, so the test rebuilds the same base
model and images and only the adapters and the expected scores are stored."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import torch

from genmetrics.backbones.hf import add_lora
from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor
from genmetrics.tpips.model import TPIPSModel

HERE = Path(__file__).resolve().parent / "legacy_adapters"
#: (height, width, seed) of the images a and b of each pair; the last pair mixes sizes
PAIRS = [((64, 64, 1), (64, 64, 4)), ((96, 160, 2), (96, 160, 5)), ((70, 50, 3), (64, 64, 6))]
ASPECTS = ["color", "overall", "the pose of the cat"]


def image(h: int, w: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def perturbed_model(variant: str) -> TPIPSModel:
    """LoRA r=4 on the tiny model with every trainable tensor moved off its initial value (seeded)."""
    backbone = add_lora(tiny_qwen3vl(seed=0), r=4, target_modules=["q_proj", "v_proj", "gate_proj"])
    model = TPIPSModel(backbone, tiny_qwen3vl_processor(), variant, probe_layers=2, mid_hidden=16)
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for _name, p in sorted(model.named_parameters()):
            if p.requires_grad:
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model.eval()


def main() -> None:
    commit = subprocess.run(
        ["git", "-C", str(Path(sys.modules["genmetrics"].__file__).parents[1]), "rev-parse", "HEAD"],
        capture_output=True,
        text=True,
    ).stdout.strip()
    expected: dict[str, object] = {"genmetrics_commit": commit, "pairs": PAIRS, "aspects": ASPECTS}
    for variant in ("late", "mid", "early"):
        model = perturbed_model(variant)
        model.save_pretrained(HERE / variant, base_weights="tiny_qwen3vl(seed=0)")
        scores = []
        for ((ha, wa, sa), (hb, wb, sb)), aspect in zip(PAIRS, ASPECTS):
            s = model.similarity([image(ha, wa, sa)], [image(hb, wb, sb)], [aspect])
            scores.append(float(s[0]))
        expected[variant] = scores
    (HERE / "expected.json").write_text(json.dumps(expected, indent=2) + "\n")


if __name__ == "__main__":
    main()
