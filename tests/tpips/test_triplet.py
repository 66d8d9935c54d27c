"""genmetrics.tpips.triplet: the 3-way head untrained equals the LM head; permutation averaging; the
training forward maps shown orders back."""

from __future__ import annotations

import torch

from genmetrics.tpips.model import TPIPSTripletModel, prompt_for

from .conftest import SIZE


def test_triplet_head_zero_shot_equals_lm_head(gen_model, processor, images):
    """Untrained, the 3-way head gives exactly the LM's answer-token logits."""
    from genmetrics.testing import tiny_qwen3vl_processor

    tm = TPIPSTripletModel(gen_model, processor, image_size=SIZE)
    x = tm.load_images(images[:3])
    logits = tm.ordered_logits([x[0]], [x[1]], [x[2]], ["color"])[0]
    wide = torch.cat(x, -1)
    proc = tiny_qwen3vl_processor(3 * SIZE)  # keeps the 64x192 strip as is
    text = (
        f"<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>{prompt_for('triplet', 'color')}"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    out = proc(text=[text], images=[wide], images_kwargs={"do_rescale": False}, return_tensors="pt")
    with torch.no_grad():
        ref = gen_model(**out, use_cache=False).logits[0, -1, tm.answer_ids]
    assert torch.allclose(logits, ref, atol=1e-4), (logits, ref)


def test_triplet_permutation_averaging(gen_model, processor, images):
    tm = TPIPSTripletModel(gen_model, processor, image_size=SIZE)
    x1, x2, x3 = images[0:2], images[2:4], images[4:6]
    p = tm.odd_one_out(x1, x2, x3, ["color", "overall"])
    assert torch.allclose(p.sum(1), torch.ones(2), atol=1e-5)
    q = tm.odd_one_out(x2, x3, x1, ["color", "overall"])  # the same triplets, rotated
    assert torch.allclose(q, p[:, [1, 2, 0]], atol=1e-5)
    t = tm.two_afc(x1, x2, x3, ["color", "overall"])
    assert torch.allclose(t.sum(1), torch.ones(2), atol=1e-5)
    assert torch.allclose(tm.two_afc(x1, x3, x2, ["color", "overall"]), t[:, [1, 0]], atol=1e-5)
    # training forward maps a shown permutation back to the original positions
    ims = [tm.load_images(v) for v in (x1, x2, x3)]
    back = tm(*ims, ["color", "overall"], [(2, 0, 1), (0, 1, 2)])
    direct = tm.ordered_logits(ims[2][:1], ims[0][:1], ims[1][:1], ["color"])[0]
    assert torch.allclose(back[0], direct[[1, 2, 0]], atol=1e-5)
