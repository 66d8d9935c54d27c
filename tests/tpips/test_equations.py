"""Tests that would catch a wrong equation: the sign of Eq. 2 and the column order of the per-aspect
similarities (Eq. 3 and the mid-fusion initialisation are tested in test_mid.py)."""

from __future__ import annotations

import pytest
import torch

from genmetrics.tpips.train import soft_cross_entropy

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
