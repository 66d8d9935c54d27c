"""Run the second catalogue of hostile inputs (``hostile.py``) and check the five guarantees around each
case: no payload ran, nothing outside the output folder changed, and (inside each case) no data loss, no
silent wrong result and no raw traceback."""

from __future__ import annotations

from pathlib import Path

import pytest

from .hostile import CASES, Ctx, snapshot


def _param(c):
    marks = []
    if c.slow:
        marks.append(pytest.mark.slow)
    if c.xfail:
        marks.append(pytest.mark.xfail(strict=c.xfail_strict, reason=c.xfail))
    return pytest.param(c, id=c.id, marks=marks)


def test_catalogue_is_large_fresh_and_documented():
    from .catalogue import CASES as OLD

    ids = [c.id for c in CASES]
    assert len(ids) >= 60 and len(ids) == len(set(ids))
    assert not set(ids) & {c.id for c in OLD}
    assert {c.cls for c in CASES} == {"pickle", "link", "poison", "fault", "silent"}
    doc = (Path(__file__).parents[2] / "docs" / "errors.md").read_text()
    missing = [i for i in ids if f"`{i}`" not in doc]
    assert not missing, f"docs/errors.md lacks {missing}"


@pytest.mark.parametrize("case", [_param(c) for c in CASES])
def test_hostile(case, tmp_path, capsys, monkeypatch):
    ctx = Ctx(tmp_path, capsys, monkeypatch)
    case.run(ctx)
    assert ctx.frozen is not None, "the case never called ctx.freeze()"
    assert not ctx.marker.exists(), "a pickle payload ran"
    after = snapshot(tmp_path, ctx.allowed)
    changed = sorted(k for k in set(ctx.frozen) | set(after) if ctx.frozen.get(k) != after.get(k))
    assert not changed, f"written outside the output folder: {changed}"
