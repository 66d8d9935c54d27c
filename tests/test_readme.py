"""The README's Python blocks run as written (on the tiny random backbones, installed through the public
backbone-provider hook so that default-weights loaders return them), and its first two commands name
files and extras that exist."""

from __future__ import annotations

import re
import sys
from pathlib import Path

import pytest

from genmetrics.backbones.provider import use_provider
from genmetrics.testing import tiny_backbones

if sys.version_info >= (3, 11):
    import tomllib
else:
    import tomli as tomllib

REPO = Path(__file__).resolve().parents[1]
README = (REPO / "README.md").read_text(encoding="utf-8")


def python_blocks(text: str) -> list[str]:
    return re.findall(r"^```python\n(.*?)^```", text, flags=re.S | re.M)


def bash_blocks(text: str) -> list[str]:
    return re.findall(r"^```bash\n(.*?)^```", text, flags=re.S | re.M)


BLOCKS = python_blocks(README)


def test_readme_has_python_blocks():
    assert len(BLOCKS) >= 2


@pytest.mark.parametrize("index", range(len(BLOCKS)))
def test_readme_python_block_runs(index, capsys):
    with use_provider(tiny_backbones):
        exec(compile(BLOCKS[index], f"README.md[python block {index}]", "exec"), {"__name__": "__readme__"})
    assert capsys.readouterr().out.strip(), "each block prints what it shows"


def test_block_extraction_sees_each_fence():
    text = "x\n```python\na = 1\n```\n```bash\nls\n```\n```python\nb = 2\n```\n"
    assert python_blocks(text) == ["a = 1\n", "b = 2\n"] and bash_blocks(text) == ["ls\n"]


def test_first_two_commands_name_what_exists():
    first, second = bash_blocks(README)[:2]
    assert "pip install torch==2.14.1 torchvision==0.29.1 && pip install -e ." in first
    config = re.search(r"genmetrics leaderboard (\S+)", first).group(1)
    assert (REPO / config).is_file()
    extras = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["optional-dependencies"]
    extra = re.search(r'pip install -e "\.\[(\w+)\]"', second).group(1)
    assert extra in extras and "python -m pytest -q tests" in second


def test_default_selection_leaves_slow_and_distributed_out_and_the_readme_says_how_to_run_all():
    """The README's test command runs pyproject's default selection; CI (and the README) override it."""
    opts = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]
    assert "-m 'not slow and not distributed'" in opts["addopts"]
    assert {m.split(":")[0] for m in opts["markers"]} >= {"slow", "distributed"}
    assert 'python -m pytest -q -m "" tests' in README
    assert '-m "${CI_PYTEST_MARKERS:-}"' in (REPO / ".ci" / "run").read_text()
    cpu = [b for b in bash_blocks(README) if "download.pytorch.org/whl/cpu" in b]
    assert cpu and "torch==2.14.1 torchvision==0.29.1" in cpu[0]
