"""Generator ranking from scored pairs."""

import numpy as np
import pytest

from genmetrics.errors import InputError
from genmetrics.mie.ranking import rank_generators, ranking_markdown, ranking_plot


def test_rank_generators(tmp_path):
    rng = np.random.default_rng(0)
    gens = ["g0", "g1", "g2", "g3"]
    quality = {"g0": 1.0, "g1": 0.5, "g2": 0.0, "g3": -0.5}
    ga, gb, sa, sb = [], [], [], []
    for _ in range(300):
        a, b = rng.choice(4, 2, replace=False)
        ga.append(gens[a])
        gb.append(gens[b])
        sa.append(quality[gens[a]] + rng.normal())
        sb.append(quality[gens[b]] + rng.normal())
    res = rank_generators(ga, gb, sa, sb, n_boot=100)
    assert res["generators"] == ["g0", "g1", "g2", "g3"]
    for g in gens:
        vals = [s for x, s in zip(ga, sa) if x == g] + [s for x, s in zip(gb, sb) if x == g]
        assert res["mean_score"][g]["mean"] == pytest.approx(np.mean(vals))
        bt = res["bradley_terry"][g]
        assert bt["low"] <= bt["theta"] <= bt["high"]
    m = np.array([[np.nan if v is None else v for v in row] for row in res["win_rate"]["matrix"]])
    i, j = 0, 3
    wins = sum(
        (x == "g0" and y == "g3" and s > t) or (x == "g3" and y == "g0" and t > s)
        for x, y, s, t in zip(ga, gb, sa, sb)
    )
    games = sum({x, y} == {"g0", "g3"} for x, y in zip(ga, gb))
    assert m[i, j] == pytest.approx(wins / games) and m[i, j] + m[j, i] == pytest.approx(1.0)
    # the win rate's interval is Wilson's given the games played (scipy's, no ties here)
    from scipy.stats import binomtest

    ci = binomtest(int(wins), int(games)).proportion_ci(0.95, method="wilson")
    wr = res["win_rate"]
    assert (wr["low"][i][j], wr["high"][i][j]) == pytest.approx((ci.low, ci.high), abs=1e-12)
    assert wr["games"][i][j] == games and wr["low"][i][i] is None
    md = ranking_markdown(res)
    assert md.index("| 1 | g0") < md.index("| 4 | g3")
    ranking_plot(res, tmp_path / "r.png")
    assert (tmp_path / "r.png").stat().st_size > 1000


def test_rank_from_outcomes_and_errors():
    res = rank_generators(["a", "a", "b"], ["b", "c", "c"], outcome=[1, 1, 1], n_boot=20)
    assert res["generators"] == ["a", "b", "c"] and "mean_score" not in res
    with pytest.raises(InputError):
        rank_generators([], [], [], [])
    with pytest.raises(InputError):
        rank_generators(["a"], ["b"])


def test_bradley_terry_intervals_are_the_percentiles_of_one_fit_per_resample():
    """rank_generators fits every bootstrap resample at once (bradley_terry_batch): its interval equals the
    percentiles of an explicit loop over the same draws (numpy's integers(0, n, (B, n)) is B draws of n),
    one scipy fit per resample. Tolerance: each fit to ~1e-9 (tests/functional/test_ranking.py)."""
    from genmetrics.functional.ranking import bradley_terry

    rng = np.random.default_rng(2)
    n, k, n_boot, seed = 80, 3, 60, 9
    a = rng.integers(0, k, n)
    b = (a + rng.integers(1, k, n)) % k
    won = (rng.random(n) < 0.5 + 0.2 * (a - b)).astype(float)
    res = rank_generators([f"g{i}" for i in a], [f"g{i}" for i in b], outcome=won, n_boot=n_boot, seed=seed)
    draws = np.random.default_rng(seed)
    boots = []
    for _ in range(n_boot):
        idx = draws.integers(0, n, n)
        boots.append(bradley_terry(a[idx], b[idx], won[idx], k, prior=0.5).numpy())
    lo, hi = np.quantile(np.stack(boots), [0.025, 0.975], axis=0)
    for i in range(k):
        bt = res["bradley_terry"][f"g{i}"]
        assert (bt["low"], bt["high"]) == pytest.approx((lo[i], hi[i]), abs=1e-7)
