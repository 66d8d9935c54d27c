"""genmetrics.data.jsonl: human votes a float cannot hold (a 400-digit integer, a sum that overflows to
infinity, which read as a silent 0.0% agreement) are refused naming the file and line."""

from __future__ import annotations

import json

import pytest

from genmetrics.cli.main import main
from genmetrics.data.jsonl import load_two_afc
from genmetrics.errors import InputError

HUGE = 10**400  # a JSON or Python integer that no float holds


def _two_afc(tmp_path, votes):
    row = {
        "id": "p0",
        "reference": "r.png",
        "candidates": ["a.png", "b.png"],
        "aspect": "color",
        "votes": votes,
    }
    path = tmp_path / "votes.jsonl"
    path.write_text(json.dumps(row) + "\n")
    return path


@pytest.mark.parametrize(
    ("votes", "says"),
    [([HUGE, 1], r"votes\[0\] should be a non-negative number"), ([1e308, 1e308], "sum to more than")],
    ids=["integer-400-digits", "sum-overflows"],
)
def test_votes_a_float_cannot_hold_are_named(tmp_path, capsys, votes, says):
    path = _two_afc(tmp_path, votes)
    with pytest.raises(InputError, match=says) as e:
        load_two_afc(path)
    assert f"{path}:1" in str(e.value)
    args = ["evaluate-human", "tpips", "--data", str(path), "--format", "2afc", "--no-model"]
    assert main([*args, "--baseline", "metric:psnr"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "Traceback" not in err and f"{path}:1" in err


def test_large_finite_votes_still_load(tmp_path):
    """The control: votes as large as a float holds with a finite sum are kept (shares are what count)."""
    (rec,) = load_two_afc(_two_afc(tmp_path, [1e307, 3e307]))
    assert rec.votes == (1e307, 3e307)
