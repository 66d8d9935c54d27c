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


def test_a_broken_link_is_skipped_and_reported_like_a_corrupt_file(tmp_path, capsys):
    """A generator folder holding a dangling link (an image moved away) stopped the leaderboard with a bare
    ``error: [Errno 2] No such file or directory`` before scoring, --on-error skip or not (the file list's
    fingerprint and the input hashes read every file); now it is one bad file like any other."""
    root = make_set(tmp_path / "set")
    bad = root / "gen" / "bad" / "s03.png"
    bad.unlink()
    bad.symlink_to(tmp_path / "moved.png")
    cfg = toml_config(root, PSNR, extra="[run]\nbatch_size = 4\n")
    rc = main(["leaderboard", str(cfg), "--out", str(tmp_path / "out"), "--no-plots", "--on-error", "skip"])
    err = capsys.readouterr().err
    assert rc == 0, err
    assert "warning: skipped bad/s03" in err and "broken symbolic link" in err and "Errno" not in err
    skipped = [json.loads(line) for line in (tmp_path / "out" / "skipped.jsonl").read_text().splitlines()]
    assert [(s["generator"], s["id"]) for s in skipped] == [("bad", "s03")]
    rc = main(["leaderboard", str(cfg), "--out", str(tmp_path / "out2"), "--no-plots"])
    err = capsys.readouterr().err
    assert rc == 2 and "s03.png" in err and "broken symbolic link" in err and "Errno" not in err
