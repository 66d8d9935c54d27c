"""The block-by-block open_clip image tower (genmetrics.backbones.clip_vision): equal to ``model.encode_image`` up
to float32 rounding on every ViT shape it accepts, and ``encode_image`` itself for anything else; its FLOP
count is the sum of its products."""

from __future__ import annotations

import copy

import pytest
import torch
from open_clip.model import CLIP

from genmetrics.accel import clip_packed
from genmetrics.accel._torch_internals import onednn_linear_available
from genmetrics.accel.fastpath import force_path
from genmetrics.backbones.clip_vision import fast_vision_tower
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


def _random_biases(model):
    """open_clip initialises the attention biases to 0 (``nn.MultiheadAttention``); random ones make a
    dropped or misplaced bias visible to the parity tests."""
    g = torch.Generator().manual_seed(7)
    with torch.no_grad():
        for name, p in model.named_parameters():
            if name.endswith("bias"):
                p.copy_(0.02 * torch.randn(p.shape, generator=g))
    return model


def _images(n: int = 3, size: int = 32) -> torch.Tensor:
    return torch.randn(n, 3, size, size, generator=torch.Generator().manual_seed(3))


def _attention_calls(model) -> list[int]:
    calls = [0]
    for blk in model.visual.transformer.resblocks:
        blk.attn.register_forward_hook(lambda *a: calls.__setitem__(0, calls[0] + 1))
    return calls


# ---------------------------------------------------------------------------- float32 rounding bounds
EPS32 = torch.finfo(torch.float32).eps  # 1.19e-7 = 2u, u the unit roundoff


def float32_bound(stages: int, k_max: int) -> float:
    """Norm-wise relative error that two float32 evaluations of the same network may each have against the
    exact value (derived, not measured on one CPU).

    A dot product of length ``K`` summed in any order (MKL, oneDNN, SDPA, blocked or not) makes an error of
    about ``u * sqrt(K)`` relative to its result when the terms have random signs (rounding errors of the
    partial sums add like a random walk; the worst case ``K * u`` needs every rounding in one direction). The
    ``stages`` products on the path from input to embedding each add such an independent error, so the
    total is about ``u * sqrt(stages * K)``, with ``K`` the longest reduction (``k_max``: the MLP's hidden
    width, the ``c_proj`` product). Layer norms rescale, they do not amplify relative errors of a
    non-degenerate row. The bound takes 4 standard deviations with ``eps = 2u``: ``4 * eps * sqrt(stages *
    k_max)``. For the tiny towers (3 blocks, K = 128) that is 1.9e-5, for ViT-B/16 (12 blocks, K = 3072)
    1.8e-4; measured on an AMD EPYC Zen 3: 2-4 eps and 5-7 eps, so the bound leaves a margin of 50x and 200x
    for other CPUs, while a wrong weight, a dropped bias or a wrong QuickGELU constant (1.70 for 1.702)
    moves the embedding by 1e-3 or more (mutations in the report).
    """
    return 4.0 * EPS32 * (stages * k_max) ** 0.5


def tower_bound(model) -> float:
    """:func:`float32_bound` for an open_clip ViT tower: 4 products per block (in-projection, out-projection,
    c_fc, c_proj) plus the final projection; K = the widest of width and MLP hidden width."""
    v = model.visual
    blocks = list(v.transformer.resblocks)
    k_max = max(max(int(b.mlp.c_fc.out_features), int(b.attn.embed_dim)) for b in blocks)
    return float32_bound(4 * len(blocks) + 1, k_max)


def relative_error(a: torch.Tensor, b: torch.Tensor) -> float:
    """Largest row-wise ``||a - b|| / ||b||`` (norm-wise relative error of each embedding)."""
    a, b = a.double(), b.double()
    return float(((a - b).norm(dim=-1) / b.norm(dim=-1)).max())


@pytest.fixture(params=["plain", "packed"])
def path(request):
    """Each test below runs on both product paths, whichever this machine would choose."""
    if request.param == "packed" and not onednn_linear_available():
        pytest.skip("this torch build has no oneDNN packed linear")
    force_path(clip_packed.PACKED_LINEAR, request.param)
    yield request.param
    force_path(clip_packed.PACKED_LINEAR, None)


@pytest.mark.parametrize("variant", ["tok-quickgelu", "tok-gelu", "avg", "avg-ln-after-pool", "one-block"])
def test_fast_tower_equals_encode_image(variant, path):
    model = _random_biases(
        {
            "tok-quickgelu": lambda: tiny_clip()[0],
            "tok-gelu": lambda: _vit(quick_gelu=False),
            "avg": lambda: _vit("avg"),
            "avg-ln-after-pool": lambda: _vit("avg", final_ln_after_pool=True),
            "one-block": lambda: _vit(layers=1),
        }[variant]()
    )
    x = _images()
    calls = _attention_calls(model)
    with torch.no_grad():
        ref = model.encode_image(x)
        n_ref = calls[0]
        fast = encode_image(model, x)
        assert calls[0] == n_ref, "the fast path must not run open_clip's attention modules"
        exact = copy.deepcopy(model).double().encode_image(x.double())
    assert fast.shape == ref.shape and fast.dtype == ref.dtype
    bound = tower_bound(model)
    # both float32 paths are roundings of the float64 value, each within the bound; so they are within 2x
    assert relative_error(ref, exact) <= bound, "the bound does not even hold for open_clip's own path"
    assert relative_error(fast, exact) <= bound
    assert relative_error(fast, ref) <= 2 * bound
    # images differ, so a wrong token or a shared row would show
    assert not torch.allclose(fast[0], fast[1])
    _assert_batch_invariant(model, x)


def _rows_independent_of_batch(model, x: torch.Tensor) -> bool:
    """Whether this machine's kernels for the tower's products give a row the same bits inside a batch of
    ``x``'s size as alone (measured: yes on the two AMD EPYC CPUs, no for oneDNN on an Intel Xeon)."""
    blk = model.visual.transformer.resblocks[0]
    n_one = model.visual.positional_embedding.shape[0]
    h = torch.randn(x.shape[0] * n_one, blk.attn.embed_dim, generator=torch.Generator().manual_seed(5))
    with torch.no_grad():
        packed = clip_packed.packed_vision_blocks(model.visual)
        if packed is None:
            lin = lambda t: torch.nn.functional.linear(t, blk.attn.in_proj_weight, blk.attn.in_proj_bias)  # noqa: E731
        else:
            lin = packed[0].in_proj
        return torch.equal(lin(h)[:n_one], lin(h[:n_one]))


def _assert_batch_invariant(model, x: torch.Tensor) -> None:
    """An image's embedding inside a batch equals the image alone: exactly where this CPU's products give a
    row the same bits whatever the batch (a per-CPU property, tested as such), else within the
    float32 bound (two roundings of the same value)."""
    with torch.no_grad():
        fast = encode_image(model, x)
        alone = torch.cat([encode_image(model, x[i : i + 1]) for i in range(x.shape[0])])
    if _rows_independent_of_batch(model, x):
        assert torch.equal(fast, alone)
    assert relative_error(fast, alone) <= 2 * tower_bound(model)


@pytest.mark.slow
def test_fast_tower_equals_encode_image_on_vit_b16(path):
    import open_clip

    torch.manual_seed(0)
    model = _random_biases(open_clip.create_model("ViT-B-16-quickgelu", pretrained=None).eval())
    x = _images(3, 224)
    with torch.no_grad():
        ref, fast = model.encode_image(x), encode_image(model, x)
    assert relative_error(fast, ref) <= 2 * tower_bound(model)  # 3.7e-4; measured 5-7 eps = 6-8e-7
    _assert_batch_invariant(model, x)


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


@pytest.mark.parametrize("layers", [1, 3])
def test_vision_tower_flops_counts_every_product(layers):
    """A second computation: FLOPs of each product from the tower's own modules' shapes (patch embedding,
    qkv, attention out, the two MLP layers, the two attention products), against the closed form."""
    from genmetrics.backbones.clip_vision import vision_tower_flops

    v = _vit(layers=layers).visual
    n = v.grid_size[0] * v.grid_size[1] + 1
    conv = v.conv1
    total = 2 * (n - 1) * conv.in_channels * conv.kernel_size[0] * conv.kernel_size[1] * conv.out_channels
    for blk in v.transformer.resblocks:
        attn, mlp = blk.attn, blk.mlp
        for weight in (attn.in_proj_weight, attn.out_proj.weight, mlp.c_fc.weight, mlp.c_proj.weight):
            total += 2 * n * weight.shape[0] * weight.shape[1]
        total += 2 * 2 * n * n * attn.embed_dim  # scores and weighted values
    total += 2 * v.proj.shape[0] * v.proj.shape[1]
    assert vision_tower_flops(v) == total
