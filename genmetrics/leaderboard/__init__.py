"""Leaderboards: score many generators with any registered metrics, resumable, shardable, with reports.

>>> from genmetrics.leaderboard import run_leaderboard
>>> result = run_leaderboard("examples/quickstart/config.toml", out="runs/quickstart")  # doctest: +SKIP
>>> result.summary["generators"]  # best first  # doctest: +SKIP

See docs/leaderboard.md. Nothing heavy is imported here (the runner and the planner load on first use).
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from genmetrics.core.registry import lazy_exports

if TYPE_CHECKING:
    from genmetrics.leaderboard.config import LeaderboardConfig, load_config

_LAZY = {
    # the config module loads yaml: not for commands that only read a leaderboard module's light parts
    "LeaderboardConfig": "genmetrics.leaderboard.config",
    "load_config": "genmetrics.leaderboard.config",
    "run_leaderboard": "genmetrics.leaderboard.runner",
    "RunResult": "genmetrics.leaderboard.runner",
    "build_plan": "genmetrics.leaderboard.plan",
    "SET_ID": "genmetrics.leaderboard.plan",
}
__all__ = ["SET_ID", "LeaderboardConfig", "RunResult", "build_plan", "load_config", "run_leaderboard"]
__getattr__, __dir__ = lazy_exports(__name__, _LAZY)
