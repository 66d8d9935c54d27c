"""Every ``KEY=VALUE`` hint written in genmetrics' messages with a literal value (``resize='to_first'``,
``precision='fp32'``, ``betas=(0.0448, 0.2856, 0.3001)``, ``data_range=255.0``), for any option of any
metric, given back through ``--option KEY=VALUE`` is the value it names, never its text: the messages speak
Python, and the command line accepts the same spelling (tests/cli/test_cli_hints.py gives the ``--option``
and ``e.g.`` hints back to the command itself).

Red before the fix: a single-quoted value stayed text with its quotes (``resize="'to_first'"``), which the
metric refused.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

import pytest

import genmetrics
from genmetrics.cli.common import parse_options
from genmetrics.core.registry import create_metric, list_metrics, metric_options

OPTIONS = sorted({k for n in list_metrics() for k in metric_options(n)}, key=len, reverse=True)
#: ``KEY=VALUE`` with a literal VALUE: a quoted string, a number, a tuple or list, True / False / None
LITERAL_HINT = re.compile(
    r"(?<![\w.])(" + "|".join(OPTIONS) + r")="
    r"('[^'\s]*'|\"[^\"\s]*\"|-?\d+(?:\.\d+)?(?:e-?\d+)?\b|\([^()]*\)|\[[^\[\]]*\]|True\b|False\b|None\b)"
)


def _is_literal(value: str) -> bool:
    try:
        ast.literal_eval(value)
    except (ValueError, SyntaxError):
        return False
    return True


def _literal_hints() -> list[tuple[str, str, str]]:
    found: dict[tuple[str, str], str] = {}
    for path in sorted(Path(genmetrics.__file__).parent.rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                for key, value in LITERAL_HINT.findall(node.value):
                    if "..." not in value and _is_literal(value):  # a bad value shown as such is no hint
                        found.setdefault((key, value), path.name)
    return [(where, key, value) for (key, value), where in sorted(found.items())]


HINTS = _literal_hints()


def test_the_python_spelled_hints_are_found():
    pairs = {(k, v) for _, k, v in HINTS}
    assert {("resize", "'to_first'"), ("betas", "(0.0448, 0.2856, 0.3001)"), ("data_range", "255.0")} <= pairs


@pytest.mark.parametrize("where,key,value", HINTS, ids=[f"{w}:{k}={v}" for w, k, v in HINTS])
def test_every_literal_hint_given_back_is_its_value(where, key, value):
    assert parse_options([f"{key}={value}"])[key] == ast.literal_eval(value), where


def test_the_psnr_size_hint_builds_the_metric_it_names():
    resize = parse_options(["resize='to_first'"])["resize"]
    metric = create_metric("psnr", resize=resize)  # refused as the text "'to_first'" before
    assert type(metric) is type(create_metric("psnr", resize="to_first"))
