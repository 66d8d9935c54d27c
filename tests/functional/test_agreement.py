"""genmetrics.functional agreement statistics against explicit computations."""

from __future__ import annotations

import math

import pytest
import torch

from genmetrics.functional import (
    human_consensus,
    odd_one_out_agreement,
    triplet_probabilities,
    two_afc_agreement,
)
from genmetrics.functional.agreement import mean_stderr, per_sample_agreement


def _explicit(pred, votes):
    vals = []
    for p, v in zip(pred, votes):
        y = [x / sum(v) for x in v]
        best = max(p)
        tied = [k for k in range(len(p)) if p[k] == best]
        vals.append(sum(y[k] for k in tied) / len(tied))
    n = len(vals)
    mean = sum(vals) / n
    sd = math.sqrt(sum((x - mean) ** 2 for x in vals) / (n - 1))
    return mean, sd / math.sqrt(n)


def test_odd_one_out_against_explicit():
    g = torch.Generator().manual_seed(0)
    pred = torch.rand(50, 3, generator=g)
    votes = torch.randint(0, 6, (50, 3), generator=g).float()
    votes[:, 0] += 1  # at least one vote
    pred[3] = torch.tensor([0.5, 0.5, 0.1])  # a tie
    mean, se = odd_one_out_agreement(pred, votes)
    em, es = _explicit(pred.tolist(), votes.tolist())
    assert mean == pytest.approx(em, abs=1e-12) and se == pytest.approx(es, abs=1e-12)
    y = votes[3] / votes[3].sum()
    assert per_sample_agreement(pred, votes)[3] == pytest.approx(float((y[0] + y[1]) / 2))


def test_two_afc_and_consensus_against_explicit():
    pred = torch.tensor([[0.9, 0.1], [0.2, 0.7], [0.3, 0.3], [1.0, 0.0]])
    votes = torch.tensor([[4.0, 1.0], [2.0, 3.0], [5.0, 0.0], [0.2, 0.8]])
    mean, se = two_afc_agreement(pred, votes)
    em, es = _explicit(pred.tolist(), votes.tolist())
    assert (mean, se) == (pytest.approx(em), pytest.approx(es))
    assert mean == pytest.approx((0.8 + 0.6 + 0.5 + 0.2) / 4)
    c, cse = human_consensus(votes)
    per = [(4 / 5) ** 2 + (1 / 5) ** 2, (2 / 5) ** 2 + (3 / 5) ** 2, 1.0, 0.2**2 + 0.8**2]
    m = sum(per) / 4
    assert c == pytest.approx(m)
    assert cse == pytest.approx(math.sqrt(sum((x - m) ** 2 for x in per) / 3) / 2)
    # three-way consensus: unanimous triplets give 1, a 5-vote 3/1/1 split gives 11/25
    c3, _ = human_consensus(torch.tensor([[5.0, 0, 0], [3.0, 1, 1]]))
    assert c3 == pytest.approx((1 + 11 / 25) / 2)


def test_triplet_probabilities_eq2():
    s = torch.tensor([[0.9, 0.5, 0.1]], dtype=torch.float64)
    p = triplet_probabilities(s, temperature=0.05)
    e = torch.exp(s / 0.05)
    assert torch.allclose(p, e / e.sum(), atol=1e-12)
    with pytest.raises(ValueError):
        triplet_probabilities(s, temperature=0)


def test_errors_and_edge_cases():
    with pytest.raises(ValueError, match="shape"):
        odd_one_out_agreement(torch.zeros(2, 2), torch.ones(2, 2))
    with pytest.raises(ValueError, match="no votes"):
        two_afc_agreement(torch.zeros(2, 2), torch.tensor([[1.0, 0.0], [0.0, 0.0]]))
    with pytest.raises(ValueError, match="records"):
        two_afc_agreement(torch.zeros(3, 2), torch.ones(2, 2))
    mean, se = mean_stderr([0.5])
    assert mean == 0.5 and math.isnan(se)
    # a constant predictor scores chance level (ties are a uniform random choice)
    m, _ = odd_one_out_agreement(torch.zeros(4, 3), torch.eye(3).repeat(2, 1)[:4])
    assert m == pytest.approx(1 / 3)
