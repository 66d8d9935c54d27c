"""The module's example runs; the progress bar follows GENMETRICS_PROGRESS; the metrics log is one row per
optimizer step and evaluation."""

from __future__ import annotations

import doctest
import json

from genmetrics.train import TrainLoopConfig, fit

from .toy import Toy, make_data


def test_module_example_runs():
    import genmetrics.train

    failed, attempted = doctest.testmod(genmetrics.train, optionflags=doctest.ELLIPSIS)
    assert attempted > 5 and failed == 0


def test_progress_bar_follows_the_environment(tmp_path, monkeypatch, capsys):
    cfg = dict(lr=0.01, epochs=1, batch_size=4, progress=True)
    monkeypatch.setenv("GENMETRICS_PROGRESS", "1")
    fit(Toy(), make_data(8), TrainLoopConfig(out_dir=tmp_path / "a", **cfg))
    assert "train" in capsys.readouterr().err
    monkeypatch.setenv("GENMETRICS_PROGRESS", "0")
    fit(Toy(), make_data(8), TrainLoopConfig(out_dir=tmp_path / "b", **cfg))
    assert "train" not in capsys.readouterr().err
    monkeypatch.setenv("GENMETRICS_PROGRESS", "1")
    fit(Toy(), make_data(8), TrainLoopConfig(out_dir=tmp_path / "c", **{**cfg, "progress": False}))
    assert "train" not in capsys.readouterr().err


def test_metrics_log_rows(tmp_path):
    res = fit(
        Toy(),
        make_data(12),
        TrainLoopConfig(
            out_dir=tmp_path / "o", lr=0.01, epochs=2, batch_size=2, grad_accum=3, progress=False
        ),
        val_examples=make_data(3),
    )
    rows = [json.loads(x) for x in (tmp_path / "o" / "metrics.jsonl").read_text().splitlines()]
    assert rows == res.history
    assert [(r["kind"], r["step"], r["epoch"]) for r in rows] == [
        ("train", 1, 0.5),
        ("train", 2, 1.0),
        ("eval", 2, 1.0),
        ("train", 3, 1.5),
        ("train", 4, 2.0),
        ("eval", 4, 2.0),
    ]
    assert all({"loss", "mae", "lr", "grad_norm"} <= r.keys() for r in rows if r["kind"] == "train")
