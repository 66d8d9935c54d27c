"""Every fenced block of README.md and docs/*.md is checked by some test, so a new block cannot
slip by unchecked. The kinds, by info string:

* ``python`` blocks run (``test_docs_examples.py``; README's in ``tests/test_readme.py``); ``python
  signatures`` are checked against the code; ``console runnable`` blocks run (``test_docs_commands.py``);
  blocks of ``genmetrics`` commands that cannot run say why (``synopsis``, ``needs-weights``, ``needs-data``)
  and have their flags checked against the CLI (``test_docs_examples.py``).
* ``bash`` blocks: every ``genmetrics`` line is checked as above; every ``python benchmarks/X.py`` line
  names a script that exists and only flags its argument parser defines (here); README's install lines
  are what CI runs on a clean venv.
* ``toml`` blocks parse (here), ``json`` blocks and every line of a plain block that starts with ``{``
  (benchmark lines pasted as measured) are JSON (here): an abridged or hand-edited line shows.
* Plain blocks hold program output and file trees: nothing to run.
"""

from __future__ import annotations

import json
import re
import shlex
import sys

import pytest

from .test_docs_commands import REPO
from .test_docs_examples import ALL, MARKS, Block

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

#: the info strings a block may carry (first word: language; later words: marks)
LANGUAGES = {"", "python", "console", "bash", "toml", "json", "text"}
OTHER_MARKS = {"signatures"}


def _lines(block: Block) -> list[str]:
    """The block's lines with ``\\`` continuations joined."""
    out: list[str] = []
    for raw in block.body.splitlines():
        if out and out[-1].endswith("\\"):
            out[-1] = out[-1][:-1] + " " + raw.strip()
        else:
            out.append(raw.rstrip())
    return out


def test_every_block_is_of_a_known_kind():
    odd = [
        f"{b} (info {' '.join(b.info)!r})"
        for b in ALL
        if (b.info[0] if b.info else "") not in LANGUAGES or set(b.info[1:]) - set(MARKS) - OTHER_MARKS
    ]
    assert not odd, (
        f"blocks of a kind no test checks (known: {sorted(LANGUAGES)}, marks {sorted(MARKS)}): {odd}"
    )


BENCH_LINES = [
    (b, line)
    for b in ALL
    if b.info[:1] == ["bash"]
    for line in _lines(b)
    if re.search(r"\bpython3? benchmarks/\w+\.py", line)
]


def test_docs_show_benchmark_commands():
    assert len(BENCH_LINES) >= 4, [str(b) for b, _ in BENCH_LINES]


@pytest.mark.parametrize("block,line", BENCH_LINES, ids=[f"{b}:{line[:40]}" for b, line in BENCH_LINES])
def test_benchmark_command_names_a_script_and_its_flags(block, line):
    words = shlex.split(line, comments=True)
    script = next(w for w in words if re.fullmatch(r"benchmarks/\w+\.py", w))
    path = REPO / script
    assert path.is_file(), f"{block}: {script} does not exist"
    source = path.read_text(encoding="utf-8")
    flags = [w.split("=")[0] for w in words[words.index(script) + 1 :] if w.startswith("--")]
    missing = [f for f in flags if f'"{f}"' not in source and f"'{f}'" not in source]
    assert not missing, f"{block}: {script} defines no option {missing}"


TOML = [b for b in ALL if b.info[:1] == ["toml"]]


@pytest.mark.parametrize("block", TOML, ids=str)
def test_toml_blocks_parse(block):
    tomllib.loads(block.body)


def _json_values(text: str) -> list[object]:
    """The JSON values of ``text`` in order (one per line, or one spread over several lines)."""
    decoder, out, i = json.JSONDecoder(), [], 0
    while i < len(text):
        if text[i].isspace():
            i += 1
            continue
        value, i = decoder.raw_decode(text, i)
        out.append(value)
    return out


JSON_BLOCKS = [b for b in ALL if b.info[:1] == ["json"]]
JSON_LINES = [
    (b, i, line)
    for b in ALL
    if not b.info
    for i, line in enumerate(b.body.splitlines())
    if line.lstrip().startswith("{")
]


def test_docs_show_benchmark_lines():
    assert len(JSON_LINES) >= 20 and JSON_BLOCKS, (len(JSON_LINES), len(JSON_BLOCKS))


@pytest.mark.parametrize("block", JSON_BLOCKS, ids=str)
def test_json_blocks_are_json(block):
    try:
        assert _json_values(block.body)
    except json.JSONDecodeError as e:
        pytest.fail(f"{block}: not JSON ({e})")


@pytest.mark.parametrize("block,i,line", JSON_LINES, ids=[f"{b}+{i}" for b, i, _ in JSON_LINES])
def test_json_lines_are_json(block, i, line):
    try:
        json.loads(line)
    except json.JSONDecodeError as e:
        pytest.fail(f"{block}+{i}: not a JSON line ({e}); paste benchmark lines whole: {line[:120]}")
