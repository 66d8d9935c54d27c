"""What the CLI suggests, the CLI accepts: option hints parse back through ``--option``, commands get close
matches, and ``genmetrics info`` shows no contradictory fields.

Red before the fix: ``score ms_ssim`` suggested ``betas=(0.0448, ...)``, which ``--option`` passed on as the text
``'(0.0448, ...)'`` and the metric refused; ``genmetrics scor`` named no close match; ``info psnr`` showed
``condition: none`` beside ``condition_need: required``; ``info mie`` said ``default_weights: None`` where
``weights list`` said ``Qwen/Qwen3.5-4B``.
"""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

import genmetrics
from genmetrics.cli.common import parse_options
from genmetrics.cli.main import main
from genmetrics.cli.weights import metric_weights
from genmetrics.core.option_docs import describe_options, options_section
from genmetrics.core.registry import alias_of, list_metrics, metric_class, metric_info, metric_options

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


@pytest.mark.parametrize("name", list_metrics())
def test_info_has_no_contradictory_fields(name):
    info = metric_info(name)
    for role in ("reference", "condition"):
        if info[role] == "none":  # an input the metric does not take is neither required nor optional
            assert info[f"{role}_need"] is None and info[f"{role}_option"] is None
        else:
            assert info[f"{role}_need"] in ("required", "optional")
    assert ([info["default_weights"]] if info["default_weights"] else []) == metric_weights(name)


@pytest.mark.parametrize("name", [n for n in list_metrics() if alias_of(n) is None])
def test_info_describes_every_option_from_the_table_the_docstring_uses(name, capsys):
    """Each option: default, allowed values and description, from genmetrics.core.option_docs; the class docstring
    carries the same lines (red before: options had only their default)."""
    defaults = metric_options(name)
    described = describe_options(name, defaults)
    missing = [k for k, d in described.items() if not (d["allowed"] and d["description"])]
    assert not missing, f"{name}: options without a description in genmetrics.core.option_docs: {missing}"
    assert main(["info", name, "--json"]) == 0
    shown = json.loads(capsys.readouterr().out)["options"]
    assert shown == described
    doc = metric_class(name).__doc__
    assert options_section(name, defaults) in doc
