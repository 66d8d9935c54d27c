"""Numbers a JSON file or a Python caller can hold but a float cannot: an integer of 400 digits (JSON and
Python integers are unbounded; ``float()`` of it raises OverflowError, which the CLI does not map to a line:
it printed a traceback, exit 1) and votes whose sum overflows to infinity (each vote finite, the record's
agreement then read 0/inf = 0: a silent wrong 0.0% row). Each is refused as bad input naming the input."""

from __future__ import annotations

import json

import pytest

from genmetrics import create_metric
from genmetrics.cli.main import main
from genmetrics.data.jsonl import load_two_afc
from genmetrics.errors import InputError
from genmetrics.options import integer, number

HUGE = 10**400


@pytest.mark.parametrize("value", [HUGE, -HUGE])
def test_an_option_too_large_for_a_float_is_named(value):
    with pytest.raises(InputError, match="option max_db: expected a finite number"):
        create_metric("psnr", max_db=value)
    with pytest.raises(InputError, match="option n: expected an integer"):
        integer("n", value, lo=1)
    with pytest.raises(InputError, match="option x"):
        number("x", value)


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


def test_a_result_row_with_a_score_too_large_for_a_float_is_named(tmp_path, capsys):
    """``leaderboard --resume`` on a results.jsonl whose score is a 400-digit integer: one error line naming
    the file and line (it was an OverflowError traceback, exit 1)."""
    from genmetrics.data.output.rows import check_result_row
    from genmetrics.testing import toy_leaderboard

    row = {"generator": "g", "metric": "psnr", "id": "0"}
    assert check_result_row({**row, "score": 10**300}) is None  # a float holds it
    assert "finite number" in check_result_row({**row, "score": HUGE})

    cfg = toy_leaderboard(tmp_path, n=2)
    board = tmp_path / "board.yaml"  # JSON is YAML
    board.write_text(json.dumps(cfg))
    out = tmp_path / "run"
    assert main(["leaderboard", str(board), "--out", str(out), "--no-plots"]) == 0
    results = out / "results.jsonl"
    lines = results.read_text().splitlines()
    lines[0] = json.dumps({**json.loads(lines[0]), "score": HUGE})
    results.write_text("\n".join(lines) + "\n")
    capsys.readouterr()
    assert main(["leaderboard", str(board), "--out", str(out), "--no-plots", "--resume"]) == 2
    err = capsys.readouterr().err
    assert err.count("error:") == 1 and "Traceback" not in err and f"{results}:1" in err
