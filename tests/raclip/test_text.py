"""Attribute / prompt text side of the raclip family: each distinct text is encoded once per
scorer or metric, with the context cut after the longest text, by the text tower in float64 -- equal to
open_clip's untrimmed ``encode_text`` of a float64 copy of the model (the explicit second computation
here), and the scores built on it equal the same formulas on those untrimmed float64 vectors."""

from __future__ import annotations

import copy

import pytest
import torch
import torch.nn.functional as F

import genmetrics as gm
from genmetrics.backbones.openclip import clip_image_batch, encode_image, trim_padding
from genmetrics.functional import pad as f_pad
from genmetrics.functional import sad as f_sad
from genmetrics.raclip import RegionAttributeScorer
from genmetrics.raclip.model import (
    HCS_TEMPLATE,
    aggregate,
    dense_tokens,
    encode_texts,
    logit_scale_of,
    refine,
    token_scores,
)
from genmetrics.testing import random_images, tiny_clip

# different lengths (1 to 5 words), so the trimmed context is shorter than 16 and rows end at different places
ATTRS = ["smiling", "wearing a wide straw hat", "bangs", "a red car"]


def _custom_text_clip():
    """open_clip's CustomTextCLIP: the text tower is a separate ``TextTransformer`` (``model.text``)."""
    from open_clip.model import CustomTextCLIP
    from open_clip.tokenizer import SimpleTokenizer

    torch.manual_seed(3)
    model = CustomTextCLIP(
        embed_dim=32,
        vision_cfg=dict(image_size=32, patch_size=8, width=64, layers=2, head_width=16),
        text_cfg=dict(context_length=16, vocab_size=49408, width=32, heads=4, layers=2),
    ).eval()
    return model, SimpleTokenizer(context_length=16)


MODELS = {
    "clip": tiny_clip,
    "clip_seed1_ctx24": lambda: tiny_clip(seed=1, context_length=24),
    "custom_text": _custom_text_clip,
}


def _untrimmed64(model, tok, texts):
    """The reference: open_clip's own ``encode_text`` on the full context, float64 copy of the model."""
    with torch.no_grad():
        return copy.deepcopy(model).double().encode_text(tok(list(texts)))


def _prompts(attrs):
    return [f"This is a photo of {a}." for a in attrs], [f"This is a photo without {a}." for a in attrs]


def _ra_scores(model, pixels, tp, tn):
    """Eq. 4, 8, 9 from given normalised prompt vectors (the pieces are checked against loops in test_model)."""
    with torch.no_grad():
        z, attn_sum, _ = dense_tokens(model, pixels)
    zn = F.normalize(z.float(), dim=-1)
    s = logit_scale_of(model)
    cos_pos = zn @ tp.T
    r_hat = token_scores(cos_pos, zn @ tn.T, s)
    n_psi = len(model.visual.transformer.resblocks) - 1
    r_tilde = torch.cat([r_hat[:, :1], refine(r_hat[:, 1:], attn_sum.float() / n_psi)], dim=1)
    return aggregate(r_tilde, cos_pos, s), r_tilde[:, 1:]


# ------------------------------------------------------------------------------------ (a) the vectors
@pytest.mark.parametrize("which", sorted(MODELS))
def test_attribute_vectors_equal_the_untrimmed_float64_tower(which):
    model, tok = MODELS[which]()
    pos, neg = _prompts(ATTRS)
    ids = tok(pos + neg)
    short = trim_padding(ids, 0)
    assert short.shape[1] < ids.shape[1]  # the cut really happens ...
    ends = (ids != 0).sum(1)
    assert int(ends.min()) < short.shape[1]  # ... and shorter rows keep padding inside the cut context
    ref = F.normalize(_untrimmed64(model, tok, pos + neg), dim=-1)

    scorer = RegionAttributeScorer(model, tok)
    tp, tn = scorer.text_embeddings(ATTRS)
    n = scorer.text_cache.encoded
    exact = scorer.text_cache.embed(model, tok, pos + neg, normalize=True)  # all cached: nothing encoded
    assert scorer.text_cache.encoded == n == 2 * len(ATTRS)
    assert exact.dtype == torch.float64
    assert float((exact - ref).abs().max()) <= 1e-10
    # the scorer's vectors are the float32 rounding of those exact values
    assert tp.dtype == torch.float32
    assert torch.equal(torch.cat([tp, tn]), exact.float())
    assert float((torch.cat([tp, tn]).double() - ref).abs().max()) <= 1e-7

    raw = encode_texts(model, tok, ATTRS, normalize=False, dtype=torch.float64)  # the public helper
    raw_ref = _untrimmed64(model, tok, ATTRS)
    bound = 1e-10 * max(1.0, float(raw_ref.abs().max()))
    assert float((raw - raw_ref).abs().max()) <= bound
    with torch.no_grad():
        f32 = model.encode_text(tok(ATTRS)).double()
    # so the bound is not met by a float32 path: a float32 result of magnitude m is off the float64 value by
    # up to m * 2**-24 ~ 6e-8 m, within 1e-10 only with probability ~2e-3 per element, never for all of them
    assert float((f32 - raw_ref).abs().max()) > bound
    plain = encode_texts(model, tok, ATTRS)  # default: model precision, float32, normalised
    assert (
        plain.dtype == torch.float32
        and float((plain.double() - F.normalize(raw_ref, dim=-1)).abs().max()) < 1e-5
    )


@pytest.mark.parametrize("center", ["prompts", "bare"])
def test_hcs_text_vectors_and_center_are_the_untrimmed_float64_ones(center):
    model, tok = tiny_clip()
    h = gm.create_metric("hcs", backbone=model, tokenizer=tok, attributes=ATTRS, text_center=center)
    t_attr, c_text = h._hcs_text(center)
    t_ref = _untrimmed64(model, tok, [HCS_TEMPLATE.format(a) for a in ATTRS])
    c_ref = _untrimmed64(model, tok, ATTRS).mean(0) if center == "bare" else t_ref.mean(0)
    assert t_attr.dtype == c_text.dtype == torch.float64
    assert float((t_attr - t_ref).abs().max()) <= 1e-10
    assert float((c_text - c_ref).abs().max()) <= 1e-10


# ------------------------------------------------------------------------------------ (b) the scores
@pytest.fixture(scope="module")
def data():
    return random_images(5, 32, seed=11), (random_images(4, 32, seed=12).int() * 2 // 3).to(torch.uint8)


def _reference_ra(model, tok, images):
    pos, neg = _prompts(ATTRS)
    t = F.normalize(_untrimmed64(model, tok, pos + neg), dim=-1).float()
    return _ra_scores(model, clip_image_batch(images, model), t[: len(ATTRS)], t[len(ATTRS) :])


def test_raclip_scores_and_set_metrics_equal_the_untrimmed_float64_reference(data):
    model, tok = tiny_clip()
    real, gen = data
    (r_score, r_maps), (g_score, g_maps) = _reference_ra(model, tok, real), _reference_ra(model, tok, gen)
    ra = gm.create_metric("raclip", backbone=model, tokenizer=tok, attributes=ATTRS)
    ra.update(candidates=gen)
    assert float((ra.per_sample()["scores"] - g_score.double()).abs().max()) <= 1e-6
    # each image against its own text (condition mode): the same vectors
    by_text = gm.create_metric("raclip", backbone=model, tokenizer=tok)
    idx = torch.arange(len(gen)) % len(ATTRS)
    by_text.update(candidates=gen, condition=[ATTRS[i] for i in idx])
    assert (
        float((by_text.per_sample()["scores"] - g_score.double()[torch.arange(len(gen)), idx]).abs().max())
        <= 1e-6
    )

    sad = gm.create_metric("sad", backbone=model, tokenizer=tok, attributes=ATTRS)
    pad = gm.create_metric("pad", backbone=model, tokenizer=tok, attributes=ATTRS)
    rsad = gm.create_metric("rsad", backbone=model, tokenizer=tok, attributes=ATTRS)
    for m in (sad, pad, rsad):
        m.update(reference=real, candidates=gen)
    want_sad, want_pad = f_sad(r_score.double(), g_score.double()), f_pad(r_score.double(), g_score.double())
    got_sad, got_pad = sad.compute()["per_attribute"], pad.compute()["per_pair"]
    assert float(((got_sad - want_sad).abs() / want_sad.abs().clamp_min(1.0)).max()) <= 1e-6
    assert float(((got_pad - want_pad).abs() / want_pad.abs().clamp_min(1.0)).max()) <= 1e-6
    want_map = r_maps.double().mean(0) - g_maps.double().mean(0)
    assert float((rsad.compute()["map"] - want_map).abs().max()) <= 1e-6


def test_hcs_and_clipscore_modes_equal_the_untrimmed_float64_reference(data):
    model, tok = tiny_clip()
    real, gen = data
    with torch.no_grad():  # the metrics' own image tower (see test_hcs_text_center_bare_is_the_2024_code)
        e_real = encode_image(model, clip_image_batch(real, model)).double()
        e_gen = encode_image(model, clip_image_batch(gen, model)).double()
    t = _untrimmed64(model, tok, [HCS_TEMPLATE.format(a) for a in ATTRS])
    for center, c_text in (("prompts", t.mean(0)), ("bare", _untrimmed64(model, tok, ATTRS).mean(0))):

        def ref_hcs(e, c_text=c_text):
            return 100 * F.normalize(e - e_real.mean(0), dim=-1) @ F.normalize(t - c_text, dim=-1).T

        h = gm.create_metric("hcs", backbone=model, tokenizer=tok, attributes=ATTRS, text_center=center)
        h.update(reference=real, candidates=gen)
        assert float((h.per_sample()["scores"] - ref_hcs(e_gen)).abs().max()) <= 1e-6
        s = gm.create_metric(
            "sad", backbone=model, tokenizer=tok, attributes=ATTRS, score="hcs", text_center=center
        )
        s.update(reference=real, candidates=gen)
        want = f_sad(ref_hcs(e_real), ref_hcs(e_gen))
        assert float(((s.compute()["per_attribute"] - want).abs() / want.abs().clamp_min(1.0)).max()) <= 1e-6

    bare = F.normalize(_untrimmed64(model, tok, ATTRS), dim=-1)

    def ref_clip(e):
        return 100 * F.normalize(e, dim=-1) @ bare.T

    s = gm.create_metric("sad", backbone=model, tokenizer=tok, attributes=ATTRS, score="clipscore")
    s.update(reference=real, candidates=gen)
    want = f_sad(ref_clip(e_real), ref_clip(e_gen))
    assert float(((s.compute()["per_attribute"] - want).abs() / want.abs().clamp_min(1.0)).max()) <= 1e-6
    c = gm.create_metric("clipscore", backbone=model, tokenizer=tok, attributes=ATTRS)
    c.update(candidates=gen)
    with torch.no_grad():
        fast = encode_image(model, clip_image_batch(gen, model)).double()  # clipscore's own image tower
    assert float((c.per_sample()["scores"] - ref_clip(fast)).abs().max()) <= 1e-6


# ------------------------------------------------------------------------------- (c) encoded once
def test_each_distinct_text_is_encoded_once_per_scorer_and_metric(data):
    model, tok = tiny_clip()
    real, gen = data
    scorer = RegionAttributeScorer(model, tok)
    first = scorer.text_embeddings(ATTRS)
    assert scorer.text_cache.encoded == 2 * len(ATTRS)
    scorer.text_embeddings(list(reversed(ATTRS)))  # another list of the same attributes: nothing new
    overlap = scorer.text_embeddings(["bangs", "grey hair", "smiling"])  # one new attribute: its 2 prompts
    assert scorer.text_cache.encoded == 2 * len(ATTRS) + 2
    for j, a in ((0, "bangs"), (2, "smiling")):
        i = ATTRS.index(a)
        assert torch.equal(overlap[0][j], first[0][i]) and torch.equal(overlap[1][j], first[1][i])

    for name, kw, per_text in (
        ("raclip", {}, 2),
        ("sad", {}, 2),
        ("rsad", {}, 2),
        ("pad", {"score": "clipscore"}, 1),
        ("sad", {"score": "hcs", "text_center": "bare"}, 2),
    ):
        m = gm.create_metric(name, backbone=model, tokenizer=tok, attributes=ATTRS, **kw)
        for _ in range(2):  # two updates (and two computes) encode nothing new
            if name == "raclip":
                m.update(candidates=gen)
            else:
                m.update(reference=real, candidates=gen)
                m.compute()
        cache = m._scorer().text_cache if kw.get("score", "raclip") == "raclip" else m._aux["prompt_cache"]
        assert cache.encoded == per_text * len(ATTRS), (name, kw)

    h = gm.create_metric("hcs", backbone=model, tokenizer=tok, attributes=ATTRS, text_center="bare")
    h.update(reference=real, candidates=gen)
    h.compute()
    h.update(candidates=gen)
    h.per_sample()
    assert h._aux["prompt_cache"].encoded == 2 * len(ATTRS)  # "a photo of {}" prompts + the bare strings

    by_text = gm.create_metric("raclip", backbone=model, tokenizer=tok)
    by_text.update(candidates=gen[:2], condition=["smiling", "bangs"])
    by_text.update(candidates=gen[2:], condition=["bangs", "a red car"])
    assert by_text._scorer().text_cache.encoded == 2 * 3


def test_cached_vectors_belong_to_their_own_text():
    """Texts that share long prefixes or lengths get their own vectors, in any order and mix of calls."""
    model, tok = tiny_clip()
    texts = ["This is a photo of bangs.", "This is a photo without bangs.", "This is a photo of hats.", "x y"]
    scorer = RegionAttributeScorer(model, tok)
    scorer.text_cache.embed(model, tok, texts[2:], normalize=True)
    got = scorer.text_cache.embed(model, tok, texts[::-1] + texts[:2], normalize=True)
    ref = F.normalize(_untrimmed64(model, tok, texts), dim=-1)
    assert float((got - ref[[3, 2, 1, 0, 0, 1]]).abs().max()) <= 1e-10
    assert len(scorer.text_cache) == len(texts) == scorer.text_cache.encoded


def test_a_model_in_another_precision_is_encoded_afresh():
    model, tok = tiny_clip()
    scorer = RegionAttributeScorer(model, tok)
    a = scorer.text_embeddings(ATTRS)[0]
    model.double()  # the same weights in float64: the float64 tower gives the same vectors, encoded again
    try:
        b = scorer.text_embeddings(ATTRS)[0]
        assert b is not a and scorer.text_cache.encoded == 4 * len(ATTRS)  # encoded again ...
        assert len(scorer.text_cache) == 2 * len(ATTRS)  # ... into a fresh cache (the old entries dropped)
        assert float((a - b).abs().max()) <= 1e-7
    finally:
        model.float()


def test_clipscore_attributes_follow_text_dtype(data):
    """clipscore's attributes= share its prompt cache and its text_dtype: "model" keeps the float32 tower."""
    model, tok = tiny_clip()
    _, gen = data
    exact = gm.create_metric("clipscore", backbone=model, tokenizer=tok, attributes=ATTRS)
    fast = gm.create_metric("clipscore", backbone=model, tokenizer=tok, attributes=ATTRS, text_dtype="model")
    for m in (exact, fast):
        m.update(candidates=gen)
    assert exact._aux["prompt_cache"].dtype == torch.float64 and fast._aux["prompt_cache"].dtype is None
    diff = float((exact.per_sample()["scores"] - fast.per_sample()["scores"]).abs().max())
    assert 0 < diff < 1e-4  # float32 rounding of the text tower, nothing more
