"""``genmetrics leaderboard`` against an unreachable hub: a metric built from its default weights, which no cache
holds, is named with its config key before torch is imported (tests/backbones/test_precheck.py runs it in a
fresh interpreter); everything the check cannot judge is left to the run, which names it as before."""

# ruff: noqa: F811 - `dead_hub` is a fixture imported from the offline-hub tests, named again as an argument

from __future__ import annotations

from pathlib import Path

import pytest

from genmetrics.cli.main import main
from genmetrics.errors import WeightsUnavailableError
from genmetrics.leaderboard.cli import _weights_first
from genmetrics.leaderboard.config import load_config
from tests.cli.test_offline_hub import dead_hub  # noqa: F401 - a fixture

DATA = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "data"


@pytest.fixture(autouse=True)
def empty_caches(monkeypatch, tmp_path):
    monkeypatch.setenv("GENMETRICS_HOME", str(tmp_path / "home"))
    monkeypatch.setattr("huggingface_hub.constants.HF_HUB_CACHE", str(tmp_path / "hf-cache"))


def _board(tmp_path: Path, metric: str) -> Path:
    cfg = tmp_path / "board.toml"
    cfg.write_text(
        f'[data]\nreferences = "{DATA / "refs"}"\n[[generators]]\nname = "blur"\nimages = "{DATA / "gen" / "blur"}"\n'
        f'[[metrics]]\nname = "psnr"\n[[metrics]]\n{metric}\n',
        encoding="utf-8",
    )
    return cfg


def test_default_weights_are_named_with_their_config_key(dead_hub, tmp_path):
    cfg = _board(tmp_path, 'name = "dino"')
    with pytest.raises(WeightsUnavailableError) as info:
        _weights_first(str(cfg), str(tmp_path / "out"))
    loaded = load_config(cfg)
    where = loaded.where(loaded.metrics[1].key)  # the prefix the run's plan gives (file:line: key)
    assert where.startswith(f"{cfg}:") and where.endswith(": metrics[1]")
    assert str(info.value).startswith(f"{where}: weights 'facebook/dinov2-base' are not available")


def test_weights_named_by_the_config_are_left_to_the_run(dead_hub, tmp_path):
    """``weights = "models/dino"`` is a folder next to the config (the run resolves it there); read from the
    current folder it would look like a hub id and be refused."""
    (tmp_path / "models" / "dino").mkdir(parents=True)
    _weights_first(str(_board(tmp_path, 'name = "dino"\nweights = "models/dino"')), str(tmp_path / "out"))


@pytest.mark.parametrize(
    "metric, out, fragment",
    [
        ('name = "dino"\nwieghts = "x"', "out", "unknown key 'wieghts'"),
        ('name = "dinno"', "out", "dino"),
        ('name = "dino"', None, "no output folder"),
    ],
    ids=["misspelt-option", "unknown-metric", "no-out"],
)
def test_what_the_run_names_first_stays_first(metric, out, fragment, dead_hub, tmp_path, capsys):
    argv = ["leaderboard", str(_board(tmp_path, metric))]
    rc = main([*argv, "--out", str(tmp_path / out)] if out else argv)
    err = capsys.readouterr().err
    assert rc == 2 and fragment in err and "not available" not in err, err
