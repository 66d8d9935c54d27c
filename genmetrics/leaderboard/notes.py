"""The notes a reader must see before the numbers, worded once for every output (stdout of ``score`` and
``leaderboard``, Markdown, HTML, CSV): scores from random backbones (a backbone provider), set-level values
from small sets, incomplete cells. Light: no torch, no pandas."""

from __future__ import annotations

from typing import Any

#: the opening words of the note every output of a run on random backbones carries
BANNER = "random backbones"
#: set-level values from fewer images per set than this get the note that their intervals are unreliable
SMALL_SET = 100
__all__ = ["BANNER", "SMALL_SET", "banner", "notes", "small_sets"]


def banner(provider: str) -> str:
    """The random-backbones note.

    >>> banner("genmetrics.testing:tiny_backbones")
    'random backbones (backbone provider genmetrics.testing:tiny_backbones): scores are not meaningful'
    """
    return f"{BANNER} (backbone provider {provider}): scores are not meaningful"


def small_sets(what: str) -> str:
    """The small-set note (the one ``genmetrics compare`` prints), about ``what``.

    >>> small_sets("sad").startswith("sad: fewer than 100 images per set")
    True
    """
    return (
        f"{what}: fewer than {SMALL_SET} images per set; the bootstrap interval of a KL divergence is unreliable "
        "there (resampling shrinks variances, which inflates KL) and the estimate can fall outside its "
        "interval. Use a few hundred images or more per set for intervals you can quote."
    )


def notes(summary: dict[str, Any]) -> list[str]:
    """What a reader must know before reading the numbers, one sentence each: a run on random backbones
    (a backbone provider), set-level values from small sets, and incomplete cells.

    >>> notes({"backbone_provider": "genmetrics.testing:tiny_backbones", "columns": {}})
    ['random backbones (backbone provider genmetrics.testing:tiny_backbones): scores are not meaningful']
    """
    out = []
    if summary.get("backbone_provider"):
        out.append(banner(summary["backbone_provider"]))
    cols = summary.get("columns", {})
    small = [
        n
        for n, e in cols.items()
        if e.get("level") == "set"
        and any(
            v.get("mean") is not None and min(v.get("n") or 0, v.get("n_real") or 0) < SMALL_SET
            for v in e["generators"].values()
        )
    ]
    if small:
        out.append(small_sets(", ".join(small)))
    incomplete = [
        f"{n} / {g}: {v['n']} of {v['n_expected']} images scored"
        for n, e in cols.items()
        if e.get("level") == "sample"
        for g, v in e["generators"].items()
        if "n_expected" in v and v["n"] < v["n_expected"]
    ]
    if incomplete:
        out.append("Incomplete: " + "; ".join(incomplete))
    return out
