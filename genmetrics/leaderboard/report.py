"""Aggregation and reports: ``summary.json``, ``leaderboard.md``, ``leaderboard.csv``, ``paired.csv`` and a
self-contained ``leaderboard.html`` (plots embedded as PNG data URIs).

The module has three layers, so each can change on its own:

1. **statistics** (:func:`summarize`): per-sample columns get the mean over images with an interval from
   :func:`_interval`, set-level columns their one value per generator (an interval when the metric offers
   ``bootstrap_ci``: sad, pad), paired comparisons come from :func:`_paired`; the ranking follows
   ``run.rank_by`` (default: the first column with a direction), best first, generators without a value
   last; :func:`notes` says what a reader must know (random backbones, small sets, incomplete cells);
2. **tables** (:func:`ranking_table`, :func:`paired_tables`): pandas DataFrames of display strings with a
   DataFrame of CSS classes per cell (``l`` text, ``sig`` an interval that excludes 0); headers carry the
   column's unit (from its metric card), an estimate and its interval share their decimals
   (:mod:`genmetrics.leaderboard.numbers`);
3. **renderers**: Markdown (:func:`leaderboard_markdown`), HTML (:func:`to_html`, pandas' ``Styler`` with HTML
   escaping; :data:`CSS` holds the look), CSV (:func:`to_csv`, :func:`paired_csv`, pandas ``to_csv``).

Text from the config or the data (generator names, labels, titles) is escaped for each format by
:mod:`genmetrics.data.text.escape`: HTML (also through pandas' Styler), Markdown (:func:`md_escape`: shown
as text, never a link, an image or a tag), CSV (:func:`csv_safe`: a cell starting with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return gets a leading ``'``, so it is never run as a formula).
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd

from genmetrics.core.registry import Granularity
from genmetrics.data.output.atomic import atomic_write_json, atomic_write_text
from genmetrics.data.text.escape import csv_cell, html_text, md_text, visible_bidi
from genmetrics.functional.bootstrap import bootstrap_ci, paired_bootstrap
from genmetrics.leaderboard.gallery import write_galleries
from genmetrics.leaderboard.notes import BANNER, notes
from genmetrics.leaderboard.numbers import fmt, fmt_ci, fmt_p, unit_suffix
from genmetrics.leaderboard.plan import SET_ID, Plan
from genmetrics.leaderboard.plots import figure, make_plots
from genmetrics.leaderboard.scores import ScoreTable

ARROW = {True: "↑", False: "↓", None: ""}
MAX_PAIRS_MD = 15  # above this many pairs the Markdown shows neighbours in the ranking only
__all__ = [
    "BANNER",
    "CSS",
    "Table",
    "cell",
    "csv_safe",
    "fmt",
    "fmt_p",
    "md_escape",
    "notes",
    "paired_csv",
    "paired_tables",
    "ranking_table",
    "summarize",
    "to_csv",
    "to_html",
    "leaderboard_markdown",
    "write_reports",
]


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def _interval(values: np.ndarray, run: Any) -> tuple[float, float, float]:
    """``(mean, low, high)`` of a per-sample column (studentized bootstrap of the mean)."""
    est, lo, hi = bootstrap_ci(values, n_boot=run.n_boot, alpha=1.0 - run.ci, seed=run.seed)
    return est, lo, hi


def _paired(a: np.ndarray, b: np.ndarray, run: Any) -> dict[str, Any]:
    """The paired comparison of two generators on the ids both have: ``diff``, ``low``, ``high``,
    ``p_value``, ``n``."""
    return paired_bootstrap(a, b, n_boot=run.n_boot, alpha=1.0 - run.ci, seed=run.seed)


# ------------------------------------------------------------------------------------------ statistics
def _set_entry(sr: dict[str, Any] | None) -> dict[str, Any]:
    ci = sr.get("ci") if sr else None
    entry = {
        "mean": sr.get("score") if sr else None,
        "low": ci[0] if ci else None,
        "high": ci[1] if ci else None,
        "n": sr.get("n") if sr else 0,
        "n_real": sr.get("n_real") if sr else None,
    }
    for extra in ("value", "labels", "grid"):
        if sr and extra in sr:
            entry[extra] = sr[extra]
    return entry


def _sample_entry(table: ScoreTable, column: str, g: str, run: Any) -> dict[str, Any]:
    _, vals = table.finite(column, g)  # the finite scores in the plan's sample order
    n, n_invalid, n_expected = table.counts(column, g)
    entry: dict[str, Any] = {
        "mean": None,
        "low": None,
        "high": None,
        "std": None,
        "n": n,
        "n_expected": n_expected,
        "n_invalid": n_invalid,
    }
    if n:
        est, lo, hi = _interval(vals, run)
        entry.update(mean=est, low=lo, high=hi, std=float(np.std(vals, ddof=1)) if n > 1 else 0.0)
    return entry


def _order(columns: dict[str, dict[str, Any]], gens: list[str], rank_by: str | None) -> list[str]:
    """Generators best first by ``rank_by`` in its direction; without a value last; ties in config order."""
    if rank_by is None:
        return list(gens)
    entry = columns[rank_by]
    sign = -1.0 if entry["higher_is_better"] in (True, None) else 1.0

    def key(g: str) -> tuple:
        m = entry["generators"][g]["mean"]
        return (m is None, sign * m if m is not None else 0.0, gens.index(g))

    return sorted(gens, key=key)


def _pairs(table: ScoreTable, column: str, order: list[str], run: Any) -> list[dict[str, Any]]:
    """Every pair of generators (ranking order) compared on the ids both scored with a finite value."""
    pairs = []
    for i, a in enumerate(order):
        for b in order[i + 1 :]:
            va, vb = table.paired(column, a, b)
            if va.size:
                pairs.append({"a": a, "b": b, **_paired(va, vb, run)})
    return pairs


def summarize(
    plan: Plan, rows: ScoreTable | Iterable[dict[str, Any]], *, provider: str | None = None
) -> dict[str, Any]:
    """The content of ``summary.json`` from the results rows of the planned keys (any iterable of rows, or
    the run's :class:`~genmetrics.leaderboard.scores.ScoreTable`: memory of float64 scores, never the rows);
    ``provider`` names the backbone provider the scores came from (``None``: real weights), for the reports'
    banner.

    Recomputed from ``results.jsonl``, it equals the summary of the run:

    >>> import tempfile
    >>> from genmetrics.data.output.rows import read_results
    >>> from genmetrics.leaderboard import build_plan, load_config, run_leaderboard
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     result = run_leaderboard(toy_leaderboard(d), Path(d) / "out", base_dir=d, plots=False)
    ...     again = summarize(build_plan(load_config(toy_leaderboard(d), base_dir=d)), read_results(result.results))
    >>> again == result.summary, again["generators"]
    (True, ['copy', 'noisy'])
    """
    run = plan.config.run
    table = rows if isinstance(rows, ScoreTable) else ScoreTable.from_rows(plan, rows)
    gens = [g.name for g in plan.generators]
    columns: dict[str, dict[str, Any]] = {}
    for mp in plan.metrics:
        for col in mp.columns:
            if mp.level is Granularity.SET:
                res = {g: _set_entry(table.set_row(col.name, g)) for g in gens}
            else:
                res = {g: _sample_entry(table, col.name, g, run) for g in gens}
            columns[col.name] = {
                "metric": mp.spec.name,
                "label": mp.spec.label,
                "aspect": col.aspect,
                "level": mp.level,
                "family": mp.card.family,
                "unit": mp.card.unit,
                "higher_is_better": mp.higher_is_better,
                "generators": res,
            }
    rank_by = run.rank_by or next((c for c, e in columns.items() if e["higher_is_better"] is not None), None)
    order = _order(columns, gens, rank_by)
    for name, entry in columns.items():
        entry["paired"] = [] if entry["level"] == "set" else _pairs(table, name, order, run)
    ranking = []
    for i, g in enumerate(order):
        item: dict[str, Any] = {"rank": i + 1, "generator": g, "images": len(plan.images[g])}
        item.update({name: entry["generators"][g]["mean"] for name, entry in columns.items()})
        ranking.append(item)
    return {
        "title": run.title,
        "config": str(plan.config.path) if plan.config.path is not None else None,
        "rank_by": rank_by,
        "higher_is_better": columns[rank_by]["higher_is_better"] if rank_by else None,
        "ci": run.ci,
        "n_boot": run.n_boot,
        "seed": run.seed,
        "set_id": SET_ID,
        "backbone_provider": provider,
        "generators": order,
        "ranking": ranking,
        "columns": columns,
    }


def _split_notes(summary: dict[str, Any]) -> tuple[list[str], list[str]]:
    """``(banner, the rest)``: the random-backbones warning goes above everything, the other notes below the
    table."""
    ns = notes(summary)
    return [n for n in ns if n.startswith(BANNER)], [n for n in ns if not n.startswith(BANNER)]


# ------------------------------------------------------------------------------------------ formatting
#: Markdown text (one escaping module for every format: :mod:`genmetrics.data.text.escape`)
md_escape = md_text
#: a CSV cell never run as a formula
csv_safe = csv_cell


def cell(entry: dict[str, Any]) -> str:
    """A table cell: ``mean [low, high]`` (the three to the same decimals), the mean alone without an
    interval, "–" without a value.

    >>> cell({"mean": 24.66, "low": 23.2, "high": 25.1}), cell({"mean": 3.0}), cell({"mean": None})
    ('24.7 [23.2, 25.1]', '3', '–')
    """
    if entry["mean"] is None:
        return "–"
    if entry.get("low") is None:
        return fmt(entry["mean"])
    est, lo, hi = fmt_ci(entry["mean"], entry["low"], entry["high"])
    return f"{est} [{lo}, {hi}]"


def _header(name: str, entry: dict[str, Any]) -> str:
    arrow = ARROW[entry["higher_is_better"]]
    return f"{name}{unit_suffix(entry)} {arrow}".strip() + (" (set)" if entry["level"] == "set" else "")


def _significant(p: dict[str, Any]) -> bool:
    return p["low"] > 0 or p["high"] < 0


def _pairs_to_show(entry: dict[str, Any], order: list[str]) -> list[dict[str, Any]]:
    pairs = entry["paired"]
    if len(pairs) <= MAX_PAIRS_MD:
        return pairs
    nxt = dict(zip(order, order[1:]))
    return [p for p in pairs if nxt.get(p["a"]) == p["b"]]


def _intro(summary: dict[str, Any]) -> str:
    cols = summary["columns"]
    level_s = f"{round(summary['ci'] * 100, 4):g}%"
    direction = {True: "higher is better", False: "lower is better", None: "no direction"}[
        summary["higher_is_better"]
    ]
    sets = any(e["level"] == "set" for e in cols.values())
    return (
        f"{len(summary['generators'])} generators ranked best first by {{rank_by}} ({direction}). "
        f"Cells: mean over images [{level_s} bootstrap CI, {summary['n_boot']} resamples, seed {summary['seed']}]"
        + ("; (set) columns: one value per generator against the real set." if sets else ".")
    )


# ------------------------------------------------------------------------------------------ tables
@dataclass
class Table:
    """A report table: ``frame`` holds the display strings, ``classes`` a CSS class per cell (``""`` none:
    ``l`` left-aligned text, ``sig`` a paired interval that excludes 0), ``align`` per column: ``l`` text
    (user text, escaped in Markdown), ``r`` numbers the report formatted; ``title`` a heading above it.

    >>> t = Table(pd.DataFrame({"a": ["x"]}), pd.DataFrame({"a": ["l"]}), ["l"])
    >>> t.frame.shape, t.title
    ((1, 1), None)
    """

    frame: pd.DataFrame
    classes: pd.DataFrame
    align: list[str]
    title: str | None = None


def ranking_table(summary: dict[str, Any]) -> Table:
    """The leaderboard: one row per generator (best first), ``mean [low, high]`` per column.

    >>> s = {"columns": {"psnr": {"higher_is_better": True, "level": "sample",
    ...                           "generators": {"a": {"mean": 20.0, "low": 19.0, "high": 21.0}}}},
    ...      "ranking": [{"rank": 1, "generator": "a", "images": 3}]}
    >>> ranking_table(s).frame.to_dict("records")
    [{'rank': '1', 'generator': 'a', 'images': '3', 'psnr ↑': '20.0 [19.0, 21.0]'}]
    """
    cols = summary["columns"]
    head = ["rank", "generator", "images"] + [_header(n, e) for n, e in cols.items()]
    rows = [
        [str(item["rank"]), item["generator"], str(item["images"])]
        + [cell(e["generators"][item["generator"]]) for e in cols.values()]
        for item in summary["ranking"]
    ]
    frame = pd.DataFrame(rows, columns=head)
    classes = pd.DataFrame([["", "l", ""] + [""] * len(cols) for _ in rows], columns=head)
    return Table(frame, classes, ["r", "l", "r"] + ["r"] * len(cols))


def winner(p: dict[str, Any], higher_is_better: bool | None) -> str | None:
    """The generator the pair's mean difference favours in the column's direction (``None``: no direction
    or no difference); whether that is significant is :func:`_significant`'s call.

    >>> p = {"a": "x", "b": "y", "diff": -0.5}
    >>> winner(p, True), winner(p, False), winner(p, None), winner({**p, "diff": 0.0}, True)
    ('y', 'x', None, None)
    """
    if higher_is_better is None or not _finite(p["diff"]) or p["diff"] == 0:
        return None
    return p["a"] if (p["diff"] > 0) == higher_is_better else p["b"]


#: the one marker of a paired difference whose interval excludes 0 (column ``excludes 0``)
SIG_MARK = {True: "yes", False: "no"}


def paired_tables(summary: dict[str, Any], *, neighbours_only: bool = False) -> dict[str, Table]:
    """Per per-sample column with comparisons: ``A``, ``B``, ``A − B`` and its ``CI`` (to the same decimals,
    in the column's unit), ``p``, ``n``, ``excludes 0`` (``yes`` when the interval excludes 0: the one
    marker of a clear difference) and ``better`` (the generator the difference favours; in brackets when
    the interval includes 0); ``neighbours_only`` keeps only neighbours in the ranking above
    :data:`MAX_PAIRS_MD` pairs.

    CSS classes: the difference ``a-wins`` or ``b-wins`` (who it favours), ``sig`` on the difference, the
    marker and the winner's name (``win``) when the interval excludes 0; nothing is highlighted otherwise.

    >>> s = {"n_boot": 1000, "generators": ["a", "b"], "columns": {"psnr": {"higher_is_better": True,
    ...      "level": "sample", "unit": "dB", "paired": [{"a": "a", "b": "b", "diff": 2.0, "low": 1.0,
    ...                                                   "high": 3.0, "p_value": 0.0, "n": 12}]}}}
    >>> t = paired_tables(s)["psnr"]
    >>> t.title, t.frame.columns[2], t.frame.iloc[0].tolist(), t.classes.iloc[0].tolist()[:3]
    ('psnr (dB) ↑', 'A − B (dB)', ['a', 'b', '+2.0', '[+1.0, +3.0]', '< 0.001', '12', 'yes', 'a'], ['l win', 'l', 'a-wins sig'])
    """
    out: dict[str, Table] = {}
    for name, e in summary["columns"].items():
        if e["level"] != "sample" or not e["paired"]:
            continue
        u = unit_suffix(e)
        head = ["A", "B", f"A − B{u}", f"CI{u}", "p", "n", "excludes 0", "better"]
        pairs = _pairs_to_show(e, summary["generators"]) if neighbours_only else e["paired"]
        rows, classes = [], []
        for p in pairs:
            sig = _significant(p)
            w = winner(p, e["higher_is_better"])
            diff, lo, hi = fmt_ci(p["diff"], p["low"], p["high"], signed=True)
            rows.append(
                [
                    p["a"],
                    p["b"],
                    diff,
                    f"[{lo}, {hi}]",
                    fmt_p(p["p_value"], summary["n_boot"]),
                    str(p["n"]),
                    SIG_MARK[sig],
                    "–" if w is None else w if sig else f"({w})",
                ]
            )
            diff_class = "" if w is None else ("a-wins" if w == p["a"] else "b-wins")
            won = "l win" if sig else "l"
            classes.append(
                [
                    won if w == p["a"] else "l",
                    won if w == p["b"] and w != p["a"] else "l",
                    f"{diff_class} sig".strip() if sig else diff_class,
                    "",
                    "",
                    "",
                    "mark sig" if sig else "mark",
                    "l",
                ]
            )
        out[name] = Table(
            pd.DataFrame(rows, columns=head),
            pd.DataFrame(classes, columns=head),
            ["l", "l", "r", "r", "r", "r", "l", "l"],
            title=_header(name, e),
        )
    return out


# ------------------------------------------------------------------------------------------ Markdown
def _md_table(t: Table) -> list[str]:
    """A pipe table, every column padded to one width (aligned as text too: numbers to the right). pandas'
    ``to_markdown`` needs ``tabulate``, which is not installed with genmetrics (and does not escape cells),
    so the lines are written here.

    >>> t = Table(pd.DataFrame({"g": ["a", "bbb"], "v": ["1.5", "10.25"]}), pd.DataFrame(), ["l", "r"])
    >>> print("\\n".join(_md_table(t)))
    | g   |     v |
    |:----|------:|
    | a   |   1.5 |
    | bbb | 10.25 |
    """
    cells = [[md_escape(c) for c in t.frame.columns]]  # text columns (``l``) escaped; ``r`` hold numbers
    cells += [
        [md_escape(v) if a == "l" else str(v) for v, a in zip(row, t.align)]
        for row in t.frame.itertuples(index=False)
    ]
    widths = [max(3, *(len(r[j]) for r in cells)) for j in range(len(t.align))]

    def line(r: list[str]) -> str:
        return (
            "| "
            + " | ".join(c.rjust(w) if a == "r" else c.ljust(w) for c, w, a in zip(r, widths, t.align))
            + " |"
        )

    sep = (
        "|"
        + "|".join(
            (":" + "-" * (w + 1)) if a == "l" else ("-" * (w + 1) + ":") for w, a in zip(widths, t.align)
        )
        + "|"
    )
    return [line(cells[0]), sep, *(line(r) for r in cells[1:])]


def leaderboard_markdown(
    summary: dict[str, Any], plots: list[tuple[str, str]], galleries: list[tuple[str, str]] | None = None
) -> str:
    """``leaderboard.md``: the notes, the ranking table (mean [CI] per column), paired comparisons, plots and
    links to the per-generator ``galleries`` (``(generator, relative href)``).

    >>> import tempfile
    >>> from genmetrics.leaderboard import run_leaderboard
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     summary = run_leaderboard(toy_leaderboard(d), Path(d) / "out", base_dir=d, plots=False).summary
    >>> print("\\n".join(leaderboard_markdown(summary, []).splitlines()[4:7]))
    | rank | generator | images |          psnr (dB) ↑ |
    |-----:|:----------|-------:|---------------------:|
    |    1 | copy      |      3 | 100.0 [100.0, 100.0] |
    """
    banner, rest = _split_notes(summary)
    lines = [f"# {md_escape(summary['title'])}", ""]
    lines += [f"> **{md_escape(n)}**" for n in banner] + ([""] if banner else [])
    lines += [_intro(summary).replace("{rank_by}", f"**{md_escape(summary['rank_by'])}**"), ""]
    lines += _md_table(ranking_table(summary))
    for note in rest:
        lines += ["", md_escape(note)]
    tables = paired_tables(summary, neighbours_only=True)
    if tables:
        level_s = f"{round(summary['ci'] * 100, 4):g}%"
        lines += [
            "",
            "## Paired comparisons",
            "",
            f"Mean difference A − B over the images both generators have, with a {level_s} paired-bootstrap "
            "CI and two-sided p-value; *excludes 0* says whether the interval excludes 0 (a clear "
            "difference); *better* names the generator the difference favours (in brackets when the interval "
            "includes 0).",
        ]
        for name, t in tables.items():
            lines += ["", f"### {md_escape(t.title)}", "", *_md_table(t)]
            total = len(summary["columns"][name]["paired"])
            if len(t.frame) < total:
                lines.append(f"\n(neighbours in the ranking only; all {total} pairs are in paired.csv)")
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{md_escape(t)}]({p})" for t, p in plots]
    if galleries:
        lines += ["", "Per-sample galleries (best and worst samples per metric): "]
        lines[-1] += ", ".join(f"[{md_escape(g)}]({href})" for g, href in galleries)
    lines += [
        "",
        "Files: `results.jsonl` (one row per generator, metric and image), `summary.json`, "
        "`leaderboard.csv`, `paired.csv`, `leaderboard.html`, `manifest.json`.",
        "",
    ]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------------ CSV
def _csv(rows: list[dict[str, Any]], columns: list[str], counts: list[str]) -> str:
    """A CSV table via pandas: numbers at full precision, missing values empty, count columns as integers,
    text cells and headers made safe for spreadsheet tools (:func:`csv_safe`)."""
    df = pd.DataFrame(rows, columns=columns)
    for c in counts:
        df[c] = df[c].astype("Int64")
    for c in df.columns:
        if not pd.api.types.is_numeric_dtype(df[c]):  # text (object or pandas' string dtype)
            df[c] = df[c].map(csv_safe)
    df.columns = [csv_safe(c) for c in df.columns]
    return df.to_csv(index=False, lineterminator="\n")


def to_csv(summary: dict[str, Any]) -> str:
    """``leaderboard.csv``: one row per generator (best first); mean, low, high and n of every column (and a
    ``note`` column on every row when the scores come from random backbones).

    >>> import tempfile
    >>> from genmetrics.leaderboard import run_leaderboard
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     summary = run_leaderboard(toy_leaderboard(d), Path(d) / "out", base_dir=d, plots=False).summary
    >>> to_csv(summary).splitlines()[:2]
    ['rank,generator,images,psnr,psnr_low,psnr_high,psnr_n', '1,copy,3,100.0,100.0,100.0,3']
    """
    cols = summary["columns"]
    head = ["rank", "generator", "images"] + [f"{n}{s}" for n in cols for s in ("", "_low", "_high", "_n")]
    banner = _split_notes(summary)[0]
    rows = []
    for item in summary["ranking"]:
        g = item["generator"]
        row = {"rank": item["rank"], "generator": g, "images": item["images"]}
        for n, e in cols.items():
            v = e["generators"][g]
            row.update(
                {n: v["mean"], f"{n}_low": v.get("low"), f"{n}_high": v.get("high"), f"{n}_n": v.get("n")}
            )
        if banner:
            row["note"] = banner[0]
        rows.append(row)
    return _csv(rows, head + (["note"] if banner else []), ["rank", "images"] + [f"{n}_n" for n in cols])


def paired_csv(summary: dict[str, Any]) -> str:
    """``paired.csv``: every paired comparison of every per-sample column.

    >>> import tempfile
    >>> from genmetrics.leaderboard import run_leaderboard
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     summary = run_leaderboard(toy_leaderboard(d), Path(d) / "out", base_dir=d, plots=False).summary
    >>> lines = paired_csv(summary).splitlines()
    >>> lines[0], lines[1].split(",")[:3]
    ('metric,a,b,diff,low,high,p_value,n', ['psnr', 'copy', 'noisy'])
    """
    head = ["metric", "a", "b", "diff", "low", "high", "p_value", "n"]
    rows = [
        {"metric": n, **{k: p[k] for k in head[1:]}}
        for n, e in summary["columns"].items()
        for p in e["paired"]
    ]
    return _csv(rows, head, ["n"])


# ------------------------------------------------------------------------------------------ HTML
#: the look of leaderboard.html (classes: ``lb`` the ranking table, ``paired`` a paired table (every one
#: with the same column widths, so they align), ``l`` text cells, ``a-wins`` / ``b-wins`` a difference
#: favouring A / B, ``sig`` a significant one, ``mark`` the ``excludes 0`` cell, ``win`` the winner's name
#: when the interval excludes 0, ``note`` small print, ``banner`` a warning before the tables, ``plots``
#: the grid of figures, ``wide`` a figure across the whole grid, ``scroll`` a wide table's box)
CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
padding:0 1rem;color:#222}table{border-collapse:collapse;margin:1rem 0}th,td{border:1px solid #ccc;
padding:.3rem .6rem;text-align:right}th{background:#f3f3f3}td.l,th.l{text-align:left}
table.lb tbody tr:first-child td{font-weight:600}.note{color:#555;font-size:.9rem}
td,th{font-variant-numeric:tabular-nums}table.paired{table-layout:fixed;width:100%}
table.paired th:nth-child(-n+2){width:17%}table.paired th:nth-child(3){width:12%}table.paired th:nth-child(4){width:18%}
table.paired th:nth-child(5),table.paired th:nth-child(6){width:7%}table.paired th:nth-child(7){width:8%}
table.paired td{overflow-wrap:anywhere}.a-wins{color:#0b6e4f}.b-wins{color:#b23a48}.sig{font-weight:600}
td.win{background:#c8ecd9}.mark.sig{background:#0b6e4f;color:#fff;padding:0 .3rem}.banner{background:#fff3cd;border:1px solid #e0c36c;padding:.5rem .8rem}
img{max-width:100%;border:1px solid #eee;margin:.5rem 0}.plots{display:grid;gap:.5rem 1rem;
grid-template-columns:repeat(auto-fill,minmax(320px,1fr))}.plots figure{margin:0}figure.wide{grid-column:1/-1}
.scroll{overflow-x:auto}"""


def _html_table(t: Table, css_class: str = "", uid: str = "") -> str:
    """A table through pandas' Styler: every cell and header HTML-escaped, the per-cell classes of ``t``."""
    styler = (
        t.frame.style.format(escape="html")
        .format_index(escape="html", axis=1)
        .set_td_classes(t.classes)
        .hide(axis="index")
        .set_uuid(uid or css_class or "t")
    )
    page = styler.to_html(table_attributes=f'class="{css_class}"' if css_class else None, cell_ids=False)
    return visible_bidi(page)  # the Styler escapes markup only: bidi controls shown as their escape


def to_html(
    summary: dict[str, Any], plots: list[tuple[str, Path]], galleries: list[tuple[str, str]] | None = None
) -> str:
    """``leaderboard.html``: the Markdown report's content as one self-contained HTML page (plots in a grid),
    with links to the per-generator ``galleries`` (``(generator, relative href)``) when given.

    >>> import tempfile
    >>> from genmetrics.leaderboard import run_leaderboard
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     summary = run_leaderboard(toy_leaderboard(d), Path(d) / "out", base_dir=d, plots=False).summary
    >>> page = to_html(summary, [])
    >>> page.startswith("<!DOCTYPE html>"), "<title>Leaderboard</title>" in page
    (True, True)
    """
    e = html_text
    level_s = f"{round(summary['ci'] * 100, 4):g}%"
    out = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8">',
        f"<title>{e(summary['title'])}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{e(summary['title'])}</h1>",
    ]
    banner, rest = _split_notes(summary)
    out += [f'<p class="banner">{e(n)}</p>' for n in banner]
    intro = e(_intro(summary)).replace("{rank_by}", f"<b>{e(str(summary['rank_by']))}</b>")
    out.append(f'<p class="note">{intro}</p>')
    out.append(f'<div class="scroll">{_html_table(ranking_table(summary), "lb")}</div>')
    out += [f'<p class="note">{e(n)}</p>' for n in rest]
    if galleries:
        links = ", ".join(f'<a href="{e(href)}">{e(g)}</a>' for g, href in galleries)
        out.append(f"<p>Per-sample galleries (the best and worst samples per metric): {links}.</p>")
    tables = paired_tables(summary)
    if tables:
        out.append(
            f'<h2>Paired comparisons</h2><p class="note">Mean difference A − B over shared images, {level_s} '
            "paired-bootstrap CI, two-sided p-value. Colours say whom the difference favours in the column's "
            'direction: <span class="a-wins">A better</span>, <span class="b-wins">B better</span>. '
            '<span class="mark sig">yes</span> under <i>excludes 0</i> marks an interval that excludes 0 '
            "(a clear difference); only then is the winner's name highlighted.</p>"
        )
        for name, t in tables.items():
            out.append(f"<h3>{e(t.title or name)}</h3>")
            out.append(_html_table(t, "paired", f"paired-{len(out)}"))
    if plots:
        out.append('<h2>Plots</h2><div class="plots">')
        is_wide = [" map, " in title or title.endswith(" per attribute") for title, _ in plots]
        # one panel per column first (they fill the grid), then the figures that span it
        for wide_, (title, path) in sorted(zip(is_wide, plots), key=lambda t: t[0]):
            out.append(figure(title, Path(path), "wide" if wide_ else ""))
        out.append("</div>")

    config = e(str(summary["config"]))
    out.append(f'<p class="note">{len(summary["generators"])} generators; config {config}.</p></body></html>')
    return "\n".join(out) + "\n"


# ------------------------------------------------------------------------------------------ files
def write_reports(
    out_dir: Path,
    plan: Plan,
    summary: dict[str, Any],
    *,
    plots: bool = True,
    rows: ScoreTable | Iterable[dict[str, Any]] | None = None,
) -> list[Path]:
    """Write summary.json, the reports and (optionally) the plots, each atomically and under the write rule
    (inside ``out_dir``, never through a link); with ``plots`` and the results ``rows`` also a gallery page
    per generator (``gallery/<generator>.html``, :mod:`genmetrics.leaderboard.gallery`), linked from
    ``leaderboard.html`` (``rows``: any iterable of rows, or the run's
    :class:`~genmetrics.leaderboard.scores.ScoreTable`); returns the paths.

    >>> import tempfile
    >>> from genmetrics.leaderboard import build_plan, load_config, run_leaderboard
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     summary = run_leaderboard(toy_leaderboard(d), Path(d) / "out", base_dir=d, plots=False).summary
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    ...     [p.name for p in write_reports(Path(d) / "again", plan, summary, plots=False)]
    ['summary.json', 'leaderboard.md', 'leaderboard.csv', 'paired.csv', 'leaderboard.html']
    """

    made = make_plots(out_dir, summary) if plots else []
    figures = [(t, out_dir / p) for t, p in made]
    galleries = write_galleries(out_dir, plan, summary, rows, figures) if plots and rows is not None else []
    return [
        atomic_write_json(out_dir / "summary.json", summary, root=out_dir),
        atomic_write_text(
            out_dir / "leaderboard.md", leaderboard_markdown(summary, made, galleries), root=out_dir
        ),
        atomic_write_text(out_dir / "leaderboard.csv", to_csv(summary), root=out_dir),
        atomic_write_text(out_dir / "paired.csv", paired_csv(summary), root=out_dir),
        atomic_write_text(out_dir / "leaderboard.html", to_html(summary, figures, galleries), root=out_dir),
    ] + [out_dir / href for _, href in galleries]
