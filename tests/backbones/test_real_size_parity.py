"""Parity at a reduced but structurally identical size (the real-size runs are benchmarks/real_size.py):

* TPIPS late fusion on the reduced Qwen3-VL-Embedding-2B config (24 vision blocks, DeepStack at 5/11/17,
  28 language layers, head_dim 128 with M-RoPE sections [24, 20, 20]) against the official embedder's
  preprocessing and pooling, re-implemented in tests/backbones/_references.py: images of awkward sizes, one
  below the official minimum budget, one padded batch;
* MIE on the reduced Qwen3.5-0.8B config (the [linear x3, full] x6 pattern, 12 vision blocks) against the
  authors' forward, with the real processor budget (min 256 x 256 pixels) and unresized images.

Tolerance 1e-4 on unit vectors / head outputs: both sides run the same float32 weights through reductions
of at most a few thousand terms (hidden 256, MLP 384, <= 2k tokens), so the rounding differences of
differently batched products are ~1e-7 x sqrt(n) x depth (< 1e-5); 1e-4 leaves a decade of margin while a
wrong token, position or read-out moves these outputs by 1e-2 or more.
"""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from tests.backbones._references import authors_mie, copy_head, official_embeddings, official_smart_resize

pytestmark = pytest.mark.slow  # two reduced-size models, about 10 s each on one thread


def _pil(h: int, w: int, seed: int) -> Image.Image:
    g = torch.Generator().manual_seed(seed)
    arr = torch.randint(0, 256, (h, w, 3), generator=g, dtype=torch.uint8).numpy()
    return Image.fromarray(arr, mode="RGB")


def test_official_smart_resize_agrees_with_genmetrics():
    from genmetrics.backbones.qwen_vl import smart_resize

    for h, w in [(20, 30), (131, 77), (768, 1024), (1400, 1600), (33, 6000), (4000, 3000)]:
        assert official_smart_resize(h, w) == smart_resize(h, w)


@pytest.fixture(scope="module")
def reduced_2b():
    from genmetrics.testing.real_models import build_real_model, processor_for

    return build_real_model("Qwen3-VL-Embedding-2B", reduced=True, seed=3), processor_for(
        "Qwen3-VL-Embedding-2B"
    )


def test_tpips_late_matches_the_official_embedder_at_reduced_size(reduced_2b):
    from genmetrics.tpips.common import prompt_for
    from genmetrics.tpips.model import TPIPSModel

    vlm, proc = reduced_2b
    images = [_pil(20, 30, 1), _pil(131, 77, 2), _pil(96, 250, 3)]  # below the minimum budget, awkward
    aspects = ["lighting", "the pose of the cat", "overall"]
    model = TPIPSModel(vlm, proc, "late", batch_size=3)
    ours = model.embed(images, aspects)
    ref = official_embeddings(vlm, proc, images, [prompt_for("late", a) for a in aspects])
    assert ours.shape == ref.shape == (3, 256)
    torch.testing.assert_close(ours, ref, atol=1e-4, rtol=0)
    # the score is their cosine: the same to 1e-4 as well
    torch.testing.assert_close(ours[0] @ ours[1], ref[0] @ ref[1], atol=1e-4, rtol=0)


def test_mie_matches_the_authors_forward_at_reduced_size():
    from genmetrics.mie.model import MIEModel
    from genmetrics.testing.real_models import build_real_model, processor_for

    vlm, proc = build_real_model("Qwen3.5-0.8B", reduced=True, seed=4), processor_for("Qwen3.5-0.8B")
    model = MIEModel(vlm, proc, image_size=None).eval()  # the default context limit: the tokenizer's
    with torch.no_grad():  # heads away from their init so every weight matters
        for p in (*model.score_head.parameters(), *model.classification_head.parameters()):
            p.add_(torch.randn(p.shape, generator=torch.Generator().manual_seed(p.numel())) * 0.05)
    refs = [_pil(120, 333, 5), _pil(301, 257, 6), _pil(64, 64, 7)]  # all below 256 x 256: upscaled
    cand = _pil(480, 640, 8)  # 300 image tokens: the sequence (~560 tokens) is longer than 512
    prompt = "a dog, a cat and a child on a sofa"
    out = model.score([refs], [prompt], [cand])
    s, d = authors_mie(
        model.vlm, proc, copy_head(model.score_head), copy_head(model.classification_head), refs, prompt, cand
    )
    assert model.prepare([refs], [prompt], [cand]).sequences[0].cost > 512  # past the tiny tokenizer's limit
    torch.testing.assert_close(out.score, s, atol=1e-4, rtol=0)
    torch.testing.assert_close(out.diagnostics, d, atol=1e-4, rtol=0)
