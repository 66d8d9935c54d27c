"""TPIPS' adapter judged before torch is imported (``genmetrics.tpips.hints.precheck``, the card's pre-check):
it raises what the adapter loader raises, word for word where the hub is asked, and leaves to it what it
cannot know."""

# ruff: noqa: F811 - `dead_hub` is a fixture imported from the offline-hub tests, named again as an argument

from __future__ import annotations

import pytest

from genmetrics.backbones.precheck import check_metric
from genmetrics.backbones.weights import hf_cache_dir
from genmetrics.core.registry import get_card
from genmetrics.tpips.adapter import adapter_folder
from genmetrics.tpips.hints import ADAPTER_HINT, precheck
from tests.cli.test_offline_hub import dead_hub  # noqa: F401 - a fixture
from tests.helpers import raised


@pytest.mark.parametrize("adapter", ["org/missing-adapter", "./no/such/adapter", "/no/such", "runs/a/final"])
def test_adapters_that_cannot_be_had_are_what_the_loader_says(adapter, dead_hub):
    said = raised(lambda: check_metric(get_card("tpips"), {"adapter": adapter}))
    assert said == raised(lambda: adapter_folder(adapter))
    assert said.endswith(ADAPTER_HINT)


def test_a_file_is_no_adapter_folder(dead_hub, tmp_path):
    (tmp_path / "adapter.safetensors").write_bytes(b"")
    path = str(tmp_path / "adapter.safetensors")
    assert raised(lambda: precheck({"adapter": path})) == raised(lambda: adapter_folder(path))


def test_what_may_load_is_left_to_the_metric(dead_hub, tmp_path):
    """No adapter, a folder holding ``tpips.json`` (the loader reads it), a hub id in the cache and a built
    model (the adapter is not read); a folder without it is named by the check in the loader's words
    (tests/backbones/test_precheck.py)."""
    precheck({})
    (tmp_path / "tpips.json").write_text("{}")
    precheck({"adapter": str(tmp_path)})
    (hf_cache_dir() / "models--org--cached").mkdir(parents=True)
    precheck({"adapter": "org/cached"})
    precheck({"adapter": "org/missing-adapter", "backbone": object()})
