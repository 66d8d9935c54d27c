"""genmetrics.mie.loss: the pairwise ranking loss and the multi-task loss against closed forms and explicit
computations (rank sign, margin, each candidate's own diagnostic targets), their gradients and refusals."""

import math

import pytest
import torch

from genmetrics.errors import InputError
from genmetrics.mie.loss import RANK_LOSSES, mie_loss, rank_loss
from genmetrics.mie.model import MIEOutput

EPS = torch.finfo(torch.float32).eps


@pytest.mark.parametrize("margin", [0.0, 0.1, 0.5])
def test_margin_rank_loss_at_known_gaps(margin):
    """``max(0, margin - (s_win - s_lose))`` per pair, averaged: the winner ahead by the margin or more costs
    nothing, level costs the margin, behind by d costs d + margin."""
    gaps = torch.tensor([2.0, margin, 0.0, -0.25, -1.0])
    s_lose = torch.linspace(-1.0, 1.0, 5)
    expected = [max(0.0, margin - float(d)) for d in gaps]
    per_pair = [
        float(rank_loss(s_lose[i : i + 1] + gaps[i], s_lose[i : i + 1], margin=margin)) for i in range(5)
    ]
    assert per_pair == pytest.approx(expected, abs=8 * EPS)
    whole = float(rank_loss(s_lose + gaps, s_lose, margin=margin))
    assert whole == pytest.approx(sum(expected) / 5, abs=8 * EPS)


def test_bradley_terry_rank_loss_closed_form():
    d = torch.tensor([-3.0, -0.5, 0.0, 0.5, 3.0])
    got = float(rank_loss(d, torch.zeros(5), kind="bradley_terry"))
    expected = sum(math.log1p(math.exp(-float(x))) for x in d) / 5  # -log sigmoid(d) = log(1 + e^-d)
    assert got == pytest.approx(expected, rel=4 * EPS * 5)


@pytest.mark.parametrize("kind", RANK_LOSSES)
def test_swapping_the_pair_is_the_loss_at_the_negated_gap(kind):
    """Only the gap counts: a shift of both scores changes nothing, and swapping winner and loser is the loss
    at the negated gap (not the same loss: a ranking loss is not symmetric)."""
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(16, generator=g), torch.randn(16, generator=g)
    shifted = rank_loss(a + 3.0, b + 3.0, kind=kind)
    assert float(shifted) == pytest.approx(float(rank_loss(a, b, kind=kind)), abs=32 * EPS)
    swapped = rank_loss(b, a, kind=kind)
    assert torch.equal(swapped, rank_loss(-(a - b), torch.zeros(16), kind=kind))
    assert float(swapped) > float(rank_loss(a + 10.0, b, kind=kind))  # behind costs more than far ahead


@pytest.mark.parametrize("kind", RANK_LOSSES)
def test_gradient_raises_the_winner_and_lowers_the_loser(kind):
    s_win = torch.tensor([0.0, -0.2], requires_grad=True)
    s_lose = torch.tensor([0.05, 0.3], requires_grad=True)
    rank_loss(s_win, s_lose, kind=kind).backward()
    assert (s_win.grad < 0).all() and (s_lose.grad > 0).all()  # descent raises s_win, lowers s_lose
    assert torch.equal(s_win.grad, -s_lose.grad)
    if kind == "margin":  # each active pair: d/ds_win = -1/n
        assert torch.equal(s_win.grad, torch.full((2,), -0.5))


def test_margin_loss_has_no_gradient_once_the_margin_is_met():
    s_win = torch.tensor([1.0], requires_grad=True)
    rank_loss(s_win, torch.tensor([0.0]), margin=0.1).backward()
    assert s_win.grad is not None and float(s_win.grad.abs().sum()) == 0.0


def test_an_unknown_rank_loss_is_refused_naming_the_choices():
    with pytest.raises(InputError, match=r"rank_loss='hinge' is not supported; expected one of \('margin', "):
        rank_loss(torch.zeros(1), torch.zeros(1), kind="hinge")


def test_unlabelled_pairs_send_a_zero_gradient_through_the_diagnostic_head():
    """Without labels (or with every pair masked out) the diagnostic term is 0 but the logits are still in
    the graph: their gradient exists and is exactly zero."""
    win = MIEOutput(torch.tensor([0.2, 0.4]), torch.randn(2, 3, requires_grad=True))
    lose = MIEOutput(torch.tensor([0.0, 0.1]), torch.randn(2, 3, requires_grad=True))
    for targets in ((None, None), (torch.ones(2, 3), torch.zeros(2, 3))):
        win.diagnostics.grad = lose.diagnostics.grad = None
        mask = None if targets[0] is None else torch.tensor([False, False])
        loss, parts = mie_loss(win, lose, *targets, diag_mask=mask)
        loss.backward()
        assert parts["diag"] == 0.0 and parts["loss"] == pytest.approx(parts["rank"], abs=EPS)
        assert torch.equal(win.diagnostics.grad, torch.zeros(2, 3))
        assert torch.equal(lose.diagnostics.grad, torch.zeros(2, 3))


def test_loss_formula_and_sign():
    w = MIEOutput(
        torch.tensor([1.0, 0.0, 0.3]), torch.tensor([[2.0, -1.0, 0.0], [0.5, 0.5, 0.5], [0.0, 0.0, 0.0]])
    )
    lo = MIEOutput(
        torch.tensor([0.0, 2.0, 0.25]), torch.tensor([[0.0, 1.0, -3.0], [1.0, 1.0, 1.0], [1.0, 1.0, 1.0]])
    )
    tw = torch.tensor([[0.9, 0.2, 0.5], [1.0, 1.0, 1.0], [0.0, 0.0, 0.0]])
    tl = torch.tensor([[0.1, 0.7, 0.5], [0.0, 0.0, 0.0], [1.0, 1.0, 1.0]])
    mask = torch.tensor([True, False, True])
    loss, parts = mie_loss(w, lo, tw, tl, alpha=0.7, beta=0.3, diag_mask=mask)
    # margin ranking, written out: max(0, 0.1 - (s_w - s_l)) per pair -> 0, 2.1, 0.05
    rank = (0.0 + 2.1 + 0.05) / 3
    bce = torch.nn.functional.binary_cross_entropy_with_logits
    diag = 0.5 * (bce(w.diagnostics[mask], tw[mask]) + bce(lo.diagnostics[mask], tl[mask]))
    assert parts["rank"] == pytest.approx(rank, rel=1e-6) and parts["diag"] == pytest.approx(
        diag.item(), rel=1e-6
    )
    assert loss.item() == pytest.approx(0.7 * rank + 0.3 * diag.item(), rel=1e-6)
    # the sign: swapping winner and loser must change the rank loss (it is not symmetric)
    _, swapped = mie_loss(lo, w, tl, tw, alpha=1.0, beta=0.0)
    assert swapped["rank"] == pytest.approx((1.1 + 0.0 + 0.15) / 3, rel=1e-6)
    _, bt = mie_loss(w, lo, rank_loss_kind="bradley_terry", beta=0.0)
    logsig = torch.nn.functional.logsigmoid
    assert bt["rank"] == pytest.approx(
        -(logsig(torch.tensor(1.0)) + logsig(torch.tensor(-2.0)) + logsig(torch.tensor(0.05))).item() / 3,
        rel=1e-6,
    )
