"""The MIE training objective (Appendix E, "Multi-task Loss Configuration"; the authors' scripts/train.py).

``loss = alpha * L_rank + beta * L_diag`` with

* ``L_rank``: margin ranking loss (``torch.nn.MarginRankingLoss(margin=0.1)`` with target +1 for the
  preferred candidate): ``mean(max(0, margin - (s_win - s_lose)))``; or, as the named option
  ``rank_loss="bradley_terry"``, ``mean(-log sigmoid(s_win - s_lose))``;
* ``L_diag``: ``BCEWithLogits`` of each candidate's 3 diagnostic logits against its own labels in [0, 1]
  (the mean of the two candidates' means, as the authors), over the pairs that have labels.

Defaults alpha 1.0, beta 0.5, margin 0.1. A micro-batch without any diagnostic labels still sends a zero
gradient through the diagnostic head, so multi-process (DDP) training does not stop on an unused head.
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

from genmetrics.errors import InputError

RANK_LOSSES = ("margin", "bradley_terry")
ALPHA, BETA, MARGIN = 1.0, 0.5, 0.1


def rank_loss(
    s_win: torch.Tensor, s_lose: torch.Tensor, *, kind: str = "margin", margin: float = MARGIN
) -> torch.Tensor:
    """Pairwise ranking loss of preferred-candidate scores ``s_win`` over ``s_lose`` ([n] each).

    >>> float(rank_loss(torch.tensor([1.0, 0.0]), torch.tensor([0.0, 0.0]), margin=0.1))  # (0 + 0.1) / 2
    0.05000000074505806
    >>> round(float(rank_loss(torch.tensor([0.0]), torch.tensor([0.0]), kind="bradley_terry")), 4)  # ln 2
    0.6931
    """
    if kind == "margin":
        return F.margin_ranking_loss(s_win, s_lose, torch.ones_like(s_win), margin=margin)
    if kind == "bradley_terry":
        return -F.logsigmoid(s_win - s_lose).mean()
    raise InputError(f"rank_loss={kind!r} is not supported; expected one of {RANK_LOSSES}")


def mie_loss(
    win: Any,
    lose: Any,
    diag_targets_win: torch.Tensor | None = None,
    diag_targets_lose: torch.Tensor | None = None,
    *,
    alpha: float = ALPHA,
    beta: float = BETA,
    margin: float = MARGIN,
    rank_loss_kind: str = "margin",
    diag_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, dict[str, float]]:
    """``alpha * L_rank + beta * L_diag`` for :class:`~genmetrics.mie.model.MIEOutput` ``win`` / ``lose``
    (the preferred and the other candidate of each pair). ``diag_targets_*`` [n,3] are each candidate's
    own labels; ``diag_mask`` [n] bool marks the pairs that have them (all when None). Returns
    ``(loss, {"rank", "diag", "loss"})``.

    The winner ahead by more than the margin costs no rank loss; logits of 0 cost ``ln 2`` per label:

    >>> from genmetrics.mie.model import MIEOutput
    >>> win, lose = MIEOutput(torch.tensor([1.0]), torch.zeros(1, 3)), MIEOutput(torch.tensor([0.0]), torch.zeros(1, 3))
    >>> loss, parts = mie_loss(win, lose, torch.ones(1, 3), torch.zeros(1, 3), alpha=1.0, beta=0.5, margin=0.1)
    >>> parts["rank"], round(parts["diag"], 4), round(float(loss), 4)  # 0.5 * ln 2
    (0.0, 0.6931, 0.3466)
    >>> round(mie_loss(lose, win, margin=0.1)[1]["rank"], 4)  # the wrong order: 1 + margin
    1.1
    """
    rank = rank_loss(win.score.float(), lose.score.float(), kind=rank_loss_kind, margin=margin)
    logits_w, logits_l = win.diagnostics.float(), lose.diagnostics.float()
    diag = 0.0 * (
        logits_w.sum() + logits_l.sum()
    )  # keeps the head in the graph (DDP) when nothing is labelled
    if beta and diag_targets_win is not None and diag_targets_lose is not None:
        dev = logits_w.device
        m = (
            torch.ones(logits_w.shape[0], dtype=torch.bool, device=dev)
            if diag_mask is None
            else diag_mask.to(dev)
        )
        if bool(m.any()):
            diag = diag + 0.5 * (
                F.binary_cross_entropy_with_logits(logits_w[m], diag_targets_win[m].to(logits_w))
                + F.binary_cross_entropy_with_logits(logits_l[m], diag_targets_lose[m].to(logits_l))
            )
    loss = alpha * rank + beta * diag
    return loss, {"rank": float(rank.detach()), "diag": float(diag.detach()), "loss": float(loss.detach())}
