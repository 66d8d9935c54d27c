"""How the reports look: paired differences coloured by who wins, plots scaled to the values with units,
the "(set) columns" note only where there are such columns, the per-generator galleries (best and worst
samples, linked, sortable, self-contained) and the RA-CLIPScore figures' colour scales."""

from __future__ import annotations

import html as html_lib
import re

import numpy as np
import pytest
from lb_helpers import toml_config
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from genmetrics.core.registry import alias_of
from genmetrics.data.output.rows import read_results
from genmetrics.leaderboard import run_leaderboard
from genmetrics.leaderboard.gallery import best_and_worst, write_galleries
from genmetrics.leaderboard.numbers import MAX_DECIMALS, decimals, fmt_ci
from genmetrics.leaderboard.plots import _points, unit
from genmetrics.leaderboard.report import _intro, cell, paired_tables, ranking_table, winner

PSNR_SSIM = '[[metrics]]\nname = "psnr"\n\n[[metrics]]\nname = "ssim"\n'


@pytest.fixture
def board(small_set, tmp_path):
    cfg = toml_config(small_set, PSNR_SSIM, extra='[run]\nn_boot = 200\ntitle = "Look <b>"\n')
    res = run_leaderboard(cfg, tmp_path / "out")
    return res, read_results(res.results)


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
def _axes():
    fig = Figure()
    FigureCanvasAgg(fig)
    return fig.add_subplot()


def test_points_axis_shows_the_differences_not_zero_and_names_the_unit():
    entry = {
        "metric": "psnr",
        "higher_is_better": True,
        "generators": {
            "a": {"mean": 42.0, "low": 41.8, "high": 42.2},
            "b": {"mean": 25.6, "low": 24.4, "high": 26.5},
            "c": {"mean": None},
        },
    }
    ax = _axes()
    assert _points(ax, "psnr", entry, ["a", "b", "c"], 0.95)
    lo, hi = ax.get_ylim()
    assert 0 < lo <= 24.4 and 42.2 <= hi  # every interval visible, the axis not stretched to 0
    assert (hi - lo) < 2 * (42.2 - 24.4)
    assert "(dB)" in ax.get_ylabel() and "95% CI" in ax.get_ylabel()
    assert [t.get_text() for t in ax.get_xticklabels()] == ["a", "b"]
    assert ax.get_title() == "psnr ↑" and ax.get_xlabel() == "generator"
    ax = _axes()
    _points(ax, "sad", {**entry, "metric": "sad", "level": "set"}, ["a", "b"], 0.95)
    assert ax.get_ylabel() == "value vs real set, 95% CI (nats)"
    # whiskers end at the interval, even where the estimate lies outside it
    entry["generators"]["a"] = {"mean": 40.0, "low": 41.0, "high": 43.0}
    ax = _axes()
    _points(ax, "psnr", entry, ["a", "b"], 0.95)
    segs = ax.collections[0].get_segments()
    assert [tuple(s[:, 1]) for s in segs] == [(41.0, 43.0), (24.4, 26.5)]


def test_units():
    assert unit("psnr") == "dB" and unit("psnr[y]") == "dB" and unit("x", {"metric": "sad"}) == "nats"
    assert unit("ssim") == "" and unit("clip_i") == ""


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
    assert cell({"mean": 24.66, "low": 23.2, "high": 26.1}) == "24.7 [23.2, 26.1]"


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
def test_best_and_worst_match_an_explicit_sort():
    rng = np.random.default_rng(1)
    for n in (1, 3, 7, 8, 20):
        scores = {f"s{i:02d}": float(v) for i, v in enumerate(rng.normal(size=n))}
        for hib in (True, False, None):
            best, worst = best_and_worst(scores, hib, k=4)
            by_value = sorted(scores, key=scores.get, reverse=hib in (True, None))
            assert best == by_value[:4]
            assert worst == by_value[::-1][: min(4, max(0, n - 4))]
            assert not set(best) & set(worst)


def test_gallery_pages(board):
    res, rows = board
    out = res.out
    page_of = dict(
        re.findall(r'<a href="(gallery/[^"]+)">([^<]+)</a>', (out / "leaderboard.html").read_text())
    )
    assert sorted(page_of.values()) == ["bad", "good", "mid"]
    for href, g in page_of.items():
        text = (out / href).read_text()
        assert not re.search(r'src="(?!data:)', text)  # self-contained
        assert 'href="../leaderboard.html"' in text and "Look &lt;b&gt;" in text
        assert "<script>" in text and 'class="sortable"' in text
        for metric in ("psnr", "ssim"):
            scores = {r["id"]: r["score"] for r in rows if r["generator"] == g and r["metric"] == metric}
            best, worst = best_and_worst(scores, True, k=4)
            section = text.split(f'<h2 id="{metric}">')[1].split("</table>")[0]
            shown = re.findall(r'<td class="l" data-v="([^"]+)">', section)
            assert shown == best + worst  # best first, then worst first
            # each row: the candidate's and the reference's thumbnail
            assert section.count('class="thumb" alt="generated') == len(shown)
            assert section.count('class="thumb" alt="reference') == len(shown)


def test_gallery_escapes_names_and_keeps_file_names_apart(board, tmp_path):
    res, rows = board
    plan = _plan(res)
    summary = {**res.summary}
    rename = {"good": "<i>a/b", "mid": "<i>a?b", "bad": "bad"}
    summary["generators"] = [rename[g] for g in res.summary["generators"]]
    summary["ranking"] = [{**it, "generator": rename[it["generator"]]} for it in res.summary["ranking"]]
    rows2 = [{**r, "generator": rename[r["generator"]]} for r in rows]
    for mp in plan.metrics:
        mp.samples = {rename[g]: v for g, v in mp.samples.items()}
    links = write_galleries(tmp_path / "o", plan, summary, rows2)
    assert len({h for _, h in links}) == 3  # "<i>a/b" and "<i>a?b" sanitise alike: still two files
    for g, h in links:
        text = (tmp_path / "o" / h).read_text()
        assert "<i>" not in text and html_lib.escape(g) in text


def _plan(res):
    from genmetrics.leaderboard import build_plan, load_config

    return build_plan(load_config(res.summary["config"]))


# ------------------------------------------------------------------------------------------ RA-CLIPScore figures
