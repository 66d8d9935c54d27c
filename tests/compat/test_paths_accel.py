"""Old public module paths of the fast paths keep working: each re-exports the same objects as the new home."""

from __future__ import annotations

import importlib

import pytest

#: old path -> new home (docs named ``genmetrics.backbones.fastpath.force_path``)
MOVED = {"genmetrics.backbones.fastpath": "genmetrics.accel.fastpath"}


@pytest.mark.parametrize("old", sorted(MOVED))
def test_an_old_path_re_exports_the_new_home_s_objects(old):
    before, after = importlib.import_module(old), importlib.import_module(MOVED[old])
    names = list(before.__all__)
    assert "force_path" in names and "choose_path" in names
    for name in names:
        assert getattr(before, name) is getattr(after, name), name
    defined_here = [n for n, v in vars(before).items() if getattr(v, "__module__", None) == old]
    assert not defined_here, f"{old} must only re-export, but defines {defined_here}"
