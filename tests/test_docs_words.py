"""The README and docs speak to users about the software: no words about how it was developed (sessions,
leads, helpers, briefs, lent machines, issue numbers, the development contract's path, dated log entries),
no test counts that go stale, and every docs page is linked from the README. The package and the tests
describe properties, not the issues they came from. CHANGELOG.md (the history) is exempt. Each finding is
named as ``file:line: the word``."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
DOCS = sorted((REPO / "docs").rglob("*.md"))
USER_TEXT = [REPO / "README.md", *DOCS]

#: words and patterns that speak of the development process, with what each catches
PROCESS_WORDS = {
    "session": re.compile(r"\bsessions?\b", re.I),
    "the lead": re.compile(r"\b(?:the|a) lead\b(?!\s+(?:to|in)\b)|\blead(?:'s|s')\b", re.I),
    "helper": re.compile(r"\bhelpers?\b", re.I),
    "brief": re.compile(r"\bbrief\b", re.I),
    "lent": re.compile(r"\blent\b", re.I),
    # the word "issue" and a number, joined by a space, "#", "-" or "_"; a number in brackets after "#"; and a
    # number on the next line (also in a comment); the cases are spelled out in test_the_scan_catches_each_kind_of_word
    "issue number": re.compile(r"\bissues?(?:[\s_#-]|\n\s*#)*\d+|\(#\d+\)", re.I),
    "development contract": re.compile(r"\.\./shared|\bDESIGN\.md\b"),
    "issue as a task": re.compile(r"\bthe issue's\b|\w_issue_\w", re.I),
    "dated entry": re.compile(r"\b20\d\d-\d\d-\d\d\b|\b\d\d:\d\d(?:-\d\d:\d\d)? UTC\b"),
}
#: a number of tests, passes, failures or skips: stale as soon as a test is added
TEST_COUNT = re.compile(
    r"\b\d[\d,]*\s+(?:tests?(?=\s+(?:in|ran|run|pass|took|collected)\b|\s*[,;:.)]|\s*$)|passed|failed|skipped)\b",
    re.I,
)
#: the package and the tests: issue numbers and the development contract only ("helper" and "session"
#: are ordinary words in code: a helper function, a pytest session fixture)
CODE_WORDS = {k: PROCESS_WORDS[k] for k in ("issue number", "issue as a task", "development contract")}


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO)) if path.is_relative_to(REPO) else str(path)


def findings(paths: list[Path], words: dict[str, re.Pattern], counts: bool) -> list[str]:
    """``path:line: word`` for every match in ``paths`` (words are matched on the whole text, so a phrase
    broken over two lines is found, at its first line; test counts line by line).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     p = Path(d) / "a.md"
    ...     _ = p.write_text("fine\\nas the lead said (issue " + "12)\\n365 tests in 3 min\\n")
    ...     [f.split("a.md:")[1].split(" (")[0] for f in findings([p], PROCESS_WORDS, counts=True)]
    ['2: the lead', '2: issue number', '3: test count']
    """
    out = []
    for path in paths:
        text = path.read_text(encoding="utf-8", errors="replace")
        hits = [
            (text.count("\n", 0, m.start()) + 1, m.start(), f"{name} ({' '.join(m.group(0).split())})")
            for name, rx in words.items()
            for m in rx.finditer(text)
        ]
        if counts:
            hits += [
                (n, 0, f"test count ({m.group(0)})")
                for n, line in enumerate(text.splitlines(), 1)
                for m in TEST_COUNT.finditer(line)
            ]
        out += [f"{_rel(path)}:{n}: {what}" for n, _, what in sorted(hits, key=lambda h: h[:2])]
    return out


def test_readme_and_docs_speak_about_the_software():
    """No development-process word anywhere; no test count in docs/ (the README's, where it states one, is
    checked against the suite by the slow test below)."""
    found = findings([REPO / "README.md"], PROCESS_WORDS, counts=False) + findings(
        DOCS, PROCESS_WORDS, counts=True
    )
    assert not found, "\n".join(found)


def test_package_and_tests_describe_properties_not_issues():
    paths = [
        p
        for folder in ("genmetrics", "tests", "benchmarks", "examples")
        for p in sorted((REPO / folder).rglob("*"))
        if p.suffix in (".py", ".c", ".md", ".toml", ".yaml", ".yml") and p.is_file()
    ]
    paths += [p for p in (REPO / ".ci").glob("*") if p.is_file()]
    assert {p.relative_to(REPO).parts[0] for p in paths} >= {"genmetrics", "tests", "benchmarks"}
    found = findings([p for p in paths if p.name != "test_docs_words.py"], CODE_WORDS, counts=False)
    assert not found, "\n".join(found)


def test_every_docs_page_is_linked_from_the_readme():
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    linked = {(REPO / m).resolve() for m in re.findall(r"\]\(([^)#\s]+\.md)\)", readme)}
    missing = [str(p.relative_to(REPO)) for p in DOCS if p.resolve() not in linked]
    assert not missing, f"README.md links none of {missing}: add them to its Documentation list"
    assert (REPO / "CHANGELOG.md").resolve() in linked


def test_the_scan_catches_each_kind_of_word(tmp_path):
    """Each pattern goes red on a line it is meant to catch and stays quiet on ordinary prose."""
    bad = [
        ("session", "measured in this session"),
        ("the lead", "the lead's measurement"),
        ("helper", "a helper ran it"),
        ("brief", "as the brief asked"),
        ("lent", "no GPU was lent"),
        # built from parts, so that this file holds no issue number itself
        ("issue number", "fixed in issue " + "26.2 and the issue-" + "22 catalogue (#" + "12)"),
        ("issue number", "see issue #" + "12 and issue_" + "22"),
        ("issue number", "the goals of issue\n    12 for every variant"),
        ("issue number", "# see issue\n    # 12"),
        ("development contract", "read ../shared/DESIGN.md first"),
        ("issue as a task", "asserts the issue's goals"),
        ("issue as a task", "def test_within_issue_tolerance():"),
        ("dated entry", "### Recheck (2026-12-02, 03:20-03:35 UTC)"),
    ]
    for i, (name, line) in enumerate(bad):
        p = tmp_path / f"case{i}.md"
        p.write_text(f"intro\n{line}\n")
        assert any(f"case{i}.md:2: {name} (" in f for f in findings([p], PROCESS_WORDS, counts=False)), line
        if name in CODE_WORDS:  # the package and the tests are held to the same
            assert findings([p], CODE_WORDS, counts=False), line
    ok = tmp_path / "ok.md"
    ok.write_text("A bad input can lead to an error; the issue is the file's size (2 GiB), 3 images.\n")
    assert not findings([ok], PROCESS_WORDS, counts=True)


@pytest.mark.slow
def test_a_test_count_in_the_readme_matches_the_suite():
    """Where the README states how many tests its command runs, the number is the one pytest collects with
    the default selection (within 5%: tests skipped at collection on some machines)."""
    readme = (REPO / "README.md").read_text(encoding="utf-8")
    stated = [int(m.group(0).split()[0].replace(",", "")) for m in TEST_COUNT.finditer(readme)]
    if not stated:
        pytest.skip("the README states no test count")
    out = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider"],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=600,
    ).stdout
    collected = int(re.search(r"(\d+)(?:/\d+)? tests? collected", out).group(1))
    assert all(abs(n - collected) <= 0.05 * collected for n in stated), (stated, collected)
