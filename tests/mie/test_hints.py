"""MIE's heads judged before torch is imported (``genmetrics.mie.hints.precheck``, the card's pre-check): it
raises what the metric and its loader raise, word for word where the hub is asked, and leaves to them what
it cannot know."""

# ruff: noqa: F811 - `dead_hub` is a fixture imported from the offline-hub tests, named again as an argument

from __future__ import annotations

import pytest

from genmetrics.backbones.precheck import check_metric
from genmetrics.backbones.weights import hf_cache_dir
from genmetrics.core.registry import create_metric, get_card
from genmetrics.mie.checkpoint import resolve_heads
from genmetrics.mie.hints import TRAIN_HINT, precheck
from tests.cli.test_offline_hub import dead_hub  # noqa: F401 - a fixture
from tests.helpers import raised


def test_no_heads_is_what_the_metric_says():
    said = raised(lambda: check_metric(get_card("mie"), {"batch_size": 2}))
    assert said == raised(lambda: create_metric("mie", batch_size=2))
    assert said.startswith("the mie metric needs trained heads") and said.endswith(TRAIN_HINT)


@pytest.mark.parametrize("heads", ["org/missing-heads", "./no/such/run", "~/no/such/run", "runs/a/best"])
def test_heads_that_cannot_be_had_are_what_the_loader_says(heads, dead_hub):
    """A hub id no cache holds with the hub unreachable, and local paths that do not exist: the pre-check's
    words equal resolve_heads' (the loader the metric calls)."""
    said = raised(lambda: precheck({"heads": heads}))
    assert said == raised(lambda: resolve_heads(heads))
    assert said.endswith(TRAIN_HINT) and heads in said


def test_offline_a_hub_id_is_refused_with_the_loaders_words_but_the_cause(monkeypatch):
    """Downloads off: the loader adds the cache's own exception in parentheses, the pre-check (which asked
    nothing) says offline mode; the rest is the same."""
    monkeypatch.setenv("GENMETRICS_OFFLINE", "1")
    said = raised(lambda: precheck({"heads": "org/missing-heads"}))
    loader = raised(lambda: resolve_heads("org/missing-heads"))
    head = "weights 'MIE heads org/missing-heads' are not available"
    assert said.startswith(f"{head}. Looked in: ") and loader.startswith(f"{head} (")
    assert said.split(". Looked in: ", 1)[1] == loader.split(". Looked in: ", 1)[1]
    assert "offline mode" in said


def test_what_may_load_is_left_to_the_metric(dead_hub, tmp_path):
    """A checkpoint folder or a training run's folder (the loader reads the checkpoint), a hub id in the
    cache, and a built model (heads are not read) pass; so does a hub that answers
    (tests/backbones/test_precheck.py). An existing path that holds no checkpoint is named by the check, in the
    loader's words (tests/backbones/test_precheck.py)."""
    (tmp_path / "ckpt").mkdir()
    (tmp_path / "ckpt" / "mie_config.json").write_text("{}")
    (tmp_path / "run" / "final").mkdir(parents=True)
    (tmp_path / "run" / "final" / "lens_config.json").write_text("{}")
    precheck({"heads": str(tmp_path / "ckpt")})
    precheck({"heads": str(tmp_path / "run")})
    (hf_cache_dir() / "models--org--cached").mkdir(parents=True)
    precheck({"heads": "org/cached"})
    precheck({"model": object()})
    precheck({"model": object(), "heads": "org/missing-heads"})
