"""genmetrics.leaderboard.cli: ``genmetrics leaderboard`` passes its flags to the runner and prints the
notes, the ranking of summary.json (best first, every column) and where the reports are."""

from __future__ import annotations

import json

import pytest
from click.testing import CliRunner
from lb_helpers import toml_config

from genmetrics.leaderboard import cli as lb_cli
from genmetrics.leaderboard.notes import notes

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
