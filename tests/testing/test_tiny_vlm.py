"""Tiny random Qwen3-VL / Qwen3.5 models and the offline processor (genmetrics.testing.tiny_vlm).

CPU only, no network: every model is built in code (genmetrics.testing.tiny_vlm) in well under a second.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch
from PIL import Image

from genmetrics.testing import tiny_vlm as tv

PAIR_TEXT = (
    "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
    "<|vision_start|><|image_pad|><|vision_end|>Represent the similarity of the image based on lighting."
    "<|im_end|>\n"
)


def _images(n: int, size: int = 64) -> list[Image.Image]:
    return [
        Image.fromarray(np.random.RandomState(i).randint(0, 256, (size, size, 3), dtype=np.uint8))
        for i in range(n)
    ]


@pytest.fixture(scope="module")
def processor():
    return tv.tiny_qwen3vl_processor()


@pytest.fixture(scope="module")
def pair_inputs(processor):
    return processor(images=_images(2), text=[PAIR_TEXT], return_tensors="pt")


@pytest.fixture(params=["qwen3vl", "qwen3_5"])
def model_and_kind(request):
    build = tv.tiny_qwen3vl if request.param == "qwen3vl" else tv.tiny_qwen35
    return build(), request.param


def _no_pixels(inputs) -> dict:
    return {k: v for k, v in inputs.items() if k != "pixel_values"}


# ----------------------------------------------------------------------------------------------- tokenizer


def test_tokenizer_special_tokens_and_vocab():
    tok = tv.tiny_tokenizer()
    cfg = tv.tiny_qwen3vl_config()
    assert len(tok) <= cfg.text_config.vocab_size == tv.TINY_VOCAB_SIZE
    for i, t in enumerate(tv.SPECIAL_TOKENS):
        assert tok.convert_tokens_to_ids(t) == i
    assert tok.pad_token == tok.eos_token == "<|endoftext|>"
    assert tok.pad_token_id == 0
    assert tok.model_max_length == 512
    assert tok.padding_side == "right"
    assert tv.tiny_tokenizer(padding_side="left").padding_side == "left"
    for name in ("image_token_id", "video_token_id", "vision_start_token_id", "vision_end_token_id"):
        assert getattr(cfg, name) < cfg.text_config.vocab_size
    assert (cfg.image_token_id, cfg.vision_start_token_id) == (tv.IMAGE_TOKEN_ID, tv.VISION_START_TOKEN_ID)


def test_tokenizer_roundtrips_any_text_and_keeps_specials_whole():
    tok = tv.tiny_tokenizer()
    text = "Héllo wörld 🙂 — the pose of the cat\n\t{x: [1, 2]} ~`@#$%^&*"
    ids = tok(text, add_special_tokens=True).input_ids
    assert max(ids) < tv.TINY_VOCAB_SIZE
    assert tok.decode(ids) == text  # byte-level: lossless, nothing added
    ids = tok("a<|vision_start|><|image_pad|><|vision_end|>b").input_ids
    assert ids[1:4] == [tv.VISION_START_TOKEN_ID, tv.IMAGE_TOKEN_ID, tv.VISION_END_TOKEN_ID]
    # deterministic across builds
    assert tv.tiny_tokenizer()(text).input_ids == tok(text).input_ids


def test_tokenizer_padding_and_truncation():
    tok = tv.tiny_tokenizer(padding_side="left", model_max_length=8)
    batch = tok(["a b c d e f g h i j k l", "a"], padding=True, truncation=True, return_tensors="pt")
    assert batch.input_ids.shape == (2, 8)
    assert batch.attention_mask[1].tolist() == [0] * 7 + [1]
    assert batch.input_ids[1, 0].item() == tok.pad_token_id


# ----------------------------------------------------------------------------------------------- processor


def test_processor_grid_and_placeholder_expansion(processor, pair_inputs):
    from transformers import Qwen2VLImageProcessor, Qwen3VLProcessor

    assert isinstance(processor, Qwen3VLProcessor)
    assert isinstance(tv.tiny_qwen35_processor(), Qwen3VLProcessor)
    ip = processor.image_processor
    assert isinstance(ip, Qwen2VLImageProcessor)
    assert (ip.patch_size, ip.merge_size, ip.temporal_patch_size) == (16, 2, 2)
    assert list(ip.image_mean) == [0.5] * 3 and list(ip.image_std) == [0.5] * 3

    x = pair_inputs
    assert x.image_grid_thw.tolist() == [[1, 4, 4], [1, 4, 4]]
    assert x.pixel_values.shape == (2 * 16, 3 * 2 * 16 * 16)
    n_tokens = int((x.image_grid_thw.prod(-1) // 4).sum())
    assert int((x.input_ids == tv.IMAGE_TOKEN_ID).sum()) == n_tokens == 8
    # mm_token_type_ids: 1 exactly at the image placeholders
    assert torch.equal(x.mm_token_type_ids.bool(), x.input_ids == tv.IMAGE_TOKEN_ID)
    # each image: vision_start, 4 pads, vision_end
    ids = x.input_ids[0].tolist()
    s = ids.index(tv.VISION_START_TOKEN_ID)
    assert ids[s : s + 6] == [tv.VISION_START_TOKEN_ID] + [tv.IMAGE_TOKEN_ID] * 4 + [tv.VISION_END_TOKEN_ID]


def test_processor_image_size_and_chat_template():
    proc = tv.tiny_qwen3vl_processor(image_size=128)
    big = proc(
        images=_images(1, 200), text=["<|vision_start|><|image_pad|><|vision_end|>"], return_tensors="pt"
    )
    assert big.image_grid_thw.tolist() == [[1, 8, 8]]  # downscaled to 128x128 -> 16 tokens
    msgs = [{"role": "user", "content": [{"type": "image"}, {"type": "text", "text": "Describe."}]}]
    text = proc.apply_chat_template(msgs, add_generation_prompt=True, tokenize=False)
    assert text == (
        "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>Describe.<|im_end|>\n<|im_start|>assistant\n"
    )
    with pytest.raises(ValueError):
        tv.tiny_qwen3vl_processor(image_size=48)


# ----------------------------------------------------------------------------------------------- models


@pytest.mark.parametrize("build", [tv.tiny_qwen3vl, tv.tiny_qwen35, tv.tiny_qwen3vl_for_generation])
def test_build_is_deterministic(build):
    a, b, c = build(seed=0), build(seed=0), build(seed=1)
    sa, sb, sc = a.state_dict(), b.state_dict(), c.state_dict()
    assert sa.keys() == sb.keys()
    assert all(torch.equal(sa[k], sb[k]) for k in sa)
    assert any(not torch.equal(sa[k], sc[k]) for k in sa)
    assert not a.training
    assert all(p.dtype == torch.float32 for p in a.parameters())
    assert a.config._attn_implementation == "sdpa"


def test_build_does_not_touch_global_rng():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    tv.tiny_qwen3vl(seed=5)
    assert torch.equal(torch.rand(3), expected)


def test_configs_have_the_documented_structure():
    q = tv.tiny_qwen3vl()
    assert type(q).__name__ == "Qwen3VLModel"
    assert list(q.config.vision_config.deepstack_visual_indexes) == [0]
    assert q.config.vision_config.out_hidden_size == q.config.text_config.hidden_size
    m = tv.tiny_qwen35()
    assert type(m).__name__ == "Qwen3_5Model"
    types = m.config.text_config.layer_types
    assert "linear_attention" in types and "full_attention" in types
    assert type(m.language_model.layers[0].linear_attn).__name__ == "Qwen3_5GatedDeltaNet"
    deeper = tv.tiny_qwen35_config(text_config={"num_hidden_layers": 8}).text_config.layer_types
    assert deeper == (["linear_attention"] * 3 + ["full_attention"]) * 2
    assert tv.tiny_qwen3vl(text_config={"num_hidden_layers": 3}).config.text_config.num_hidden_layers == 3


@torch.no_grad()
def test_forward_with_processor_output(model_and_kind, pair_inputs):
    model, kind = model_and_kind
    out = model(**pair_inputs, use_cache=False, output_hidden_states=True)
    n_layers = model.config.text_config.num_hidden_layers
    seq = pair_inputs.input_ids.shape[1]
    assert out.last_hidden_state.shape == (1, seq, 64)
    assert torch.isfinite(out.last_hidden_state).all()
    assert len(out.hidden_states) == n_layers + 1
    # hidden_states[-1] is the post-norm last_hidden_state (capture_outputs ties them)
    assert torch.equal(out.hidden_states[-1], out.last_hidden_state)
    assert out.cache is None
    assert sum(t.shape[0] for t in out.image_outputs.pooler_output) == int(
        (pair_inputs.input_ids == tv.IMAGE_TOKEN_ID).sum()
    )


@torch.no_grad()
def test_generation_model_logits(pair_inputs):
    model = tv.tiny_qwen3vl_for_generation()
    out = model(**pair_inputs, use_cache=False, logits_to_keep=1)
    assert out.logits.shape == (1, 1, tv.TINY_VOCAB_SIZE)
    m35 = tv.tiny_qwen35_for_generation()
    assert m35(**pair_inputs, use_cache=False).logits.shape[-1] == tv.TINY_VOCAB_SIZE


@torch.no_grad()
def test_mm_token_type_ids_is_required(pair_inputs):
    model = tv.tiny_qwen3vl()
    inputs = {k: v for k, v in pair_inputs.items() if k != "mm_token_type_ids"}
    with pytest.raises(ValueError, match="mm_token_type_ids"):
        model(**inputs, use_cache=False)


@torch.no_grad()
def test_precomputed_vision_features_qwen3vl(processor, pair_inputs):
    """Per-image vision outputs (pooler_output + DeepStack) cached and passed back via mm_encoder_outputs."""
    from transformers.models.qwen3_vl.modeling_qwen3_vl import BaseModelOutputWithDeepstackFeatures

    model = tv.tiny_qwen3vl()
    ref = model(**pair_inputs, use_cache=False).last_hidden_state

    # one call per image, as a cache keyed by image would do
    per_image = []
    rows = 0
    for thw in pair_inputs.image_grid_thw:
        n = int(thw.prod())
        feats = model.get_image_features(pair_inputs.pixel_values[rows : rows + n], thw[None])
        rows += n
        assert len(feats.pooler_output) == 1 and feats.pooler_output[0].shape == (n // 4, 64)
        assert len(feats.deepstack_features) == 1  # one entry per deepstack_visual_indexes
        per_image.append((feats.pooler_output[0], [level[0] for level in feats.deepstack_features]))

    enc = BaseModelOutputWithDeepstackFeatures(
        pooler_output=[pooled for pooled, _ in per_image],
        deepstack_features=[[ds[level] for _, ds in per_image] for level in range(len(per_image[0][1]))],
    )
    got = model(
        **_no_pixels(pair_inputs), mm_encoder_outputs={"image": enc}, use_cache=False
    ).last_hidden_state
    assert torch.allclose(got, ref, atol=1e-5, rtol=0)

    # the whole-batch output of get_image_features can be passed back as is
    whole = model.get_image_features(pair_inputs.pixel_values, pair_inputs.image_grid_thw)
    got2 = model(
        **_no_pixels(pair_inputs), mm_encoder_outputs={"image": whole}, use_cache=False
    ).last_hidden_state
    assert torch.equal(got2, ref)

    # dropping DeepStack silently changes the output
    no_ds = BaseModelOutputWithDeepstackFeatures(pooler_output=enc.pooler_output, deepstack_features=[])
    got3 = model(
        **_no_pixels(pair_inputs), mm_encoder_outputs={"image": no_ds}, use_cache=False
    ).last_hidden_state
    assert not torch.allclose(got3, ref, atol=1e-3)

    # pixel_values and mm_encoder_outputs together are refused
    with pytest.raises(ValueError, match="mm_encoder_outputs"):
        model(**pair_inputs, mm_encoder_outputs={"image": enc}, use_cache=False)


@torch.no_grad()
def test_precomputed_vision_features_qwen35(pair_inputs):
    from transformers.modeling_outputs import BaseModelOutputWithPooling

    model = tv.tiny_qwen35()
    ref = model(**pair_inputs, use_cache=False).last_hidden_state
    feats = model.get_image_features(pair_inputs.pixel_values, pair_inputs.image_grid_thw)
    assert not hasattr(feats, "deepstack_features")  # Qwen3.5 has no DeepStack
    enc = BaseModelOutputWithPooling(pooler_output=list(feats.pooler_output))
    got = model(
        **_no_pixels(pair_inputs), mm_encoder_outputs={"image": enc}, use_cache=False
    ).last_hidden_state
    assert torch.allclose(got, ref, atol=1e-5, rtol=0)


@torch.no_grad()
def test_4d_bool_mask_needs_explicit_3d_position_ids(pair_inputs):
    model = tv.tiny_qwen3vl()
    ref = model(**pair_inputs, use_cache=False).last_hidden_state
    pos, _ = model.get_rope_index(
        pair_inputs.input_ids,
        pair_inputs.mm_token_type_ids,
        pair_inputs.image_grid_thw,
        attention_mask=pair_inputs.attention_mask,
    )
    assert pos.shape == (3, 1, pair_inputs.input_ids.shape[1])
    s = pair_inputs.input_ids.shape[1]
    causal = torch.tril(torch.ones(s, s, dtype=torch.bool))[None, None]
    inputs = {**pair_inputs, "attention_mask": causal}
    got = model(**inputs, position_ids=pos, use_cache=False).last_hidden_state
    assert torch.allclose(got, ref, atol=1e-5, rtol=0)
    with pytest.raises(IndexError):
        model(**inputs, use_cache=False)


@torch.no_grad()
def test_right_padding_batch_matches_single(processor):
    model = tv.tiny_qwen35()
    one = "<|vision_start|><|image_pad|><|vision_end|>overall"
    two = (
        "<|vision_start|><|image_pad|><|vision_end|><|vision_start|><|image_pad|><|vision_end|>a longer text"
    )
    imgs = _images(3)
    batch = processor(images=imgs, text=[two, one], return_tensors="pt", padding=True)
    single = processor(images=imgs[2:], text=[one], return_tensors="pt")
    hb = model(**batch, use_cache=False).last_hidden_state
    hs = model(**single, use_cache=False).last_hidden_state
    n = single.input_ids.shape[1]
    assert batch.attention_mask[1, n:].sum() == 0
    assert torch.allclose(hb[1, :n], hs[0], atol=1e-5, rtol=0)
