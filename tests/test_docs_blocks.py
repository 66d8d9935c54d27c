"""Every Python block of every user doc (README.md, docs/*.md; docs/dev/ is for developers) runs as written
in this test, on the tiny random backbones (installed through the public provider hook, as
tests/test_readme.py does for the README), or carries a marker on the line just before its fence saying
why it cannot: ``<!-- not run: needs weights -->`` (or ``needs a GPU``, ``needs your data``, ...). A block
added later is covered by the same rule without touching this file.

The blocks run in a temporary folder holding a link to the repository's ``examples/`` (what "run from the
repository's root" gives them), so nothing they write lands in the checkout. README blocks are run by
tests/test_readme.py and only checked for the rule here.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from genmetrics.backbones.provider import use_provider
from genmetrics.registry import unregister_metric
from genmetrics.testing import tiny_backbones

REPO = Path(__file__).resolve().parents[1]
USER_DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]
FENCE = re.compile(r"^```(\S*)[^\n]*\n(.*?)^```[ \t]*$", re.S | re.M)
MARK = re.compile(r"^<!-- not run: (\S.*?) -->$")
CODE = {"python", "py"}


def blocks(text: str) -> list[tuple[int, str, str, str | None]]:
    """``(line, language, body, reason)`` per fenced block at the start of a line; ``reason`` is the
    ``not run`` marker on the last non-blank line before the fence (``None`` when there is none)."""
    out = []
    for m in FENCE.finditer(text):
        line = text.count("\n", 0, m.start()) + 1
        before = [s for s in text[: m.start()].splitlines() if s.strip()]
        mark = MARK.match(before[-1].strip()) if before else None
        out.append((line, m.group(1).lower(), m.group(2), mark.group(1) if mark else None))
    return out


def python_blocks() -> list[tuple[Path, int, str, str | None]]:
    return [
        (doc, line, body, reason)
        for doc in USER_DOCS
        for line, lang, body, reason in blocks(doc.read_text(encoding="utf-8"))
        if lang in CODE
    ]


RUN = [
    (d, line, body) for d, line, body, reason in python_blocks() if reason is None and d.name != "README.md"
]


def test_block_reader_sees_fences_and_markers():
    text = "a\n<!-- not run: needs weights -->\n\n```python\nx = 1\n```\n```python signatures\nf(x)\n```\n"
    assert blocks(text) == [(4, "python", "x = 1\n", "needs weights"), (7, "python", "f(x)\n", None)]


def test_every_python_block_runs_or_says_why_not():
    """The rule itself: a block is run below unless it is marked; a marker names a reason."""
    found = python_blocks()
    assert len(found) >= 15 and len(RUN) >= 3
    for doc, line, _, reason in found:
        assert reason is None or len(reason) > 5, f"{doc.name}:{line}: a 'not run' marker needs a reason"


@pytest.mark.parametrize("doc,line,body", RUN, ids=[f"{d.name}:{line}" for d, line, _ in RUN])
def test_docs_python_block_runs(doc, line, body, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "examples").symlink_to(REPO / "examples", target_is_directory=True)
    try:
        with use_provider(tiny_backbones):
            exec(compile(body, f"{doc.name}[block at line {line}]", "exec"), {"__name__": "__docs__"})
    finally:
        unregister_metric("my_metric")  # docs/contributing.md registers an example card
