"""A smoke run says so everywhere; small sets are noted; a typo in a metric name is
named as an unknown metric; ``--resume`` says what it kept and what is left; scores print at the metric's
precision."""

from __future__ import annotations

import json
import re

import pandas as pd
import pytest
import yaml

from genmetrics.backbones.provider import use_provider
from genmetrics.cli.main import main
from genmetrics.testing import tiny_backbones, toy_leaderboard

BANNER = "random backbones (backbone provider genmetrics.testing:tiny_backbones): scores are not meaningful"


def _config(tmp_path, **changes) -> tuple[dict, str]:
    cfg = toy_leaderboard(tmp_path)
    for k, v in changes.items():
        cfg[k] = v
    path = tmp_path / "board.yaml"
    path.write_text(yaml.safe_dump(cfg))
    return cfg, str(path)


def _run(argv, capsys) -> tuple[int, str, str]:
    rc = main(argv)
    out = capsys.readouterr()
    return rc, out.out, out.err


@pytest.mark.slow
def test_a_smoke_leaderboard_says_so_everywhere_and_notes_small_sets(tmp_path, capsys):
    metrics = [{"name": "psnr"}, {"name": "sad", "attributes": ["smiling", "a hat"]}]
    _, cfg = _config(tmp_path, metrics=metrics)
    out = tmp_path / "smoke"
    with use_provider(tiny_backbones):
        rc, stdout, err = _run(["leaderboard", cfg, "--out", str(out), "--no-plots"], capsys)
    assert rc == 0, err
    assert f"note: {BANNER}" in stdout.splitlines()[0]
    assert "sad: fewer than 100 images per set" in stdout
    assert BANNER in (out / "leaderboard.md").read_text() and BANNER in (out / "leaderboard.html").read_text()
    csv = pd.read_csv(out / "leaderboard.csv", keep_default_na=False, dtype=str)
    assert set(csv["note"]) == {BANNER}
    assert "sad: fewer than 100 images per set" in (out / "leaderboard.md").read_text()
    # the same config on real weights (no provider): no banner, no note column
    rc, stdout, err = _run(["leaderboard", _config(tmp_path)[1], "--out", str(tmp_path / "real")], capsys)
    assert rc == 0 and "random backbones" not in stdout
    assert "note" not in pd.read_csv(tmp_path / "real" / "leaderboard.csv").columns
    assert "random backbones" not in (tmp_path / "real" / "leaderboard.md").read_text()


def test_a_smoke_score_says_so(tmp_path, capsys):
    data = tmp_path / "d"
    toy_leaderboard(data)
    with use_provider(tiny_backbones):
        rc, stdout, err = _run(
            ["score", "clip_i", "-r", str(data / "refs"), "-c", str(data / "noisy")], capsys
        )
    assert rc == 0, err
    assert stdout.splitlines()[0] == f"note: {BANNER}" and stdout.splitlines()[1].startswith("clip_i: ")
    rc, stdout, err = _run(["score", "psnr", "-r", str(data / "refs"), "-c", str(data / "noisy")], capsys)
    assert rc == 0 and "note:" not in stdout


def test_a_typo_in_a_metric_name_is_an_unknown_metric(tmp_path, capsys):
    """``name = "ssmi"`` with ``rank_by = "ssim"``: the error names the metric entry and its close matches;
    rank_by never suggests the typo back."""
    _, cfg = _config(tmp_path, metrics=[{"name": "ssmi"}], run={"rank_by": "ssim"})
    rc, _, err = _run(["leaderboard", cfg, "--out", str(tmp_path / "out")], capsys)
    assert rc == 2
    assert "metrics[0].name: unknown metric 'ssmi'; did you mean 'ssim'" in err
    assert "rank_by" not in err and "did you mean 'ssmi'" not in err


def test_resume_says_what_it_kept_and_what_is_left(tmp_path, capsys):
    _, cfg = _config(tmp_path)
    out = tmp_path / "out"
    assert main(["leaderboard", cfg, "--out", str(out), "--no-plots"]) == 0
    results = out / "results.jsonl"
    results.write_text(
        "".join(results.read_text().splitlines(keepends=True)[:2])
    )  # as if killed after 2 rows
    capsys.readouterr()
    rc, _, err = _run(["leaderboard", cfg, "--out", str(out), "--resume", "--no-plots"], capsys)
    assert rc == 0
    assert "note: --resume: kept 2 finished row(s) of 6; left to score: psnr 4 of 6" in err
    rc, _, err = _run(["leaderboard", cfg, "--out", str(out), "--resume", "--no-plots"], capsys)
    assert "note: --resume: kept 6 finished row(s) of 6; nothing left to score" in err


def test_scores_print_at_the_metrics_precision(tmp_path, capsys):
    """psnr's range is [0, 100]: 6 significant digits of float32 over a width of 100 leave 4 decimals; the
    JSON keeps every digit."""
    data = tmp_path / "d"
    toy_leaderboard(data)
    argv = ["score", "psnr", "-r", str(data / "refs"), "-c", str(data / "noisy")]
    rc, text, _ = _run(argv, capsys)
    rc2, as_json, _ = _run([*argv, "--json"], capsys)
    assert rc == rc2 == 0
    full = json.loads(as_json)["value"]
    shown = re.fullmatch(r"psnr: (\S+)  \(n=3\)\n", text)
    assert shown and float(shown[1]) == round(full, 4) and len(shown[1].split(".")[1]) <= 4
    assert full != round(full, 4)  # the JSON value has more digits than the line shows
