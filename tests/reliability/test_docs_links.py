"""User docs (README.md and docs/*.md; docs/dev/ holds developers' notes) cite papers by title and link and
never point outside the repository: no ``shared/...`` paths, no DESIGN sections, no developer notes among
them, and every relative Markdown link resolves to a file in the repository."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
USER_DOCS = sorted((REPO / "docs").glob("*.md")) + [REPO / "README.md"]
# contributing.md is the developers' page: it may name the design contract
OUTSIDE = re.compile(r"shared/|\bDESIGN\b|DESIGN\.md|/work/")


@pytest.mark.parametrize("page", [p for p in USER_DOCS if p.name != "contributing.md"], ids=lambda p: p.name)
def test_user_docs_do_not_point_outside_the_repository(page):
    bad = [
        f"{page.name}:{i}: {ln.strip()}"
        for i, ln in enumerate(page.read_text().splitlines(), 1)
        if OUTSIDE.search(ln)
    ]
    assert not bad, "\n".join(bad)


def test_developer_notes_left_the_user_docs():
    assert not [p.name for p in USER_DOCS if p.name.startswith("_")]
    assert (REPO / "docs" / "dev" / "notes_vlm.md").is_file()


@pytest.mark.parametrize("page", USER_DOCS, ids=lambda p: p.name)
def test_relative_links_resolve(page):
    text = re.sub(r"```.*?```|`[^`\n]*`", "", page.read_text(), flags=re.S)  # code shows output, not links
    for target in re.findall(r"\]\(([^)\s]+)\)", text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue
        path = (page.parent / target.split("#")[0]).resolve()
        assert path.exists() and REPO in path.parents, (
            f"{page.name}: link {target} does not resolve in the repository"
        )


def test_paper_citations_have_a_title_and_a_link():
    for page, title in [
        ("raclip.md", "RA-CLIPScore: Making Generative Model Evaluation More Interpretable"),
        ("tpips.md", "Text-Prompted Image"),
        ("mie.md", "MIBE: Multi-subject Interaction Benchmark"),
    ]:
        text = (REPO / "docs" / page).read_text()
        assert title in text, page
        at = text.index(title)
        assert "](https://" in text[at : at + 300], f"{page}: no link next to the title"
