"""A config is read with bounded memory and time (YAML aliases cannot expand it past MAX_YAML_NODES, nesting
is bounded, the file size is bounded), and every integer option is range-checked for what it is used for
(a seed that numpy or torch cannot take is refused when the config is read, not deep in the run)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from genmetrics.core.options import SEED_MAX, integer, seed
from genmetrics.errors import InputError
from genmetrics.leaderboard.config import MAX_YAML_NODES, load_config, yaml_size
from genmetrics.train import TrainLoopConfig

ROOT = Path(__file__).resolve().parents[2]
BASE = "generators:\n  - name: a\n    images: gen\nmetrics:\n  - name: psnr\n"


def _laughs(levels: int, fan: int = 9) -> str:
    """The "billion laughs" document: each level an anchored list of ``fan`` aliases of the level below."""
    lines = [f"l0: &l0 [{', '.join(['lol'] * fan)}]"]
    for i in range(1, levels):
        lines.append(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * fan)}]")
    return "\n".join(lines) + f"\n{BASE}    extra: *l{levels - 1}\n"


def _expanded(obj) -> int:
    """The second computation: count the loaded document as it expands (every alias walked again)."""
    if isinstance(obj, dict):
        return 1 + sum(_expanded(k) + _expanded(v) for k, v in obj.items())
    if isinstance(obj, list):
        return 1 + sum(_expanded(v) for v in obj)
    return 1


@pytest.mark.parametrize("levels,fan", [(1, 3), (2, 3), (4, 3), (3, 5)])
def test_the_expanded_size_is_counted_without_expanding(levels, fan):
    import yaml

    text = _laughs(levels, fan)
    size, depth = yaml_size(yaml.compose(text, Loader=yaml.SafeLoader))
    assert size == _expanded(yaml.safe_load(text))
    assert depth == levels + 4  # root mapping, "metrics" list, its table, the lists of "extra", their scalars


def test_a_billion_laughs_config_fails_fast_with_bounded_memory(tmp_path):
    """A 1 kB YAML whose aliases expand to ~10**9 values grew past 2.5 GB; it is refused in well under a
    second, in a process limited to 512 MiB of address space (torch is not imported to read a config)."""
    path = tmp_path / "laughs.yaml"
    path.write_text(_laughs(9))
    assert path.stat().st_size < 1024
    code = textwrap.dedent(
        f"""
        import resource, sys, time
        resource.setrlimit(resource.RLIMIT_AS, (512 * 2**20, 512 * 2**20))
        from genmetrics.errors import InputError
        from genmetrics.leaderboard.config import load_config
        t = time.process_time()
        try:
            load_config({str(path)!r})
        except InputError as e:
            print(f"{{time.process_time() - t:.3f}}", e)
            sys.exit(0)
        sys.exit(3)
        """
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, env=env)
    assert r.returncode == 0, r.stderr[-2000:]
    cpu, message = r.stdout.split(" ", 1)
    assert float(cpu) < 5.0
    assert "expands to 387,420,4" in message or "expands to" in message
    assert str(path) in message and f"{MAX_YAML_NODES:,}" in message and "\n" not in message.strip()


def test_a_recursive_alias_and_deep_nesting_are_one_line(tmp_path):
    path = tmp_path / "self.yaml"
    path.write_text(BASE + "    extra: &x [1, *x]\n")
    with pytest.raises(InputError, match="refers to itself"):
        load_config(path)
    deep = tmp_path / "deep.yaml"
    deep.write_text(BASE + "    extra: " + "[" * 100 + "]" * 100 + "\n")
    with pytest.raises(InputError, match="nested 10[0-9] levels deep"):
        load_config(deep)
    deeper = tmp_path / "deeper.toml"
    deeper.write_text(
        '[[generators]]\nname = "a"\nimages = "g"\n[[metrics]]\nname = "psnr"\nx = '
        + "[" * 5000
        + "]" * 5000
        + "\n"
    )
    with pytest.raises(InputError, match="nested too deeply"):
        load_config(deeper)


def test_aliases_within_the_bound_still_work(tmp_path):
    path = tmp_path / "ok.yaml"
    path.write_text(
        "generators:\n  - name: a\n    images: gen\n"
        "metrics:\n  - &d {name: psnr, max_db: 60.0}\n  - {<<: *d, label: psnr-b}\n"
    )
    assert [m.options for m in load_config(path).metrics] == [{"max_db": 60.0}] * 2


def test_a_pipe_as_config_is_refused_without_reading(tmp_path):
    fifo = tmp_path / "config.yaml"
    os.mkfifo(fifo)
    with pytest.raises(InputError, match="not a regular file"):
        load_config(fifo)  # reading would block until a writer appears


# ----------------------------------------------------------------------------------- integer ranges
@pytest.mark.parametrize("value", [2**64 + 1, 2**32, -1, 2**63])
def test_a_seed_numpy_or_torch_cannot_take_is_refused_when_read(tmp_path, value):
    path = tmp_path / "c.toml"
    path.write_text(
        f'[run]\nseed = {value}\n[[generators]]\nname = "a"\nimages = "g"\n[[metrics]]\nname = "psnr"\n'
    )
    with pytest.raises(InputError, match=r"run\.seed: expected an integer in \[0, 4294967295\]"):
        load_config(path)
    with pytest.raises(InputError, match=r"option seed: expected an integer in \[0, 4294967295\]"):
        TrainLoopConfig(out_dir=tmp_path / "o", seed=value).checked()


def test_every_accepted_seed_is_taken_by_every_generator():
    import random

    import numpy as np
    import torch

    for s in (0, 1, SEED_MAX):
        assert seed("seed", s) == s
        torch.manual_seed(s)
        np.random.seed(s)
        np.random.default_rng(s)
        random.seed(s)
    with pytest.raises(ValueError):
        np.random.seed(SEED_MAX + 1)  # the bound is numpy's own


@pytest.mark.parametrize(
    "field,value,needle",
    [
        ("batch_size", 2**31, r"batch_size: expected an integer in \[1, 2147483647\]"),
        ("grad_accum", 2**40, r"grad_accum: expected an integer in \[1, 2147483647\]"),
        ("num_workers", 100_000, r"num_workers: expected an integer in \[0, 256\]"),
        ("max_steps", 2**64, "does not fit in 64 bits"),
        ("epochs", 2**70, "does not fit in 64 bits"),
        ("keep_checkpoints", 2**63, "does not fit in 64 bits"),
        ("save_every", 10**30, "does not fit in 64 bits"),
    ],
)
def test_integer_training_options_are_bounded_by_their_use(tmp_path, field, value, needle):
    with pytest.raises(InputError, match=needle):
        TrainLoopConfig(out_dir=tmp_path / "o", **{field: value}).checked()


def test_integers_are_exact_above_two_to_the_53():
    assert integer("n", 2**53 + 1) == 2**53 + 1  # read through a float it was 2**53
    assert integer("n", str(2**60 + 1)) == 2**60 + 1
    with pytest.raises(InputError, match="expected an integer"):
        integer("n", 2.5)
