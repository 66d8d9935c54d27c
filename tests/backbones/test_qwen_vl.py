"""The shared Qwen-VL runtime: cached vision features reproduce the plain forward (both ways of passing them
back), smart_resize agrees with transformers' own, the resize policy is PIL bicubic, content keys, the LRU,
part resolution, linear-attention detection and folder resolution."""

from __future__ import annotations

import pytest
import torch
from PIL import Image

from genmetrics.backbones import qwen_vl as qv
from genmetrics.errors import InputError, WeightsUnavailableError

SIZE = 64
TEXT = "<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>and <|vision_start|><|image_pad|><|vision_end|> lighting<|im_end|>\n"


@pytest.fixture(scope="module")
def vlm():
    from genmetrics.testing import tiny_qwen3vl

    return tiny_qwen3vl(seed=0)


@pytest.fixture(scope="module")
def processor():
    from genmetrics.testing import tiny_qwen3vl_processor

    return tiny_qwen3vl_processor(96)


def _images():
    g = torch.Generator().manual_seed(5)
    return [
        torch.randint(0, 256, (3, 64, 96), generator=g, dtype=torch.uint8).float() / 255,
        torch.randint(0, 256, (3, 32, 64), generator=g, dtype=torch.uint8).float() / 255,
    ]


def _plain(vlm, processor, images):
    out = processor(
        text=[TEXT],
        images=images,
        images_kwargs={"do_rescale": False, "do_resize": False},
        return_tensors="pt",
    )
    with torch.no_grad():
        return out, vlm(**out, use_cache=False).last_hidden_state


def test_cached_features_equal_plain_forward(vlm, processor):
    """Features from the VisionEncoder (cached, two images of different grids), passed back through
    mm_encoder_outputs or scattered into inputs_embeds with our own positions, give the plain forward."""
    images = _images()
    out, ref = _plain(vlm, processor, images)
    enc = qv.VisionEncoder(vlm.visual, processor.image_processor, cache_size=4)
    feats = enc.features(images)
    assert enc.calls == 2 and [f.grid for f in feats] == [(2, 3), (1, 2)]
    assert len(feats[0].deepstack) == len(vlm.config.vision_config.deepstack_visual_indexes) >= 1
    again = enc.features(images[::-1])  # from the cache, no tower call, order follows the input
    assert enc.calls == 2 and again[0] is feats[1]
    mm = qv.mm_encoder_outputs(feats, device="cpu", dtype=torch.float32)
    kw = {k: v for k, v in out.items() if k != "pixel_values"}
    with torch.no_grad():
        via_mm = vlm(**kw, mm_encoder_outputs={"image": mm}, use_cache=False).last_hidden_state
    assert torch.allclose(via_mm, ref, atol=1e-5), (via_mm - ref).abs().max()
    pos, _ = vlm.get_rope_index(
        out["input_ids"], out["mm_token_type_ids"], out["image_grid_thw"], out["attention_mask"]
    )
    vmask = out["input_ids"] == vlm.config.image_token_id
    with torch.no_grad():
        embeds, ds = qv.scatter_features(vlm.language_model, out["input_ids"], vmask, feats)
        hidden, cap = qv.run_language_model(
            vlm.language_model, embeds, out["attention_mask"], pos, vmask, ds, capture=[0]
        )
    assert torch.allclose(hidden, ref, atol=1e-5), (hidden - ref).abs().max()
    assert cap[0].shape == hidden.shape
    with torch.no_grad():  # dropping DeepStack changes the result: the test can see it
        no_ds, _ = qv.run_language_model(vlm.language_model, embeds, out["attention_mask"], pos, vmask, None)
    assert not torch.allclose(no_ds, ref, atol=1e-3)


@pytest.mark.parametrize(
    "hw", [(96, 160), (640, 640), (20, 30), (1000, 100), (3000, 4000), (33, 47), (17, 900)]
)
def test_smart_resize_matches_transformers(hw):
    from transformers.models.qwen2_vl.image_processing_qwen2_vl import smart_resize

    lo, hi = 4 * 32 * 32, 1800 * 32 * 32
    assert qv.smart_resize(*hw) == smart_resize(*hw, factor=32, min_pixels=lo, max_pixels=hi)
    h, w = qv.smart_resize(*hw)
    assert h % 32 == 0 and w % 32 == 0 and lo <= h * w <= hi


def test_smart_resize_short_side_below_half_factor():
    """qwen_vl_utils (what the official embedder calls) rounds a side below factor/2 up to one factor before
    the pixel check; transformers' copy rounds it to 0 and rescales the other side too."""
    assert qv.smart_resize(5, 900) == (32, 896)


def test_smart_resize_bad_input():
    with pytest.raises(InputError, match="aspect ratio"):
        qv.smart_resize(10, 5000)
    with pytest.raises(InputError, match="resize="):
        qv.QwenResize("crop")
    with pytest.raises(InputError, match="multiple"):
        qv.QwenResize("square", 50)


def test_smart_policy_is_pil_bicubic_on_8bit():
    x = torch.randint(0, 256, (3, 96, 160), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))
    pol = qv.QwenResize("smart", min_pixels=None, max_pixels=64 * 96)
    th, tw = pol.target(96, 160)
    assert (th, tw) == qv.smart_resize(96, 160, 32, None, 64 * 96) and (th, tw) != (96, 160)
    y = pol.apply(x.float() / 255)
    ref = Image.fromarray(x.permute(1, 2, 0).numpy()).resize((tw, th), Image.Resampling.BICUBIC)
    assert torch.equal(
        (y * 255).round().to(torch.uint8), torch.from_numpy(__import__("numpy").array(ref)).permute(2, 0, 1)
    )
    same = torch.rand(3, 64, 96)
    assert pol.apply(same) is same  # already at its size: untouched
    assert pol.pair_size(torch.rand(3, 64, 64), torch.rand(3, 128, 64)) == pol.target(96, 64)
    assert pol.pair_size(torch.rand(3, 64, 64), torch.rand(3, 128, 64)) == pol.pair_size(
        torch.rand(3, 128, 64), torch.rand(3, 64, 64)
    )


def test_image_key_content_and_lru():
    a = torch.rand(3, 8, 8)
    assert qv.image_key(a) == qv.image_key(a.clone()) != qv.image_key(a + 1e-6)
    assert qv.image_key(a) != qv.image_key(a.reshape(3, 4, 16))
    im = Image.new("RGB", (4, 4), (1, 2, 3))
    assert qv.image_key(im) == qv.image_key(im.copy()) != qv.image_key(Image.new("RGB", (4, 4), (1, 2, 4)))
    c = qv.VisionCache(2)
    c.put("a", 1)
    c.put("b", 2)
    assert c.get("a") == 1
    c.put("c", 3)  # evicts b, the least recently used
    assert "b" not in c and "a" in c and len(c) == 2
    off = qv.VisionCache(0)
    off.put("a", 1)
    assert len(off) == 0


def test_parts_token_ids_and_linear_attention(vlm, processor):
    from genmetrics.testing import tiny_qwen3vl_for_generation, tiny_qwen35

    gen = tiny_qwen3vl_for_generation(seed=0)
    parts = qv.resolve_parts(gen)
    assert parts.base is gen.model and parts.lm_head is gen.lm_head
    assert qv.core_vlm(vlm) is vlm and qv.resolve_parts(vlm).lm_head is None
    with pytest.raises(InputError, match="Qwen-VL-style"):
        qv.resolve_parts(torch.nn.Linear(2, 2))
    with pytest.raises(InputError, match="nn.Module"):
        qv.resolve_parts("Qwen/Qwen3-VL-Embedding-2B")
    ids = qv.token_ids(vlm.config, processor.tokenizer)
    tok = processor.tokenizer
    assert ids.image == tok.convert_tokens_to_ids("<|image_pad|>")
    assert ids.vision_start == tok.convert_tokens_to_ids("<|vision_start|>")
    assert ids.vision_end == tok.convert_tokens_to_ids("<|vision_end|>") and ids.pad == tok.pad_token_id
    assert qv.linear_attention_layers(vlm) == []
    assert qv.linear_attention_layers(tiny_qwen35(seed=0)) == [0, 1, 2]
    assert qv.attn_implementation(parts) == "sdpa"


def test_resolve_folder(tmp_path):
    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "marker.json").write_text("{}")
    assert (
        qv.resolve_folder(tmp_path / "ok", "marker.json", what="x", hint="h") == (tmp_path / "ok").resolve()
    )
    (tmp_path / "empty").mkdir()
    with pytest.raises(WeightsUnavailableError, match="no marker.json"):
        qv.resolve_folder(tmp_path / "empty", "marker.json", what="x", hint="make one")
    with pytest.raises(WeightsUnavailableError, match="make one"):
        qv.resolve_folder(tmp_path / "missing", "marker.json", what="x", hint="make one")
