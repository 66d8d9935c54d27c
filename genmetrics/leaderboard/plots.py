"""PNG plots of a leaderboard summary (matplotlib's Agg canvas; pyplot and its global state are not used).

* ``plots/<column>.png``: one dot per generator (ranking order) at its mean, with the interval as a whisker
  where there is one; the axis is scaled to the values (not from 0) and names the unit (from the metric's
  card: ``psnr`` in dB); the x axis names the generators; the HTML report lays these out in a grid;
* set-level columns whose value is a vector (SaD per attribute, PaD per attribute pair):
  ``plots/<column>_per_attribute.png``, grouped bars of the largest entries per generator;
* set-level columns whose value is a ``[P, C]`` map (R-SaD per patch and attribute):
  ``plots/<column>_<generator>_heatmap.png``, the patch grid of the attributes with the largest mean
  absolute value, signed colours (red = more present in the real set, blue = more in the generated set).

The data comes only from the results rows (``value``, ``labels``, ``grid``), never from a family's code.
Names and labels are drawn literally (:func:`genmetrics.data.text.escape.mpl_text`: no mathtext) and file
names come from :func:`genmetrics.data.text.escape.file_stem` (short, stable, distinct).
"""

from __future__ import annotations

import base64
import itertools
import math
from pathlib import Path
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from genmetrics.data.output.atomic import atomic_output
from genmetrics.data.output.write_rule import make_folder
from genmetrics.data.text.escape import file_stem, html_text, mpl_text

COLOR = "#4C72B0"
TOP_ATTRIBUTES = 20
TOP_MAPS = 4


def safe_name(name: str) -> str:
    """``name`` as a file-name part (:func:`genmetrics.data.text.escape.file_stem`).

    >>> safe_name("ssim / b=2"), safe_name("***")
    ('ssim_b_2', 'plot')
    """
    return file_stem(name)


#: the most characters of a name drawn on a tick or in a legend (longer ones end in "…")
MAX_TICK = 32


def _tick(name: str) -> str:
    """A name for a tick label or a legend entry: drawn literally, at most :data:`MAX_TICK` characters.

    >>> _tick("a$b"), len(_tick("g" * 240))
    ('a\\\\$b', 32)
    """
    name = str(name)
    return mpl_text(name if len(name) <= MAX_TICK else name[: MAX_TICK - 1] + "…")


def _figure(w: float, h: float) -> Any:
    fig = Figure(figsize=(w, h), layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _save(fig: Any, path: Path, root: Path | None) -> None:
    """Save a figure as PNG under the write rule (inside ``root``, never through a link, whole or not at all)."""
    with atomic_output(path, root=root) as tmp:
        fig.savefig(tmp, dpi=110, format="png")


def unit(name: str, entry: dict[str, Any] | None = None) -> str:
    """The unit of a column: the entry's ``unit`` (from its metric's card), else the card of the metric it
    names (or of the column name before any ``[aspect]``), else ``""``.

    >>> unit("psnr"), unit("psnr_y", {"metric": "psnr"}), unit("ssim"), unit("x", {"unit": "nats"})
    ('dB', 'dB', '', 'nats')
    """
    from genmetrics.core.registry import get_card

    if entry and entry.get("unit") is not None:
        return str(entry["unit"])
    for metric in ((entry or {}).get("metric"), name.split("[")[0]):
        try:
            if metric:
                return get_card(str(metric)).unit
        except (KeyError, ValueError):
            continue
    return ""


def _points(ax: Any, name: str, entry: dict[str, Any], order: list[str], ci: float) -> bool:
    """Draw one column on ``ax``: a dot per generator at its mean with the interval as a whisker (dots, not
    bars, so the axis is scaled to the values and their differences, never stretched down to 0)."""
    gens = [g for g in order if entry["generators"][g]["mean"] is not None]
    if not gens:
        return False
    vals = [entry["generators"][g] for g in gens]
    means = np.array([v["mean"] for v in vals], dtype=float)
    x = np.arange(len(gens))
    has_ci = all(v.get("low") is not None for v in vals)
    if has_ci:
        lows = np.array([v["low"] for v in vals], dtype=float)
        highs = np.array([v["high"] for v in vals], dtype=float)
        # the interval as computed; a biased set-level estimate may sit outside it, and the dot then shows so
        ax.vlines(x, lows, highs, color="#222", lw=1.4)
        ax.hlines(np.r_[lows, highs], np.r_[x, x] - 0.12, np.r_[x, x] + 0.12, color="#222", lw=1.4)
    ax.plot(x, means, "o", color=COLOR, ms=7, zorder=3)
    ax.set_xlim(-0.6, len(gens) - 0.4)
    long = max(len(g) for g in gens) > 8
    ax.set_xticks(x, [_tick(g) for g in gens], rotation=30 if long else 0, ha="right" if long else "center")
    ax.set_xlabel("generator")
    lo, hi = ax.get_ylim()
    if hi - lo < 1e-12 * max(1.0, abs(hi)):  # all equal: a visible band around the value
        ax.set_ylim(lo - 0.5 * max(abs(lo), 1.0) * 1e-3, hi + 0.5 * max(abs(hi), 1.0) * 1e-3)
    u = unit(name, entry)
    est = "value vs real set" if entry.get("level") == "set" else "mean"  # a set-level value is no mean
    what = f"{est}, {ci * 100:g}% CI" if has_ci else est
    ax.set_ylabel(f"{what} ({u})" if u else what)
    arrow = {True: " ↑", False: " ↓", None: ""}[entry["higher_is_better"]]
    ax.set_title(mpl_text(f"{name}{arrow}"), fontsize="large")
    ax.grid(axis="y", alpha=0.3)
    return True


def bar_chart(
    name: str, entry: dict[str, Any], order: list[str], path: Path, ci: float, root: Path | None = None
) -> bool:
    """One column into ``path``: a dot per generator (mean) with its interval as a whisker, the axis scaled
    to the values (not from 0) and labelled with the unit; False when no generator has a value.

    >>> import tempfile
    >>> entry = {"higher_is_better": True, "generators": {"a": {"mean": 20.0, "low": 19.0, "high": 21.0},
    ...                                                   "b": {"mean": None}}}
    >>> with tempfile.TemporaryDirectory() as d:
    ...     bar_chart("psnr", entry, ["a", "b"], Path(d) / "psnr.png", 0.95), (Path(d) / "psnr.png").is_file()
    (True, True)
    """
    n = sum(entry["generators"][g]["mean"] is not None for g in order)
    if not n:
        return False
    longest = max(len(_tick(g)) for g in order if entry["generators"][g]["mean"] is not None)
    extra = 0.06 * longest if longest > 8 else 0.0  # rotated names reach left and down: room for them
    fig = _figure(max(3.4, 0.6 * n + 1.8) + extra, 3.0 + 0.6 * extra)
    _points(fig.add_subplot(), name, entry, order, ci)
    _save(fig, path, root)
    return True


def _labels_for(n: int, labels: list[str] | None, *, pairs: bool = False) -> list[str]:
    if labels and len(labels) == n and not pairs:
        return list(labels)
    if labels and n == len(labels) * (len(labels) - 1) // 2:
        return [f"{a} & {b}" for a, b in itertools.combinations(labels, 2)]
    return [str(i) for i in range(n)]


def _part(result: dict[str, Any], ndim: int, keys: tuple[str, ...]) -> tuple[np.ndarray | None, str | None]:
    """The ``ndim``-dimensional part of a set-level value and its key: the value itself (a list; key
    None) or, for a dict value, its first entry among ``keys`` (sad/pad/rsad return ``per_attribute``,
    ``per_pair``, ``map``)."""
    value = result.get("value")
    found = (
        [(None, value)]
        if isinstance(value, list)
        else [(k, value.get(k)) for k in keys]
        if isinstance(value, dict)
        else []
    )
    for k, v in found:
        if isinstance(v, list):
            try:
                a = np.asarray(v, dtype=float)
            except (TypeError, ValueError):
                continue
            if a.ndim == ndim and a.size:
                return a, k
    return None, None


def attribute_bars(
    name: str, entry: dict[str, Any], order: list[str], path: Path, root: Path | None = None
) -> bool:
    """Grouped bars of a set-level metric's per-attribute (or per-pair) values, one group per attribute;
    False when the results hold no such vector.

    >>> import tempfile
    >>> entry = {"generators": {g: {"value": {"per_attribute": v}, "labels": ["smiling", "hat"]}
    ...                         for g, v in (("a", [0.1, 0.4]), ("b", [0.2, 0.1]))}}
    >>> with tempfile.TemporaryDirectory() as d:
    ...     attribute_bars("sad", entry, ["a", "b"], Path(d) / "sad.png"), attribute_bars("psnr", {"generators": {
    ...         "a": {"value": 3.0}}}, ["a"], Path(d) / "none.png")
    (True, False)
    """
    parts = {g: _part(entry["generators"][g], 1, ("per_attribute", "per_pair")) for g in order}
    vecs = {g: v for g, (v, _) in parts.items() if v is not None}
    if not vecs:
        return False
    n = len(next(iter(vecs.values())))
    if any(len(v) != n for v in vecs.values()):
        return False
    pairs = any(k == "per_pair" for _, k in parts.values())
    labels = _labels_for(n, next((entry["generators"][g].get("labels") for g in vecs), None), pairs=pairs)
    stack = np.stack(list(vecs.values()))
    top = np.argsort(-np.abs(stack).max(0), kind="stable")[:TOP_ATTRIBUTES]
    fig = _figure(max(5.0, 0.45 * len(top) * max(1, len(vecs)) ** 0.5 + 2.5), 3.8)
    ax = fig.add_subplot()
    width = 0.8 / len(vecs)
    x = np.arange(len(top))
    for i, (g, v) in enumerate(vecs.items()):
        ax.bar(x + (i - (len(vecs) - 1) / 2) * width, v[top], width=width, label=_tick(g))
    ax.set_xticks(x, [_tick(labels[i]) for i in top], rotation=45, ha="right")
    ax.set_xlabel("attribute pair" if pairs else "attribute")
    ax.set_title(mpl_text(f"{name} per attribute{' pair' if pairs else ''} (largest {len(top)})"))
    u = unit(name, entry)
    ax.set_ylabel(f"value ({u})" if u else "value")
    ax.legend(fontsize="small")
    ax.grid(axis="y", alpha=0.3)
    _save(fig, path, root)
    return True


def heatmaps(name: str, generator: str, result: dict[str, Any], path: Path, root: Path | None = None) -> bool:
    """Signed maps (an R-SaD ``map`` [P,C] on its patch grid) of the strongest attributes; False when the
    result holds no square map.

    >>> import tempfile
    >>> result = {"value": {"map": [[0.1 * i, -0.05 * i] for i in range(16)]}, "labels": ["smiling", "hat"]}
    >>> with tempfile.TemporaryDirectory() as d:
    ...     heatmaps("rsad", "gen_a", result, Path(d) / "rsad.png"), (Path(d) / "rsad.png").is_file()
    (True, True)
    """
    m, _ = _part(result, 2, ("map",))
    if m is None:
        return False
    p, c = m.shape
    grid = result.get("grid")
    if not (isinstance(grid, list) and len(grid) == 2 and grid[0] * grid[1] == p):
        side = math.isqrt(p)
        if side * side != p:
            return False
        grid = [side, side]
    labels = _labels_for(c, result.get("labels"))
    top = np.argsort(-np.abs(m).mean(0), kind="stable")[:TOP_MAPS]
    vmax = float(np.abs(m[:, top]).max()) or 1.0
    fig = _figure(2.6 * len(top) + 0.8, 2.9)
    axes = fig.subplots(1, len(top), squeeze=False)[0]
    im = None
    for ax, j in zip(axes, top):
        im = ax.imshow(m[:, j].reshape(grid), cmap="RdBu_r", vmin=-vmax, vmax=vmax)
        ax.set_title(mpl_text(labels[j]), fontsize="small")
        ax.set_xticks([])
        ax.set_yticks([])
    bar = fig.colorbar(im, ax=list(axes), shrink=0.8)
    if unit(name):
        bar.set_label(unit(name), fontsize="small")
    fig.suptitle(
        mpl_text(f"{name}, {generator}: red = more in real, blue = more in generated"), fontsize="small"
    )
    _save(fig, path, root)
    return True


def make_plots(out_dir: Path, summary: dict[str, Any]) -> list[tuple[str, str]]:
    """Draw every plot of ``summary`` under ``out_dir/plots``; returns ``(title, relative path)`` pairs.

    >>> import tempfile
    >>> from genmetrics.leaderboard import run_leaderboard
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     summary = run_leaderboard(toy_leaderboard(d), Path(d) / "out", base_dir=d, plots=False).summary
    ...     make_plots(Path(d) / "out", summary)
    [('psnr', 'plots/psnr.png')]
    """
    plots = make_folder(out_dir / "plots", root=out_dir)
    made: list[tuple[str, str]] = []
    used: set[str] = set()

    def path(stem: str) -> Path:  # distinct column names may sanitise to one file name (or one but for case)
        name, k = stem, 1
        while name.casefold() in used:
            k += 1
            name = f"{stem}-{k}"
        used.add(name.casefold())
        return plots / f"{name}.png"

    order = summary["generators"]
    for name, entry in summary["columns"].items():
        f = path(safe_name(name))
        if bar_chart(name, entry, order, f, summary["ci"], root=out_dir):
            made.append((name, f"plots/{f.name}"))
        if entry["level"] != "set":
            continue
        f = path(f"{safe_name(name)}_per_attribute")
        if attribute_bars(name, entry, order, f, root=out_dir):
            made.append((f"{name} per attribute", f"plots/{f.name}"))
        for g in order:
            f = path(f"{safe_name(name)}_{safe_name(g)}_heatmap")
            if heatmaps(name, g, entry["generators"][g], f, root=out_dir):
                made.append((f"{name} map, {g}", f"plots/{f.name}"))
    return made


def data_uri(path: Path, mime: str = "image/png") -> str:
    """A file as a ``data:`` URI, so a page embeds it and fetches nothing.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     (Path(d) / "x.png").write_bytes(b"ab") and data_uri(Path(d) / "x.png")
    'data:image/png;base64,YWI='
    """
    return f"data:{mime};base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def figure(title: str, path: Path, css_class: str = "", img_class: str = "") -> str:
    """A PNG file as an embedded ``<figure>`` with ``title`` as its caption (escaped).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     (Path(d) / "x.png").write_bytes(b"ab") and figure("a<b", Path(d) / "x.png", "wide")
    '<figure class="wide"><img alt="a&lt;b" src="data:image/png;base64,YWI="><figcaption class="note">a&lt;b</figcaption></figure>'
    """
    e = html_text
    fc = f' class="{css_class}"' if css_class else ""
    ic = f' class="{img_class}"' if img_class else ""
    return (
        f'<figure{fc}><img{ic} alt="{e(title)}" src="{data_uri(path)}">'
        f'<figcaption class="note">{e(title)}</figcaption></figure>'
    )
