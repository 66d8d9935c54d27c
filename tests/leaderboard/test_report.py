"""The leaderboard's CSV tables (made with pandas) round-trip: every number at full precision, missing
values empty, counts as integers, one row per generator best first, one row per paired comparison."""

from __future__ import annotations

import io
import math
import re

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


# ------------------------------------------------------------------------------ hostile names
HOSTILE = ['=HYPERLINK("http://x","y")', "+1+1", "-2+3", "@SUM(A1)", "a|b\nc <script>x</script>"]


def _hostile_run(tmp_path):
    """A leaderboard whose generator names are spreadsheet formulas, a pipe, a line break and a tag."""
    from genmetrics.leaderboard import run_leaderboard
    from genmetrics.testing import toy_leaderboard

    cfg = toy_leaderboard(tmp_path)
    folders = [g["images"] for g in cfg["generators"]]
    cfg["generators"] = [
        {"name": name, "images": folders[i % len(folders)]} for i, name in enumerate(HOSTILE)
    ]
    return run_leaderboard(cfg, tmp_path / "out", base_dir=tmp_path, plots=False).out


def test_hostile_names_are_neutralised_in_every_report(tmp_path):
    out = _hostile_run(tmp_path)
    board = pd.read_csv(out / "leaderboard.csv", keep_default_na=False, dtype=str)
    assert sorted(board["generator"]) == sorted("'" + n if n[0] in "=+-@" else n for n in HOSTILE)
    paired = pd.read_csv(out / "paired.csv", keep_default_na=False, dtype=str)
    for col in ("a", "b"):
        assert all(not v.startswith(("=", "+", "-", "@")) for v in paired[col])
    md = (out / "leaderboard.md").read_text()
    assert "a\\|b<br>c \\<script>x\\</script>" in md  # rendered as text: the tag's "<" is escaped
    assert not re.search(r"(?<!\\)<script", md)
    for (
        line
    ) in md.splitlines():  # every table row keeps its column count (no cell split by | or a line break)
        if line.startswith("| ") and "generator" not in line and "A − B" not in line:
            cells = [c for c in line.split(" | ")]
            assert len(cells) in (4, 8), line  # ranking: 4; paired: A, B, A − B, CI, p, n, excludes 0, better
    page = (out / "leaderboard.html").read_text()
    assert "<script>" not in page and "&lt;script&gt;" in page


def test_csv_safe_and_md_escape_unit():
    from genmetrics.leaderboard.report import csv_safe, md_escape

    assert [csv_safe(x) for x in ("=1", "+1", "-1", "@1", "\t1", "ok", "", 1.5, -2)] == [
        "'=1",
        "'+1",
        "'-1",
        "'@1",
        "'\t1",
        "ok",
        "",
        1.5,
        -2,
    ]
    assert (
        md_escape("x|y") == "x\\|y"
        and md_escape("x\r\ny") == "x<br>y"
        and md_escape("<b>&") == "\\<b>&"
        and md_escape("&lt;") == "\\&lt;"
    )
