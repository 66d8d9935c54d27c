"""Batch composition never changes a TPIPS score: every row of a batch that mixes image sizes,
aspect ratios, PIL modes and aspects equals that row scored alone, and the language-tower batch size (1, 3,
all) does not matter, for every entry point (``similarity``, ``triplet_scores`` / ``odd_one_out``, the
``tpips`` metric's update / compute / one-shot, the training forward and loss), in late, mid and early fusion,
with and without LoRA.

Tolerance (float32, from the arithmetic, not from this CPU): a batch changes only the padding and the
blocking of the same float32 reductions (GEMMs over the padded batch, attention sums whose masked keys get
zero weight). Each reordered dot product of length n moves by about sqrt(n) * 2**-24 relative (rounding
errors of random sign); the tiny model's widths are n <= 256, so about 1e-6 per product, and a few layers of
O(1) activations and a final cosine / weighted distance of O(1) keep a similarity within ``TOL = 1e-5``.
Quantities that divide the similarity by Eq. 2's ``tau`` scale the bound: logits ``s / tau`` by ``1 / tau``;
softmax probabilities by ``1 / (2 tau)`` (the softmax Jacobian has infinity-norm ``max 2 p (1 - p) <= 1/2``);
the cross-entropy by ``2 / tau`` (its gradient ``p - y`` has l1-norm <= 2)."""

from __future__ import annotations

import warnings

import pytest
import torch
from PIL import Image

from genmetrics.backbones.hf import add_lora
from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor
from genmetrics.tpips.metric import TPIPS
from genmetrics.tpips.model import TPIPSModel
from genmetrics.tpips.train import soft_cross_entropy

TOL = 1e-5
VARIANTS = ["late", "mid", "early"]


def _rgb(h: int, w: int, seed: int) -> torch.Tensor:
    return torch.randint(0, 256, (3, h, w), dtype=torch.uint8, generator=torch.Generator().manual_seed(seed))


def _pil(mode: str, h: int, w: int, seed: int) -> Image.Image:
    g = torch.Generator().manual_seed(seed)
    rgb = Image.fromarray(torch.randint(0, 256, (h, w, 3), dtype=torch.uint8, generator=g).numpy())
    alpha = Image.fromarray(torch.randint(0, 256, (h, w), dtype=torch.uint8, generator=g).numpy())
    if mode == "RGBA":
        return Image.merge("RGBA", (*rgb.split(), alpha))
    if mode == "LA":
        return Image.merge("LA", (rgb.convert("L"), alpha))
    if mode == "I;16":
        deep = torch.randint(0, 65536, (h, w), dtype=torch.int32, generator=g).numpy().astype("uint16")
        return Image.fromarray(deep)  # uint16: mode I;16
    if mode == "P":
        return rgb.quantize(16)
    return rgb.convert(mode)


def mixed_triplets() -> tuple[list, list, list, list[str]]:
    """Five rows: sizes from 33 to 160 px, aspect ratios 0.4 to 2.6, tensors (uint8, float) and PIL images
    of modes RGB, L, LA, RGBA, P, CMYK, I;16, and a different aspect per row; the third column mixes again."""
    x1 = [
        _rgb(64, 64, 1),
        _pil("L", 96, 160, 2),
        _pil("P", 70, 50, 3),
        _rgb(50, 130, 4).float() / 255,
        _pil("I;16", 80, 80, 5),
    ]
    x2 = [
        _rgb(64, 64, 6),
        _pil("RGBA", 96, 160, 7),
        _pil("CMYK", 40, 90, 8),
        _pil("LA", 64, 64, 9),
        _rgb(33, 47, 10),
    ]
    x3 = [
        _pil("RGBA", 64, 96, 11),
        _rgb(96, 160, 12),
        _rgb(70, 50, 13),
        _pil("L", 128, 48, 14),
        _pil("P", 64, 64, 15),
    ]
    aspects = ["color", "overall", "the pose of the cat", "lighting", "texture"]
    return x1, x2, x3, aspects


def build(variant: str, lora: bool) -> TPIPSModel:
    backbone = tiny_qwen3vl(seed=0)
    if lora:  # LoRA B moved off zero so the adapters matter; no dropout, so train mode is deterministic
        backbone = add_lora(backbone, r=4, dropout=0.0, target_modules=["q_proj", "v_proj", "up_proj"])
    model = TPIPSModel(backbone, tiny_qwen3vl_processor(), variant, probe_layers=2, mid_hidden=16)
    g = torch.Generator().manual_seed(3)
    with torch.no_grad():
        for n, p in model.named_parameters():
            if "lora_B" in n or n.startswith("fusion."):
                p.add_(0.05 * torch.randn(p.shape, generator=g))
    return model.eval()


@pytest.fixture(scope="module", params=[(v, lora) for v in VARIANTS for lora in (False, True)], ids=str)
def spec(request):
    return request.param


@pytest.fixture(scope="module")
def model(spec):
    return build(*spec)


@pytest.fixture(scope="module")
def rows():
    return mixed_triplets()


@pytest.fixture(autouse=True)
def _quiet():
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the official conversion's notes on LA / I;16 inputs
        yield


def _max_diff(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).abs().max())


def test_similarity_rows_equal_rows_alone(model, rows):
    x1, x2, _, aspects = rows
    full = model.similarity(x1, x2, aspects)
    alone = torch.cat([model.similarity([a], [b], [c]) for a, b, c in zip(x1, x2, aspects)])
    assert _max_diff(full, alone) <= TOL, (full, alone)
    assert len({round(float(v), 6) for v in full}) == len(full)  # the rows are distinct computations
    saved = model.batch_size
    try:
        for size in (1, 3, len(x1)):
            model.batch_size = size
            assert _max_diff(model.similarity(x1, x2, aspects), full) <= TOL, size
    finally:
        model.batch_size = saved


def test_triplet_scores_and_odd_one_out_rows_equal_rows_alone(model, rows):
    x1, x2, x3, aspects = rows
    cols = [model.load_images(x) for x in (x1, x2, x3)]
    with torch.no_grad():
        full = model.triplet_scores(*cols, aspects)
        alone = torch.cat([model.triplet_scores([a], [b], [c], [s]) for a, b, c, s in zip(*cols, aspects)])
    assert _max_diff(full, alone) <= TOL, (full, alone)
    p_full = model.odd_one_out(x1, x2, x3, aspects)
    p_alone = torch.cat([model.odd_one_out([a], [b], [c], [s]) for a, b, c, s in zip(x1, x2, x3, aspects)])
    assert _max_diff(p_full, p_alone) <= TOL / (2 * model.temperature)
    assert torch.allclose(p_full.sum(1), torch.ones(len(x1), dtype=p_full.dtype))
    # column k is the pair that leaves image k out, each computed as the plain pair
    with torch.no_grad():
        pairs = [model.pair_scores(cols[i], cols[j], aspects) for i, j in ((1, 2), (0, 2), (0, 1))]
    assert _max_diff(full, torch.stack(pairs, 1)) <= TOL


def test_metric_rows_equal_rows_alone(model, rows):
    x1, x2, _, aspects = rows
    alone = torch.cat(
        [TPIPS(model, batch_size=1).similarities([a], [b], [c]) for a, b, c in zip(x1, x2, aspects)]
    )
    for chunk in (1, 3, len(x1)):
        metric = TPIPS(model, batch_size=chunk)
        metric.update(reference=x1[:2], candidates=x2[:2], condition=aspects[:2])
        metric.update(reference=x1[2:], candidates=x2[2:], condition=aspects[2:])
        scores = metric.per_sample()["scores"]
        assert _max_diff(scores, alone) <= TOL, chunk
        assert abs(float(metric.compute()) - float(alone.mean())) <= TOL
        assert _max_diff(metric.similarities(x1, x2, aspects), alone) <= TOL
        per = metric.per_aspect()
        assert all(abs(float(per[c]) - float(alone[i])) <= TOL for i, c in enumerate(aspects))


def test_training_forward_and_loss_rows_equal_rows_alone(spec, rows):
    model = build(*spec)  # its own copy: the metric test froze the shared one (register_backbone)
    x1, x2, x3, aspects = rows
    votes = torch.tensor(
        [[0.0, 1.0, 4.0], [3.0, 1.0, 1.0], [1.0, 1.0, 1.0], [0.0, 5.0, 0.0], [2.0, 0.0, 1.0]]
    )
    cols = [model.load_images(x) for x in (x1, x2, x3)]
    model.train()
    try:
        logits = model(*cols, aspects)
        loss = soft_cross_entropy(logits, votes)
        assert logits.requires_grad
        alone = [model([a], [b], [c], [s]) for a, b, c, s in zip(*cols, aspects)]
        loss_alone = torch.cat([soft_cross_entropy(z, v[None]) for z, v in zip(alone, votes)])
    finally:
        model.eval()
    tau = model.temperature
    assert _max_diff(logits.detach(), torch.cat(alone).detach()) <= TOL / tau
    assert _max_diff(loss.detach(), loss_alone.detach()) <= 2 * TOL / tau
    assert abs(float(loss.mean()) - float(loss_alone.mean())) <= 2 * TOL / tau  # one micro-batch vs five


def test_swapped_images_and_reordered_pairs_run_the_same_computation(model, rows):
    """f(a, b) = f(b, a) bitwise on the mixed batch (late/mid encode the distinct rows in a canonical order,
    early puts each pair in a canonical order); reordering the pairs reorders the scores, bitwise for late
    and mid (the encoded rows are the same set), within TOL for early (each pair is its own sequence row)."""
    x1, x2, _, aspects = rows
    s = model.similarity(x1, x2, aspects)
    assert torch.equal(model.similarity(x2, x1, aspects), s)
    perm = [3, 0, 4, 2, 1]
    again = model.similarity([x1[i] for i in perm], [x2[i] for i in perm], [aspects[i] for i in perm])
    if model.variant == "early":
        assert _max_diff(again, s[perm]) <= TOL
    else:
        assert torch.equal(again, s[perm])
