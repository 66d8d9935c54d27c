"""Agreement of a similarity model with human votes (TPIPS, Wang et al., Section 5 "Metrics").

* Odd-one-out: for a triplet with human vote distribution ``y = votes / votes.sum()`` and model prediction
  ``k_hat = argmax_k pred_k``, the agreement is ``y[k_hat]``: the probability that a random rater picks what
  the model picks. The dataset value is the mean over (triplet, aspect) records.
* 2AFC: the same over two candidates; ``pred`` is each candidate's similarity to the reference and the
  model picks the *more similar* one (``argmax``), ``votes`` count which candidate raters found more
  similar.
* Human consensus: ``sum_k y_k**2`` per record, the expected agreement of two random raters.

Ties in ``pred`` (exactly equal maxima) count as a uniformly random choice among the tied entries: the
agreement is the mean of ``y`` over them (so a constant predictor scores chance level, not ``y[0]``).

Every function returns ``(mean, stderr)`` as Python floats, where ``stderr`` is the standard error of the
mean over records, ``std(ddof=1) / sqrt(N)`` (NaN when ``N < 2``). All arithmetic is float64.
"""

from __future__ import annotations

import math

import torch

__all__ = [
    "human_consensus",
    "human_consensus_per_sample",
    "mean_stderr",
    "odd_one_out_agreement",
    "per_sample_agreement",
    "triplet_probabilities",
    "two_afc_agreement",
]


def _as2d(x, name: str, k: int | None) -> torch.Tensor:
    t = torch.as_tensor(x).detach().to(device="cpu", dtype=torch.float64)
    if t.ndim != 2 or (k is not None and t.shape[1] != k) or t.shape[0] == 0:
        want = f"[N,{k}]" if k is not None else "[N,C]"
        raise ValueError(f"{name}: expected a non-empty tensor of shape {want}, got shape {tuple(t.shape)}")
    if not torch.isfinite(t).all():
        raise ValueError(f"{name}: contains NaN or infinite values")
    return t


def _vote_distribution(votes, k: int | None) -> torch.Tensor:
    v = _as2d(votes, "votes", k)
    if (v < 0).any():
        raise ValueError("votes: counts must be non-negative")
    total = v.sum(1, keepdim=True)
    if (total <= 0).any():
        bad = int(torch.nonzero(total[:, 0] <= 0)[0])
        raise ValueError(f"votes: record {bad} has no votes; every record needs at least one vote")
    return v / total


def mean_stderr(values) -> tuple[float, float]:
    """``(mean, std(ddof=1)/sqrt(N))`` of a 1-D sequence, in float64; stderr is NaN for ``N < 2``.

    >>> mean_stderr([1.0, 3.0])  # std(ddof=1) = sqrt(2), divided by sqrt(2)
    (2.0, 1.0)
    """
    x = torch.as_tensor(values, dtype=torch.float64).reshape(-1)
    if x.numel() == 0:
        raise ValueError("mean_stderr: no values")
    mean = float(x.mean())
    if x.numel() < 2:
        return mean, math.nan
    return mean, float(x.std(unbiased=True) / math.sqrt(x.numel()))


def per_sample_agreement(pred, votes) -> torch.Tensor:
    """``[N]`` float64: ``y[argmax pred]`` per record (ties: mean of ``y`` over the tied maxima).

    >>> per_sample_agreement([[0.9, 0.1, 0.0], [0.5, 0.5, 0.5]], [[3, 1, 0], [3, 1, 0]]).tolist()
    [0.75, 0.3333333333333333]
    """
    p = _as2d(pred, "pred", None)
    y = _vote_distribution(votes, p.shape[1])
    if p.shape[0] != y.shape[0]:
        raise ValueError(f"pred has {p.shape[0]} records but votes has {y.shape[0]}; pass one row per record")
    top = p == p.max(1, keepdim=True).values
    return (y * top).sum(1) / top.sum(1)


def odd_one_out_agreement(pred, votes) -> tuple[float, float]:
    """Odd-one-out agreement with humans.

    Args:
        pred: ``[N,3]`` odd-one-out scores (higher = more likely the odd one), e.g. the probabilities of
            Eq. 2 or the similarity of the complementary pair ``s_bar_k = f(x_i, x_j)``.
        votes: ``[N,3]`` vote counts (or a distribution) for which image is the odd one out.

    Returns ``(mean, stderr)`` of ``y[argmax pred]``.

    >>> votes = [[8, 1, 1], [0, 6, 4]]  # raters' picks for the odd image
    >>> odd_one_out_agreement([[0.7, 0.2, 0.1], [0.1, 0.3, 0.6]], votes)[0]  # mean of 0.8 and 0.4
    0.6000000000000001
    >>> odd_one_out_agreement([[1.0, 1.0, 1.0]] * 2, votes)[0]  # a constant model: chance, 1/3
    0.3333333333333333
    """
    _as2d(pred, "pred", 3)
    return mean_stderr(per_sample_agreement(pred, votes))


def two_afc_agreement(pred, votes) -> tuple[float, float]:
    """2AFC agreement with humans.

    Args:
        pred: ``[N,2]`` similarity of each candidate to the reference (higher = more similar).
        votes: ``[N,2]`` vote counts (or fractions) for which candidate is more similar to the reference.

    >>> two_afc_agreement([[0.9, 0.2], [0.1, 0.8]], [[3, 1], [1, 3]])  # both right with 3 of 4 raters
    (0.75, 0.0)
    """
    _as2d(pred, "pred", 2)
    return mean_stderr(per_sample_agreement(pred, votes))


def human_consensus_per_sample(votes) -> torch.Tensor:
    """``[N]`` float64: ``sum_k y_k**2`` per record.

    >>> human_consensus_per_sample([[4, 0, 0], [1, 1, 2]]).tolist()  # unanimous -> 1
    [1.0, 0.375]
    """
    y = _vote_distribution(votes, None)
    return (y * y).sum(1)


def human_consensus(votes) -> tuple[float, float]:
    """Human consensus ``mean_n sum_k y_k**2`` (the expected agreement of two random raters) and its
    standard error; ``votes`` is ``[N,C]`` counts (C = 3 odd-one-out, 2 for 2AFC).

    >>> human_consensus([[2, 2], [4, 0]])  # a split vote gives 0.5, a unanimous one 1.0
    (0.75, 0.25)
    """
    return mean_stderr(human_consensus_per_sample(votes))


def triplet_probabilities(pair_sims, temperature: float = 0.05) -> torch.Tensor:
    """Eq. 2's choice model: ``p_k = softmax(s_bar / tau)_k`` with ``s_bar_k = f(x_i, x_j)`` for
    ``{i,j} = {1,2,3} \\ {k}``.

    Args:
        pair_sims: ``[N,3]``; column ``k`` is the similarity of the pair that leaves image ``k`` out,
            i.e. ``[f(x2,x3), f(x1,x3), f(x1,x2)]``.
        temperature: ``tau > 0`` (0.05 late/early fusion, 0.0025 mid fusion in the paper).

    Returns ``[N,3]`` float64 probabilities that each image is the odd one out.

    Images 1 and 2 are the most similar pair (the last column), so image 3 is the likely odd one:

    >>> p = triplet_probabilities([[0.1, 0.2, 0.9]])
    >>> int(p.argmax()), round(float(p.sum()), 6)
    (2, 1.0)
    """
    if not (isinstance(temperature, (int, float)) and temperature > 0):
        raise ValueError(f"temperature must be a positive number, got {temperature!r}")
    s = _as2d(pair_sims, "pair_sims", 3)
    return torch.softmax(s / float(temperature), dim=1)
