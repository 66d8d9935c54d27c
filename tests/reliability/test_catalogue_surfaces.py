"""The catalogue of the newer surfaces (``catalogue_surfaces.py``): its judge on planted outcomes (fast), and the
whole catalogue run as a script with 0 cases in each bad class (slow)."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter
from pathlib import Path

import pytest

from genmetrics.data.text.escape import file_stem

from . import catalogue_surfaces as cs

HERE = Path(__file__).resolve().parent


def test_catalogue_is_large_fresh_and_spread_over_the_surfaces():
    ids = [c.id for c in cs.CASES]
    assert len(ids) >= 80 and len(ids) == len(set(ids))
    from .catalogue import CASES as OLD
    from .hostile import all_cases

    OLD2 = all_cases()

    assert not set(ids) & ({c.id for c in OLD} | {c.id for c in OLD2})
    per_surface = Counter(c.surface for c in cs.CASES)
    assert set(per_surface) == {"weights", "reports", "state", "train", "fastpath", "configs", "pipeline"}
    assert min(per_surface.values()) >= 12, per_surface
    # every expectation is specific: an exit code, a named error or a measured bound
    vague = [
        c.id
        for c in cs.CASES
        if not any(w in c.expect for w in ("exit", "Error", "MB", "identical", "warning"))
    ]
    assert not vague, vague


def _proc(rc, err="", out="", **kw):
    return cs.Proc(rc, out, err, 1.0, **kw)


@pytest.mark.parametrize(
    ("proc", "cls"),
    [
        (_proc(2, "error: config lb.toml: run.seed too large\n"), "ok"),
        (_proc(2, "warning: x\nerror: config lb.toml: run.seed too large\n"), "ok"),
        (_proc(2, "Traceback (most recent call last):\n  File x\nKeyError: 'seed'\n"), "traceback"),
        (_proc(0, ""), "silent"),
        (_proc(2, "error: Overflow when unpacking long long\n"), "unclear"),  # does not name the input
        (_proc(1, "error: config lb.toml: run.seed too large\n"), "unclear"),  # wrong exit code
        (_proc(2, "error: config lb.toml: seed\nerror: again\n"), "unclear"),  # two lines
        (_proc(-9, ""), "unclear"),
        (_proc(-9, "", timed_out=True), "hang"),
    ],
)
def test_refused_classifies_each_outcome(proc, cls):
    """Mutations: dropping the Traceback check turns row 3 'unclear'; dropping the fragment check row 5 'ok'."""
    assert cs.refused(proc, (2,), "lb.toml", "seed")[0] == cls


def test_api_refused_tells_our_errors_from_raw_ones():
    def run(outcome, **kw):
        return cs.api_refused(
            _proc(0, out="RESULT " + json.dumps({"outcome": outcome, **kw}) + "\n"), "max_db"
        )

    assert run("raised", type="InputError", msg="psnr: max_db differ", ours=True)[0] == "ok"
    assert run("raised", type="KeyError", msg="'files'", ours=False)[0] == "traceback"
    assert run("raised", type="InputError", msg="psnr: options differ", ours=True)[0] == "unclear"
    assert run("accepted", detail="30.0")[0] == "silent"


@pytest.mark.parametrize(
    ("name", "text", "live"),
    [
        ("leaderboard.md", "| 1 | ![t](http://h/t.png) |", True),
        ("leaderboard.md", "| 1 | !\\[t\\](http://h/t.png) |", False),
        ("leaderboard.md", "[c](javascript:alert(1))", True),
        ("leaderboard.md", "&lt;img src=x onerror=USERTAG&gt;", False),
        ("leaderboard.md", "<img src=x onerror=USERTAG>", True),
        ("leaderboard.html", "<td>![t](http://h/t.png)</td>", False),  # Markdown is inert in HTML
        ("leaderboard.html", "<td><img src=x onerror=USERTAG></td>", True),
        (
            "leaderboard.html",
            '<img alt="&lt;img src=x onerror=USERTAG&gt;" src="data:image/png;base64,AA">',
            False,
        ),
        ("leaderboard.html", '<a href="javascript:alert(1)">x</a>', True),
        ("leaderboard.csv", 'rank,generator\n1,"=HYPERLINK(""http://h"")"\n', True),
        ("leaderboard.csv", "rank,generator\n1,'=HYPERLINK(x)\n2,-3.5\n", False),
    ],
)
def test_scan_reports_finds_live_content_only(tmp_path, name, text, live):
    (tmp_path / name).write_text(text)
    assert bool(cs._scan_reports(tmp_path)) == live


MD_PAYLOADS = [
    "[c](javascript:alert(1))",
    "<img src=x onerror=USERTAG>",
    "<img src=x onerror=USERTAG> ![t](http://127.0.0.1:9/t.png)",
    "<script>USERTAG</script>",
]


def _board_md(name: str, esc) -> str:
    """A leaderboard.md shaped as the report writes it: the title heading, a table cell, a gallery link."""
    return (
        f"# {esc(name)}\n\n| rank | generator |\n|---:|:---|\n| 1 | {esc(name)} |\n\n"
        f"Per-sample galleries: [{esc(name)}](gallery/{file_stem(name)}.html), [plain](gallery/plain.html)\n"
    )


@pytest.mark.parametrize("name", MD_PAYLOADS)
def test_scan_reports_judges_markdown_as_a_real_renderer_shows_it(tmp_path, name):
    markdown_it = pytest.importorskip("markdown_it")
    from html.parser import HTMLParser

    from genmetrics.data.text.escape import md_text

    page = markdown_it.MarkdownIt("commonmark").enable("table").render(_board_md(name, md_text))
    tags: list[str] = []
    text: list[str] = []
    parser = HTMLParser(convert_charrefs=True)
    parser.handle_starttag = lambda tag, attrs: tags.append(tag)
    parser.handle_data = text.append
    parser.feed(page)
    # the renderer shows the escaped name as its own text, three times, and builds no tag from it
    assert "".join(text).count(name) == 3 and set(tags) <= {"h1", "p", "table", "thead", "tbody", "tr"} | {
        "th",
        "td",
        "a",
    }, page
    (tmp_path / "leaderboard.md").write_text(_board_md(name, md_text))
    assert cs._scan_reports(tmp_path) == []  # escaped text is not live
    (tmp_path / "leaderboard.md").write_text(_board_md(name, str))
    assert cs._scan_reports(tmp_path)  # the same text unescaped is


@pytest.mark.slow
def test_every_case_is_in_a_good_class(tmp_path):
    """The whole catalogue, as the script runs it: 0 security, loss, silent, traceback, hang, unclear."""
    out = tmp_path / "surfaces.json"
    r = subprocess.run(
        [sys.executable, str(HERE / "catalogue_surfaces.py"), "--json", str(out)],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert out.exists(), r.stderr[-3000:]
    data = json.loads(out.read_text())
    bad = [
        f"{row['id']} [{row['class']}]: {row['observation']}"
        for row in data["rows"]
        if row["class"] in cs.BAD
    ]
    for cls in cs.BAD:
        assert data["counts"][cls] == 0, "\n".join(bad)
