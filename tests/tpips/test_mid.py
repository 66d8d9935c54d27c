"""genmetrics.tpips.mid: Eq. 3 against an independent computation from the standard forward, the
initialisation (first-step loss near ln 3), channel weights that follow the aspect, probe layers."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from genmetrics.errors import InputError
from genmetrics.tpips.mid import MidFusionHead, initial_weight, probe_indices
from genmetrics.tpips.model import TPIPSModel, prompt_for
from genmetrics.tpips.train import soft_cross_entropy

from .conftest import SIZE


def _mid_reference(vlm, processor, m: TPIPSModel, a, b, aspect: str) -> float:
    """Eq. 3 from the standard Qwen3VLModel forward: hidden_states[l + 1] is decoder layer l's output."""
    tok = processor.tokenizer
    instr = prompt_for("mid", aspect)
    text = (
        f"<|im_start|>system\n{instr}<|im_end|>\n<|im_start|>user\n<|vision_start|><|image_pad|><|vision_end|>"
        "<|im_end|>\n<|im_start|>assistant\n"
    )
    t0 = len(tok("<|im_start|>system\n", add_special_tokens=False)["input_ids"])
    t1 = t0 + len(tok(instr, add_special_tokens=False)["input_ids"])
    states = []
    for im in (a, b):
        out = processor(
            text=[text],
            images=[im],
            images_kwargs={"do_resize": False, "do_rescale": False},
            return_tensors="pt",
        )
        with torch.no_grad():
            hs = vlm(**out, output_hidden_states=True, use_cache=False).hidden_states
        img = out["input_ids"][0] == vlm.config.image_token_id
        states.append([(hs[li + 1][0, img], hs[li + 1][0, t0:t1].mean(0)) for li in m.fusion.probe_layers])
    total = 0.0
    for j, mlp in enumerate(m.fusion.head.mlps):
        (pa, ta), (pb, tb) = states[0][j], states[1][j]
        if m.fusion.head.text_norm == "layer":  # the MLP input: zero mean, unit variance over channels
            ta = (ta - ta.mean()) / (ta.var(unbiased=False) + 1e-5).sqrt()
            tb = (tb - tb.mean()) / (tb.var(unbiased=False) + 1e-5).sqrt()
        with torch.no_grad():
            w = 0.5 * (F.softplus(mlp(ta)) + F.softplus(mlp(tb)))
        phi_a, phi_b = pa / pa.norm(dim=-1, keepdim=True), pb / pb.norm(dim=-1, keepdim=True)
        total += float(((w * (phi_a - phi_b)) ** 2).sum(-1).mean())
    return -total


@pytest.mark.parametrize("text_norm", ["layer", "none"])
def test_mid_fusion_equals_eq3_from_the_standard_forward(processor, images, text_norm):
    """Probe layers 0 and 1 of a 3-layer model (the standard forward replaces the last layer's output by
    the post-norm state, so the last layer is left out of this comparison); both MLP-input options."""
    from genmetrics.testing import tiny_qwen3vl

    vlm = tiny_qwen3vl(seed=1, text_config={"num_hidden_layers": 3})
    m = TPIPSModel(vlm, processor, "mid", image_size=SIZE, probe_layers=[0, 1], mid_text_norm=text_norm)
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():  # non-trivial channel weights, so every term of Eq. 3 matters
        for mlp in m.fusion.head.mlps:
            mlp[2].weight.copy_(torch.randn(mlp[2].weight.shape, generator=g) * 0.05)
    a, b = [x.float() / 255 for x in images[:2]]
    got = float(m.similarity([a], [b], "lighting")[0])
    ref = _mid_reference(vlm, processor, m, a, b, "lighting")
    assert got == pytest.approx(ref, rel=1e-4, abs=1e-7), (got, ref)


def _first_step(vlm_seed: int, processor, mid_init, images):
    from genmetrics.testing import tiny_qwen3vl
    from genmetrics.tpips.train import TrainConfig, build_model

    cfg = TrainConfig(variant="mid", image_size=SIZE, probe_layers=2, lora_dropout=0.0).resolved()
    model = build_model(cfg, tiny_qwen3vl(seed=vlm_seed), processor)
    if mid_init is not None:
        fusion = model.fusion
        fusion.head = type(fusion.head)(
            model.hidden_size, len(fusion.probe_layers), fusion.mid_hidden, init_weight=mid_init
        )
    model.train()
    x = [model.load_images(images[i::3][:2]) for i in range(3)]
    votes = torch.tensor([[0.0, 1.0, 4.0], [3.0, 1.0, 1.0]])
    loss = soft_cross_entropy(model(*x, ["color", "lighting"]), votes).mean()
    loss.backward()
    grad = torch.sqrt(sum((p.grad.double() ** 2).sum() for p in model.parameters() if p.grad is not None))
    return float(loss.detach()), float(grad)


def test_mid_fusion_starts_near_chance(processor, images):
    """Default init (w0 = sqrt(tau / L)): first-step loss within 0.25 of ln 3 and a bounded gradient; the
    paper-literal w0 = 1 at tau = 0.0025 starts far from chance with a much larger gradient."""
    loss, grad = _first_step(0, processor, None, images)
    assert abs(loss - math.log(3)) < 0.25, loss
    assert grad < 20.0, grad
    loss1, grad1 = _first_step(0, processor, 1.0, images)
    assert loss1 > 3.0 and grad1 > 5 * grad, (loss1, grad1)


def test_mid_channel_weights_follow_the_aspect_whatever_the_state_scale():
    """With the default MLP input norm, w_l(c) depends on the direction of the averaged instruction state, not
    its scale (the tiny backbone's states have norm ~0.1, a real one's ~10-1000): scaling the state by 100
    or 1e4 leaves the weights unchanged, while two different states still give different weights. The
    paper-literal raw input ("none") is scale-dependent."""
    from genmetrics.tpips.mid import MidFusionHead

    g = torch.Generator().manual_seed(0)
    heads = {n: MidFusionHead(32, 1, mlp_hidden=16, init_weight=0.05, text_norm=n) for n in ("layer", "none")}
    for h in heads.values():
        with torch.no_grad():
            h.mlps[0][2].weight.copy_(torch.randn(h.mlps[0][2].weight.shape, generator=g))
    t, u = torch.randn(2, 32, generator=g) * 0.1
    w = heads["layer"].channel_weights(0, t * 10)  # (per-channel variance 1, far above LayerNorm's eps 1e-5)
    for scale in (1e3, 1e5):
        assert torch.allclose(heads["layer"].channel_weights(0, t * scale), w, rtol=1e-4, atol=1e-7)
        assert not torch.allclose(
            heads["none"].channel_weights(0, t * scale), heads["none"].channel_weights(0, t)
        )
    assert (heads["layer"].channel_weights(0, u) - w).abs().max() > 1e-2
    with pytest.raises(Exception, match="mid_text_norm"):
        MidFusionHead(32, 1, text_norm="rms")


@pytest.mark.parametrize("n_layers,k", [(28, 4), (28, 20), (5, 5), (2, 20), (36, 1), (7, 3)])
def test_probe_layers_are_evenly_spaced_and_include_the_last(n_layers, k):
    idx = probe_indices(n_layers, k)
    assert len(idx) == min(k, n_layers) and idx == sorted(set(idx))
    assert idx[-1] == n_layers - 1 and (k == 1 or idx[0] == 0)
    gaps = [b - a for a, b in zip(idx, idx[1:])]
    assert not gaps or max(gaps) - min(gaps) <= 1  # as even as integers allow


def test_explicit_probe_layers_wrap_negative_indices_and_refuse_nothing_chosen():
    assert probe_indices(10, [-1, 0, 3, 3]) == [0, 3, 9]
    with pytest.raises(InputError, match="probe_layers must be positive, got 0"):
        probe_indices(10, 0)
    with pytest.raises(InputError, match="probe_layers: empty list"):
        probe_indices(10, [])


@pytest.mark.parametrize("tau,n", [(0.0025, 25), (0.05, 4), (1.0, 1)])
def test_the_initial_weight_makes_eq2_logits_minus_the_mean_squared_distance(tau, n):
    """With every channel weight ``w0``, Eq. 3's distance over ``n`` layers divided by ``tau`` is
    ``w0^2 * n * mean_l ||d_l||^2 / tau`` = the mean squared distance."""
    w0 = initial_weight(tau, n)
    assert w0**2 * n / tau == pytest.approx(1.0, rel=1e-12)


def test_the_head_refuses_bad_options_naming_them():
    with pytest.raises(InputError, match=r"mid-fusion init_weight must be positive, got 0\.0"):
        MidFusionHead(8, 2, 4, init_weight=0.0)
    with pytest.raises(InputError, match=r"mid_text_norm='batch': expected one of layer, none"):
        MidFusionHead(8, 2, 4, text_norm="batch")
