"""Progress (genmetrics.data.progress): a bar on a terminal, a line every ``LINE_INTERVAL_S`` without one, nothing
when turned off; GENMETRICS_PROGRESS takes yes/no words and a bad value is named; the items pass through
unchanged in every mode."""

from __future__ import annotations

import io
import os
from unittest import mock

import pytest

from genmetrics.cli.main import main
from genmetrics.data import progress as P


@pytest.mark.parametrize("setting", ["0", "1", ""])
def test_every_mode_yields_the_items_unchanged_and_lazily(setting, monkeypatch):
    monkeypatch.setattr(P.sys, "stderr", io.StringIO())
    pulled = []

    def source():
        for i in range(5):
            pulled.append(i)
            yield i

    with mock.patch.dict(os.environ, {"GENMETRICS_PROGRESS": setting}):
        it = P.progress(source(), desc="x", total=5)
        assert next(it) == 0 and pulled == [0]  # one item at a time: a stream is never read ahead
        assert list(it) == [1, 2, 3, 4]
    out = P.sys.stderr.getvalue()
    assert (out == "") == (setting in ("0", ""))  # off, or lines with a 30 s interval: silent for short work


def test_progress_without_a_terminal_is_a_line_every_interval(monkeypatch):
    err = io.StringIO()  # not a terminal
    monkeypatch.setattr(P.sys, "stderr", err)
    monkeypatch.setattr(P, "LINE_INTERVAL_S", 0.0)
    with mock.patch.dict(os.environ, {"GENMETRICS_PROGRESS": ""}):
        assert P.progress_mode() == "lines"
        assert list(P.progress(range(3), desc="psnr | model-a", total=3, unit="batch")) == [0, 1, 2]
    lines = err.getvalue().splitlines()
    assert [ln.split(" [")[0] for ln in lines] == [f"psnr | model-a: {i}/3 batch" for i in (1, 2, 3)]
    monkeypatch.setattr(P, "LINE_INTERVAL_S", 30.0)  # short work: no line at all
    err.truncate(0)
    err.seek(0)
    with mock.patch.dict(os.environ, {"GENMETRICS_PROGRESS": ""}):
        list(P.progress(range(100), desc="x", total=100))
    assert err.getvalue() == ""


@pytest.mark.parametrize(
    "value, mode",
    [
        ("1", "bar"),
        ("yes", "bar"),
        ("true", "bar"),
        ("On", "bar"),
        ("0", "off"),
        ("no", "off"),
        ("false", "off"),
    ],
)
def test_progress_setting_takes_words(value, mode, capsys):
    with mock.patch.dict(os.environ, {"GENMETRICS_PROGRESS": value}):
        assert P.progress_mode() == mode
        assert main(["list", "psnr"]) == 0
    capsys.readouterr()


def test_a_bad_progress_setting_is_named(capsys):
    with mock.patch.dict(os.environ, {"GENMETRICS_PROGRESS": "maybe"}):
        rc, err = main(["list"]), capsys.readouterr().err
    assert rc == 2 and "environment variable GENMETRICS_PROGRESS: expected true or false, got 'maybe'" in err
