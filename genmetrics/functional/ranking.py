"""Pairwise ranking math for learned preference metrics (MIE): pairwise accuracy against human
preferences, per-dimension F1 of diagnostic logits, win-rate matrices and Bradley-Terry ratings.

Pure torch, float64 internally, no I/O. Conventions:

* a *pair* compares item ``a`` with item ``b``; ``outcome`` is 1 when ``a`` wins, 0 when ``b`` wins and
  0.5 for a tie (soft outcomes in [0, 1] are allowed everywhere an outcome is taken);
* pairwise accuracy counts a tie in the metric's scores (``score_a == score_b``) as half right, so a
  constant metric scores exactly 0.5 (chance);
* diagnostic F1 is binary per dimension with the positive class 1 (e.g. "the subject exists"); logits are
  thresholded at 0 (probability 0.5) and soft labels at 0.5; macro-F1 is the unweighted mean over
  dimensions; a dimension with no positive label and no positive prediction has F1 ``zero_division``
  (0.0 by default, as scikit-learn).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import torch
from scipy.optimize import minimize
from scipy.special import expit
from scipy.stats import norm

__all__ = [
    "bradley_terry",
    "bradley_terry_batch",
    "f1_per_class",
    "macro_f1",
    "pairwise_accuracy",
    "win_counts",
    "win_rate_interval",
    "win_rate_matrix",
]


def _vec(x: Any, name: str) -> torch.Tensor:
    t = torch.as_tensor(x).detach().to("cpu")
    if t.dtype == torch.bool:
        t = t.to(torch.float64)
    t = t.to(torch.float64).reshape(-1) if t.ndim <= 1 else t.to(torch.float64)
    if t.ndim != 1:
        raise ValueError(f"{name}: expected a 1-D sequence, got shape {tuple(t.shape)}")
    return t


def pairwise_accuracy(score_a: Any, score_b: Any, human_prefers_a: Any) -> float:
    """Fraction of pairs where the metric prefers the candidate the human preferred.

    ``score_a``, ``score_b``: metric scores [N] (higher = better); ``human_prefers_a``: [N] bool/0-1 (or a
    soft preference in [0, 1]). A pair is right with weight ``p`` if ``score_a > score_b`` (``p`` = the
    human preference for a), ``1 - p`` if ``score_a < score_b``, and 0.5 on a score tie. NaN scores count
    as ties. Returns a Python float; an empty input is a ``ValueError``.

    >>> pairwise_accuracy([0.9, 0.2, 0.5], [0.1, 0.8, 0.3], [1, 1, 1])  # right, wrong, right
    0.6666666666666666
    >>> pairwise_accuracy([0.5, 0.5], [0.5, 0.5], [1, 0])  # a constant metric scores chance
    0.5
    """
    a, b, h = _vec(score_a, "score_a"), _vec(score_b, "score_b"), _vec(human_prefers_a, "human_prefers_a")
    if not (a.numel() == b.numel() == h.numel()):
        raise ValueError(
            f"pairwise_accuracy: lengths differ (score_a {a.numel()}, score_b {b.numel()}, "
            f"human_prefers_a {h.numel()})"
        )
    if a.numel() == 0:
        raise ValueError("pairwise_accuracy: no pairs given")
    if ((h < 0) | (h > 1)).any():
        raise ValueError("pairwise_accuracy: human_prefers_a must be in [0, 1] (1 = the human preferred a)")
    return float(pairwise_correct(a, b, h).mean())


def pairwise_correct(score_a: Any, score_b: Any, human_prefers_a: Any) -> torch.Tensor:
    """Per-pair correctness [N] in {0, 0.5, 1} (soft for soft preferences); its mean is
    :func:`pairwise_accuracy`. Useful for bootstrap intervals and breakdowns."""
    a, b, h = _vec(score_a, "score_a"), _vec(score_b, "score_b"), _vec(human_prefers_a, "human_prefers_a")
    diff = a - b
    metric_a = torch.where(diff > 0, 1.0, torch.where(diff < 0, 0.0, 0.5)).to(torch.float64)  # NaN -> 0.5
    return metric_a * h + (1 - metric_a) * (1 - h)


def _binary_stats(pred_logits: Any, labels: Any) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    p = torch.as_tensor(pred_logits).detach().to("cpu", torch.float64)
    y = torch.as_tensor(labels).detach().to("cpu", torch.float64)
    if p.ndim == 1:
        p = p[:, None]
    if y.ndim == 1:
        y = y[:, None]
    if p.shape != y.shape or p.ndim != 2:
        raise ValueError(f"f1: pred_logits {tuple(p.shape)} and labels {tuple(y.shape)} must both be [N, C]")
    if p.shape[0] == 0:
        raise ValueError("f1: no samples given")
    pred = p > 0
    true = y >= 0.5
    tp = (pred & true).sum(0).double()
    fp = (pred & ~true).sum(0).double()
    fn = (~pred & true).sum(0).double()
    return tp, fp, fn


def f1_per_class(pred_logits: Any, labels: Any, *, zero_division: float = 0.0) -> torch.Tensor:
    """Binary F1 per column: ``pred_logits`` [N,C] thresholded at 0, ``labels`` [N,C] (0/1 or soft,
    thresholded at 0.5). ``F1 = 2TP / (2TP + FP + FN)``; ``zero_division`` when the denominator is 0.
    Returns float64 [C].

    >>> f1_per_class([[2.0, -1.0], [-3.0, 1.0]], [[1, 0], [0, 0]]).tolist()  # column 1: one false positive
    [1.0, 0.0]
    """
    tp, fp, fn = _binary_stats(pred_logits, labels)
    den = 2 * tp + fp + fn
    return torch.where(den > 0, 2 * tp / den.clamp_min(1), torch.full_like(den, float(zero_division)))


def macro_f1(pred_logits: Any, labels: Any) -> float:
    """Unweighted mean of :func:`f1_per_class` over the columns (for MIE: existence, appearance,
    interaction). ``pred_logits`` [N,3] logits (threshold 0), ``labels`` [N,3] in {0,1} or soft.

    >>> macro_f1([[2.0, -1.0, 0.5], [-3.0, 1.0, 0.5]], [[1, 0, 1], [0, 0, 1]])  # mean of 1, 0, 1
    0.6666666666666666
    """
    return float(f1_per_class(pred_logits, labels).mean())


def _pairs(
    item_a: Any, item_b: Any, outcome: Any, n_items: int | None
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, int]:
    ia = torch.as_tensor(item_a).detach().to("cpu").reshape(-1).long()
    ib = torch.as_tensor(item_b).detach().to("cpu").reshape(-1).long()
    o = _vec(outcome, "outcome")
    if not (ia.numel() == ib.numel() == o.numel()):
        raise ValueError(f"lengths differ (item_a {ia.numel()}, item_b {ib.numel()}, outcome {o.numel()})")
    if ((o < 0) | (o > 1)).any() or torch.isnan(o).any():
        raise ValueError("outcome must be in [0, 1] (1 = item_a won, 0 = item_b won, 0.5 = tie)")
    if (ia < 0).any() or (ib < 0).any():
        raise ValueError("item indices must be >= 0")
    if (ia == ib).any():
        raise ValueError("a pair compares an item with itself; item_a and item_b must differ")
    k = int(max(int(ia.max()) if ia.numel() else -1, int(ib.max()) if ib.numel() else -1) + 1)
    if n_items is not None:
        if k > n_items:
            raise ValueError(f"item index {k - 1} >= n_items={n_items}")
        k = int(n_items)
    return ia, ib, o, k


def win_counts(item_a: Any, item_b: Any, outcome: Any, n_items: int | None = None) -> torch.Tensor:
    """``W[i, j]`` = (fractional) wins of item i over item j, float64 [K,K]; ties give 0.5 to each.

    >>> win_counts([0, 0, 1], [1, 2, 2], [1.0, 0.5, 0.0]).tolist()
    [[0.0, 1.0, 0.5], [0.0, 0.0, 0.0], [0.5, 1.0, 0.0]]
    """
    ia, ib, o, k = _pairs(item_a, item_b, outcome, n_items)
    w = torch.zeros(k, k, dtype=torch.float64)
    w.index_put_((ia, ib), o, accumulate=True)
    w.index_put_((ib, ia), 1 - o, accumulate=True)
    return w


def win_rate_matrix(item_a: Any, item_b: Any, outcome: Any, n_items: int | None = None) -> torch.Tensor:
    """``R[i, j]`` = fraction of the comparisons between i and j that i won, float64 [K,K];
    ``R[i, j] + R[j, i] = 1`` where they met, NaN where they never met (and on the diagonal).

    >>> r = win_rate_matrix([0, 0, 0, 1], [1, 1, 1, 2], [1, 1, 0, 1])
    >>> round(float(r[0, 1]), 4), round(float(r[1, 0]), 4), bool(r[0, 2].isnan())  # 0 and 2 never met
    (0.6667, 0.3333, True)
    """
    w = win_counts(item_a, item_b, outcome, n_items)
    games = w + w.T
    return torch.where(games > 0, w / games.clamp_min(1e-300), torch.full_like(w, float("nan")))


def win_rate_interval(wins: Any, games: Any, alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Wilson score interval ``(low, high)`` of win rates ``wins / games`` (elementwise, float64; NaN where
    ``games == 0``): the ``p`` a two-sided score test of ``Binomial(games, p)`` at level ``alpha`` does not
    reject, ``(w + z^2/2 -+ z sqrt(w (g - w) / g + z^2 / 4)) / (g + z^2)`` with ``z`` the ``1 - alpha/2``
    normal quantile. A tie counts half a win (``wins`` may be fractional); a tie's outcome varies less than
    a win's, so ties make the interval conservative. It stays inside [0, 1] and near nominal coverage with a
    handful of games, where a percentile bootstrap of the pairs undercovers (docs/bootstrap.md).

    >>> low, high = win_rate_interval([7.0], [10.0])
    >>> round(float(low[0]), 4), round(float(high[0]), 4)  # scipy's binomtest(7, 10) Wilson interval
    (0.3968, 0.8922)
    """
    w = np.asarray(wins, dtype=np.float64)
    g = np.asarray(games, dtype=np.float64)
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"win_rate_interval: alpha must be in (0, 1), got {alpha}")
    z = float(norm.ppf(1.0 - alpha / 2.0))
    with np.errstate(invalid="ignore", divide="ignore"):
        half = z * np.sqrt(np.clip(w * (g - w), 0.0, None) / g + z * z / 4.0)
        low = (w + z * z / 2.0 - half) / (g + z * z)
        high = (w + z * z / 2.0 + half) / (g + z * z)
    empty = g <= 0
    return np.where(empty, np.nan, np.clip(low, 0.0, 1.0)), np.where(empty, np.nan, np.clip(high, 0.0, 1.0))


def _strongly_connected(w: torch.Tensor) -> bool:
    """Every item reachable from every other along 'beat' edges (the MLE exists iff this holds)."""
    k = w.shape[0]
    if k <= 1:
        return True
    adj = (w > 0).numpy()

    def reach(a) -> set[int]:
        seen, stack = {0}, [0]
        while stack:
            i = stack.pop()
            for j in range(k):
                if a[i, j] and j not in seen:
                    seen.add(j)
                    stack.append(j)
        return seen

    return len(reach(adj)) == k and len(reach(adj.T)) == k


def bradley_terry(
    item_a: Any,
    item_b: Any,
    outcome: Any,
    n_items: int | None = None,
    *,
    prior: float = 0.0,
    max_iter: int = 100,
    tol: float = 1e-10,
) -> torch.Tensor:
    """Bradley-Terry log-strengths ``theta`` [K] (float64, mean zero) by maximum likelihood.

    Model: ``P(i beats j) = sigmoid(theta_i - theta_j)``; the log-likelihood
    ``sum_{i,j} W[i,j] * log sigmoid(theta_i - theta_j)`` over the win counts ``W`` of :func:`win_counts`
    (ties count half a win for each side) is maximised by ``scipy.optimize.minimize`` (trust-region Newton,
    ``trust-exact``, with the exact gradient and Hessian; it is concave and the gauge is fixed by
    ``mean(theta) = 0``). ``prior > 0`` adds ``prior`` virtual wins in each
    direction for every pair of items (a symmetric regulariser that also makes the maximum exist when
    some item never lost); with ``prior=0`` a comparison graph that is not strongly connected (an item
    that never lost, never won, or never met the others) is a ``ValueError``.

    For an Elo-like scale use ``1000 + 400 / ln(10) * theta``.

    Item 0 beats item 1 in 3 of 4 games: the fitted gap is ``logit(3/4) = ln 3``:

    >>> import math
    >>> theta = bradley_terry([0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0])
    >>> round(float(theta[0] - theta[1]), 6), round(math.log(3), 6), round(float(theta.sum()), 9)
    (1.098612, 1.098612, 0.0)
    """
    w_t = win_counts(item_a, item_b, outcome, n_items)
    k = w_t.shape[0]
    if k == 0:
        raise ValueError("bradley_terry: no items")
    if prior < 0:
        raise ValueError(f"prior must be >= 0, got {prior}")
    if prior > 0:
        w_t = w_t + prior * (1 - torch.eye(k, dtype=torch.float64))
    elif not _strongly_connected(w_t):
        raise ValueError(
            "bradley_terry: the maximum-likelihood ratings do not exist (some item never lost, "
            "never won, or never met the others); pass prior > 0 to regularise"
        )
    w = w_t.numpy()
    n = w + w.T

    def nll(t: np.ndarray) -> tuple[float, np.ndarray]:
        # - log-likelihood + (sum theta)^2 / 2: the penalty fixes the gauge (the likelihood's gradient sums
        # to 0, so at the optimum sum theta = 0) and makes the objective strictly convex
        d = t[:, None] - t[None, :]
        p = expit(d)  # P(i beats j)
        s = float(t.sum())
        grad = (w.T * p).sum(1) - (w * (1 - p)).sum(1) + s
        return float((w * np.logaddexp(0.0, -d)).sum()) + 0.5 * s * s, grad

    def hess(t: np.ndarray) -> np.ndarray:
        p = expit(t[:, None] - t[None, :])
        h = n * p * (1 - p)
        return np.diag(h.sum(1)) - h + 1.0  # graph Laplacian with these weights + the penalty's ones

    res = minimize(
        nll,
        np.zeros(k),
        jac=True,
        hess=hess,
        method="trust-exact",
        options={"gtol": tol, "maxiter": max_iter},
    )
    theta = res.x
    theta = theta - theta.mean()
    return torch.from_numpy(theta.copy())


def bradley_terry_batch(wins: Any, *, prior: float, max_iter: int = 100, tol: float = 1e-10) -> np.ndarray:
    """:func:`bradley_terry` of many win-count matrices at once (bootstrap resamples): ``wins [B,K,K]``
    (``W[b, i, j]`` = wins of i over j, as :func:`win_counts`) -> ``theta [B,K]`` (float64, mean zero).

    The same objective (``prior`` virtual wins each way, the ``(sum theta)^2 / 2`` gauge penalty), minimised
    by Newton's method on all ``B`` at once with batched ``numpy.linalg.solve`` and a backtracking (Armijo)
    step, until the gradient's largest entry is below ``tol``. ``prior`` must be > 0: it makes every
    objective strictly convex with a minimum, whatever a resample left out.

    >>> w = np.array([[[0.0, 3.0], [1.0, 0.0]], [[0.0, 1.0], [1.0, 0.0]]])  # 3-1 and 1-1
    >>> theta = bradley_terry_batch(w, prior=0.5)
    >>> ref = bradley_terry([0, 0, 0, 0], [1, 1, 1, 1], [1, 1, 1, 0], prior=0.5)
    >>> bool(abs(theta[0, 0] - float(ref[0])) < 1e-9), theta[1].tolist()
    (True, [0.0, 0.0])
    """
    w = np.asarray(wins, dtype=np.float64)
    if w.ndim != 3 or w.shape[1] != w.shape[2]:
        raise ValueError(f"bradley_terry_batch: expected win counts [B,K,K], got shape {w.shape}")
    if not prior > 0:
        raise ValueError(f"bradley_terry_batch: prior must be > 0, got {prior}")
    b, k, _ = w.shape
    w = w + prior * (1.0 - np.eye(k))
    n = w + w.transpose(0, 2, 1)
    wt = w.transpose(0, 2, 1)

    def nll(t: np.ndarray, w: np.ndarray) -> np.ndarray:
        d = t[:, :, None] - t[:, None, :]
        return (w * np.logaddexp(0.0, -d)).sum((1, 2)) + 0.5 * t.sum(1) ** 2

    t = np.zeros((b, k))
    f = nll(t, w)
    for _ in range(max_iter):
        p = expit(t[:, :, None] - t[:, None, :])  # P(i beats j)
        grad = (wt * p).sum(2) - (w * (1 - p)).sum(2) + t.sum(1, keepdims=True)
        todo = np.abs(grad).max(1) >= tol
        if not todo.any():
            break
        h = n * p * (1 - p)
        hess = -h + 1.0  # graph Laplacian with these weights + the penalty's ones (as bradley_terry)
        hess[:, np.arange(k), np.arange(k)] += h.sum(2)
        step = -np.linalg.solve(hess[todo], grad[todo][:, :, None])[:, :, 0]
        slope = (grad[todo] * step).sum(1)  # < 0: the Hessian is positive definite
        t_old, f_old, scale = t[todo], f[todo], np.ones(int(todo.sum()))
        # near the minimum the decrease is below f's rounding (K^2 terms, a few ulps each): a step whose
        # f is within 64 eps |f| of the old one is accepted, else the full Newton step would be halved away
        noise = 64.0 * np.finfo(np.float64).eps * np.abs(f_old)
        for _ in range(60):
            t_new = t_old + scale[:, None] * step
            f_new = nll(t_new, w[todo])
            bad = f_new > f_old + 1e-4 * scale * slope + noise
            if not bad.any():
                break
            scale = np.where(bad, scale / 2, scale)
        t[todo], f[todo] = t_new, f_new
    return t - t.mean(1, keepdims=True)


def items_to_index(names: Sequence[Any]) -> tuple[list[Any], torch.Tensor]:
    """``(sorted unique names, index tensor)`` for a list of hashable item names."""
    uniq = sorted(set(names), key=str)
    pos = {n: i for i, n in enumerate(uniq)}
    return uniq, torch.tensor([pos[n] for n in names], dtype=torch.long)
