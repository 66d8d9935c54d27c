"""Fixtures for the TPIPS tests: tiny random Qwen3-VL models (genmetrics.testing), synthetic vote files."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from PIL import Image

SIZE = 64  # the tiny processor's image size (2x2 merged tokens per image)


@pytest.fixture(scope="session")
def processor():
    from genmetrics.testing import tiny_qwen3vl_processor

    return tiny_qwen3vl_processor(SIZE)


@pytest.fixture(scope="session")
def vlm():
    """A tiny Qwen3VLModel shared by read-only tests (never wrap it with LoRA in place)."""
    from genmetrics.testing import tiny_qwen3vl

    return tiny_qwen3vl(seed=0)


@pytest.fixture(scope="session")
def models(vlm, processor):
    from genmetrics.tpips.model import TPIPSModel

    return {v: TPIPSModel(vlm, processor, v, image_size=SIZE) for v in ("late", "mid", "early")}


@pytest.fixture(scope="session")
def images():
    from genmetrics.testing import random_images

    return random_images(6, SIZE, seed=11)


def write_png(path: Path, t: torch.Tensor) -> str:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.fromarray(t.permute(1, 2, 0).numpy()).save(path)
    return str(path)


def make_triplets(
    root: Path, n: int = 8, seed: int = 0, size: int = SIZE, sources: list[str] | None = None
) -> Path:
    """``n`` synthetic odd-one-out records: (base, slightly perturbed base, unrelated image), votes [0,1,4]
    (mostly the unrelated one is odd)."""
    g = torch.Generator().manual_seed(seed)
    lines = []
    for i in range(n):
        base = torch.randint(0, 256, (3, size, size), generator=g, dtype=torch.uint8)
        near = (base.int() + torch.randint(-20, 21, base.shape, generator=g)).clamp(0, 255).to(torch.uint8)
        far = torch.randint(0, 256, (3, size, size), generator=g, dtype=torch.uint8)
        paths = [write_png(root / "img" / f"t{i}_{j}.png", t) for j, t in enumerate((base, near, far))]
        rec = {
            "id": f"t{i}",
            "images": [str(Path(p).relative_to(root)) for p in paths],
            "aspect": ["lighting", "overall", "color"][i % 3],
            "votes": [0, 1, 4],
        }
        if sources:
            rec["source"] = sources[i % len(sources)]
        lines.append(rec)
    out = root / "triplets.jsonl"
    out.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    return out


def make_two_afc(root: Path, n: int = 6, seed: int = 1, size: int = SIZE) -> Path:
    g = torch.Generator().manual_seed(seed)
    lines = []
    sources = ["editing", "compositing", "nvs", "im-to-3d"]
    for i in range(n):
        ref = torch.randint(0, 256, (3, size, size), generator=g, dtype=torch.uint8)
        c0 = (ref.int() + torch.randint(-10, 11, ref.shape, generator=g)).clamp(0, 255).to(torch.uint8)
        c1 = torch.randint(0, 256, (3, size, size), generator=g, dtype=torch.uint8)
        p = [write_png(root / "afc" / f"a{i}_{j}.png", t) for j, t in enumerate((ref, c0, c1))]
        lines.append(
            {
                "id": f"a{i}",
                "reference": str(Path(p[0]).relative_to(root)),
                "candidates": [str(Path(x).relative_to(root)) for x in p[1:]],
                "aspect": "color",
                "votes": [4, 1] if i % 3 else [2, 3],
                "source": sources[i % 4],
            }
        )
    out = root / "two_afc.jsonl"
    out.write_text("\n".join(json.dumps(r) for r in lines) + "\n")
    return out


@pytest.fixture(scope="session")
def tiny_folder(tmp_path_factory, vlm, processor):
    """The tiny model and processor saved as a local checkpoint folder (for the CLI's --weights)."""
    d = tmp_path_factory.mktemp("tiny_qwen3vl")
    vlm.save_pretrained(d)
    processor.save_pretrained(d)
    return d


@pytest.fixture(scope="module")
def gen_model():
    from genmetrics.testing import tiny_qwen3vl_for_generation

    return tiny_qwen3vl_for_generation(seed=0)


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    root = tmp_path_factory.mktemp("eval")
    return make_triplets(root, n=6, sources=None), make_two_afc(root, n=8)
