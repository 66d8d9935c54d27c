"""The ``genmetrics`` entry point (genmetrics.cli.main): light commands (list, info, --help) import neither torch
nor torchmetrics and ``--help`` lists commands from tables that agree with the commands; ``score`` starts
without torchmetrics' package ``__init__`` (the heavy modules it would import, torchvision, torch._dynamo,
scipy.signal, transformers, stay out; the score is the one the library computes; anything else asked of the
``torchmetrics`` package still works); unknown commands get close matches; errors map to one ``error:`` line
and an exit code (2 bad input, 1 environment, 130 Ctrl-C)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import click
import numpy as np
import pytest
from PIL import Image

from genmetrics.cli.main import main
from genmetrics.errors import InputError

HEAVY = (
    "torchvision",
    "torch._dynamo",
    "scipy",
    "transformers",
    "open_clip",
    "pandas",
    "torchmetrics.functional",  # torchmetrics' full package init
    "matplotlib",
    # the options read from the metrics' source (ast.parse of several files): only `info` and readers of a
    # metric class's docstring need them
    "genmetrics.core.static_options",
    "genmetrics.core.option_docs",
)

SCORE = """
import json, sys
from importlib import metadata
scans = []
scan = metadata.entry_points
def counted(**kw):  # genmetrics' plugins: a scan of every installed package's metadata
    if kw.get("group") == "genmetrics.metrics":
        scans.append(kw)
    return scan(**kw)
metadata.entry_points = counted
from genmetrics.cli.main import main
rc = main(["score", "psnr", "-r", {ref!r}, "-c", {gen!r}])
print(json.dumps({{"rc": rc, "heavy": [m for m in {heavy!r} if m in sys.modules], "scans": scans}}), file=sys.stderr)
"""

FALLBACK = """
import json, logging, sys
from genmetrics.cli.main import defer_torchmetrics_init
assert defer_torchmetrics_init()
import torchmetrics
import torchmetrics.metric
light = torchmetrics.Metric is torchmetrics.metric.Metric and "torchmetrics.functional" not in sys.modules
version = torchmetrics.__version__  # anything else runs the real __init__
acc = torchmetrics.Accuracy(task="binary")
print(json.dumps({"light": light, "version": version, "full": "torchmetrics.functional" in sys.modules,
    "handlers": len(logging.getLogger("torchmetrics").handlers), "acc": type(acc).__name__,
    "again": defer_torchmetrics_init()}))
"""


def _images(tmp_path, n=3):
    rng = np.random.default_rng(0)
    for role in ("ref", "gen"):
        (tmp_path / role).mkdir()
        for i in range(n):
            Image.fromarray((rng.random((16, 16, 3)) * 255).astype("uint8")).save(
                tmp_path / role / f"{i}.png"
            )
    return tmp_path / "ref", tmp_path / "gen"


def test_score_psnr_imports_none_of_the_heavy_modules(tmp_path):
    import torch

    from genmetrics.baselines.pixel import PSNR

    ref, gen = _images(tmp_path)
    code = SCORE.format(ref=str(ref), gen=str(gen), heavy=HEAVY)
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=300)
    report = json.loads(out.stderr.strip().splitlines()[-1])
    assert report == {"rc": 0, "heavy": [], "scans": []}, out.stderr[-2000:]

    def read(folder):  # an explicit second reading: numpy arrays of the PNGs, in [0,1]
        arrays = [np.asarray(Image.open(p).convert("RGB")) for p in sorted(folder.iterdir())]
        return torch.from_numpy(np.stack(arrays)).permute(0, 3, 1, 2).float() / 255

    expect = float(PSNR().score(read(ref), read(gen)))
    printed = float(re.search(r"psnr: ([-0-9.e]+)", out.stdout).group(1))
    assert abs(printed - expect) <= 1e-4, out.stdout  # printed to 4 decimals


PLOT = """
import json, sys
from genmetrics.cli.main import defer_torchmetrics_init
assert defer_torchmetrics_init()
import torch
import genmetrics
m = genmetrics.create_metric("psnr")
m.update(reference=torch.zeros(2, 3, 8, 8), candidates=torch.full((2, 3, 8, 8), 0.1))
before = "matplotlib.pyplot" in sys.modules
fig, ax = m.plot()  # genmetrics' Metric.plot -> torchmetrics' plot_single_or_multi_val
import torchmetrics.utilities.plot as p
print(json.dumps({"before": before, "after": "matplotlib.pyplot" in sys.modules,
    "fig": type(fig).__name__, "ax": type(ax).__name__, "cmap_type": p._CMAP_TYPE is not object}))
"""


def test_plotting_still_works_after_the_deferred_plot_module():
    """matplotlib stays out of a score process until something plots; then the real plot module runs."""
    env = {**os.environ, "MPLBACKEND": "Agg"}
    out = subprocess.run([sys.executable, "-c", PLOT], capture_output=True, text=True, timeout=300, env=env)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    assert got == {"before": False, "after": True, "fig": "Figure", "ax": "Axes", "cmap_type": True}


def test_the_deferred_package_loads_fully_on_any_other_name():
    out = subprocess.run([sys.executable, "-c", FALLBACK], capture_output=True, text=True, timeout=300)
    assert out.returncode == 0, out.stderr[-2000:]
    got = json.loads(out.stdout.strip().splitlines()[-1])
    import importlib.metadata

    assert got == {
        "light": True,
        "version": importlib.metadata.version("torchmetrics"),
        "full": True,
        "handlers": 1,  # __init__ adds a handler; the shell had added the same one: not twice
        "acc": "BinaryAccuracy",
        "again": False,  # torchmetrics is imported now: nothing to defer
    }


PROBE = """
import sys
from genmetrics.cli.main import entry
sys.argv = ["genmetrics", *{args!r}]
try:
    entry()
except SystemExit:
    pass
print("IMPORTED", [m for m in ("torch", "torchmetrics") if m in sys.modules], file=sys.stderr)
"""


@pytest.mark.parametrize("args", [["list"], ["info", "ssim"], ["info", "clip_t", "--json"], ["--help"]])
def test_light_commands_do_not_import_torch(args):
    out = subprocess.run(
        [sys.executable, "-c", PROBE.format(args=args)], capture_output=True, text=True, timeout=120
    )
    line = [x for x in out.stderr.splitlines() if x.startswith("IMPORTED")]
    assert line == ["IMPORTED []"], out.stderr[-2000:]
    if args[-1] == "--json":
        assert "options" in json.loads(out.stdout)


def test_help_table_agrees_with_the_commands():
    """``--help`` lists commands from cli.main's tables (importing none); each entry opens its command's
    docstring, so the two cannot drift apart."""
    import inspect

    import click

    from genmetrics.cli.main import (
        COMMAND_HELP,
        EVALUATE_HELP,
        EXPORT_HELP,
        TRAIN_HELP,
        cli,
        evaluate_group,
        export_group,
        train_group,
    )

    tables = ((cli, COMMAND_HELP), (train_group, TRAIN_HELP), (evaluate_group, EVALUATE_HELP))
    for group, table in (*tables, (export_group, EXPORT_HELP)):
        ctx = click.Context(group)
        assert sorted(table) == group.list_commands(ctx), group.name
        for name, line in table.items():
            doc = " ".join(inspect.cleandoc(group.get_command(ctx, name).help or "").split())
            assert doc.startswith(line), (group.name, name, line, doc)


@pytest.mark.parametrize(
    "typo,meant", [("scor", "score"), ("leaderbord", "leaderboard"), ("weigths", "weights")]
)
def test_commands_get_close_matches(typo, meant, capsys):
    assert main([typo]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("error: ") and f"did you mean {meant!r}" in err and len(err.strip().splitlines()) == 1
    )


def test_a_group_s_commands_get_close_matches(capsys):
    assert main(["train", "tpip"]) == 2
    assert "did you mean 'tpips'" in capsys.readouterr().err


def test_an_abort_from_end_of_input_is_not_called_a_ctrl_c(monkeypatch, capsys):
    """click maps ``EOFError`` (a closed stdin at a prompt, a truncated transfer) to ``Abort``: exit 1, named."""

    def eof(*a, **k):
        raise click.exceptions.Abort() from EOFError("stdin closed")

    monkeypatch.setattr("genmetrics.cli.main.check_environment", eof)
    assert main(["list"]) == 1
    err = capsys.readouterr().err
    assert "end of input" in err and "interrupted" not in err

    def ctrl_c(*a, **k):
        raise KeyboardInterrupt

    monkeypatch.setattr("genmetrics.cli.main.check_environment", ctrl_c)
    assert main(["list"]) == 130
    assert "interrupted" in capsys.readouterr().err


def _group(lazy):
    from genmetrics.cli.main import LazyGroup

    @click.group(cls=LazyGroup, lazy=lazy, helps={k: f"help of {k}" for k in lazy}, name="g")
    def g():
        """A test group."""

    @g.command("eager")
    def eager():
        """Defined on the group itself."""
        click.echo("eager ran")

    return g


def test_lazy_group_lists_eager_and_lazy_commands_and_loads_on_demand():
    from click.testing import CliRunner

    g = _group({"basic": "genmetrics.cli.basic:list_cmd", "zeta": "genmetrics.cli.basic:info_cmd"})
    ctx = click.Context(g)
    assert g.list_commands(ctx) == ["basic", "eager", "zeta"]
    import genmetrics.cli.basic as basic

    assert g.get_command(ctx, "basic") is basic.list_cmd and g.get_command(ctx, "zeta") is basic.info_cmd
    assert g.get_command(ctx, "nope") is None
    res = CliRunner().invoke(g, ["--help"])
    assert res.exit_code == 0 and "help of zeta" in res.output and "eager" in res.output
    assert CliRunner().invoke(g, ["eager"]).output == "eager ran\n"


@pytest.mark.parametrize("target", ["genmetrics.no_such_module:cmd", "genmetrics.cli.basic:no_such_cmd"])
def test_a_lazy_command_that_cannot_load_is_named(target):
    g = _group({"broken": target})
    with pytest.raises(click.UsageError, match=r"command 'broken' is not available in this installation"):
        g.get_command(click.Context(g), "broken")


@pytest.mark.parametrize(
    "error,code,line",
    [
        (InputError("bad.png: not an image"), 2, "error: bad.png: not an image"),
        (ValueError("a\n  multi   line"), 2, "error: a multi line"),
        (FileNotFoundError("no such file: x"), 2, "error: no such file: x"),
        (OSError("disk on fire"), 1, "error: disk on fire"),
        (RuntimeError(""), 1, "error: RuntimeError"),
        (MemoryError("out of memory"), 1, "error: out of memory"),
    ],
    ids=lambda x: type(x).__name__ if isinstance(x, BaseException) else None,
)
def test_main_maps_each_error_to_one_line_and_its_exit_code(monkeypatch, capsys, error, code, line):
    def fail(*a, **k):
        raise error

    monkeypatch.setattr("genmetrics.cli.main.check_environment", fail)
    assert main(["list"]) == code
    assert capsys.readouterr().err == line + "\n"


def test_debug_shows_the_traceback(monkeypatch, capsys):
    def fail(*a, **k):
        raise InputError("bad input")

    monkeypatch.setattr("genmetrics.cli.main.check_environment", fail)
    assert main(["--debug", "list"]) == 2
    err = capsys.readouterr().err
    assert "Traceback" in err and err.rstrip().endswith("error: bad input")


def test_a_warning_is_one_line_once(monkeypatch, capsys):
    import warnings

    def warn(*a, **k):
        for _ in range(2):  # the same text twice (a file read by the pre-check and by the metric): once
            warnings.warn("frame 3\n dropped", UserWarning, stacklevel=1)

    monkeypatch.setattr("genmetrics.cli.main.check_environment", warn)
    assert main(["list"]) == 0
    assert capsys.readouterr().err == "warning: frame 3 dropped\n"


def test_a_dead_worker_reported_from_a_finaliser_prints_no_traceback(monkeypatch):
    """torch's SIGCHLD handler can raise inside the loader's ``__del__`` while a run unwinds after a worker
    died: Python printed 'Exception ignored ... Traceback' above the one error line. Other finaliser errors,
    and every one under --debug, still reach Python's hook."""
    import sys

    from genmetrics.cli.main import _quiet_dead_worker_finalisers

    seen: list[str] = []
    monkeypatch.setattr(sys, "unraisablehook", lambda u: seen.append(str(u.exc_value)))

    class Dies:
        def __init__(self, msg: str) -> None:
            self.msg = msg

        def __del__(self) -> None:
            raise RuntimeError(self.msg)

    with _quiet_dead_worker_finalisers(False):
        Dies("DataLoader worker (pid(s) 7) exited unexpectedly")  # finalised at once
        Dies("boom")
    with _quiet_dead_worker_finalisers(True):
        Dies("DataLoader worker (pid(s) 8) exited unexpectedly")
    Dies("DataLoader worker (pid(s) 9) exited unexpectedly")  # outside a run: Python's own report
    assert seen == [
        "boom",
        "DataLoader worker (pid(s) 8) exited unexpectedly",
        "DataLoader worker (pid(s) 9) exited unexpectedly",
    ]
