"""How the reports look: paired differences coloured by who wins, units in the headers, aligned Markdown
tables, plots in a grid, the "(set) columns" note only where there are such columns. (The plots, the
galleries and the number formats are tested in test_plots.py, test_gallery.py and test_numbers.py.)"""

from __future__ import annotations

import re

import numpy as np
import pytest

from genmetrics.core.registry import alias_of
from genmetrics.leaderboard.report import _intro, cell, paired_tables, ranking_table, winner


# ------------------------------------------------------------------------------------------ paired colours
@pytest.mark.parametrize("hib", [True, False, None])
def test_winner_follows_direction_and_is_symmetric(hib):
    rng = np.random.default_rng(0)
    for d in rng.normal(size=50):
        p = {"a": "x", "b": "y", "diff": float(d)}
        swapped = {"a": "y", "b": "x", "diff": -float(d)}
        assert winner(p, hib) == winner(swapped, hib)  # the same pair read the other way round
        if hib is None:
            assert winner(p, hib) is None
        else:  # explicit: higher is better -> the larger mean wins
            assert winner(p, hib) == (("x" if d > 0 else "y") if hib else ("y" if d > 0 else "x"))


def test_paired_cells_coloured_by_who_wins_in_every_direction():
    def summary(hib, diff, lo, hi):
        pair = {"a": "a", "b": "b", "diff": diff, "low": lo, "high": hi, "p_value": 0.5, "n": 5}
        return {
            "n_boot": 100,
            "generators": ["a", "b"],
            "columns": {"m": {"higher_is_better": hib, "level": "sample", "paired": [pair]}},
        }

    cases = [  # (direction, diff, CI) -> (A class, B class, diff class, better)
        ((True, 2.0, 1.0, 3.0), ("l win", "l", "a-wins sig", "a")),
        ((False, 2.0, 1.0, 3.0), ("l", "l win", "b-wins sig", "b")),
        ((True, -1.0, -2.0, 0.5), ("l", "l", "b-wins", "(b)")),
        ((False, -1.0, -2.0, 0.5), ("l", "l", "a-wins", "(a)")),
        ((None, 2.0, 1.0, 3.0), ("l", "l", "sig", "–")),
    ]
    for args, (ca, cb, cd, better) in cases:
        t = paired_tables(summary(*args))["m"]
        assert t.classes.iloc[0].tolist()[:3] == [ca, cb, cd], args
        assert t.frame.iloc[0]["better"] == better, args
        # one marker for "the interval excludes 0", and a highlight (win) only with it
        excludes = args[2] > 0 or args[3] < 0
        assert t.frame.iloc[0]["excludes 0"] == ("yes" if excludes else "no"), args
        assert ("sig" in t.classes.iloc[0]["excludes 0"]) == excludes, args
        assert any("win" in c.split() for c in t.classes.iloc[0]) == (excludes and args[0] is not None), args


def test_winner_matches_the_means_of_the_board(board):
    res, _ = board
    s = res.summary
    for name in ("psnr", "ssim"):
        e = s["columns"][name]
        for p in e["paired"]:
            ma, mb = e["generators"][p["a"]]["mean"], e["generators"][p["b"]]["mean"]
            # all ids shared, so the mean difference is the difference of the means (higher is better)
            assert p["diff"] == pytest.approx(ma - mb, rel=1e-9, abs=1e-12)
            assert winner(p, True) == (p["a"] if ma > mb else p["b"])
    page = (res.out / "leaderboard.html").read_text()
    # every pair here is significant and A is ranked above B: A's name highlighted, the difference A's colour
    assert len(re.findall(r'class="data row\d+ col0 l win"', page)) == 6
    assert len(re.findall(r'class="data row\d+ col2 a-wins sig"', page)) == 6


# ------------------------------------------------------------------------------------------ plots
def test_every_metric_card_names_its_unit_once_and_the_reports_show_it(board):
    from genmetrics.core.registry import get_card, list_metrics

    # the unit comes from the card: psnr is in dB, the KL divergences in nats, the rest unitless
    units = {n: get_card(n).unit for n in list_metrics() if alias_of(n) is None}
    assert units["psnr"] == "dB" and {units[k] for k in ("sad", "pad", "rsad")} == {"nats"}
    assert all(u in ("", "dB", "nats") for u in units.values())
    res, _ = board
    assert res.summary["columns"]["psnr"]["unit"] == "dB" and res.summary["columns"]["ssim"]["unit"] == ""
    head = list(ranking_table(res.summary).frame.columns)
    assert head[3:] == ["psnr (dB) ↑", "ssim ↑"]
    t = paired_tables(res.summary)["psnr"]
    assert t.title == "psnr (dB) ↑" and list(t.frame.columns)[2:4] == ["A − B (dB)", "CI (dB)"]
    md = (res.out / "leaderboard.md").read_text()
    assert "psnr (dB) ↑" in md and "A − B (dB)" in md


def test_markdown_tables_align_as_text(board):
    res, _ = board
    md = (res.out / "leaderboard.md").read_text().splitlines()
    tables, cur = [], []
    for line in md + [""]:
        if line.startswith("|"):
            cur.append(line)
        elif cur:
            tables.append(cur)
            cur = []
    assert len(tables) >= 3  # the ranking and a paired table per column
    for t in tables:  # every row of a table has its pipes at the same places
        pipes = {tuple(i for i, ch in enumerate(r) if ch == "|" and r[i - 1 : i] != "\\") for r in t}
        assert len(pipes) == 1, t


def test_html_plots_in_a_grid_and_set_note_only_with_set_columns(board):
    res, _ = board
    page = (res.out / "leaderboard.html").read_text()
    assert '<div class="plots">' in page and page.count("<figure") == 2
    assert "(set) columns" not in _intro(res.summary)
    with_set = {
        **res.summary,
        "columns": {**res.summary["columns"], "x": {**res.summary["columns"]["psnr"], "level": "set"}},
    }
    assert "(set) columns" in _intro(with_set)


# ------------------------------------------------------------------------------------------ gallery
# ------------------------------------------------------------------------------------------ RA-CLIPScore figures


def test_cell_shows_the_estimate_and_its_interval_to_the_same_decimals():
    assert cell({"mean": 24.66, "low": 23.2, "high": 26.1}) == "24.7 [23.2, 26.1]"
