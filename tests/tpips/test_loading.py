"""genmetrics.tpips.loading: adapter folders with malformed JSON or pickled weights are refused unread."""

from __future__ import annotations

import json

import pytest

from genmetrics.errors import InputError
from tests.reliability.hostile import Cases

# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case("h-tpips-json-malformed", "fault", "a TPIPS adapter folder whose tpips.json is not JSON")
def _(ctx):
    from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor
    from genmetrics.tpips.loading import load_tpips

    d = ctx.inp / "adapter"
    d.mkdir()
    (d / "tpips.json").write_text("{not json")
    ctx.freeze()
    ctx.refused(
        lambda: load_tpips(d, backbone=tiny_qwen3vl(seed=0), processor=tiny_qwen3vl_processor()), "tpips.json"
    )


@case("h-tpips-adapter-pth-payload", "pickle", "a TPIPS adapter folder with adapter_model.pth (payload)")
def _(ctx):
    from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor
    from genmetrics.tpips.loading import load_tpips

    d = ctx.inp / "adapter"
    d.mkdir()
    (d / "tpips.json").write_text(json.dumps({"variant": "late"}))
    ctx.payload(d / "adapter_model.pth")
    ctx.freeze()
    with pytest.raises((InputError, OSError)):
        load_tpips(d, backbone=tiny_qwen3vl(seed=0), processor=tiny_qwen3vl_processor())


test_hostile = HOSTILE.test()
