from __future__ import annotations

import pytest
import torch

import genmetrics as gm
from genmetrics.cli.weights import metric_weights
from genmetrics.core.metric import SampleMetric
from genmetrics.core.registry import MetricCard, list_metrics, metric_info, register_metric, unregister_metric
from genmetrics.errors import InputError
from genmetrics.testing import random_images


def test_unknown_names_suggest_close_matches():
    with pytest.raises(ValueError, match="did you mean 'ssim'"):
        gm.create_metric("sim")
    with pytest.raises(ValueError, match="did you mean 'max_db'"):
        gm.create_metric("psnr", max_dB=50)
    assert gm.list_metrics("*ssim") == ["ms_ssim", "ssim"]
    with pytest.raises(ValueError, match="did you mean 'psnr'"):  # a spelling off in case only
        gm.metric_info("PSNR")
    with pytest.raises(ValueError, match="did you mean 'ms_ssim'"):
        gm.create_metric("MS-SSIM")


class _Plugin(SampleMetric):
    name = "plugin_mean"

    def prepare(self, reference, candidates, condition):
        return {"candidates": list(candidates)}

    def score_batch(self, batch):
        return torch.stack([torch.as_tensor(x, dtype=torch.float64).mean() for x in batch["candidates"]])


@pytest.fixture
def plugin():
    register_metric(
        MetricCard(
            name="plugin_mean",
            factory=f"{__name__}:_Plugin",
            family="plugin",
            summary="mean",
            inputs={"candidates": "tensors"},
            higher_is_better=True,
            range=None,
        )
    )
    yield
    unregister_metric("plugin_mean")


def test_plugin_registration_and_ids_dedup(plugin):
    assert "plugin_mean" in gm.list_metrics("plugin*")
    m = gm.create_metric("plugin_mean", batch_size=2)
    xs = [torch.full((2,), float(i)) for i in range(5)]
    m.update(candidates=xs[:3], ids=["a", "b", "c"])
    with pytest.warns(UserWarning, match="already scored by this metric in this process"):
        m.update(candidates=xs[2:], ids=["c", "d", "e"])  # "c" again in one process: dropped, with a warning
    assert float(m.compute()) == pytest.approx(2.0)
    per = m.per_sample()
    assert per["ids"] == ["a", "b", "c", "d", "e"]
    with pytest.raises(InputError, match="ids"):
        m.update(candidates=xs[:2], ids=["x"])


def test_compute_before_update_is_clear():
    m = gm.create_metric("psnr")
    with pytest.raises(InputError, match="before any update"):
        m.compute()


def test_mismatched_lengths_and_missing_inputs():
    m = gm.create_metric("psnr")
    with pytest.raises(InputError, match="mismatched input lengths"):
        m.update(random_images(2), random_images(3))
    with pytest.raises(InputError, match="reference images are required"):
        m.update(candidates=random_images(2))
    with pytest.raises(InputError, match="differs from its reference"):
        m.update(random_images(2, 16), random_images(2, 32))
    m2 = gm.create_metric("psnr", resize="to_first")
    m2.update(random_images(2, 16), random_images(2, 32))
    with pytest.raises(InputError, match="batch_size"):
        gm.create_metric("psnr", batch_size=0)


def test_closed_forms():
    ref = torch.zeros(1, 3, 8, 8)
    cand = torch.full((1, 3, 8, 8), 0.1)
    psnr = gm.create_metric("psnr").compute(ref, cand)
    assert float(psnr) == pytest.approx(20.0, abs=1e-5)  # 10 log10(1 / 0.01)
    assert float(gm.create_metric("psnr").compute(ref, ref)) == 100.0
    a, b = random_images(2, seed=1), random_images(2, seed=2)
    assert float(gm.create_metric("ssim").compute(a, b)) < 0.2  # independent noise is structurally unrelated
    assert float(gm.create_metric("ssim").compute(a, b)) == pytest.approx(
        float(gm.create_metric("ssim").compute(b, a))
    )
    x = random_images(2)
    assert float(gm.create_metric("ssim").compute(x, x)) == pytest.approx(1.0)


def test_backbone_outside_state_dict_and_moves_with_to():
    from genmetrics.testing import tiny_clip

    model, _ = tiny_clip()
    m = gm.create_metric("clip_i", backbone=model)
    assert list(m.state_dict()) == [] or all("visual" not in k for k in m.state_dict())
    assert not list(m.parameters())
    m.train()
    assert not model.training
    m.to(torch.float64)
    assert next(model.parameters()).dtype == torch.float64


def test_a_broken_plugin_is_skipped_with_one_warning_and_named_when_asked_for(monkeypatch, tmp_path):
    """Entry points that raise at import, take a built-in's name or name neither a card nor a function used
    to raise from ``_load_all`` (every command, built-ins included, ended in a traceback, and the plugins after
    it were never registered): each is now one warning naming it and the fix, and the good plugin loads."""
    from importlib import metadata

    from genmetrics.core import registry

    (tmp_path / "_gm_raises.py").write_text("import _no_such_dependency_xyz\n")
    (tmp_path / "_gm_plugins.py").write_text(
        "from genmetrics.core.registry import MetricCard, ReferenceKind\n"
        "def card(name):\n"
        "    return MetricCard(name=name, factory='x:Y', family='t', summary='s',\n"
        "                      inputs={'reference': 'i', 'candidates': 'i'},\n"
        "                      higher_is_better=True, range=None, reference=ReferenceKind.MATCHED)\n"
        "TAKEN, GOOD, NOT_A_CARD = card('psnr'), card('_gm_good'), 3\n"
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    eps = [
        metadata.EntryPoint("_gm_raises", "_gm_raises:CARD", registry.ENTRY_POINT_GROUP),
        metadata.EntryPoint("psnr_again", "_gm_plugins:TAKEN", registry.ENTRY_POINT_GROUP),
        metadata.EntryPoint("_gm_three", "_gm_plugins:NOT_A_CARD", registry.ENTRY_POINT_GROUP),
        metadata.EntryPoint("_gm_good", "_gm_plugins:GOOD", registry.ENTRY_POINT_GROUP),
    ]
    monkeypatch.setattr(
        metadata, "entry_points", lambda group: eps if group == registry.ENTRY_POINT_GROUP else []
    )
    monkeypatch.setattr(registry, "_LOADED", False)
    monkeypatch.setattr(registry, "_BROKEN", {})
    try:
        with pytest.warns(RuntimeWarning) as caught:
            registry._load_all()  # the built-ins, then the plugins
        assert registry.get_card("psnr").factory == "genmetrics.baselines.pixel:PSNR"
        assert registry.get_card("_gm_good").factory == "x:Y"
        said = [str(w.message) for w in caught]
        assert len(said) == 3 and all("fix the plugin" in m and m.endswith("it is skipped") for m in said)
        assert "_gm_raises = '_gm_raises:CARD'" in said[0] and "_no_such_dependency_xyz" in said[0]
        assert "'psnr' is already registered" in said[1] and "expected a MetricCard" in said[2]
        with pytest.raises(ValueError, match="metric plugin _gm_raises .* could not be registered"):
            gm.create_metric("_gm_raises")
    finally:
        unregister_metric("_gm_good")


@pytest.mark.parametrize("name", list_metrics())
def test_info_has_no_contradictory_fields(name):
    info = metric_info(name)
    for role in ("reference", "condition"):
        if info[role] == "none":  # an input the metric does not take is neither required nor optional
            assert info[f"{role}_need"] is None and info[f"{role}_option"] is None
        else:
            assert info[f"{role}_need"] in ("required", "optional")
    assert ([info["default_weights"]] if info["default_weights"] else []) == metric_weights(name)
