"""Weights cast to bfloat16 once (genmetrics.accel.cast_weights): every bf16 result bit for bit the one of
the uncached pass (autocast casting each weight at each call), a copy never served after its weight changed,
and freed with its model."""

from __future__ import annotations

import copy
import gc
import warnings

import pytest
import torch

import genmetrics as gm
from genmetrics.accel import cast_weights as CW
from genmetrics.backbones.clip_vision import encode_image
from genmetrics.backbones.provider import use_provider
from genmetrics.testing import random_images, tiny_backbones, tiny_clip
from tests.recipes import metric_recipe
from tests.test_precision import MODEL_METRICS, _flat


@pytest.fixture(autouse=True)
def _fresh():
    CW.release_cast_weights()
    CW.set_cast_cache(None)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", message="precision='bf16'")
        yield
    CW.set_cast_cache(None)
    CW.release_cast_weights()


#: what hands a metric a model the caller built (MIE copies a given backbone: the copy is the metric's own)
CALLERS_MODEL = ("backbone", "tokenizer", "processor")


def _metric_run(name: str, cached: bool, loaded: bool = True) -> tuple[torch.Tensor, int]:
    """The recipe's bf16 value and the bytes of cast copies kept. ``loaded``: the metric loads its model
    from weights by name (a tiny one, through the backbone provider) instead of taking the caller's."""
    CW.set_cast_cache(cached)
    r = metric_recipe(name)
    kwargs = dict(r["kwargs"])
    if loaded and name != "mie":
        kwargs = {k: v for k, v in kwargs.items() if k not in CALLERS_MODEL}
    with use_provider(tiny_backbones):
        m = gm.create_metric(name, **kwargs, precision="bf16")
        for u in r["updates"]:  # two or more updates: the later ones find the copies the first one made
            m.update(**u)
        out = _flat(m.compute())
    kept = CW.cast_weights_kept()
    del m
    return out, kept


@pytest.mark.parametrize("name", MODEL_METRICS)
def test_bf16_metric_bitwise_equal_with_and_without_cache(name):
    plain, kept_plain = _metric_run(name, cached=False)
    cached, kept = _metric_run(name, cached=True)
    assert kept_plain == 0
    assert kept > 0, f"{name}: no weight went through the cache under precision='bf16'"
    assert torch.equal(plain, cached), f"{name}: cached bf16 differs by {(plain - cached).abs().max():.3g}"


@pytest.mark.parametrize("name", [n for n in MODEL_METRICS if n != "mie"])
def test_a_caller_s_model_gets_no_kept_copy(name):
    """A model the caller passed may be under training, its weights written where torch does not count it:
    no copy of it is kept, and the value is the uncached one."""
    plain, _ = _metric_run(name, cached=False, loaded=False)
    value, kept = _metric_run(name, cached=True, loaded=False)
    assert kept == 0 and torch.equal(plain, value)


def test_a_caller_s_backbone_written_through_data_is_scored_with_its_new_weights():
    """An EMA-style update (``p.data.mul_``) bumps no version counter: with a kept copy, the second score
    of the caller's backbone was the first one's (red before copies were limited to loaded models)."""
    model, _ = tiny_clip()
    x, y = random_images(2, seed=1), random_images(2, seed=2)
    m = gm.create_metric("clip_i", backbone=model, precision="bf16")
    first = m.score(x, y)
    with torch.no_grad():
        for p in model.parameters():
            p.data.mul_(1.5)
    again = m.score(x, y)
    # on a copy: new tensors, which no copy kept for the old ones can stand for
    fresh = gm.create_metric("clip_i", backbone=copy.deepcopy(model), precision="bf16").score(x, y)
    assert torch.equal(again, fresh) and not torch.equal(first, fresh)


def test_keep_false_reaches_nested_scopes_and_direct_calls():
    lin = torch.nn.Linear(4, 4)
    x = torch.randn(2, 4, generator=torch.Generator().manual_seed(0))
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        with CW.cached_weight_scope(keep=False), CW.cached_weight_scope(lin):  # the inner one asks to keep
            hooked = bool(lin._forward_pre_hooks)
            direct = CW.autocast_weight(lin.weight)
            lin(x)
        assert not hooked and direct is lin.weight
        assert CW.cast_weights_kept() == 0
        with CW.cached_weight_scope(lin):
            lin(x)
    assert CW.cast_weights_kept() > 0


def _bf16(fn, *args):
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        return fn(*args)


def test_clip_tower_copy_made_once_and_equal_to_autocast():
    model, _ = tiny_clip()
    x = torch.randn(3, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    CW.set_cast_cache(False)
    plain = _bf16(encode_image, model, x)
    CW.set_cast_cache(True)
    first = _bf16(encode_image, model, x)
    w = model.visual.transformer.resblocks[0].attn.in_proj_weight
    copy = _bf16(CW.autocast_weight, w)
    second = _bf16(encode_image, model, x)
    assert _bf16(CW.autocast_weight, w) is copy  # kept, not cast again
    assert torch.equal(copy, w.detach().to(torch.bfloat16))
    assert torch.equal(plain, first) and torch.equal(plain, second)
    assert all(p.dtype == torch.float32 and isinstance(p, torch.nn.Parameter) for p in model.parameters())
    assert not any(m._forward_pre_hooks or m._forward_hooks for m in model.modules())  # scope left nothing


@pytest.mark.parametrize("change", ["in_place", "load_state_dict", "new_parameter"])
def test_changed_weights_are_cast_again(change):
    """A stale copy after a weight change would give the old weights' output (red when the version counter
    is left out of the copy's key)."""
    model, _ = tiny_clip()
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(1))
    CW.set_cast_cache(True)
    before = _bf16(encode_image, model, x)
    blk = model.visual.transformer.resblocks[0]
    new = blk.mlp.c_fc.weight.detach() * 1.5
    if change == "in_place":
        with torch.no_grad():
            blk.mlp.c_fc.weight.mul_(1.5)
            blk.attn.in_proj_weight.mul_(0.5)
            new_in = blk.attn.in_proj_weight.detach().clone()
    elif change == "load_state_dict":
        state = model.state_dict()
        state["visual.transformer.resblocks.0.mlp.c_fc.weight"] = new
        model.load_state_dict(state)
    else:
        blk.mlp.c_fc.weight = torch.nn.Parameter(new)
    after = _bf16(encode_image, model, x)
    CW.set_cast_cache(False)
    expected = _bf16(encode_image, model, x)
    assert not torch.equal(before, expected)
    assert torch.equal(after, expected)
    CW.set_cast_cache(True)
    assert torch.equal(_bf16(CW.autocast_weight, blk.mlp.c_fc.weight), new.to(torch.bfloat16))
    if change == "in_place":
        assert torch.equal(_bf16(CW.autocast_weight, blk.attn.in_proj_weight), new_in.to(torch.bfloat16))


def test_copies_freed_with_the_model():
    model, _ = tiny_clip()
    x = torch.randn(1, 3, 32, 32, generator=torch.Generator().manual_seed(2))
    CW.set_cast_cache(True)
    _bf16(encode_image, model, x)
    assert CW.cast_weights_kept() > 0
    del model
    gc.collect()
    assert CW.cast_weights_kept() == 0


def test_no_copy_without_autocast_for_inference_tensors_or_with_autograd():
    lin = torch.nn.Linear(4, 3)
    assert CW.autocast_weight(lin.weight) is lin.weight  # no autocast
    with torch.autocast("cpu", dtype=torch.bfloat16):  # autograd through the weight: autocast casts it
        assert CW.autocast_weight(lin.weight) is lin.weight
    with torch.inference_mode():
        frozen = torch.nn.Linear(4, 3)
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.bfloat16):
        assert CW.autocast_weight(frozen.weight) is frozen.weight  # no version counter: never kept
        assert CW.autocast_weight(lin.weight).dtype == torch.bfloat16
    with torch.no_grad(), torch.autocast("cpu", dtype=torch.float16):
        assert CW.autocast_weight(lin.weight) is lin.weight  # another autocast dtype: left to autocast
    assert CW.cast_weights_kept() == lin.weight.numel() * 2


def test_scope_swaps_only_stock_products_under_autocast():
    """A stock Linear reads the copy during its own forward; a module that reads a weight itself, or a
    Linear called with autocast switched off, sees the float32 parameter."""

    class Head(torch.nn.Module):
        def __init__(self) -> None:
            super().__init__()
            self.inner = torch.nn.Linear(4, 4)
            self.off = torch.nn.Linear(4, 2)
            self.seen: list[torch.dtype] = []

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            self.seen.append(self.inner.weight.dtype)
            h = self.inner(x)
            with torch.autocast("cpu", enabled=False):
                return self.off(h.float())

    head = Head()
    x = torch.randn(3, 4, generator=torch.Generator().manual_seed(3))
    CW.set_cast_cache(False)
    plain = _bf16(head, x)
    CW.set_cast_cache(True)
    with CW.cached_weight_scope(head):  # no autocast: no hooks, a float32 pass pays nothing
        assert not head.inner._forward_pre_hooks
    inside: list[torch.dtype] = []
    with torch.autocast("cpu", dtype=torch.bfloat16), CW.cached_weight_scope(head, None, "not a module"):
        hook = head.inner.register_forward_pre_hook(lambda m, a: inside.append(m.weight.dtype))  # after ours
        kept = _bf16(head, x)
        hook.remove()
    assert inside == [torch.bfloat16]  # the product itself read the copy
    assert torch.equal(plain, kept) and head.seen == [torch.float32, torch.float32]
    assert CW.cast_weights_kept() == (16 + 4) * 2  # inner's weight and bias only
    assert "weight" not in head.inner.__dict__ and not head.inner._forward_pre_hooks


def test_only_torch_s_own_products_are_swapped():
    """A Linear keeping nn.Linear.forward and a plain Conv2d run on the kept copy; a Conv2d subclass (which may
    read its weight outside the product) and a Linear with its own forward keep autocast's own cast."""

    class OwnConv(torch.nn.Conv2d):
        pass

    class OwnLinear(torch.nn.Linear):
        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return super().forward(x) + self.weight.sum()

    class Quiet(torch.nn.Linear):  # e.g. nn.modules.linear.NonDynamicallyQuantizableLinear
        pass

    root = torch.nn.ModuleList(
        [
            torch.nn.Linear(2, 2),
            torch.nn.Conv2d(1, 1, 1),
            OwnConv(1, 1, 1, bias=False),
            OwnLinear(2, 2),
            Quiet(2, 2),
        ]
    )
    with torch.autocast("cpu", dtype=torch.bfloat16), CW.cached_weight_scope(root):
        hooked = [bool(m._forward_pre_hooks) for m in root]
    assert hooked == [True, True, False, False, True]


def test_weights_reassigned_at_the_same_address_are_cast_again():
    """``weight.data = new`` keeps the version counter; when the new values sit where the old ones were (a
    buffer reloaded in place, or memory the allocator handed out again) the address is the same too. Only the
    storage tells them apart: red when the copy's key holds the address and version alone."""
    np = pytest.importorskip("numpy")
    lin = torch.nn.Linear(8, 4)
    x = torch.randn(3, 8, generator=torch.Generator().manual_seed(3))
    buf = lin.weight.detach().numpy().copy()
    lin.weight.data = torch.from_numpy(buf)

    def scoped(x):
        with CW.cached_weight_scope(lin):  # entered under autocast, as the metrics do
            return lin(x)

    CW.set_cast_cache(True)
    before = _bf16(scoped, x)
    assert CW.cast_weights_kept() > 0
    np.multiply(buf, 3.0, out=buf)  # new values, written where the old ones were
    lin.weight.data = torch.from_numpy(buf)  # and handed to the model again
    after = _bf16(scoped, x)
    CW.set_cast_cache(False)
    expected = _bf16(lin, x)
    assert not torch.equal(before, expected)
    assert torch.equal(after, expected)
