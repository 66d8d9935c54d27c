"""TPIPSModel: exactness against the standard transformers forward, the vision cache, symmetry, identity,
padding independence, the Appendix C.2 mask/positions, bad input, and the generative variants."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from genmetrics.errors import InputError
from genmetrics.tpips.early import early_inputs
from genmetrics.tpips.late import embedding_sequences
from genmetrics.tpips.model import (
    PairwiseScoreModel,
    TPIPSModel,
    TPIPSTripletModel,
    prompt_for,
)

from .conftest import SIZE

VARIANTS = ["late", "mid", "early"]
ASPECTS8 = [
    "lighting",
    "color",
    "pose of the cat",
    "texture",
    "background",
    "overall",
    "camera angle",
    "style",
]


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


@pytest.mark.parametrize("variant", VARIANTS)
def test_vision_cache_once_per_image_and_identical(vlm, processor, images, variant):
    """8 aspects over one pair: the vision tower runs once per image, and the result equals computing each
    aspect on its own with no cache at all."""
    cached = TPIPSModel(vlm, processor, variant, image_size=SIZE, vision_cache_size=16)
    s = cached.similarity([images[0]] * 8, [images[1]] * 8, ASPECTS8)
    assert cached.vision_calls == 2
    again = cached.similarity([images[0]] * 8, [images[1]] * 8, ASPECTS8)  # from the cache: bit-identical
    assert cached.vision_calls == 2 and torch.equal(s, again)
    plain = TPIPSModel(vlm, processor, variant, image_size=SIZE, vision_cache_size=0)
    ref = torch.cat([plain.similarity([images[0]], [images[1]], [a]) for a in ASPECTS8])
    assert plain.vision_calls == 16
    assert torch.allclose(s, ref, atol=1e-5, rtol=1e-5), (s - ref).abs().max()
    assert len({round(float(x), 6) for x in s}) > 1  # the aspect changes the similarity


def test_vision_cache_keeps_deepstack(vlm, processor, images):
    m = TPIPSModel(vlm, processor, "late", image_size=SIZE)
    f = m.vision_features(m.load_images(images[:1]))[0]
    assert len(f.deepstack) == len(vlm.config.vision_config.deepstack_visual_indexes) >= 1
    assert f.deepstack[0].shape == f.embeds.shape


@pytest.mark.parametrize("variant", VARIANTS)
def test_symmetric_and_identity(models, images, variant):
    m = models[variant]
    a, b = images[:3], images[3:6]
    asp = ["lighting", "overall", "pose of the cat"]
    sab, sba = m.similarity(a, b, asp), m.similarity(b, a, asp)
    assert torch.allclose(sab, sba, atol=1e-5)
    same = m.similarity(a, a, asp)
    assert (same >= sab - 1e-6).all() and (same >= sba - 1e-6).all()  # identity is maximal
    if variant == "late":
        assert torch.equal(same, torch.ones(3))  # exactly 1
    elif variant == "early":
        assert torch.allclose(same, torch.ones(3), atol=1e-6)  # 1 up to fp32 attention summation order
        assert (sab < 1).all()
    else:
        assert torch.equal(same, torch.zeros(3))  # mid fusion: distance 0 is the maximum
        assert (sab < 0).all()


@pytest.mark.parametrize("variant", VARIANTS)
def test_pair_independent_of_batch(models, images, variant):
    m = models[variant]
    alone = m.similarity([images[0]], [images[1]], ["lighting"])
    batch = m.similarity(
        [images[2], images[0], images[4]],
        [images[3], images[1], images[0]],
        ["a much longer aspect: the exact pose of the cat and the dog on the sofa", "lighting", "overall"],
    )
    assert torch.allclose(alone[0], batch[1], atol=1e-5), (alone, batch)


def test_early_mask_and_positions(models, images):
    m = models["early"]
    fa = m.vision_features(m.load_images(images[:2]))
    fb = m.vision_features(m.load_images(images[2:4]))
    inp = early_inputs(m, fa, fb, ["lighting", "the pose of the cat in the middle of the picture"])
    N = fa[0].n_tokens
    gh, gw = fa[0].grid
    for b in range(2):
        r1, r2 = inp["register_index"][b].tolist()
        M = r1 - 2 * N
        mask = inp["mask"][b, 0]
        pos = inp["position_ids"][:, b]
        x1, x2 = slice(M, M + N), slice(M + N, r1)
        assert torch.equal(mask[:M, :M], torch.tril(torch.ones(M, M, dtype=torch.bool)))
        assert not mask[:M, M:].any()  # text never sees images or registers
        assert mask[M:r1, :r1].all() and not mask[M:r1, r1:].any()  # patches: text + both images only
        for r, own in ((r1, x1), (r2, x2)):
            row = torch.zeros(mask.shape[1], dtype=torch.bool)
            row[:M] = True
            row[own] = True
            row[r] = True
            assert torch.equal(mask[r], row)
        L = inp["lengths"][b]
        assert not mask[:, L:].any() or all(
            mask[p, p] and mask[:, p].sum() == 1 for p in range(L, mask.shape[0])
        )
        assert torch.equal(pos[0, :M], torch.arange(1, M + 1)) and not pos[1:, :M].any()
        grid = torch.stack(
            [
                torch.zeros(N, dtype=torch.long),
                torch.arange(gh).repeat_interleave(gw),
                torch.arange(gw).repeat(gh),
            ]
        )
        assert torch.equal(pos[:, x1], grid) and torch.equal(pos[:, x2], grid)
        assert pos[:, r1].tolist() == pos[:, r2].tolist() == [M + 1, 0, 0]
    assert (inp["input_ids"][inp["register_mask"]] == m.pad_id).all()


def test_bad_inputs(models, vlm, processor, images):
    m = models["late"]
    with pytest.raises(InputError, match="empty"):
        m.similarity(images[:2], images[2:4], ["lighting", "  "])
    with pytest.raises(InputError, match="images_a has 2 images but images_b has 3"):
        m.similarity(images[:2], images[2:5], "lighting")
    with pytest.raises(InputError, match="3 aspects for 2"):
        m.similarity(images[:2], images[2:4], ["a", "b", "c"])
    with pytest.raises(InputError):
        m.similarity([object()], [images[0]], ["lighting"])
    with pytest.raises(InputError, match="multiple of"):
        TPIPSModel(vlm, processor, "late", image_size=50)
    with pytest.raises(InputError, match="variant"):
        TPIPSModel(vlm, processor, "fusion")
    with pytest.raises(InputError, match="processor"):
        TPIPSModel(vlm, None, "late")
    with pytest.raises(InputError, match="late fusion only"):
        models["mid"].embed(images[:1], "lighting")


def test_different_sizes_are_resized_by_policy(models, images):
    """Images of other sizes are resized to image_size x image_size (bicubic, aspect not kept)."""
    from genmetrics.data.io.images import ResizePolicy

    m = models["early"]
    wide = torch.randint(0, 256, (3, 48, 100), dtype=torch.uint8, generator=torch.Generator().manual_seed(3))
    s = m.similarity([images[0]], [wide], ["color"])
    resized = ResizePolicy("resize", SIZE).apply_one(wide.float() / 255)
    assert torch.equal(s, m.similarity([images[0]], [resized], ["color"]))


def test_qwen35_early_refused_late_works(processor, images):
    from genmetrics.testing import tiny_qwen35

    q35 = tiny_qwen35(seed=0)
    with pytest.raises(InputError, match="linear-attention"):
        TPIPSModel(q35, processor, "early", image_size=SIZE)
    late = TPIPSModel(q35, processor, "late", image_size=SIZE)
    s = late.similarity(images[:2], images[[0, 3]], ["lighting", "overall"])
    assert s[0] == 1.0 and torch.isfinite(s).all()


def test_long_aspect_is_truncated_by_tokenizer(models, images):
    m = models["late"]
    long = "lighting " * 400
    with pytest.warns(UserWarning, match="truncated"):
        s = m.similarity([images[0]], [images[1]], [long])
    assert torch.isfinite(s).all()


@pytest.fixture(scope="module")
def gen_model():
    from genmetrics.testing import tiny_qwen3vl_for_generation

    return tiny_qwen3vl_for_generation(seed=0)


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


def test_pairwise_score_baseline(gen_model, processor, images, vlm):
    pm = PairwiseScoreModel(gen_model, processor, image_size=SIZE)
    s = pm.score(images[:2], images[2:4], ["color", "overall"])
    assert ((s >= 0) & (s <= 10)).all()
    assert torch.allclose(s, pm.score(images[2:4], images[:2], ["color", "overall"]), atol=1e-6)
    with pytest.raises(InputError, match="LM head"):
        PairwiseScoreModel(vlm, processor, image_size=SIZE)
