"""genmetrics.leaderboard.numbers: an estimate and its interval shown to the same decimals, chosen from the
interval's width; rounding only."""

from __future__ import annotations

import numpy as np
import pytest

from genmetrics.leaderboard.numbers import MAX_DECIMALS, decimals, fmt, fmt_ci, fmt_p, unit_suffix


def _decimals_of(text: str) -> int:
    return len(text.split(".")[1]) if "." in text else 0


@pytest.mark.parametrize("seed", range(5))
def test_estimate_and_interval_share_their_decimals(seed):
    rng = np.random.default_rng(seed)
    for _ in range(200):
        scale = 10.0 ** rng.uniform(-2.5, 5)
        lo, hi = sorted(rng.normal(0, scale, 2))
        est = rng.uniform(lo, hi)
        for signed in (False, True):
            parts = fmt_ci(est, lo, hi, signed=signed)
            if decimals(est, lo, hi) is None:  # scientific notation: the same mantissa digits for the three
                assert len({p.split("e")[0].split(".")[1].__len__() for p in parts}) == 1, parts
                continue
            d = {_decimals_of(p) for p in parts}
            assert len(d) == 1, parts  # the same decimals for the three
            dec = d.pop()
            # rounding only: each shown value within half a unit of its last digit of the true one
            for p, v in zip(parts, (est, lo, hi)):
                assert abs(float(p) - v) <= 0.5 * 10.0**-dec * (1 + 1e-9) + 1e-12, (p, v)
            # the width is shown with two significant digits unless the decimals are capped
            if 0 < dec < MAX_DECIMALS:
                assert 10 <= (hi - lo) * 10.0**dec < 100, (parts, hi - lo)


@pytest.mark.parametrize("n_boot", [10, 200, 1000, 10_000])
def test_a_p_value_below_the_resolution_is_shown_as_a_bound(n_boot):
    res = 1 / n_boot
    assert fmt_p(0.0, n_boot) == fmt_p(res / 2, n_boot) == f"< {res:.2g}"
    for p in (res, 0.5, 1.0):
        assert float(fmt_p(p, n_boot)) == pytest.approx(p, abs=5e-4)


def test_a_value_alone_has_four_significant_digits_and_its_sign_when_asked():
    rng = np.random.default_rng(7)
    for v in rng.normal(0, 10.0 ** rng.uniform(-5, 6, 200)):
        shown = fmt(float(v))
        assert float(shown) == pytest.approx(float(f"{v:.4g}"), rel=1e-12)
        assert fmt(float(v), signed=True)[0] == ("-" if v < 0 else "+")
    assert fmt(None) == "–" and fmt(float("nan")) == "nan"
    assert unit_suffix({"unit": "nats"}) == " (nats)" and unit_suffix({"unit": None}) == ""
