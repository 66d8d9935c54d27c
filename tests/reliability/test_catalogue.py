"""Run the catalogue of bad inputs against the Python API and the CLI."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from genmetrics.cli.main import main

from .catalogue import CASES, make_workspace, skip_without_needs


@pytest.fixture(scope="module")
def ws(tmp_path_factory):
    return make_workspace(tmp_path_factory.mktemp("catalogue"))


def test_catalogue_is_large_and_documented():
    assert len(CASES) >= 100
    ids = [c.id for c in CASES]
    assert len(ids) == len(set(ids))
    doc = (Path(__file__).parents[2] / "docs" / "errors.md").read_text()
    missing = [i for i in ids if f"`{i}`" not in doc]
    assert not missing, f"docs/errors.md lacks {missing}"


def test_hostile_cases_are_many_fresh_and_documented():
    """The hostile cases kept in the test file of the module each attacks (``tests/reliability/hostile.py``)."""
    from .hostile import all_cases

    hostile = all_cases()
    ids = [c.id for c in hostile]
    assert len(ids) >= 60 and len(ids) == len(set(ids))
    assert not set(ids) & {c.id for c in CASES}
    assert {c.cls for c in hostile} == {"pickle", "link", "poison", "fault", "silent"}
    doc = (Path(__file__).parents[2] / "docs" / "errors.md").read_text()
    missing = [i for i in ids if f"`{i}`" not in doc]
    assert not missing, f"docs/errors.md lacks {missing}"


@pytest.mark.parametrize("case", [c for c in CASES if c.api], ids=lambda c: c.id)
def test_api(case, ws):
    skip_without_needs(case)
    if case.error is None:
        case.api(ws)
        return
    with pytest.raises(case.error) as e:
        case.api(ws)
    assert case.fragment in str(e.value), str(e.value)


@pytest.mark.parametrize("case", [c for c in CASES if c.cli], ids=lambda c: c.id)
def test_cli(case, ws, capsys, monkeypatch):
    skip_without_needs(case)
    for k, v in (case.env or {}).items():
        monkeypatch.setenv(k, v)
    rc = main(case.cli(ws))
    out = capsys.readouterr()
    assert "Traceback" not in out.err
    if case.error is None:
        assert rc == 0, out.err
        assert case.fragment in out.out + out.err
        return
    assert rc == case.exit_code, out.err
    lines = [
        ln
        for ln in out.err.splitlines()
        if ln.strip() and not ln.startswith(("WARNING", "ERROR:root", "warning: "))
    ]
    assert len(lines) == 1 and lines[0].startswith("error: "), out.err
    assert case.fragment in lines[0] or re.search(case.fragment, lines[0]), lines[0]
