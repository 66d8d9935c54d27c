"""Library plots use matplotlib's object API (Figure + FigureCanvasAgg): no module calls
``matplotlib.use`` or imports pyplot, and making a plot leaves the user's backend as it was."""

from __future__ import annotations

import ast
from pathlib import Path

import genmetrics

ROOT = Path(genmetrics.__file__).parent


def test_no_backend_switch_or_pyplot_in_library_code():
    bad = []
    for path in ROOT.rglob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, (ast.Import, ast.ImportFrom)):
                names = [a.name for a in node.names] + (
                    [node.module] if isinstance(node, ast.ImportFrom) else []
                )
                if any(n and "pyplot" in n for n in names):
                    bad.append(f"{path.relative_to(ROOT)}:{node.lineno} imports pyplot")
            if (
                isinstance(node, ast.Call)
                and isinstance(node.func, ast.Attribute)
                and node.func.attr == "use"
                and isinstance(node.func.value, ast.Name)
                and node.func.value.id in ("matplotlib", "mpl")
            ):
                bad.append(f"{path.relative_to(ROOT)}:{node.lineno} calls matplotlib.use")
    assert not bad, bad


def test_plots_keep_the_users_backend(tmp_path):
    import matplotlib

    import genmetrics.mie.ranking as mie_ranking
    from genmetrics.mie.evaluate import accuracy_plot

    ranking_plot = getattr(
        mie_ranking, "ranking_plot", None
    )  # (being moved by its owner at the time of writing)
    before = matplotlib.get_backend()
    matplotlib.use("svg")  # a user's choice that is not Agg
    try:
        bt = {g: {"elo": e, "elo_low": e - 30, "elo_high": e + 30} for g, e in (("a", 1040.0), ("b", 960.0))}
        if ranking_plot is not None:
            ranking_plot({"generators": ["a", "b"], "bradley_terry": bt}, tmp_path / "rank.png")
        acc = {s: {"value": 0.7, "low": 0.6, "high": 0.8} for s in ("overall", "seen")}
        accuracy_plot(
            {"metrics": {"m": {"accuracy": acc}}, "subsets": ["overall", "seen"]}, tmp_path / "acc.png"
        )
        assert matplotlib.get_backend() == "svg"
    finally:
        matplotlib.use(before)
    for name in ("rank.png", "acc.png") if ranking_plot is not None else ("acc.png",):
        assert (tmp_path / name).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
