"""Generator rankings from scored pairs: mean score per generator, the win-rate matrix, and
Bradley-Terry ratings with bootstrap confidence intervals.

Works with any scores (MIE or any registered metric) and with human preferences: each pair names the two
generators and either gives both candidates' scores (the metric's verdict is ``score_a > score_b``) or
an ``outcome`` (1 = a won, 0 = b won, 0.5 = tie).
"""

from __future__ import annotations

import math
import warnings
from collections.abc import Sequence
from typing import Any

import numpy as np
from matplotlib.backends.backend_agg import FigureCanvasAgg
from matplotlib.figure import Figure

from genmetrics.core.options import choice, integer, number
from genmetrics.data.output.atomic import atomic_output
from genmetrics.data.text.escape import md_text, mpl_text
from genmetrics.errors import InputError
from genmetrics.functional.bootstrap import MAX_N_BOOT, bootstrap_ci
from genmetrics.functional.ranking import (
    bradley_terry,
    bradley_terry_batch,
    win_counts,
    win_rate_interval,
    win_rate_matrix,
)

ELO_SCALE = 400.0 / math.log(10.0)


def rank_generators(
    generators_a: Sequence[str],
    generators_b: Sequence[str],
    scores_a: Sequence[float] | None = None,
    scores_b: Sequence[float] | None = None,
    *,
    outcome: Sequence[float] | None = None,
    n_boot: int = 1000,
    alpha: float = 0.05,
    prior: float = 0.5,
    seed: int = 0,
    on_error: str = "stop",
) -> dict[str, Any]:
    """Rank generators from pairwise comparisons.

    Args:
        generators_a, generators_b: the generator of each pair's two candidates.
        scores_a, scores_b: the candidates' scores (higher = better); give these or ``outcome``.
        outcome: per pair, 1 when a won, 0 when b won, 0.5 for a tie (e.g. human preferences). When not
            given it is derived from the scores (ties -> 0.5).
        n_boot: bootstrap resamples of the pairs for the confidence intervals, in ``[1, 100000]``.
        prior: Bradley-Terry regulariser (virtual wins per direction per pair of generators; see
            :func:`genmetrics.functional.ranking.bradley_terry`).
        on_error: a score that is not finite (NaN, inf) is never ranked: ``"stop"`` refuses it naming the
            pair; ``"skip"`` leaves such pairs out, warns, and lists them in ``skipped_pairs``.

    Returns a dict: ``generators`` (ranking order, best first), ``mean_score`` (per generator ``mean``,
    ``low``, ``high``, ``n``; only with scores), ``win_rate`` (``generators``, ``matrix`` R[i][j] = share of
    i's comparisons with j that i won, None where they never met, ``low`` / ``high`` its Wilson score
    interval given the games played, a tie half a win, ``games``), ``bradley_terry`` (per
    generator ``theta``, ``low``, ``high``, ``elo`` = 1000 + 400/ln10 * theta, ``elo_low``, ``elo_high``),
    and ``n_pairs``.

    ``gen_a`` beats ``gen_b`` three times, ``gen_b`` beats ``gen_c`` once (scores decide each pair):

    >>> res = rank_generators(["gen_a", "gen_a", "gen_a", "gen_b"], ["gen_b", "gen_b", "gen_b", "gen_c"],
    ...                       [0.9, 0.8, 0.7, 0.6], [0.1, 0.2, 0.3, 0.2], n_boot=100)
    >>> res["generators"], res["win_rate"]["matrix"][0], res["n_pairs"]
    (['gen_a', 'gen_b', 'gen_c'], [None, 1.0, None], 4)
    >>> res["bradley_terry"]["gen_a"]["elo"] > res["bradley_terry"]["gen_b"]["elo"] > res["bradley_terry"]["gen_c"]["elo"]
    True
    """
    ga, gb = [str(g) for g in generators_a], [str(g) for g in generators_b]
    n = len(ga)
    if n == 0:
        raise InputError("rank_generators: no pairs given")
    if len(gb) != n:
        raise InputError(f"rank_generators: {len(ga)} generators_a but {len(gb)} generators_b")

    choice("on_error", on_error, ("stop", "skip"), owner="rank_generators")
    n_boot = integer("n_boot", n_boot, lo=1, hi=MAX_N_BOOT, owner="rank_generators")  # InputError
    prior = number("prior", prior, lo=0.0, owner="rank_generators")
    alpha = number("alpha", alpha, lo=0.0, hi=1.0, lo_open=True, hi_open=True, owner="rank_generators")
    has_scores = scores_a is not None and scores_b is not None
    skipped: list[int] = []
    if has_scores:
        sa, sb = np.asarray(scores_a, dtype=np.float64), np.asarray(scores_b, dtype=np.float64)
        if sa.shape != (n,) or sb.shape != (n,):
            raise InputError(f"rank_generators: expected {n} scores per side, got {sa.shape} and {sb.shape}")
        bad = np.flatnonzero(~(np.isfinite(sa) & np.isfinite(sb)))
        if bad.size and on_error == "stop":
            i = int(bad[0])
            raise InputError(
                f"rank_generators: {bad.size} pair(s) have a score that is not finite (first: pair {i}, "
                f"{ga[i]} {sa[i]} vs {gb[i]} {sb[i]}); such scores are never ranked: fix them, or pass "
                "on_error='skip' (--on-error skip) to leave those pairs out"
            )
        if bad.size:
            skipped = [int(i) for i in bad]
            warnings.warn(
                f"rank_generators: {bad.size} pair(s) with a score that is not finite were left out "
                f"(pairs {skipped[:5]}{'...' if bad.size > 5 else ''})",
                stacklevel=2,
            )
            keep = np.isfinite(sa) & np.isfinite(sb)
            sa, sb = sa[keep], sb[keep]
            ga = [g for g, k in zip(ga, keep) if k]
            gb = [g for g, k in zip(gb, keep) if k]
            if outcome is not None:
                outcome = [o for o, k in zip(outcome, keep) if k]
            n = len(ga)
            if n == 0:
                raise InputError(
                    "rank_generators: every pair has a score that is not finite; nothing to rank"
                )
    if outcome is None:
        if not has_scores:
            raise InputError("rank_generators: give scores_a and scores_b, or outcome")
        out = np.where(sa > sb, 1.0, np.where(sa < sb, 0.0, 0.5))
    else:
        out = np.asarray(outcome, dtype=np.float64)
        if out.shape != (n,) or not np.isfinite(out).all() or ((out < 0) | (out > 1)).any():
            raise InputError("rank_generators: outcome must hold one value in [0, 1] per pair")
    names = sorted(set(ga) | set(gb))
    pos = {g: i for i, g in enumerate(names)}
    ia = np.array([pos[g] for g in ga])
    ib = np.array([pos[g] for g in gb])
    same = ia == ib
    if same.any():  # a generator against itself says nothing about the ranking
        ia, ib, out = ia[~same], ib[~same], out[~same]
    k = len(names)
    if ia.size == 0:
        raise InputError("rank_generators: every pair compares a generator with itself; nothing to rank")

    theta = bradley_terry(ia, ib, out, k, prior=prior).numpy()
    rates = win_rate_matrix(ia, ib, out, k).numpy()
    wins = win_counts(ia, ib, out, k).numpy()
    games = wins + wins.T

    boots = np.empty((0, k))
    if ia.size > 1:
        rng = np.random.default_rng(seed)
        boots = np.empty((n_boot, k))
        if prior > 0:  # every resample's fit at once: its win counts from how often each pair was drawn
            onto = np.zeros((ia.size, k * k))  # pair -> its contribution to the flattened win counts
            np.add.at(onto, (np.arange(ia.size), ia * k + ib), out)
            np.add.at(onto, (np.arange(ia.size), ib * k + ia), 1.0 - out)
            chunk = max(1, int(2e7 // ia.size))  # bounds the [chunk, n_pairs] draws in memory
            for s in range(0, n_boot, chunk):
                c = min(chunk, n_boot - s)
                idx = rng.integers(0, ia.size, (c, ia.size))  # the same draws as one resample at a time
                counts = np.bincount((idx + ia.size * np.arange(c)[:, None]).ravel(), minlength=c * ia.size)
                w_b = (counts.reshape(c, ia.size).astype(np.float64) @ onto).reshape(c, k, k)
                boots[s : s + c] = bradley_terry_batch(w_b, prior=prior)
        else:  # no prior: a resample may have no maximum (bradley_terry says so)
            for b in range(n_boot):
                idx = rng.integers(0, ia.size, ia.size)
                boots[b] = bradley_terry(ia[idx], ib[idx], out[idx], k, prior=prior).numpy()
    lo, hi = np.quantile(boots, [alpha / 2, 1 - alpha / 2], axis=0) if len(boots) else (theta, theta)
    # the win rate's interval given the games each pair played (a percentile bootstrap of the pairs covered
    # 92% at nominal 95% with ~8 games a pair; docs/bootstrap.md)
    rate_lo, rate_hi = win_rate_interval(wins, games, alpha)

    bt = {}
    for i, g in enumerate(names):
        bt[g] = {
            "theta": float(theta[i]),
            "low": float(lo[i]),
            "high": float(hi[i]),
            "elo": 1000.0 + ELO_SCALE * float(theta[i]),
            "elo_low": 1000.0 + ELO_SCALE * float(lo[i]),
            "elo_high": 1000.0 + ELO_SCALE * float(hi[i]),
            "wins": float(wins[i].sum()),
            "games": float(games[i].sum()),
        }

    result: dict[str, Any] = {"n_pairs": int(n), "bradley_terry": bt}
    if skipped:
        result["skipped_pairs"] = skipped
    if has_scores:
        per: dict[str, list[float]] = {g: [] for g in names}
        for g, s in zip(ga, sa):
            per[g].append(float(s))
        for g, s in zip(gb, sb):
            per[g].append(float(s))
        ms = {}
        for g in names:
            vals = np.asarray(per[g])
            est, low, high = bootstrap_ci(vals, n_boot=n_boot, alpha=alpha, seed=seed)
            ms[g] = {"mean": est, "low": low, "high": high, "n": int(vals.size)}
        result["mean_score"] = ms
    order = sorted(names, key=lambda g: (-bt[g]["theta"], g))
    result["generators"] = order
    result["win_rate"] = {
        "generators": names,
        "matrix": [[None if math.isnan(v) else float(v) for v in row] for row in rates],
        "low": [[None if math.isnan(r) else float(v) for r, v in zip(*rows)] for rows in zip(rates, rate_lo)],
        "high": [
            [None if math.isnan(r) else float(v) for r, v in zip(*rows)] for rows in zip(rates, rate_hi)
        ],
        "games": [[float(v) for v in row] for row in games],
    }
    return result


def ranking_markdown(result: dict[str, Any], *, title: str = "Generator ranking") -> str:
    """A Markdown table (best first) plus the win-rate matrix; generator names shown as text
    (:func:`genmetrics.data.text.escape.md_text`).

    >>> res = rank_generators(["a", "a", "b"], ["b", "c", "c"], [0.9, 0.8, 0.7], [0.1, 0.2, 0.3], n_boot=50)
    >>> print("\\n".join(ranking_markdown(res).splitlines()[:3]))
    # Generator ranking
    <BLANKLINE>
    3 pairs.
    """
    lines = [f"# {md_text(title)}", "", f"{result['n_pairs']} pairs.", ""]
    has_mean = "mean_score" in result
    head = "| rank | generator | BT rating (Elo scale) | 95% CI | wins / games |" + (
        " mean score | 95% CI |" if has_mean else ""
    )
    lines += [head, "|" + "---|" * (head.count("|") - 1)]
    for r, g in enumerate(result["generators"], 1):
        bt = result["bradley_terry"][g]
        row = (
            f"| {r} | {md_text(g)} | {bt['elo']:.1f} | [{bt['elo_low']:.1f}, {bt['elo_high']:.1f}] | "
            f"{bt['wins']:g} / {bt['games']:g} |"
        )
        if has_mean:
            ms = result["mean_score"][g]
            row += f" {ms['mean']:.4f} | [{ms['low']:.4f}, {ms['high']:.4f}] |"
        lines.append(row)
    wr = result["win_rate"]
    names = wr["generators"]
    lines += [
        "",
        "Win rate of the row generator against the column generator:",
        "",
        "| | " + " | ".join(md_text(n) for n in names) + " |",
        "|---|" + "---|" * len(names),
    ]
    for g, row in zip(names, wr["matrix"]):
        lines.append(f"| {md_text(g)} | " + " | ".join("-" if v is None else f"{v:.3f}" for v in row) + " |")
    return "\n".join(lines) + "\n"


def ranking_plot(result: dict[str, Any], path: Any) -> None:
    """Bar chart of the Bradley-Terry ratings (Elo scale) with their confidence intervals (PNG).

    >>> import tempfile
    >>> from pathlib import Path
    >>> from PIL import Image
    >>> res = rank_generators(["a", "a", "b"], ["b", "c", "c"], [0.9, 0.8, 0.7], [0.1, 0.2, 0.3], n_boot=50)
    >>> with tempfile.TemporaryDirectory() as d:
    ...     ranking_plot(res, Path(d) / "ranking.png")
    ...     Image.open(Path(d) / "ranking.png").format
    'PNG'
    """
    names = result["generators"]
    bt = result["bradley_terry"]
    vals = [bt[g]["elo"] for g in names]
    err = [
        [bt[g]["elo"] - bt[g]["elo_low"] for g in names],
        [bt[g]["elo_high"] - bt[g]["elo"] for g in names],
    ]
    fig = Figure(
        figsize=(max(4.0, 0.8 * len(names) + 2), 3.5)
    )  # object API: no backend switch, no pyplot state
    FigureCanvasAgg(fig)
    ax = fig.add_subplot(1, 1, 1)
    ax.bar(range(len(names)), vals, yerr=err, capsize=3, color="#4C72B0")
    ax.set_xticks(range(len(names)), [mpl_text(n) for n in names], rotation=30, ha="right")
    ax.set_xlabel("generator")
    ax.set_ylabel("Bradley-Terry rating (Elo scale)")
    ax.axhline(1000.0, color="gray", lw=0.8)
    fig.tight_layout()
    with atomic_output(path) as tmp:  # the write rule (genmetrics/data/output/)
        fig.savefig(tmp, dpi=120)
