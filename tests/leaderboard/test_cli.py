"""genmetrics.leaderboard.cli: ``genmetrics leaderboard`` passes its flags to the runner and prints the
notes, the ranking of summary.json (best first, every column) and where the reports are.

Against an unreachable hub, a metric built from its default weights, which no cache holds, is named with its
config key before torch is imported (tests/backbones/test_precheck.py runs it in a fresh interpreter);
everything the check cannot judge is left to the run, which names it as before."""

# ruff: noqa: F811 - `dead_hub` is a fixture imported from the offline-hub tests, named again as an argument

from __future__ import annotations

import json
from pathlib import Path

import pytest
from click.testing import CliRunner
from lb_helpers import toml_config

from genmetrics.cli.main import main
from genmetrics.errors import WeightsUnavailableError
from genmetrics.leaderboard import cli as lb_cli
from genmetrics.leaderboard.cli import _weights_first
from genmetrics.leaderboard.config import load_config
from genmetrics.leaderboard.notes import notes
from genmetrics.mie.hints import no_heads_error
from tests.cli.test_offline_hub import dead_hub  # noqa: F401 - a fixture

PSNR_SSIM = '[[metrics]]\nname = "psnr"\n\n[[metrics]]\nname = "ssim"\n'


def _run(*args: str):
    return CliRunner().invoke(lb_cli.leaderboard_cmd, list(args), catch_exceptions=False)


def test_the_printed_ranking_is_the_summary(small_set, tmp_path):
    cfg = toml_config(small_set, PSNR_SSIM, extra='[run]\nn_boot = 50\ntitle = "Board"\n')
    out = tmp_path / "out"
    r = _run(str(cfg), "--out", str(out), "--no-plots", "--seed", "3")
    assert r.exit_code == 0, r.output
    s = json.loads((out / "summary.json").read_text())
    assert s["n_boot"] == 50 and not (out / "plots").exists()  # config and flags reached the run
    lines = r.output.splitlines()
    head = [f"note: {n}" for n in notes(s)] + [f"Board (best first by {s['rank_by']}):"]
    assert lines[: len(head)] == head
    rows = lines[len(head) : len(head) + len(s["ranking"])]
    for line, item in zip(rows, s["ranking"]):
        rank, gen, *vals = line.split()
        assert (rank, gen) == (f"{item['rank']}.", item["generator"])
        assert [v.split("=")[0] for v in vals] == list(s["columns"])
        for v, col in zip(vals, s["columns"]):
            assert float(v.split("=")[1]) == pytest.approx(item[col], rel=5e-4)  # four significant digits
    assert lines[-1].startswith(f"report: {out / 'leaderboard.md'}")
    assert len(lines) == len(head) + len(s["ranking"]) + 1


def test_a_missing_value_is_a_dash():
    assert lb_cli._short(None) == "–" and lb_cli._short(12.34567) == "12.35"


def test_on_error_takes_only_stop_or_skip(small_set, tmp_path):
    cfg = toml_config(small_set, PSNR_SSIM)
    r = CliRunner().invoke(
        lb_cli.leaderboard_cmd, [str(cfg), "--out", str(tmp_path / "o"), "--on-error", "retry"]
    )
    assert r.exit_code == 2
    assert "'retry' is not one of 'stop', 'skip'" in r.output and not (tmp_path / "o").exists()


DATA = Path(__file__).resolve().parents[2] / "examples" / "quickstart" / "data"


@pytest.fixture
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


def test_default_weights_are_named_with_their_config_key(empty_caches, dead_hub, tmp_path):
    cfg = _board(tmp_path, 'name = "dino"')
    with pytest.raises(WeightsUnavailableError) as info:
        _weights_first(str(cfg), str(tmp_path / "out"))
    loaded = load_config(cfg)
    where = loaded.where(loaded.metrics[1].key)  # the prefix the run's plan gives (file:line: key)
    assert where.startswith(f"{cfg}:") and where.endswith(": metrics[1]")
    assert str(info.value).startswith(f"{where}: weights 'facebook/dinov2-base' are not available")


def test_mie_without_heads_is_named_with_its_config_key(empty_caches, dead_hub, tmp_path):
    """No MIE heads are published: a config scoring MIE without heads fails before torch with what the metric
    says (how to train them), not with the backbone's weights; heads given as a checkpoint folder next to the
    config are left to the run."""
    cfg = _board(tmp_path, 'name = "mie"')
    with pytest.raises(WeightsUnavailableError) as info:
        _weights_first(str(cfg), str(tmp_path / "out"))
    loaded = load_config(cfg)
    assert str(info.value) == f"{loaded.where(loaded.metrics[1].key)}: {no_heads_error()}"
    (tmp_path / "runs" / "mie").mkdir(parents=True)
    (tmp_path / "runs" / "mie" / "mie_config.json").write_text("{}")
    _weights_first(str(_board(tmp_path, 'name = "mie"\nheads = "runs/mie"')), str(tmp_path / "out"))


@pytest.mark.parametrize(
    "metric",
    [
        'name = "dino"\nweights = "models/dino"',
        'name = "mie"\nheads = "./runs/mie"',
        'name = "tpips"\nadapter = "runs/tp"',
    ],
    ids=["weights", "heads", "adapter"],
)
def test_weights_named_by_the_config_are_judged_where_the_run_reads_them(
    metric, empty_caches, dead_hub, tmp_path, monkeypatch
):
    """Weights, heads or an adapter named by the config are read next to the config (``models/dino`` is a
    folder there; read from the current folder it would look like a hub id). A folder the loader would refuse
    (no ``config.json``, no checkpoint, no ``tpips.json``) is refused before torch with the words and config
    key the run's plan gives (they were left to the run: 6 s of imports first). Red when such metrics are
    skipped, or checked with their paths unresolved."""
    from genmetrics.leaderboard.plan import build_plan

    monkeypatch.chdir(tmp_path.parent)  # not the config's folder
    folder = tmp_path / metric.split('"')[-2].removeprefix("./")
    folder.mkdir(parents=True)
    cfg = _board(tmp_path, metric)
    with pytest.raises(WeightsUnavailableError) as first:
        _weights_first(str(cfg), str(tmp_path / "out"))
    with pytest.raises(WeightsUnavailableError) as run:
        build_plan(load_config(cfg))  # what the run says (its plan, torch imported)
    assert str(first.value) == str(run.value) and str(folder) in str(first.value)
    for name in ("config.json", "mie_config.json", "tpips.json"):  # what each loader reads first
        (folder / name).write_text("{}")
    _weights_first(str(cfg), str(tmp_path / "out"))


@pytest.mark.parametrize(
    "metric, out, fragment",
    [
        ('name = "dino"\nwieghts = "x"', "out", "unknown key 'wieghts'"),
        ('name = "dinno"', "out", "dino"),
        ('name = "dino"', None, "no output folder"),
    ],
    ids=["misspelt-option", "unknown-metric", "no-out"],
)
def test_what_the_run_names_first_stays_first(
    metric, out, fragment, empty_caches, dead_hub, tmp_path, capsys
):
    argv = ["leaderboard", str(_board(tmp_path, metric))]
    rc = main([*argv, "--out", str(tmp_path / out)] if out else argv)
    err = capsys.readouterr().err
    assert rc == 2 and fragment in err and "not available" not in err, err
