"""Decoding workers (genmetrics.data.io.workers): the default follows the cores available, a count outside
``[0, MAX_WORKERS]`` is refused naming the flag, and every command that reads files refuses it at parse time."""

from __future__ import annotations

import os

import click
import pytest
from click.testing import CliRunner

from genmetrics.cli.main import cli
from genmetrics.data.io import workers as W
from genmetrics.data.io.workers import MAX_DEFAULT_WORKERS, MAX_WORKERS, check_workers, workers_option
from genmetrics.errors import InputError


@pytest.mark.parametrize("cores", [1, 2, 5, MAX_DEFAULT_WORKERS + 1, 64])
def test_default_workers_is_one_per_core_but_one_capped(monkeypatch, cores):
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(cores)), raising=False)
    expected = min(cores - 1, MAX_DEFAULT_WORKERS)  # the rule written out: one core kept for the main loop
    assert W.default_workers() == expected
    assert check_workers(None) == expected  # no count asked for: the default


def test_default_workers_without_affinity_counts_the_cpus(monkeypatch):
    monkeypatch.delattr(os, "sched_getaffinity", raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: None)  # unknown: one core, decode in the calling process
    assert W.default_workers() == 0
    monkeypatch.setattr(os, "cpu_count", lambda: 3)
    assert W.default_workers() == 2


@pytest.mark.parametrize("bad", [-1, MAX_WORKERS + 1, True, 2.0, "2"])
def test_check_workers_names_the_flag_the_range_and_the_value(bad):
    with pytest.raises(InputError) as info:
        check_workers(bad, flag="--workers")
    msg = str(info.value)
    assert msg.startswith("--workers:") and f"[0, {MAX_WORKERS}]" in msg and repr(bad) in msg


@pytest.mark.parametrize("good", [0, 1, MAX_WORKERS])
def test_check_workers_returns_a_count_in_range_unchanged(good):
    assert check_workers(good) == good


def test_workers_option_passes_the_count_or_none():
    seen = []
    cmd = click.command()(workers_option(lambda workers: seen.append(workers)))
    for args in ([], ["--workers", "0"], ["--workers", str(MAX_WORKERS)]):
        assert CliRunner().invoke(cmd, args).exit_code == 0
    assert seen == [None, 0, MAX_WORKERS]


@pytest.mark.parametrize("command", ["score", "leaderboard", "compare"])
def test_workers_beyond_the_cap_refused_on_every_command(command):
    """``--workers 10000`` would start (or silently cap) ten thousand processes: every command that reads
    files refuses it at parse time, naming the flag and its range (exit 2)."""
    res = CliRunner().invoke(cli, [command, "--workers", str(MAX_WORKERS + 1)])
    assert res.exit_code == 2, res.output
    assert "--workers" in res.output and str(MAX_WORKERS) in res.output
    assert check_workers(MAX_WORKERS) == MAX_WORKERS
    with pytest.raises(InputError, match=rf"workers.*\[0, {MAX_WORKERS}\].*{MAX_WORKERS + 1}"):
        check_workers(MAX_WORKERS + 1)
