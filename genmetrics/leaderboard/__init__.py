"""Leaderboards: score many generators with any registered metrics, resumable, shardable, with reports.

>>> from genmetrics.leaderboard import run_leaderboard
>>> result = run_leaderboard("examples/quickstart/config.toml", out="runs/quickstart")  # doctest: +SKIP
>>> result.summary["generators"]  # best first  # doctest: +SKIP

See docs/leaderboard.md. Nothing heavy is imported here.
"""

from __future__ import annotations

from typing import Any

from genmetrics.leaderboard.config import LeaderboardConfig, load_config

__all__ = ["SET_ID", "LeaderboardConfig", "RunResult", "build_plan", "load_config", "run_leaderboard"]


def __getattr__(name: str) -> Any:
    if name in ("run_leaderboard", "RunResult"):
        from genmetrics.leaderboard import runner

        return getattr(runner, name)
    if name in ("build_plan", "SET_ID"):
        from genmetrics.leaderboard import plan

        return getattr(plan, name)
    raise AttributeError(f"module 'genmetrics.leaderboard' has no attribute {name!r}")
