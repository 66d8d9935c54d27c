"""Images reach the model as the official Qwen3-VL-Embedding embedder sends them: the zero-shot embedding
baseline equals an independent re-implementation of that embedder (its smart_resize on PIL, its chat
format, the processor told not to resize, last-token pooling read from the attention mask) on non-square
images; the square policy is kept as a named option; mid/early pairs share one grid."""

from __future__ import annotations

import unicodedata
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from PIL import Image

from genmetrics.tpips.loading import load_tpips
from genmetrics.tpips.model import PROMPTS, TPIPSModel, prompt_for

SIZES = [(96, 160), (70, 50), (64, 64), (20, 30), (130, 97)]  # (height, width)


def _pil(h: int, w: int, seed: int) -> Image.Image:
    g = torch.Generator().manual_seed(seed)
    x = torch.randint(0, 256, (h, w, 3), generator=g, dtype=torch.uint8)
    return Image.fromarray(x.numpy(), mode="RGB")


def official_rgb(im: Image.Image) -> Image.Image:
    """qwen_vl_utils.to_rgb, as the official embedder calls it: RGBA pasted on white through its alpha channel,
    every other mode Image.convert("RGB")."""
    if im.mode == "RGBA":
        white = Image.new("RGB", im.size, (255, 255, 255))
        white.paste(im, mask=im.split()[3])
        return white
    return im.convert("RGB")


def official_instruction(instruction: str) -> str:
    """Qwen3VLEmbedder.format_model_input: strip, then a '.' unless the last character is Unicode punctuation."""
    instruction = instruction.strip()
    if instruction and not unicodedata.category(instruction[-1]).startswith("P"):
        instruction += "."
    return instruction


def official_embeddings(vlm, processor, images: list, instructions: list[str]) -> torch.Tensor:
    """The official embedder's path, written independently of genmetrics: a path is opened with PIL (no EXIF
    rotation), qwen_vl_utils' to_rgb, transformers' smart_resize with MIN_PIXELS = 4*32*32 and
    MAX_PIXELS = 1800*32*32, PIL resize, the instruction finished as the embedder does, the chat template
    (system: instruction; user: image; generation prompt), the processor with do_resize=False, padding, last
    real token by the attention mask, L2 normalisation."""
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    resized, texts = [], []
    for im, instr in zip(images, instructions):
        im = official_rgb(Image.open(im) if isinstance(im, (str, Path)) else im)
        h, w = smart_resize(im.height, im.width, factor=32, min_pixels=4 * 32 * 32, max_pixels=1800 * 32 * 32)
        resized.append(im.resize((w, h)))
        conv = [
            {"role": "system", "content": [{"type": "text", "text": official_instruction(instr)}]},
            {"role": "user", "content": [{"type": "image", "image": resized[-1]}]},
        ]
        texts.append(processor.apply_chat_template(conv, add_generation_prompt=True, tokenize=False))
    inputs = processor(
        text=texts, images=resized, padding=True, images_kwargs={"do_resize": False}, return_tensors="pt"
    )
    with torch.no_grad():
        hidden = vlm(**inputs, use_cache=False).last_hidden_state
    mask = inputs["attention_mask"]
    col = mask.shape[1] - mask.flip(1).argmax(1) - 1
    return F.normalize(hidden[torch.arange(hidden.shape[0]), col], dim=-1)


def test_embedding_baseline_equals_official_embedder(vlm, processor):
    images = [_pil(h, w, i) for i, (h, w) in enumerate(SIZES)]
    aspects = ["lighting", "overall", "the pose of the cat", "color", "texture"]
    ref = official_embeddings(vlm, processor, images, [prompt_for("embedding_baseline", a) for a in aspects])
    model = load_tpips(
        None, backbone=vlm, processor=processor, variant="late", prompts=PROMPTS["embedding_baseline"]
    )
    assert model.resize.mode == "smart"
    z = model.embed(images, aspects)
    err = float((z - ref).abs().max())
    print(f"parity: max |embedding difference| = {err:.2e} over {len(SIZES)} images")
    assert err < 1e-5, err
    # the same images as uint8 tensors and as paths-equivalent float tensors: the same pixels, the same embeddings
    t = [torch.from_numpy(__import__("numpy").array(im)).permute(2, 0, 1) for im in images]
    assert torch.allclose(model.embed(t, aspects), z, atol=1e-6)
    assert torch.allclose(model.embed([x.float() / 255 for x in t], aspects), z, atol=1e-6)
    # the square policy is a different function on non-square images (the test can tell them apart)
    square = load_tpips(
        None,
        backbone=vlm,
        processor=processor,
        variant="late",
        prompts=PROMPTS["embedding_baseline"],
        resize="square",
        image_size=64,
    )
    assert square.resize.mode == "square"
    assert (square.embed(images[:2], aspects[:2]) - z[:2]).abs().max() > 1e-3


def test_square_option_and_adapter_policy(vlm, processor):
    m = TPIPSModel(vlm, processor, "late", resize="square")
    assert (m.resize.mode, m.image_size) == ("square", 448)
    assert TPIPSModel(vlm, processor, "late", image_size=64).resize.mode == "square"
    assert TPIPSModel(vlm, processor, "late").config_dict()["resize"] == "smart"


@pytest.mark.parametrize("variant", ["mid", "early"])
def test_pairs_share_one_grid(models_smart, variant):
    """Mid and early fusion compare token grids: both images of a pair are brought to the smart size of their
    mean size (96x160 and 64x64 -> mean 80x112 -> 64x128), each resized from its own pixels with PIL bicubic
    as the official embedder resizes (re-done here with PIL directly). Symmetric bitwise; identity exact."""
    from genmetrics.backbones.qwen_vl import smart_resize

    m = models_smart[variant]
    a, b = _pil(96, 160, 1), _pil(64, 64, 2)
    s_ab, s_ba = m.similarity([a], [b], "color"), m.similarity([b], [a], "color")
    assert torch.equal(s_ab, s_ba)
    target = smart_resize(round((96 + 64) / 2), round((160 + 64) / 2))
    assert target == (64, 128)
    by_hand = [im.resize((target[1], target[0]), Image.Resampling.BICUBIC) for im in (a, b)]
    assert torch.equal(m.similarity([by_hand[0]], [by_hand[1]], "color"), s_ab)
    assert float(m.similarity([a], [a], "color")) == pytest.approx(0.0 if variant == "mid" else 1.0, abs=1e-6)
    # a pair of equal sizes keeps each image's own official size (no resize at all for 64x128)
    c, d = _pil(64, 128, 3), _pil(64, 128, 4)
    assert m.resize.pair_size(*(torch.zeros(3, 64, 128),) * 2) == (64, 128)
    assert torch.isfinite(m.similarity([c], [d], "color")).all()


@pytest.fixture(scope="module")
def models_smart(vlm, processor):
    return {v: TPIPSModel(vlm, processor, v, probe_layers=2) for v in ("mid", "early")}
