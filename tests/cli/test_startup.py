"""Start-up: list, info and --help import neither torch nor torchmetrics; info's options read
from the source equal the imported signatures."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from genmetrics.core.registry import alias_of, get_card, list_metrics, metric_class
from genmetrics.core.static_options import static_options

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


def test_static_options_equal_the_imported_signatures():
    import inspect

    for name in list_metrics():
        if alias_of(name):
            continue
        static = static_options(get_card(name).factory)
        assert static is not None, name
        expected = {}
        for klass in metric_class(name).__mro__:
            init = klass.__dict__.get("__init__")
            if init is None:
                continue
            params = inspect.signature(init).parameters
            for p, v in params.items():
                if p != "self" and v.kind not in (v.VAR_POSITIONAL, v.VAR_KEYWORD) and p not in expected:
                    expected[p] = None if v.default is inspect.Parameter.empty else repr(v.default)
            if not any(v.kind == v.VAR_KEYWORD for v in params.values()):
                break
        assert static == expected, name
