"""Aggregation and reports: ``summary.json``, ``leaderboard.md``, ``leaderboard.csv``, ``paired.csv`` and a
self-contained ``leaderboard.html`` (plots embedded as PNG data URIs).

* Per-sample columns: the mean over images with a BCa bootstrap interval
  (:func:`genmetrics.functional.bootstrap.bootstrap_ci`; ``run.n_boot`` resamples, ``run.ci`` level,
  ``run.seed``); missing or non-finite scores are left out and counted.
* Set-level columns: the one value per generator; an interval when the metric offers ``bootstrap_ci``
  (sad, pad: both sets resampled, from the per-image scores kept with ``keep_scores``).
* Ranking: by ``run.rank_by`` (default: the first column whose metric has a direction), best first;
  generators without a value go last, ties keep the config order.
* Paired comparisons: for every pair of generators (in ranking order) and every per-sample column, the
  mean difference A - B over the ids both have, with a paired bootstrap interval and p-value
  (:func:`genmetrics.functional.bootstrap.paired_bootstrap`).
"""

from __future__ import annotations

import base64
import html
import math
from pathlib import Path
from typing import Any

import numpy as np

from genmetrics.leaderboard.plan import SET_ID, Plan

ARROW = {True: "↑", False: "↓", None: ""}
MAX_PAIRS_MD = 15  # above this many pairs the Markdown shows neighbours in the ranking only


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def summarize(plan: Plan, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The content of ``summary.json`` from the results rows of the planned keys.

    Recomputed from ``results.jsonl``, it equals the summary of the run:

    >>> import tempfile
    >>> from genmetrics.data.results import read_results
    >>> from genmetrics.leaderboard import build_plan, load_config, run_leaderboard
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     result = run_leaderboard(toy_leaderboard(d), Path(d) / "out", base_dir=d, plots=False)
    ...     again = summarize(build_plan(load_config(toy_leaderboard(d), base_dir=d)), read_results(result.results))
    >>> again == result.summary, again["generators"]
    (True, ['copy', 'noisy'])
    """
    from genmetrics.functional.bootstrap import bootstrap_ci, paired_bootstrap

    run = plan.config.run
    alpha = 1.0 - run.ci
    planned = set(plan.keys())
    data: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
    for r in rows:
        k = (str(r.get("generator")), str(r.get("metric")), str(r.get("id")))
        if k in planned:
            data.setdefault((k[1], k[0]), {})[k[2]] = r
    gens = [g.name for g in plan.generators]

    columns: dict[str, dict[str, Any]] = {}
    for mp in plan.metrics:
        for col in mp.columns:
            res: dict[str, Any] = {}
            for g in gens:
                d = data.get((col.name, g), {})
                if mp.level == "set":
                    sr = d.get(SET_ID)
                    ci = sr.get("ci") if sr else None
                    res[g] = {
                        "mean": sr.get("score") if sr else None,
                        "low": ci[0] if ci else None,
                        "high": ci[1] if ci else None,
                        "n": sr.get("n") if sr else 0,
                        "n_real": sr.get("n_real") if sr else None,
                    }
                    for extra in ("value", "labels", "grid"):
                        if sr and extra in sr:
                            res[g][extra] = sr[extra]
                    continue
                expected = [s.id for s in mp.samples[g]]
                vals = [float(d[i]["score"]) for i in expected if i in d and _finite(d[i].get("score"))]
                entry: dict[str, Any] = {
                    "mean": None,
                    "low": None,
                    "high": None,
                    "std": None,
                    "n": len(vals),
                    "n_expected": len(expected),
                    "n_invalid": sum(1 for i in expected if i in d and not _finite(d[i].get("score"))),
                }
                if vals:
                    est, lo, hi = bootstrap_ci(vals, n_boot=run.n_boot, alpha=alpha, seed=run.seed)
                    entry.update(
                        mean=est, low=lo, high=hi, std=float(np.std(vals, ddof=1)) if len(vals) > 1 else 0.0
                    )
                res[g] = entry
            columns[col.name] = {
                "metric": mp.spec.name,
                "label": mp.spec.label,
                "aspect": col.aspect,
                "level": mp.level,
                "family": mp.card.family,
                "higher_is_better": mp.higher_is_better,
                "generators": res,
            }

    rank_by = run.rank_by or next((c for c, e in columns.items() if e["higher_is_better"] is not None), None)
    order = list(gens)
    if rank_by is not None:
        hib = columns[rank_by]["higher_is_better"]
        sign = -1.0 if hib in (True, None) else 1.0

        def key(g: str) -> tuple:
            m = columns[rank_by]["generators"][g]["mean"]
            return (m is None, sign * m if m is not None else 0.0, gens.index(g))

        order.sort(key=key)

    for name, entry in columns.items():
        if entry["level"] == "set":
            entry["paired"] = []
            continue
        d = {g: data.get((name, g), {}) for g in gens}
        pairs = []
        for i, a in enumerate(order):
            for b in order[i + 1 :]:
                shared = [
                    k
                    for k in d[a]
                    if k in d[b] and _finite(d[a][k].get("score")) and _finite(d[b][k].get("score"))
                ]
                if not shared:
                    continue
                shared.sort()
                pb = paired_bootstrap(
                    [d[a][k]["score"] for k in shared],
                    [d[b][k]["score"] for k in shared],
                    n_boot=run.n_boot,
                    alpha=alpha,
                    seed=run.seed,
                )
                pairs.append({"a": a, "b": b, **pb})
        entry["paired"] = pairs

    ranking = []
    for i, g in enumerate(order):
        item: dict[str, Any] = {"rank": i + 1, "generator": g, "images": len(plan.images[g])}
        for name, entry in columns.items():
            item[name] = entry["generators"][g]["mean"]
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
        "generators": order,
        "ranking": ranking,
        "columns": columns,
    }


# ------------------------------------------------------------------------------------------ formatting
def fmt(x: Any, *, signed: bool = False) -> str:
    """A number with 4 significant digits (``signed``: with its sign); "–" for a missing value.

    >>> fmt(1234.5678), fmt(0.5, signed=True), fmt(None)
    ('1235', '+0.5', '–')
    """
    if not _finite(x):
        return "–" if x is None else str(x)
    return f"{x:+.4g}" if signed else f"{x:.4g}"


def fmt_p(p: float, n_boot: int) -> str:
    """A bootstrap p-value; below the resolution ``1 / n_boot`` it is shown as a bound.

    >>> fmt_p(0.0321, 1000), fmt_p(0.0, 1000)
    ('0.032', '<0.001')
    """
    return f"<{1 / n_boot:.2g}" if p < 1 / n_boot else f"{p:.3f}"


def cell(entry: dict[str, Any]) -> str:
    """A table cell: ``mean [low, high]``, the mean alone without an interval, "–" without a value.

    >>> cell({"mean": 20.0, "low": 19.5, "high": 20.5}), cell({"mean": 3.0}), cell({"mean": None})
    ('20 [19.5, 20.5]', '3', '–')
    """
    if entry["mean"] is None:
        return "–"
    if entry.get("low") is None:
        return fmt(entry["mean"])
    return f"{fmt(entry['mean'])} [{fmt(entry['low'])}, {fmt(entry['high'])}]"


def _header(name: str, entry: dict[str, Any]) -> str:
    arrow = ARROW[entry["higher_is_better"]]
    return f"{name} {arrow}".strip() + (" (set)" if entry["level"] == "set" else "")


def _pairs_to_show(entry: dict[str, Any], order: list[str]) -> list[dict[str, Any]]:
    pairs = entry["paired"]
    if len(pairs) <= MAX_PAIRS_MD:
        return pairs
    nxt = {a: b for a, b in zip(order, order[1:])}
    return [p for p in pairs if nxt.get(p["a"]) == p["b"]]


def _significant(p: dict[str, Any]) -> bool:
    return p["low"] > 0 or p["high"] < 0


def to_markdown(summary: dict[str, Any], plots: list[tuple[str, str]]) -> str:
    """``leaderboard.md``: the ranking table (mean [CI] per column), paired comparisons and plots.

    >>> import tempfile
    >>> from genmetrics.leaderboard import run_leaderboard
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     summary = run_leaderboard(toy_leaderboard(d), Path(d) / "out", base_dir=d, plots=False).summary
    >>> print("\\n".join(to_markdown(summary, []).splitlines()[4:7]))
    | rank | generator | images | psnr ↑ |
    |---:|---|---:|---:|
    | 1 | copy | 3 | 100 [100, 100] |
    """
    cols = summary["columns"]
    order = summary["generators"]
    level = round(summary["ci"] * 100, 4)
    level_s = f"{level:g}%"
    lines = [f"# {summary['title']}", ""]
    rb = summary["rank_by"]
    direction = {True: "higher is better", False: "lower is better", None: "no direction"}[
        summary["higher_is_better"]
    ]
    lines.append(
        f"{len(order)} generators ranked best first by **{rb}** ({direction}). "
        f"Cells: mean over images [{level_s} bootstrap CI, {summary['n_boot']} resamples, seed {summary['seed']}]"
        + (
            "; `(set)` columns: one value per generator against the real set."
            if any(e["level"] == "set" for e in cols.values())
            else "."
        )
    )
    lines.append("")
    head = ["rank", "generator", "images"] + [_header(n, e) for n, e in cols.items()]
    lines.append("| " + " | ".join(head) + " |")
    lines.append("|" + "|".join(["---:", "---", "---:"] + ["---:"] * len(cols)) + "|")
    for item in summary["ranking"]:
        g = item["generator"]
        row = [str(item["rank"]), g, str(item["images"])] + [cell(e["generators"][g]) for e in cols.values()]
        lines.append("| " + " | ".join(row) + " |")
    incomplete = [
        (n, g, e["generators"][g])
        for n, e in cols.items()
        if e["level"] == "sample"
        for g in order
        if e["generators"][g]["n"] < e["generators"][g]["n_expected"]
    ]
    if incomplete:
        lines += [
            "",
            "Incomplete: "
            + "; ".join(f"{n} / {g}: {v['n']} of {v['n_expected']} images scored" for n, g, v in incomplete),
        ]
    sample_cols = {n: e for n, e in cols.items() if e["level"] == "sample" and e["paired"]}
    if sample_cols:
        lines += [
            "",
            "## Paired comparisons",
            "",
            f"Mean difference A − B over the images both generators have, with a {level_s} paired-bootstrap "
            "CI and two-sided p-value; `*` marks intervals that exclude 0.",
        ]
        for n, e in sample_cols.items():
            shown = _pairs_to_show(e, order)
            lines += [
                "",
                f"### {_header(n, e)}",
                "",
                "| A | B | A − B | CI | p | n |",
                "|---|---|---:|---:|---:|---:|",
            ]
            for p in shown:
                star = " *" if _significant(p) else ""
                lines.append(
                    f"| {p['a']} | {p['b']} | {fmt(p['diff'], signed=True)}{star} | "
                    f"[{fmt(p['low'], signed=True)}, {fmt(p['high'], signed=True)}] | "
                    f"{fmt_p(p['p_value'], summary['n_boot'])} | {p['n']} |"
                )
            if len(shown) < len(e["paired"]):
                lines.append(
                    f"\n(neighbours in the ranking only; all {len(e['paired'])} pairs are in paired.csv)"
                )
    if plots:
        lines += ["", "## Plots", ""]
        lines += [f"![{t}]({p})" for t, p in plots]
    lines += [
        "",
        "Files: `results.jsonl` (one row per generator, metric and image), `summary.json`, "
        "`leaderboard.csv`, `paired.csv`, `leaderboard.html`, `manifest.json`.",
        "",
    ]
    return "\n".join(lines)


def _csv(rows: list[dict[str, Any]], columns: list[str], counts: list[str]) -> str:
    """A CSV table via pandas: numbers at full precision, missing values empty, count columns as integers."""
    import pandas as pd

    df = pd.DataFrame(rows, columns=columns)
    for c in counts:
        df[c] = df[c].astype("Int64")
    return df.to_csv(index=False, lineterminator="\n")


def to_csv(summary: dict[str, Any]) -> str:
    """``leaderboard.csv``: one row per generator (best first); mean, low, high and n of every column.

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
    rows = []
    for item in summary["ranking"]:
        g = item["generator"]
        row = {"rank": item["rank"], "generator": g, "images": item["images"]}
        for n, e in cols.items():
            v = e["generators"][g]
            row.update(
                {n: v["mean"], f"{n}_low": v.get("low"), f"{n}_high": v.get("high"), f"{n}_n": v.get("n")}
            )
        rows.append(row)
    return _csv(rows, head, ["rank", "images"] + [f"{n}_n" for n in cols])


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


_CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:2rem auto;max-width:1100px;
padding:0 1rem;color:#222}table{border-collapse:collapse;margin:1rem 0}th,td{border:1px solid #ccc;
padding:.3rem .6rem;text-align:right}th{background:#f3f3f3}td.l,th.l{text-align:left}table.lb tr:nth-child(2) td{font-weight:600}
.sig{color:#0a6}.note{color:#555;font-size:.9rem}img{max-width:100%;border:1px solid #eee;margin:.5rem 0}"""


def to_html(summary: dict[str, Any], plots: list[tuple[str, Path]]) -> str:
    """``leaderboard.html``: the Markdown report's content as one self-contained HTML page.

    >>> import tempfile
    >>> from genmetrics.leaderboard import run_leaderboard
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     summary = run_leaderboard(toy_leaderboard(d), Path(d) / "out", base_dir=d, plots=False).summary
    >>> page = to_html(summary, [])
    >>> page.startswith("<!DOCTYPE html>"), "<title>Leaderboard</title>" in page
    (True, True)
    """
    e = html.escape
    cols = summary["columns"]
    order = summary["generators"]
    level_s = f"{round(summary['ci'] * 100, 4):g}%"
    out = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8">',
        f"<title>{e(summary['title'])}</title>",
        f"<style>{_CSS}</style></head><body>",
        f"<h1>{e(summary['title'])}</h1>",
    ]
    direction = {True: "higher is better", False: "lower is better", None: "no direction"}[
        summary["higher_is_better"]
    ]
    out.append(
        f'<p class="note">Ranked best first by <b>{e(str(summary["rank_by"]))}</b> ({direction}). Cells: mean '
        f"over images [{level_s} bootstrap CI, {summary['n_boot']} resamples, seed {summary['seed']}]; (set) "
        "columns: one value per generator against the real set.</p>"
    )
    out.append(
        '<table class="lb"><tr><th>rank</th><th class="l">generator</th><th>images</th>'
        + "".join(f"<th>{e(_header(n, c))}</th>" for n, c in cols.items())
        + "</tr>"
    )
    for item in summary["ranking"]:
        g = item["generator"]
        out.append(
            f'<tr><td>{item["rank"]}</td><td class="l">{e(g)}</td><td>{item["images"]}</td>'
            + "".join(f"<td>{e(cell(c['generators'][g]))}</td>" for c in cols.values())
            + "</tr>"
        )
    out.append("</table>")
    sample_cols = {n: c for n, c in cols.items() if c["level"] == "sample" and c["paired"]}
    if sample_cols:
        out.append(
            f'<h2>Paired comparisons</h2><p class="note">Mean difference A − B over shared images, {level_s} '
            "paired-bootstrap CI, two-sided p-value; green: the interval excludes 0.</p>"
        )
        for n, c in sample_cols.items():
            out.append(
                f'<h3>{e(_header(n, c))}</h3><table><tr><th class="l">A</th><th class="l">B</th>'
                "<th>A − B</th><th>CI</th><th>p</th><th>n</th></tr>"
            )
            for p in c["paired"]:
                cls = ' class="sig"' if _significant(p) else ""
                out.append(
                    f'<tr><td class="l">{e(p["a"])}</td><td class="l">{e(p["b"])}</td>'
                    f"<td{cls}>{fmt(p['diff'], signed=True)}</td>"
                    f"<td>[{fmt(p['low'], signed=True)}, {fmt(p['high'], signed=True)}]</td>"
                    f"<td>{e(fmt_p(p['p_value'], summary['n_boot']))}</td><td>{p['n']}</td></tr>"
                )
            out.append("</table>")
    if plots:
        out.append("<h2>Plots</h2>")
        for title, path in plots:
            data = base64.b64encode(Path(path).read_bytes()).decode("ascii")
            out.append(
                f'<figure><img alt="{e(title)}" src="data:image/png;base64,{data}">'
                f'<figcaption class="note">{e(title)}</figcaption></figure>'
            )
    out.append(
        f'<p class="note">{len(order)} generators; config {e(str(summary["config"]))}.</p></body></html>'
    )
    return "\n".join(out) + "\n"


def write_reports(out_dir: Path, plan: Plan, summary: dict[str, Any], *, plots: bool = True) -> list[Path]:
    """Write summary.json, the reports and (optionally) the plots, each atomically; returns the paths.

    >>> import tempfile
    >>> from genmetrics.leaderboard import build_plan, load_config, run_leaderboard
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     summary = run_leaderboard(toy_leaderboard(d), Path(d) / "out", base_dir=d, plots=False).summary
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    ...     [p.name for p in write_reports(Path(d) / "again", plan, summary, plots=False)]
    ['summary.json', 'leaderboard.md', 'leaderboard.csv', 'paired.csv', 'leaderboard.html']
    """
    from genmetrics.data.results import atomic_write_json, atomic_write_text

    made: list[tuple[str, str]] = []
    if plots:
        from genmetrics.leaderboard.plots import make_plots

        made = make_plots(out_dir, summary)
    paths = [
        atomic_write_json(out_dir / "summary.json", summary),
        atomic_write_text(out_dir / "leaderboard.md", to_markdown(summary, made)),
        atomic_write_text(out_dir / "leaderboard.csv", to_csv(summary)),
        atomic_write_text(out_dir / "paired.csv", paired_csv(summary)),
        atomic_write_text(
            out_dir / "leaderboard.html", to_html(summary, [(t, out_dir / p) for t, p in made])
        ),
    ]
    return paths
