"""A bad image among good ones: stop (finished rows kept) or --on-error skip (reported, the rest scored)."""

from __future__ import annotations

import json

from lb_helpers import make_set, toml_config

from genmetrics.cli.main import main
from genmetrics.data.output.rows import read_results

PSNR = '[[metrics]]\nname = "psnr"\n'


def _break(root):
    (root / "gen" / "bad" / "s03.png").write_bytes(b"not an image")


def test_stop_keeps_finished_rows_and_names_the_file(tmp_path, capsys):
    root = make_set(tmp_path / "set")
    _break(root)
    cfg = toml_config(root, PSNR, extra="[run]\nbatch_size = 2\n")
    rc = main(["leaderboard", str(cfg), "--out", str(tmp_path / "out"), "--no-plots"])
    err = capsys.readouterr().err
    assert rc == 2 and "s03.png" in err and err.strip().startswith("error:")
    rows = read_results(tmp_path / "out" / "results.jsonl")
    assert {r["generator"] for r in rows} >= {"mid"}  # the generator scored before the bad one is kept


def test_skip_reports_and_scores_the_rest(tmp_path, capsys):
    root = make_set(tmp_path / "set")
    _break(root)
    cfg = toml_config(root, PSNR, extra="[run]\nbatch_size = 4\n")
    rc = main(["leaderboard", str(cfg), "--out", str(tmp_path / "out"), "--no-plots", "--on-error", "skip"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "warning: skipped bad/s03" in err
    rows = read_results(tmp_path / "out" / "results.jsonl")
    by_gen = {}
    for r in rows:
        by_gen.setdefault(r["generator"], []).append(r["id"])
    assert sorted(by_gen["bad"]) == ["s00", "s01", "s02", "s04", "s05"]
    assert len(by_gen["good"]) == len(by_gen["mid"]) == 6
    skipped = [json.loads(line) for line in (tmp_path / "out" / "skipped.jsonl").read_text().splitlines()]
    assert [(s["generator"], s["id"]) for s in skipped] == [("bad", "s03")]
