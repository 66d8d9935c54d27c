"""The block-by-block open_clip image tower (issue 16): equal to ``model.encode_image`` up to float32
rounding on every ViT shape it accepts, and ``encode_image`` itself for anything else."""

from __future__ import annotations

import copy

import pytest
import torch
from open_clip.model import CLIP

from genmetrics.backbones import clip_packed
from genmetrics.backbones._torch_internals import onednn_linear_available
from genmetrics.backbones.clip_vision import fast_vision_tower
from genmetrics.backbones.fastpath import force_path
from genmetrics.backbones.openclip import encode_image, load_open_clip, release_packed_weights
from genmetrics.testing import tiny_clip, tiny_clip_resnet


@pytest.fixture
def packed_path():
    """Take the packed oneDNN products whatever this machine measured (their arithmetic is tested here)."""
    if not onednn_linear_available():
        pytest.skip("this torch build has no oneDNN packed linear; encode_image uses F.linear")
    force_path(clip_packed.PACKED_LINEAR, "packed")
    yield
    force_path(clip_packed.PACKED_LINEAR, None)


def _vit(pool: str = "tok", *, quick_gelu: bool = True, final_ln_after_pool: bool = False, layers: int = 3):
    torch.manual_seed(0)
    return CLIP(
        embed_dim=32,
        quick_gelu=quick_gelu,
        vision_cfg=dict(
            image_size=32,
            patch_size=8,
            width=64,
            layers=layers,
            head_width=16,
            mlp_ratio=2.0,
            pool_type=pool,
            final_ln_after_pool=final_ln_after_pool,
        ),
        text_cfg=dict(context_length=16, vocab_size=49408, width=32, heads=4, layers=1),
    ).eval()


def _images(n: int = 3, size: int = 32) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(3))


def _attention_calls(model) -> list[int]:
    calls = [0]
    for blk in model.visual.transformer.resblocks:
        blk.attn.register_forward_hook(lambda *a: calls.__setitem__(0, calls[0] + 1))
    return calls


@pytest.mark.parametrize("variant", ["tok-quickgelu", "tok-gelu", "avg", "avg-ln-after-pool", "one-block"])
def test_fast_tower_equals_encode_image(variant):
    model = {
        "tok-quickgelu": lambda: tiny_clip()[0],
        "tok-gelu": lambda: _vit(quick_gelu=False),
        "avg": lambda: _vit("avg"),
        "avg-ln-after-pool": lambda: _vit("avg", final_ln_after_pool=True),
        "one-block": lambda: _vit(layers=1),
    }[variant]()
    x = _images()
    calls = _attention_calls(model)
    with torch.no_grad():
        ref = model.encode_image(x)
        n_ref = calls[0]
        fast = encode_image(model, x)
        assert calls[0] == n_ref, "the fast path must not run open_clip's attention modules"
        exact = copy.deepcopy(model).double().encode_image(x.double())
    assert fast.shape == ref.shape and fast.dtype == ref.dtype
    assert (fast - ref).abs().max() <= 1e-5 * max(1.0, float(ref.abs().max()))
    # as close to the float64 tower as open_clip's own float32 path
    assert (fast.double() - exact).abs().max() <= 4 * (ref.double() - exact).abs().max() + 1e-6
    # images differ, so a wrong token or a shared row would show
    assert not torch.allclose(fast[0], fast[1])
    _assert_batch_invariant_as_open_clip(model, x)


def _assert_batch_invariant_as_open_clip(model, x: torch.Tensor) -> None:
    """An image's embedding depends on the rest of its batch no more than with open_clip's own path."""
    with torch.no_grad():
        fast = encode_image(model, x)
        fast_split = torch.cat([encode_image(model, x[:1]), encode_image(model, x[1:])])
        ref = model.encode_image(x)
        ref_split = torch.cat([model.encode_image(x[:1]), model.encode_image(x[1:])])
    assert (fast - fast_split).abs().max() <= (ref - ref_split).abs().max()


@pytest.mark.slow
def test_fast_tower_equals_encode_image_on_vit_b16():
    import open_clip

    torch.manual_seed(0)
    model = open_clip.create_model("ViT-B-16-quickgelu", pretrained=None).eval()
    x = _images(3, 224)
    with torch.no_grad():
        ref, fast = model.encode_image(x), encode_image(model, x)
    assert (fast - ref).abs().max() <= 1e-5 * max(1.0, float(ref.abs().max()))
    _assert_batch_invariant_as_open_clip(model, x)  # (measured: 0 for both at this width)


def test_other_towers_and_gradients_use_encode_image():
    model = tiny_clip()[0]
    x = _images()
    calls = _attention_calls(model)
    with torch.enable_grad():  # gradients: open_clip's own forward, bit for bit
        assert torch.equal(encode_image(model, x), model.encode_image(x))
    assert calls[0] > 0
    model.train()
    with torch.no_grad():
        assert fast_vision_tower(model) is None
    model.eval()

    class Custom(CLIP):  # a user's own encode_image is respected
        def encode_image(self, image, normalize=False):
            return super().encode_image(image, normalize) * 2

    custom = Custom(**_cfg_of_tiny()).eval()
    resnet = tiny_clip_resnet()[0]
    with torch.no_grad():
        assert fast_vision_tower(model) is model.visual
        assert fast_vision_tower(custom) is None and fast_vision_tower(resnet) is None
        assert torch.equal(encode_image(custom, x), custom.encode_image(x))
        assert torch.equal(encode_image(resnet, x), resnet.encode_image(x))


def _cfg_of_tiny() -> dict:
    return dict(
        embed_dim=32,
        quick_gelu=True,
        vision_cfg=dict(image_size=32, patch_size=8, width=64, layers=2, head_width=16, mlp_ratio=2.0),
        text_cfg=dict(context_length=16, vocab_size=49408, width=32, heads=4, layers=1),
    )


def test_packed_weights_are_used_and_follow_the_model(packed_path):
    """Where the packed path is taken, the blocks' products run on a packed copy of the weights (oneDNN);
    that copy must follow in-place updates (an optimizer step, ``load_state_dict``) and another model, never
    serve stale weights."""
    a, b = tiny_clip()[0], _vit()
    x = _images()
    with torch.no_grad():
        release_packed_weights()
        first = encode_image(a, x)
        assert clip_packed.packed_tower() is a.visual, "the packed path was not taken"
        a.visual.transformer.resblocks[0].mlp.c_fc.weight.mul_(1.5)  # in place: same storage, new version
        after = encode_image(a, x)
        assert not torch.allclose(first, after, atol=1e-4)
        torch.testing.assert_close(after, a.encode_image(x), atol=1e-5, rtol=1e-5)
        a.load_state_dict(tiny_clip()[0].state_dict())  # copied in place: back to the first weights
        torch.testing.assert_close(encode_image(a, x), first, atol=0, rtol=0)
        torch.testing.assert_close(
            encode_image(b, x), b.encode_image(x), atol=1e-5, rtol=1e-5
        )  # another tower
        assert clip_packed.packed_tower() is b.visual  # one tower's copy at a time
        assert release_packed_weights() and clip_packed.packed_tower() is None


def test_weights_made_under_inference_mode_are_packed_per_call(packed_path):
    """A model built under ``torch.inference_mode`` has inference-tensor weights without a version counter:
    an in-place change could not be detected, so nothing is cached and every call sees the current weights."""
    x = _images()
    with torch.inference_mode():
        model = tiny_clip()[0]
        release_packed_weights()
        first = encode_image(model, x)
        assert clip_packed.packed_tower() is None, "inference tensors must not be cached"
        model.visual.transformer.resblocks[0].mlp.c_fc.weight.mul_(1.5)
        after = encode_image(model, x)
        assert not torch.allclose(first, after, atol=1e-4)
        torch.testing.assert_close(after, model.encode_image(x), atol=1e-5, rtol=1e-5)


def test_weights_loaded_lazily_inside_inference_mode_are_cached(packed_path):
    """A metric loads its weights lazily, often inside ``torch.inference_mode`` (the CLI scores that way):
    load_open_clip builds them as ordinary tensors, so the packed copy is kept across calls."""
    from genmetrics.backbones.provider import use_provider
    from genmetrics.testing import tiny_backbones

    with torch.inference_mode(), use_provider(tiny_backbones):
        model = load_open_clip("ViT-B-32/openai")[0]
        assert not any(p.is_inference() for p in model.parameters())
        release_packed_weights()
        encode_image(model, _images())
        assert clip_packed.packed_tower() is model.visual
