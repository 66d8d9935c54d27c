"""genmetrics.tpips.late: the late-fusion embedding (the cached-vision path) equals the standard transformers
forward, token ids and M-RoPE positions included."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from genmetrics.tpips.late import embedding_sequences
from genmetrics.tpips.model import TPIPSModel, prompt_for

from .conftest import SIZE


def _late_text(instruction: str) -> str:
    return (
        f"<|im_start|>system\n{instruction}<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|>"
        "<|vision_end|><|im_end|>\n<|im_start|>assistant\n"
    )


@pytest.mark.parametrize("aspect", ["lighting", "overall"])
def test_late_embedding_equals_standard_forward(vlm, processor, images, aspect):
    """The cached-vision path (inputs_embeds + own positions + DeepStack) == Qwen3VLModel(**processor(...))."""
    m = TPIPSModel(vlm, processor, "late", image_size=SIZE)
    out = processor(text=[_late_text(prompt_for("late", aspect))], images=[images[0]], return_tensors="pt")
    with torch.no_grad():
        ref = F.normalize(vlm(**out, use_cache=False).last_hidden_state[0, -1], dim=-1)
    z = m.embed([images[0]], [aspect])[0]
    assert torch.allclose(z, ref, atol=1e-5), (z - ref).abs().max()


def test_positions_and_ids_match_transformers(vlm, processor, images):
    m = TPIPSModel(vlm, processor, "late", image_size=SIZE)
    aspects = ["lighting", "the pose of the cat on the left"]
    feats = m.vision_features(m.load_images(images[:2]))
    batch = m.build_sequences(embedding_sequences(m, feats, aspects, "late"))
    texts = [_late_text(prompt_for("late", a)) for a in aspects]
    out = processor(text=texts, images=list(images[:2]), return_tensors="pt", padding=True)
    am = out["attention_mask"].bool()
    assert torch.equal(batch.attention_mask.bool(), am)
    assert torch.equal(batch.input_ids[am], out["input_ids"][am])
    pos, _ = vlm.get_rope_index(
        out["input_ids"], out["mm_token_type_ids"], out["image_grid_thw"], out["attention_mask"]
    )
    for b in range(2):
        assert torch.equal(batch.position_ids[:, b, am[b]], pos[:, b, am[b]])


def test_late_similarity_is_the_dot_product_of_the_embeddings(models, images):
    """Late fusion's score is the cosine of the two unit embeddings: written out from ``embed``, each row
    embedded alone (a row in a batch equals it alone)."""
    m = models["late"]
    a, b, asp = images[:3], images[3:6], ["lighting", "overall", "pose of the cat"]
    za, zb = m.embed(a, asp), m.embed(b, asp)
    assert torch.allclose(za.norm(dim=-1), torch.ones(3), atol=1e-6)
    alone = torch.cat([m.embed([a[i]], [asp[i]]) for i in range(3)])
    assert torch.allclose(za, alone, atol=1e-5)
    eps = torch.finfo(torch.float32).eps
    assert torch.allclose(m.similarity(a, b, asp), (za * zb).sum(-1), atol=za.shape[-1] * eps)
