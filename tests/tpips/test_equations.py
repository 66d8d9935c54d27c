"""Tests that would catch a wrong equation: the sign of Eq. 2, Eq. 3 against an independent computation
from the standard forward's hidden states (unit normalisation, weights, probe layers), the column order of
the per-aspect similarities, and the mid-fusion initialisation (first-step loss near ln 3, bounded
gradients)."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from genmetrics.tpips.model import TPIPSModel, prompt_for
from genmetrics.tpips.train import soft_cross_entropy

from .conftest import SIZE

VARIANTS = ["late", "mid", "early"]


@pytest.mark.parametrize("variant", VARIANTS)
def test_eq2_sign_identical_pair_makes_the_third_odd(models, images, variant):
    """x1 == x2: the pair leaving x3 out is the most similar, so x3 is the odd one (Eq. 2's p = softmax(+s/tau))."""
    m = models[variant]
    a, b = list(images[:3]), list(images[3:6])
    p = m.odd_one_out(a, a, b, ["color", "overall", "lighting"])
    assert (p.argmax(1) == 2).all(), p
    q = m.odd_one_out(b, a, a, ["color", "overall", "lighting"])  # and wherever the odd one stands
    assert (q.argmax(1) == 0).all(), q
    x = [m.load_images(v) for v in (a, a, b)]
    with torch.no_grad():
        logits = m(*x, ["color", "overall", "lighting"])
        s = m.triplet_scores(*x, ["color", "overall", "lighting"])
    assert torch.allclose(logits, s / m.temperature)
    # the training loss is lowest when the votes name the image Eq. 2 calls odd
    votes = torch.eye(3)
    losses = torch.stack([soft_cross_entropy(logits[:1], v[None])[0] for v in votes])
    assert int(losses.argmin()) == 2


@pytest.mark.parametrize("variant", VARIANTS)
def test_triplet_columns_leave_image_k_out(models, images, variant):
    m = models[variant]
    x1, x2, x3 = [m.load_images(images[i : i + 2]) for i in (0, 2, 4)]
    asp = ["color", "pose of the cat"]
    with torch.no_grad():
        s = m.triplet_scores(x1, x2, x3, asp)
        ref = torch.stack(
            [m.pair_scores(x2, x3, asp), m.pair_scores(x1, x3, asp), m.pair_scores(x1, x2, asp)], 1
        )
    assert torch.allclose(s.double(), ref.double(), atol=1e-6), (s, ref)
    assert (s[:, 0] - s[:, 2]).abs().max() > 1e-6  # the columns differ, so a swap would show


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
