"""The leaderboard's CSV tables (made with pandas) round-trip: every number at full precision, missing
values empty, counts as integers, one row per generator best first, one row per paired comparison."""

from __future__ import annotations

import io
import math

import pandas as pd

from genmetrics.leaderboard.report import paired_csv, to_csv


def _summary():
    third = 1 / 3
    col = {
        "generators": {
            "g,1": {"mean": third, "low": 0.1, "high": 0.7, "n": 6},
            "g2": {"mean": -1e-20, "low": None, "high": None, "n": None},
        },
        "paired": [
            {"a": "g,1", "b": "g2", "diff": third + 1e-20, "low": 0.01, "high": 0.9, "p_value": 0.002, "n": 5}
        ],
    }
    setcol = {
        "generators": {"g,1": {"mean": 2.5, "low": None, "high": None, "n": 1}, "g2": {"mean": None, "n": 0}},
        "paired": [],
    }
    return {
        "columns": {"clip": col, "sad": setcol},
        "ranking": [
            {"rank": 1, "generator": "g,1", "images": 6},
            {"rank": 2, "generator": "g2", "images": 7},
        ],
    }


def test_leaderboard_csv_round_trips():
    s = _summary()
    text = to_csv(s)
    df = pd.read_csv(io.StringIO(text), keep_default_na=False, dtype=str)
    assert list(df.columns) == [
        "rank",
        "generator",
        "images",
        "clip",
        "clip_low",
        "clip_high",
        "clip_n",
        "sad",
        "sad_low",
        "sad_high",
        "sad_n",
    ]
    assert list(df["generator"]) == ["g,1", "g2"] and list(df["rank"]) == ["1", "2"]
    assert float(df["clip"][0]) == 1 / 3 and float(df["clip"][1]) == -1e-20  # exact round trip
    assert df["clip_n"][0] == "6" and df["clip_n"][1] == "" and df["clip_low"][1] == ""
    assert df["sad"][1] == "" and df["sad_n"][1] == "0" and float(df["sad"][0]) == 2.5


def test_paired_csv_round_trips():
    df = pd.read_csv(io.StringIO(paired_csv(_summary())), keep_default_na=False, dtype=str)
    assert len(df) == 1 and list(df.iloc[0][["metric", "a", "b", "n"]]) == ["clip", "g,1", "g2", "5"]
    assert float(df["diff"][0]) == 1 / 3 + 1e-20 and math.isclose(float(df["p_value"][0]), 0.002)
    empty = paired_csv({"columns": {"sad": {"paired": []}}})
    assert empty == "metric,a,b,diff,low,high,p_value,n\n"
