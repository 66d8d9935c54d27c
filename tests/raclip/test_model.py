"""RegionAttributeScorer: the single masked pass, Eq. 4/8/9 against explicit computations, options, errors."""

import pytest
import torch
import torch.nn.functional as F

from genmetrics.errors import InputError
from genmetrics.raclip import RegionAttributeScorer
from genmetrics.raclip.model import aggregate, dense_tokens, eq7_mask, refine, token_scores

ATTRS = ["smiling", "wearing hat", "a red car", "bangs"]


def _explicit_tokens(model, x):
    """Blocks 1..L-1 through open_clip itself; block L by the Eq. 6 formula for patches and the
    unmasked block for [CLS]; per-block head-averaged weights from nn.MultiheadAttention."""
    v = model.visual
    h = v._embeds(x)
    weights = []
    for blk in v.transformer.resblocks[:-1]:
        y = blk.ln_1(h)
        _, w = blk.attn(y, y, y, need_weights=True, average_attn_weights=True)
        weights.append(w)
        h = blk(h)
    last = v.transformer.resblocks[-1]
    full = last(h)  # [CLS] row of the unmasked block == masked block's [CLS] (row 0 of the mask is all zeros)
    a = last.attn
    d = h.shape[-1]
    wv, bv = a.in_proj_weight[2 * d :], a.in_proj_bias[2 * d :]
    dense = h + a.out_proj(F.linear(last.ln_1(h), wv, bv))  # Eq. 6: H + V(H) W_o, residual kept
    dense = dense + last.mlp(last.ln_2(dense))
    out = torch.cat([full[:, :1], dense[:, 1:]], 1)
    return v.ln_post(out) @ v.proj, weights


def test_global_token_equals_encode_image(clip, pixels):
    model, _ = clip
    with torch.no_grad():
        z, _, grid = dense_tokens(model, pixels)
        ref = model.encode_image(pixels)
    assert grid == (4, 4) and z.shape[1] == 17
    torch.testing.assert_close(z[:, 0], ref, atol=1e-5, rtol=1e-5)


def test_dense_tokens_equal_explicit_eq6_and_mask(clip, pixels):
    model, _ = clip
    with torch.no_grad():
        z, attn_sum, _ = dense_tokens(model, pixels)
        zz, weights = _explicit_tokens(model, pixels)
        # the same through open_clip's own last block with the Eq. 7 mask
        v = model.visual
        h = v._embeds(pixels)
        for blk in v.transformer.resblocks[:-1]:
            h = blk(h)
        masked = v.transformer.resblocks[-1](h, attn_mask=eq7_mask(h.shape[1]))
        zm = v.ln_post(masked) @ v.proj
    torch.testing.assert_close(z, zz, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(z, zm, atol=1e-5, rtol=1e-5)
    expected = sum(w[:, 1:, 1:] for w in weights)
    torch.testing.assert_close(attn_sum, expected, atol=1e-6, rtol=1e-5)


def test_eq8_eq9_equal_loops(clip, pixels):
    model, tok = clip
    s = RegionAttributeScorer(model, tok, temperature=0.7)
    with torch.no_grad():
        out = s(pixels, ATTRS)
        z, attn_sum, _ = dense_tokens(model, pixels)
        tp, tn = s.text_embeddings(ATTRS)
    scale = model.logit_scale.exp().item()
    zn = F.normalize(z, dim=-1)
    b, n, _ = z.shape
    p, c = n - 1, len(ATTRS)
    L = len(model.visual.transformer.resblocks)
    for i in range(b):
        for t in range(c):
            r_hat = []
            for j in range(n):  # Eq. 4 as a two-way softmax
                logits = torch.stack([scale * (zn[i, j] @ tp[t]), scale * (zn[i, j] @ tn[t])])
                r_hat.append(torch.softmax(logits, 0)[0])
            r_tilde = [r_hat[0]]
            for j in range(1, n):  # Eq. 8, rows not renormalised
                acc = 0.0
                for k in range(1, n):
                    acc = acc + attn_sum[i, j - 1, k - 1] / (L - 1) * r_hat[k]
                r_tilde.append(acc)
            logits = torch.stack([scale * (zn[i, j] @ tp[t]) / 0.7 for j in range(n)])
            w = torch.softmax(logits, 0)
            ra = sum(w[j] * r_tilde[j] for j in range(n))  # Eq. 9
            assert abs(float(ra) - float(out.score[i, t])) < 1e-5
            assert abs(float(r_hat[0]) - float(out.global_score[i, t])) < 1e-5
            for j in range(1, n):
                assert abs(float(r_tilde[j]) - float(out.patch_scores[i, j - 1, t])) < 1e-5
    assert out.patch_scores.shape == (b, p, c)


def test_scores_in_unit_interval_and_constant_refined_scores(clip, pixels):
    model, tok = clip
    out = RegionAttributeScorer(model, tok)(pixels, ATTRS)
    for t in (out.score, out.global_score, out.patch_scores):
        assert float(t.min()) >= 0.0 and float(t.max()) <= 1.0
    cos = torch.randn(2, 17, 3)
    for kw in ({}, {"local_tokens": False}, {"temperature": 0.1}):
        res = aggregate(torch.full((2, 17, 3), 0.37), cos, 100.0, **kw)
        torch.testing.assert_close(res, torch.full((2, 3), 0.37))


def test_token_scores_and_refine_shapes():
    cp, cn = torch.rand(2, 5, 3), torch.rand(2, 5, 3)
    torch.testing.assert_close(token_scores(cp, cn, 100.0), torch.sigmoid(100.0 * (cp - cn)))
    assert token_scores(cp, None, 100.0) is cp
    a = torch.rand(2, 4, 4)
    r = torch.rand(2, 4, 3)
    torch.testing.assert_close(refine(r, a), torch.einsum("bjk,bkc->bjc", a, r))


def test_ablations(clip, pixels):
    model, tok = clip
    full = RegionAttributeScorer(model, tok)(pixels, ATTRS)
    no_lt = RegionAttributeScorer(model, tok, local_tokens=False)(pixels, ATTRS)
    torch.testing.assert_close(no_lt.score, full.global_score)  # w/o LT: only the [CLS] token
    no_dp = RegionAttributeScorer(model, tok, dual_prompt=False)(pixels, ATTRS)
    z, _, _ = dense_tokens(model, pixels)
    tp, _ = RegionAttributeScorer(model, tok, dual_prompt=False).text_embeddings(ATTRS)
    torch.testing.assert_close(no_dp.global_score, F.normalize(z[:, 0], dim=-1) @ tp.T, atol=1e-5, rtol=1e-5)
    flat = RegionAttributeScorer(model, tok, temperature=1e6)(pixels, ATTRS)  # huge τ: plain mean over tokens
    r_tilde = torch.cat([full.global_score[:, None], full.patch_scores], 1)
    torch.testing.assert_close(flat.score, r_tilde.mean(1), atol=1e-4, rtol=1e-4)
    with pytest.raises(InputError, match="temperature"):
        RegionAttributeScorer(model, tok, temperature=0)


def test_without_ge_takes_cls_from_block_before_last(clip, pixels):
    """Table 2, "w/o GE": the global token is the [CLS] leaving block L-1 (then ln_post, proj); the patch
    tokens and Eq. 8 are unchanged and all tokens are still aggregated (Eq. 9)."""
    model, tok = clip
    full = RegionAttributeScorer(model, tok)(pixels, ATTRS)
    no_ge = RegionAttributeScorer(model, tok, global_token=False)(pixels, ATTRS)
    v = model.visual
    with torch.no_grad():
        h = v._embeds(pixels)
        for blk in v.transformer.resblocks[:-1]:  # open_clip's own blocks 1..L-1
            h = blk(h)
        z0 = F.normalize(v.ln_post(h[:, 0]) @ v.proj, dim=-1)
        z, _, _ = dense_tokens(model, pixels)
        tp, tn = RegionAttributeScorer(model, tok).text_embeddings(ATTRS)
    s = model.logit_scale.exp().item()
    r0 = torch.sigmoid(s * (z0 @ tp.T - z0 @ tn.T))  # Eq. 4 on the layer L-1 [CLS] token
    torch.testing.assert_close(no_ge.global_score, r0, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(no_ge.patch_scores, full.patch_scores)  # local tokens untouched
    zp = F.normalize(z[:, 1:], dim=-1)
    logits = torch.cat([(z0 @ tp.T)[:, None], zp @ tp.T], 1) * s  # Eq. 9 weights over [CLS_{L-1}] + patches
    r_tilde = torch.cat([r0[:, None], full.patch_scores], 1)
    expected = (torch.softmax(logits, 1) * r_tilde).sum(1)
    torch.testing.assert_close(no_ge.score, expected, atol=1e-5, rtol=1e-5)
    # not the same as dropping the global token from the aggregation (the old reading)
    dropped = (torch.softmax(logits[:, 1:], 1) * full.patch_scores).sum(1)
    assert float((no_ge.score - dropped).abs().max()) > 1e-3
    assert float((no_ge.global_score - full.global_score).abs().max()) > 1e-3


class _Recorder:
    """Wraps a tokenizer and records every text it is asked to encode."""

    def __init__(self, tok):
        self.tok, self.texts = tok, []
        self.context_length = getattr(tok, "context_length", 77)

    def __call__(self, texts, *a, **k):
        self.texts.extend([texts] if isinstance(texts, str) else list(texts))
        return self.tok(texts, *a, **k)

    def __getattr__(self, name):
        return getattr(self.tok, name)


def test_dual_prompts_are_the_papers_and_in_order(clip, pixels):
    """Eq. 3: T+ = "This is a photo of {t}.", T- = "This is a photo without {t}." -- the texts actually
    encoded, and which of the two is the positive in Eq. 4."""
    model, tok = clip
    rec = _Recorder(tok)
    scorer = RegionAttributeScorer(model, rec)
    out = scorer(pixels, ["smiling", "wearing hat"])
    assert rec.texts == [
        "This is a photo of smiling.",
        "This is a photo of wearing hat.",
        "This is a photo without smiling.",
        "This is a photo without wearing hat.",
    ]
    with torch.no_grad():
        emb = F.normalize(model.encode_text(tok(rec.texts)).float(), dim=-1)
        z, _, _ = dense_tokens(model, pixels)
    tp, tn = scorer.text_embeddings(["smiling", "wearing hat"])
    torch.testing.assert_close(tp, emb[:2])
    torch.testing.assert_close(tn, emb[2:])
    z0 = F.normalize(z[:, 0], dim=-1)
    s = model.logit_scale.exp().item()
    pos = torch.softmax(torch.stack([s * z0 @ emb[:2].T, s * z0 @ emb[2:].T]), 0)[0]  # P("of" prompt wins)
    torch.testing.assert_close(out.global_score, pos, atol=1e-5, rtol=1e-5)
    rec.texts.clear()
    RegionAttributeScorer(model, rec, dual_prompt=False)(pixels, ["smiling"])
    assert rec.texts == ["This is a photo of smiling."]  # w/o DP: the positive prompt only


def test_noop_scorer_options_refused(clip):
    model, tok = clip
    with pytest.raises(InputError, match="option temperature has no effect with local_tokens=False"):
        RegionAttributeScorer(model, tok, local_tokens=False, temperature=0.5)
    with pytest.raises(InputError, match="option negative_template has no effect with dual_prompt=False"):
        RegionAttributeScorer(model, tok, dual_prompt=False, negative_template="no {} here")
    RegionAttributeScorer(
        model, tok, local_tokens=False, global_token=False
    )  # w/o LT on the L-1 [CLS]: allowed


def test_text_cache(clip, pixels):
    model, tok = clip
    s = RegionAttributeScorer(model, tok)
    a = s.text_embeddings(ATTRS)
    assert s.text_embeddings(list(ATTRS))[0] is a[0]
    assert s.text_embeddings(ATTRS[:2])[0] is not a[0]


def test_long_attribute_keeps_end_token(clip):
    from genmetrics.backbones.openclip import tokenize

    _, tok = clip
    long = "a person " + "with a very long description of many details " * 4
    with pytest.warns(UserWarning, match="truncated"):
        ids = tokenize(tok, ["short", long])
    assert ids.shape == (2, tok.context_length)
    assert int(ids[1, -1]) == tok.eot_token_id  # end token kept at the last position
    assert int(ids[1].argmax()) == tok.context_length - 1  # open_clip pools the text at argmax(ids)
    assert int(ids[0, 2]) == tok.eot_token_id


def test_custom_block_towers_match_encode_image(pixels):
    from open_clip.model import CLIP
    from open_clip.tokenizer import SimpleTokenizer

    torch.manual_seed(0)
    for extra in (
        {"qk_norm": True, "scale_heads": True},
        {"scale_attn": True, "scale_attn_inner": True},
        {"ls_init_value": 0.1},
    ):
        model = CLIP(
            embed_dim=32,
            vision_cfg=dict(
                image_size=32, patch_size=8, width=64, layers=3, head_width=16, mlp_ratio=2.0, **extra
            ),
            text_cfg=dict(context_length=16, vocab_size=49408, width=32, heads=4, layers=1),
        ).eval()
        with torch.no_grad():
            z, _, _ = dense_tokens(model, pixels)
            torch.testing.assert_close(z[:, 0], model.encode_image(pixels), atol=1e-5, rtol=1e-5)
            out = RegionAttributeScorer(model, SimpleTokenizer(context_length=16))(pixels, ATTRS)
        assert float(out.score.min()) >= 0 and float(out.score.max()) <= 1


def test_errors(clip, pixels):
    from genmetrics.testing import tiny_clip_resnet

    model, tok = clip
    s = RegionAttributeScorer(model, tok)
    with pytest.raises(InputError, match="empty"):
        s(pixels, [])
    with pytest.raises(InputError, match="duplicate attribute"):
        s(pixels, ["smiling", "Smiling "])
    with pytest.raises(InputError, match="input size"):
        s(torch.zeros(1, 3, 48, 48), ATTRS)
    with pytest.raises(InputError, match="preprocessed float tensor"):
        s(torch.zeros(3, 32, 32), ATTRS)
    rn, rtok = tiny_clip_resnet()
    with pytest.raises(InputError, match="VisionTransformer"):
        RegionAttributeScorer(rn, rtok)


def test_cpu_pass_uses_the_packed_products(clip, pixels):
    """On the CPU without autograd, where the packed oneDNN products are taken (forced here; normally where
    this machine measured them faster), the masked pass runs on the packed weights that encode_image uses;
    with autograd, the modules' own."""
    from genmetrics.accel import clip_packed
    from genmetrics.accel._torch_internals import onednn_linear_available
    from genmetrics.accel.fastpath import force_path

    if not onednn_linear_available():
        pytest.skip("this torch build has no oneDNN packed linear")
    model, _ = clip
    clip_packed.release_packed_weights()
    force_path(clip_packed.PACKED_LINEAR, "packed")
    try:
        with torch.enable_grad():
            z_grad, a_grad, _ = dense_tokens(model, pixels)
        assert clip_packed.packed_tower() is None
        with torch.no_grad():
            z, a, _ = dense_tokens(model, pixels)
    finally:
        force_path(clip_packed.PACKED_LINEAR, None)
    assert clip_packed.packed_tower() is model.visual
    torch.testing.assert_close(z, z_grad.detach(), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(a, a_grad.detach(), atol=1e-6, rtol=1e-5)


def test_logit_scale_read_again_after_data_is_reassigned():
    """``logit_scale.data = ...`` keeps the parameter's version counter: red when the kept scale is keyed by
    the version alone (the old ``exp`` came back)."""
    import math

    from genmetrics.raclip.model import logit_scale_of

    model = torch.nn.Module()
    model.logit_scale = torch.nn.Parameter(torch.tensor(math.log(100.0)))
    first = logit_scale_of(model)
    model.logit_scale.data = torch.tensor(math.log(50.0))
    assert first == float(torch.tensor(math.log(100.0)).exp())
    assert logit_scale_of(model) == float(torch.tensor(math.log(50.0)).exp())
