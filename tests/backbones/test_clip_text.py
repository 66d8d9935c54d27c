"""CLIP text side: the context cut to the longest prompt gives the full-context embeddings,
non-causal towers are left alone, each distinct text is encoded once, long text warns once with a count."""

from __future__ import annotations

import copy
import warnings

import pytest
import torch
from open_clip.model import CustomTextCLIP

import genmetrics as gm
from genmetrics.backbones.clip_text import causal_text_tower
from genmetrics.backbones.openclip import TextEmbeddingCache, encode_text_ids, trim_padding
from genmetrics.testing import tiny_clip
from tests.backbones.test_clip_vision import EPS32, float32_bound, relative_error

TEXTS = ["a dog", "a photo of a red car on the street", "x"]


def _custom(no_causal_mask: bool):
    torch.manual_seed(0)
    return CustomTextCLIP(
        embed_dim=32,
        vision_cfg=dict(image_size=32, patch_size=8, width=64, layers=1, head_width=16),
        text_cfg=dict(
            context_length=16, vocab_size=49408, width=32, heads=4, layers=2, no_causal_mask=no_causal_mask
        ),
    ).eval()


def test_trimmed_equals_full_context_on_causal_towers():
    model, tok = tiny_clip()
    ids = tok(TEXTS)
    assert trim_padding(ids, 0).shape[1] < ids.shape[1]
    for m in (model, _custom(False)):
        with torch.inference_mode():
            full, short = m.encode_text(ids), encode_text_ids(m, ids)
        assert (full - short).abs().max() < 1e-5
        assert not torch.equal(short[0], short[1])


def test_bidirectional_tower_is_not_trimmed():
    m = _custom(True)
    ids = tok_ids = tiny_clip()[1](TEXTS)
    with torch.inference_mode():
        # padding does change a bidirectional tower's output, so cutting it would be wrong ...
        assert (m.encode_text(ids) - m.encode_text(ids[:, :9])).abs().max() > 1e-3
        # ... and the helper leaves such towers on the full context
        assert torch.equal(encode_text_ids(m, tok_ids), m.encode_text(tok_ids))


def test_cache_encodes_each_distinct_text_once_and_matches_fresh_encoding():
    model, tok = tiny_clip()
    cache = TextEmbeddingCache()
    a = cache.embed(model, tok, ["a dog", "a cat", "a dog"])
    assert cache.encoded == 2
    b = cache.embed(model, tok, ["a cat", "a bird"])
    assert cache.encoded == 3
    with torch.inference_mode():
        ref = model.encode_text(tok(["a dog", "a cat", "a bird"])).float()
    assert (a - ref[[0, 1, 0]]).abs().max() < 1e-5 and (b - ref[[1, 2]]).abs().max() < 1e-5
    other, _ = tiny_clip(seed=1)
    cache.embed(other, tok, ["a dog"])  # another model starts a fresh cache
    assert cache.encoded == 4 and len(cache) == 1


def test_clipscore_equals_untrimmed_path():
    model, tok = tiny_clip()
    g = torch.Generator().manual_seed(0)
    images = torch.rand(4, 3, 32, 32, generator=g)
    prompts = ["a dog", "a photo of a red car on the street", "a dog", "snow"]
    m = gm.create_metric("clipscore", backbone=model, tokenizer=tok)
    m.update(candidates=images, condition=prompts)
    ours = m.per_sample()["scores"]
    from genmetrics.backbones.openclip import clip_image_batch

    with torch.inference_mode():
        img = torch.nn.functional.normalize(
            model.encode_image(clip_image_batch(list(images), model)).float(), dim=-1
        )
        txt = torch.nn.functional.normalize(model.encode_text(tok(prompts)).float(), dim=-1)
    plain = (100.0 * (img * txt).sum(-1)).double()
    assert (ours - plain).abs().max() <= 1e-4
    assert m._aux["prompt_cache"].encoded == 3  # "a dog" once


def test_long_text_is_truncated_keeping_the_end_token_with_one_warning():
    model, tok = tiny_clip()  # context 16
    long_text = " ".join(["word"] * 40)
    with warnings.catch_warnings(record=True) as w:
        warnings.simplefilter("always")
        emb = TextEmbeddingCache().embed(
            model, tok, [long_text, "short", long_text + " more"], name="condition"
        )
    msgs = [str(x.message) for x in w if issubclass(x.category, UserWarning)]
    assert len(msgs) == 1 and "2 text(s)" in msgs[0] and "condition" in msgs[0]
    ids = tok([long_text])
    assert int(ids[0, -1]) == tok.eot_token_id
    assert emb.shape[0] == 3
    with pytest.raises(Exception, match="condition"):
        TextEmbeddingCache().embed(model, tok, ["ok", ""], name="condition")


def _b16_text_tower():
    """A random text tower with ViT-B/16's sizes (width 512, 12 layers, 8 heads, 77 tokens); tiny image tower."""
    torch.manual_seed(0)
    return CustomTextCLIP(
        embed_dim=512,
        vision_cfg=dict(image_size=32, patch_size=8, width=64, layers=1, head_width=16),
        text_cfg=dict(context_length=77, vocab_size=49408, width=512, heads=8, layers=12),
    ).eval()


def _scores(img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
    f = torch.nn.functional.normalize
    return 100.0 * (f(img.double(), dim=-1) * f(txt.double(), dim=-1)).sum(-1)


def _text_bound(model) -> float:
    """Norm-wise relative float32 error of a text embedding (see ``float32_bound`` in backbones/test_clip_vision.py):
    4 products per block plus the text projection, K = the MLP's hidden width (2048 for ViT-B/16's text
    tower, 49 products: 4 * eps * sqrt(49 * 2048) = 1.5e-4)."""
    found = causal_text_tower(model)
    assert found is not None
    blocks = list(found[0].transformer.resblocks)
    k_max = max(int(b.mlp.c_fc.out_features) for b in blocks)
    return float32_bound(4 * len(blocks) + 1, k_max)


@pytest.mark.parametrize("which", ["tiny", "b16"])
def test_trimming_is_exact_and_float32_gap_is_rounding_of_the_untrimmed_path(which):
    """Cutting the padding is exact: in float64 trimmed == untrimmed up to float64 rounding. In float32 the
    two differ only by rounding (GEMMs of another shape): both are within the derived float32 bound of the
    float64 value, on any CPU (the old tolerance was a multiple of one CPU's measured rounding)."""
    if which == "tiny":
        model, tok = tiny_clip()
        texts = TEXTS
    else:
        from open_clip import get_tokenizer

        model, tok = _b16_text_tower(), get_tokenizer("ViT-B-16")
        texts = TEXTS + [
            "two people walking with an umbrella in the snow",
            "close-up painting of a wooden house",
        ]
    ids = tok(texts)
    assert trim_padding(ids, 0).shape[1] < ids.shape[1]
    with torch.inference_mode():
        dim = model.encode_text(ids[:1]).shape[-1]
        img = torch.randn(len(texts), dim, generator=torch.Generator().manual_seed(1))
        e_full32, e_short32 = model.encode_text(ids), encode_text_ids(model, ids)
        m64 = copy.deepcopy(model).double()
        e_full64, e_short64 = m64.encode_text(ids), encode_text_ids(m64, ids)
    # score units: |d(100 cos(a, t))| <= 100 * ||dt|| / ||t|| for a unit a, to first order
    bound64 = _text_bound(model) / EPS32 * torch.finfo(torch.float64).eps  # the same derivation in float64
    assert relative_error(e_short64, e_full64) <= bound64
    assert (_scores(img, e_short64) - _scores(img, e_full64)).abs().max() <= 100 * bound64
    bound = _text_bound(model)
    assert relative_error(e_full32, e_full64) <= bound, "the bound does not hold for open_clip's own path"
    assert relative_error(e_short32, e_full64) <= bound
    assert (_scores(img, e_short32) - _scores(img, e_full32)).abs().max() <= 100 * 2 * bound


@pytest.mark.parametrize("which", ["clip", "custom"])
def test_float64_text_tower_equals_the_float64_model_and_leaves_the_model_alone(which):
    model = tiny_clip()[0] if which == "clip" else _custom(False)
    ids = tiny_clip()[1](TEXTS)
    before = {k: v.clone() for k, v in model.state_dict().items()}
    with torch.inference_mode():
        exact = copy.deepcopy(model).double().encode_text(ids)
        ours = encode_text_ids(model, ids, dtype=torch.float64)
        f32 = encode_text_ids(model, ids)
    assert ours.dtype == torch.float64
    bound = 1e-12 * max(1.0, float(exact.abs().max()))
    assert (ours - exact).abs().max() <= bound
    # the float32 path misses the bound (so the bound tells the paths apart): a float32 result of magnitude m
    # is off the float64 value by up to m * 2**-24 ~ 6e-8 m, 1e-12 only with probability ~2e-5 per element,
    # for every one of the hundreds of elements never
    assert (f32.double() - exact).abs().max() > bound
    assert all(
        torch.equal(v, model.state_dict()[k]) and v.dtype == model.state_dict()[k].dtype
        for k, v in before.items()
    )


def test_clipscore_text_dtype_float64_is_the_float64_text_tower():
    """Default ``text_dtype="float64"``: the score is the untrimmed float64 text tower's (<= 1e-9) with the
    same image embedding; ``"model"`` stays within float32 rounding; each distinct prompt is encoded once."""
    from genmetrics.backbones.openclip import clip_image_batch, encode_image

    model, tok = tiny_clip()
    images = torch.rand(4, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    prompts = ["a dog", "a photo of a red car on the street", "a dog", "snow"]
    with torch.inference_mode():
        # per update batch, as the metric does (float32 GEMM rounding depends on the batch's shape)
        img = torch.cat(
            [
                encode_image(model, clip_image_batch(list(images[sl]), model))
                for sl in (slice(0, 2), slice(2, 4))
            ]
        )
        txt64 = copy.deepcopy(model).double().encode_text(tok(prompts))
    exact = _scores(img, txt64)
    out = {}
    for dtype in ("float64", "model"):
        m = gm.create_metric("clipscore", backbone=model, tokenizer=tok, text_dtype=dtype)
        m.update(candidates=images[:2], condition=prompts[:2])
        m.update(candidates=images[2:], condition=prompts[2:])
        out[dtype] = m.per_sample()["scores"]
        assert m._aux["prompt_cache"].encoded == 3  # "a dog" once, across updates
    assert (out["float64"] - exact).abs().max() <= 1e-9
    assert 1e-9 < (out["model"] - exact).abs().max() <= 1e-4
    with pytest.raises(Exception, match="text_dtype.*'float64'.*'float32'"):
        gm.create_metric("clipscore", backbone=model, tokenizer=tok, text_dtype="float32")
