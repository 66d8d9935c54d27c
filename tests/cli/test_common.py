"""CLI helpers (genmetrics.cli.common): ``--option KEY=VALUE`` parses JSON, then Python literals (never code),
else keeps the text; every option hint the package's messages give parses back to a value, so what the CLI
suggests, the CLI accepts (``score ms_ssim`` suggests ``betas=(0.0448, ...)``, which must come back as a tuple,
not as its text); ``echo_json`` prints what ``json`` reads back.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import genmetrics
from genmetrics.cli.common import echo_json, parse_options
from genmetrics.cli.main import main
from genmetrics.core.registry import list_metrics, metric_options
from genmetrics.errors import InputError

ROOT = Path(__file__).resolve().parents[2]
DATA = ROOT / "examples" / "quickstart" / "data"
#: an option hint in a message: ``e.g. KEY=VALUE`` or ``--option KEY=VALUE`` (VALUE up to a closing bracket)
HINT = re.compile(r"(?:e\.g\. |--option '?)(\w+=(?:\([^)]*\)|\[[^\]]*\]|[^\s'`;,)]+))")


#: every option some metric takes (what ``--option KEY=VALUE`` is for)
OPTIONS = {k for n in list_metrics() for k in metric_options(n)}


def _source_hints() -> list[tuple[str, str]]:
    """Every metric-option hint written in a string of genmetrics' source (messages, help texts), with its
    file (``e.g. ids=[...]`` of Python code is not an option hint)."""
    found = []
    for path in sorted(Path(genmetrics.__file__).parent.rglob("*.py")):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                found += [
                    (path.name, m)
                    for m in HINT.findall(node.value)
                    if "..." not in m and m.split("=")[0] in OPTIONS
                ]
    return found


HINTS = _source_hints()


def test_hints_are_found():
    assert ("pixel.py", "betas=(0.0448, 0.2856, 0.3001)") in HINTS


@pytest.mark.parametrize("where,hint", HINTS, ids=[f"{w}:{h}" for w, h in HINTS])
def test_every_option_hint_parses_to_a_value(where, hint):
    key, value = hint.split("=", 1)
    parsed = parse_options([hint])[key]
    if value[:1] in "([":  # a tuple or list: a value, never the text of one
        assert isinstance(parsed, (tuple, list)) and len(parsed) == value.count(",") + 1, (where, parsed)


def test_the_ms_ssim_hint_is_accepted_when_given_back(capsys):
    argv = ["score", "ms_ssim", "--reference", str(DATA / "refs"), "--candidates", str(DATA / "gen" / "blur")]
    assert main(argv) == 2
    err = capsys.readouterr().err
    hint = HINT.search(err).group(1)
    assert hint.startswith("betas=(")
    assert main([*argv, "--option", hint]) == 0, capsys.readouterr().err
    assert "ms_ssim:" in capsys.readouterr().out


@pytest.mark.parametrize(
    "value",
    [16, -0.5, True, None, [1, 2], {"a": [1.5, None]}, "ViT-B-32/openai", (0.0448, 0.2856), "(", "x=y"],
    ids=repr,
)
def test_parse_options_round_trips_the_spellings_messages_use(value):
    """A value written as JSON, or as a Python literal for a tuple, parses back to itself; anything else is
    kept as its text."""
    text = (
        repr(value) if isinstance(value, tuple) else (value if isinstance(value, str) else json.dumps(value))
    )
    assert parse_options([f"key={text}"]) == {"key": value}


def test_parse_options_never_runs_code(tmp_path):
    marker = tmp_path / "ran"
    text = f"__import__('pathlib').Path({str(marker)!r}).touch()"
    assert parse_options([f"k={text}"]) == {"k": text}  # kept as text, not evaluated
    assert not marker.exists()
    assert parse_options(["k=" + "(" * 20_000]) == {"k": "(" * 20_000}  # too long to be a value: text


@pytest.mark.parametrize("bad", ["batch_size", "=16", ""])
def test_parse_options_without_key_or_equals_names_the_item(bad):
    with pytest.raises(InputError, match=rf"--option {bad!r}: expected KEY=VALUE"):
        parse_options([bad])


def test_echo_json_prints_what_json_reads_back(capsys):
    import math

    import torch

    echo_json({"path": Path("a/b.png"), "t": torch.tensor([1.0, 2.0]), "nan": math.nan, 3: (1, 2)})
    got = json.loads(capsys.readouterr().out)
    assert got == {"path": str(Path("a/b.png")), "t": [1.0, 2.0], "nan": None, "3": [1, 2]}


@pytest.mark.parametrize("pairs", [["max_db=20", "max_db=60"], ["max_db=20", " max_db =20"]])
def test_parse_options_refuses_a_key_given_twice(pairs):
    """Red before: the last value won and the other was dropped without a word (even a conflicting one)."""
    with pytest.raises(InputError) as info:
        parse_options(pairs)
    msg = str(info.value)
    assert "--option max_db: given twice" in msg and all(repr(p) in msg for p in pairs)
    assert parse_options(pairs[:1]) == {"max_db": 20}  # once: as before
