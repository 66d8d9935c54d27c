"""Per-generator sample galleries: ``gallery/<generator>.html``, one self-contained page per generator
(thumbnails embedded as JPEG data URIs, a few lines of inline script, nothing fetched), linked from
``leaderboard.html``.

For every per-sample column the page shows the ``k`` best and ``k`` worst samples of that generator (in the
column's direction; for a column without a direction the highest and lowest), each with its candidate, its
reference and its condition (the prompt) when the metric has them, and the sample's score on every other
per-sample column. Every table sorts by a click on its header. Set-level columns show the generator's
value; for the RA-CLIPScore family the generator's per-attribute bars and R-SaD heatmaps (drawn by
:mod:`genmetrics.leaderboard.plots`) are embedded.

The data comes from the plan (which files a sample compares) and the results rows; every page is written
through the project's write rule (:func:`genmetrics.data.output.atomic.atomic_write_text`). Names, ids, captions
and paths are HTML-escaped and page names made from generator names are short, stable and distinct
(:mod:`genmetrics.data.text.escape`). The page uses the window's whole width.
"""

from __future__ import annotations

import base64
import io
import math
from collections.abc import Iterable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from genmetrics.core.registry import Granularity
from genmetrics.data.io.images import load_image
from genmetrics.data.output.atomic import atomic_write_text
from genmetrics.data.text.escape import html_text
from genmetrics.errors import InputError
from genmetrics.leaderboard.notes import notes
from genmetrics.leaderboard.numbers import fmt, fmt_ci, unit_suffix
from genmetrics.leaderboard.plan import Plan
from genmetrics.leaderboard.plots import figure, safe_name
from genmetrics.leaderboard.scores import ScoreTable

#: samples shown per end (best, worst) of each column
K = 4
#: the longest side of a thumbnail, in pixels
THUMB = 128
__all__ = ["K", "THUMB", "best_and_worst", "thumbnail", "write_galleries"]

CSS = """body{font-family:system-ui,-apple-system,Segoe UI,Roboto,sans-serif;margin:1.5rem 0;padding:0 1.5rem;
color:#222}table{border-collapse:collapse;margin:.5rem 0 1.5rem;width:100%}td,th{font-variant-numeric:tabular-nums}th,td{border:1px solid #ccc;
padding:.25rem .5rem;text-align:right;vertical-align:middle}th{background:#f3f3f3;cursor:pointer;user-select:none}
th.sorted-asc::after{content:" ▲"}th.sorted-desc::after{content:" ▼"}td.l,th.l{text-align:left}
td.best,td.worst{white-space:nowrap}td.best{background:#e3f4ea}td.worst{background:#fbe4e6}td.cond{max-width:22rem;text-align:left;font-size:.85rem}
.thumb{width:96px;height:96px;object-fit:contain;background:#fafafa;border:1px solid #eee;display:block}
.note{color:#555;font-size:.9rem}.banner{background:#fff3cd;border:1px solid #e0c36c;padding:.5rem .8rem}
img.plot{max-width:100%;border:1px solid #eee}"""

# Click a header to sort its table by that column (numbers by data-v, text otherwise); a second click
# reverses. Plain DOM calls, no library.
SCRIPT = """document.querySelectorAll("table.sortable").forEach(function (t) {
  t.querySelectorAll("th").forEach(function (th, i) {
    th.addEventListener("click", function () {
      var desc = th.classList.contains("sorted-asc");
      t.querySelectorAll("th").forEach(function (h) { h.classList.remove("sorted-asc", "sorted-desc"); });
      th.classList.add(desc ? "sorted-desc" : "sorted-asc");
      var body = t.tBodies[0], rows = Array.prototype.slice.call(body.rows);
      rows.sort(function (a, b) {
        var x = a.cells[i].getAttribute("data-v"), y = b.cells[i].getAttribute("data-v");
        var nx = parseFloat(x), ny = parseFloat(y), c;
        if (!isNaN(nx) && !isNaN(ny)) { c = nx - ny; } else { c = String(x).localeCompare(String(y)); }
        return desc ? -c : c;
      });
      rows.forEach(function (r) { body.appendChild(r); });
    });
  });
});"""


def _finite(x: Any) -> bool:
    return isinstance(x, (int, float)) and not isinstance(x, bool) and math.isfinite(x)


def best_and_worst(
    scores: dict[str, float], higher_is_better: bool | None, k: int = K
) -> tuple[list[str], list[str]]:
    """The ids of the ``k`` best and the ``k`` worst scores (best first, worst first; ties by id), in the
    direction ``higher_is_better`` (``None``: highest count as best). With fewer than ``2 k`` scores the two
    lists share no id: the worst are taken from what the best left.

    >>> best_and_worst({"a": 3.0, "b": 1.0, "c": 2.0, "d": 5.0}, True, k=1)
    (['d'], ['b'])
    >>> best_and_worst({"a": 3.0, "b": 1.0, "c": 2.0}, False, k=2)
    (['b', 'c'], ['a'])
    """
    sign = -1.0 if higher_is_better in (True, None) else 1.0
    ranked = sorted(scores, key=lambda i: (sign * scores[i], i))
    best = ranked[:k]
    rest = ranked[len(best) :]
    worst = list(reversed(rest))[:k]
    return best, worst


def thumbnail(path: Path, size: int = THUMB) -> str | None:
    """A JPEG thumbnail (longest side ``size``) of an image file as a data URI; ``None`` when the file cannot
    be read as an image (the gallery then shows its name only).

    >>> import tempfile
    >>> from PIL import Image
    >>> with tempfile.TemporaryDirectory() as d:
    ...     Image.new("RGB", (300, 150), "red").save(f"{d}/a.png")
    ...     uri = thumbnail(Path(d) / "a.png")
    ...     im = Image.open(io.BytesIO(base64.b64decode(uri.split(",", 1)[1])))
    ...     missing = thumbnail(Path(d) / "none.png")
    >>> uri.startswith("data:image/jpeg;base64,"), im.size, missing
    (True, (128, 64), None)
    """
    try:
        im = load_image(path)
    except (InputError, OSError, ValueError):
        return None
    im.thumbnail((size, size))
    buf = io.BytesIO()
    im.save(buf, format="JPEG", quality=85)
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


class _Thumbs:
    """Thumbnails made once per file for all the pages of a run."""

    def __init__(self) -> None:
        self.cache: dict[Path, str | None] = {}

    def img(self, path: Path | None, role: str) -> str:
        if path is None:
            return "–"
        if path not in self.cache:
            self.cache[path] = thumbnail(path)
        uri, name = self.cache[path], html_text(path.name)
        if uri is None:
            return f'<span class="note">{name}</span>'
        return f'<img class="thumb" alt="{role} {name}" title="{name}" src="{uri}">'


def _sample_columns(plan: Plan) -> list[tuple[str, Any]]:
    """``(column name, metric plan)`` of every per-sample column, in config order."""
    return [(c.name, mp) for mp in plan.metrics if mp.level is not Granularity.SET for c in mp.columns]


def _top(table: ScoreTable, name: str, g: str, hib: bool | None, k: int) -> tuple[list[str], list[str], int]:
    """:func:`best_and_worst` of column ``name`` for ``g`` from the table's arrays (``2 k`` ids sorted, never a
    dict of every score), and how many finite scores there are."""
    ids, values = table.finite(name, g)
    sign = -1.0 if hib in (True, None) else 1.0
    # ties by id: rank the ids once (sorted order), then sort by (sign * score, id rank)
    rank = np.empty(len(ids), dtype=np.int64)
    rank[np.argsort(np.array(ids, dtype=object), kind="stable")] = np.arange(len(ids))
    ranked = np.lexsort((rank, sign * values))
    best = [ids[i] for i in ranked[:k]]
    rest = ranked[len(best) :]
    worst = [ids[i] for i in rest[::-1][:k]]
    return best, worst, len(ids)


def _section(
    name: str,
    mp: Any,
    g: str,
    table: ScoreTable,
    columns: list[str],
    summary: dict[str, Any],
    thumbs: _Thumbs,
) -> str:
    e = html_text
    entry = summary["columns"][name]
    hib = entry["higher_is_better"]
    arrow = {True: " ↑", False: " ↓", None: ""}[hib]
    best, worst, n = _top(table, name, g, hib, K)
    if not n:
        return f'<h2 id="{e(safe_name(name))}">{e(name)}{arrow}</h2><p class="note">no finite scores.</p>'
    samples = {s.id: s for s in mp.samples.get(g, [])}
    refs = any(s.reference is not None for s in samples.values())
    conds = any(s.condition for s in samples.values())
    others = [c for c in columns if c != name]
    units = {c: unit_suffix(summary["columns"][c]) for c in [name, *others]}
    head = ["shown", "id", "candidate"] + (["reference"] if refs else []) + (["condition"] if conds else [])
    head += [f"{name}{units[name]}{arrow}"] + [f"{c}{units[c]}" for c in others]
    out = [
        f'<h2 id="{e(safe_name(name))}">{e(name)}{arrow}</h2>',
        f'<p class="note">The {len(best)} best and {len(worst)} worst of {n} samples '
        f"({'higher' if hib in (True, None) else 'lower'} is better{'' if hib is not None else ': no direction, highest first'}); "
        "click a header to sort.</p>",
        '<table class="sortable"><thead><tr>'
        + "".join(f'<th class="{"l" if h in ("shown", "id", "condition") else ""}">{e(h)}</th>' for h in head)
        + "</tr></thead><tbody>",
    ]
    for kind, ids in (("best", best), ("worst", worst)):
        for rank, i in enumerate(ids, 1):
            s = samples.get(i)
            ref = s.reference if s is not None else None
            ref_path = ref[0] if isinstance(ref, list) and ref else ref if isinstance(ref, Path) else None
            cells = [
                f'<td class="l {kind}" data-v="{kind} {rank:03d}">{kind} {rank}</td>',
                f'<td class="l" data-v="{e(i)}">{e(i)}</td>',
                f"<td>{thumbs.img(s.candidate if s is not None else None, 'generated')}</td>",
            ]
            if refs:
                more = (
                    f'<br><span class="note">+{len(ref) - 1} more</span>'
                    if isinstance(ref, list) and len(ref) > 1
                    else ""
                )
                cells.append(f"<td>{thumbs.img(ref_path, 'reference')}{more}</td>")
            if conds:
                cond = s.condition if s is not None and s.condition else ""
                cells.append(f'<td class="cond" data-v="{e(cond)}">{e(cond)}</td>')
            for c in [name, *others]:
                v = table.value(c, g, i)
                cells.append(f'<td data-v="{v if v is not None else ""}">{fmt(v)}</td>')
            out.append("<tr>" + "".join(cells) + "</tr>")
    out.append("</tbody></table>")
    return "\n".join(out)


def _set_section(name: str, entry: dict[str, Any], g: str, plots: list[tuple[str, Path]]) -> str:
    e = html_text
    v = entry["generators"][g]
    arrow = {True: " ↑", False: " ↓", None: ""}[entry["higher_is_better"]]
    u = unit_suffix(entry)
    if v.get("low") is not None and _finite(v.get("mean")):
        est, lo, hi = fmt_ci(v.get("mean"), v.get("low"), v.get("high"))
        value = f"<b>{est}</b> [{lo}, {hi}]{e(u)}"
    else:
        value = f"<b>{fmt(v.get('mean'))}</b>{e(u)}"
    out = [
        f'<h2 id="{e(safe_name(name))}">{e(name)}{e(u)}{arrow} (set)</h2>',
        f"<p>{e(g)} against the real set: {value} "
        f'<span class="note">({v.get("n") or 0} generated, {v.get("n_real") or 0} real images)</span></p>',
    ]
    if entry.get("family") == "raclip":  # per-attribute bars (every generator) and this generator's heatmaps
        out += [
            figure(t, Path(f), img_class="plot")
            for t, f in plots
            if t in (f"{name} per attribute", f"{name} map, {g}") and Path(f).is_file()
        ]
    return "\n".join(out)


def page(
    g: str,
    plan: Plan,
    summary: dict[str, Any],
    rows: ScoreTable | Iterable[dict[str, Any]],
    plots: list[tuple[str, Path]],
    thumbs: _Thumbs | None = None,
) -> str:
    """The gallery page of generator ``g`` (HTML text)."""
    e = html_text
    thumbs = thumbs or _Thumbs()
    table = rows if isinstance(rows, ScoreTable) else ScoreTable.from_rows(plan, rows)
    sample_cols = _sample_columns(plan)
    names = [n for n, _ in sample_cols]
    set_cols = [n for n, en in summary["columns"].items() if en["level"] == "set"]
    title = f"{summary['title']}: {g}"
    rank = next((it["rank"] for it in summary["ranking"] if it["generator"] == g), None)
    out = [
        "<!DOCTYPE html>",
        '<html><head><meta charset="utf-8">',
        f"<title>{e(title)}</title>",
        f"<style>{CSS}</style></head><body>",
        f"<h1>{e(title)}</h1>",
        f'<p class="note"><a href="../leaderboard.html">← leaderboard</a> · rank {rank} of '
        f"{len(summary['generators'])} by {e(str(summary['rank_by']))} · sections: "
        + ", ".join(f'<a href="#{e(safe_name(n))}">{e(n)}</a>' for n in [*names, *set_cols])
        + "</p>",
    ]
    out += [f'<p class="banner">{e(n)}</p>' for n in notes(summary) if n.startswith("random backbones")]
    for name, mp in sample_cols:
        out.append(_section(name, mp, g, table, names, summary, thumbs))
    for name in set_cols:
        out.append(_set_section(name, summary["columns"][name], g, plots))
    out.append(f"<script>{SCRIPT}</script></body></html>")
    return "\n".join(out) + "\n"


def write_galleries(
    out_dir: Path,
    plan: Plan,
    summary: dict[str, Any],
    rows: ScoreTable | Iterable[dict[str, Any]],
    plots: Sequence[tuple[str, Path]] = (),
) -> list[tuple[str, str]]:
    """Write ``gallery/<generator>.html`` for every generator under ``out_dir`` (the write rule); returns
    ``(generator, relative href)`` pairs for the leaderboard's links.

    >>> import tempfile
    >>> from genmetrics.data.output.rows import read_results
    >>> from genmetrics.leaderboard import build_plan, load_config, run_leaderboard
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     res = run_leaderboard(toy_leaderboard(d), Path(d) / "out", base_dir=d, plots=False)
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    ...     links = write_galleries(Path(d) / "out", plan, res.summary, read_results(res.results))
    ...     text = (Path(d) / "out" / links[0][1]).read_text()
    >>> links, text.count('class="thumb"')
    ([('copy', 'gallery/copy.html'), ('noisy', 'gallery/noisy.html')], 6)
    """
    thumbs = _Thumbs()
    table = rows if isinstance(rows, ScoreTable) else ScoreTable.from_rows(plan, rows)
    made, used = [], set()
    for g in summary["generators"]:
        stem, k = safe_name(g), 1
        # distinct names may sanitise to one file name, or to names that differ in case only (one file on a
        # case-insensitive file system: macOS, Windows)
        while stem.casefold() in used:
            k += 1
            stem = f"{safe_name(g)}-{k}"
        used.add(stem.casefold())
        path = out_dir / "gallery" / f"{stem}.html"
        atomic_write_text(path, page(g, plan, summary, table, list(plots), thumbs), root=out_dir)
        made.append((g, f"gallery/{stem}.html"))
    return made
