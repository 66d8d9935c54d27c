"""The registered `mie` metric."""

import pytest
import torch

import genmetrics as gm
from genmetrics.errors import InputError, WeightsUnavailableError


@pytest.fixture(scope="module")
def heads_dir():
    from tests.recipes.mie import tiny_heads_dir

    return tiny_heads_dir(0)


def test_card():
    info = gm.metric_info("mie")
    assert info["family"] == "mie" and info["higher_is_better"] is True
    assert set(info["inputs"]) == {"reference", "candidates", "condition"}
    assert "reference-sets" in info["tags"]


def test_no_heads_is_a_clear_error(proc):
    from conftest import tiny_backbone

    with pytest.raises(WeightsUnavailableError) as e:
        gm.create_metric("mie")
    msg = str(e.value)
    assert "heads=" in msg and "genmetrics train mie" in msg
    with pytest.raises(WeightsUnavailableError, match="heads="):
        gm.create_metric("mie", backbone=tiny_backbone(0), processor=proc)
    with pytest.raises(WeightsUnavailableError, match="no such folder"):
        gm.create_metric("mie", heads="./no/such/dir")
    with pytest.raises(ValueError, match="unknown option"):
        gm.create_metric("mie", head="x")


def test_scores_diagnostics_and_generators(proc, heads_dir, imgs):
    from conftest import tiny_backbone

    from genmetrics.mie.model import MIEModel

    vlm = tiny_backbone(0)
    metric = gm.create_metric("mie", backbone=vlm, processor=proc, heads=heads_dir)
    assert not hasattr(vlm, "peft_config")  # the caller's backbone is left alone
    refs = [[imgs[0], imgs[1]], [imgs[2], imgs[3], imgs[4]], [imgs[0], imgs[1]]]
    metric.update(refs, imgs[5:8], ["a", "b", "c"], ids=["gen_a/1", "gen_b/1", "gen_a/2"])
    ps = metric.per_sample()
    assert ps["scores"].shape == (3,) and ps["diagnostics"].shape == (3, 3) and ps["ids"][0] == "gen_a/1"
    assert ps["dimensions"] == ("existence", "appearance", "interaction")
    direct = MIEModel.from_pretrained(heads_dir, tiny_backbone(0), proc).score(
        refs, ["a", "b", "c"], imgs[5:8]
    )
    torch.testing.assert_close(ps["scores"].float(), direct.score, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ps["diagnostics"].float(), direct.diagnostics, atol=1e-5, rtol=1e-5)
    assert metric.compute().item() == pytest.approx(float(direct.score.double().mean()), abs=1e-5)
    per = metric.per_generator()
    assert set(per) == {"gen_a", "gen_b"} and per["gen_a"]["n"] == 2
    assert per["gen_a"]["score"] == pytest.approx(float(ps["scores"][[0, 2]].mean()))
    # a flat list of images is one reference set shared by every candidate
    shared = metric.compute([imgs[0], imgs[1]], imgs[5:8:2], ["a", "c"])
    torch.testing.assert_close(shared.float(), direct.score[[0, 2]].mean(), atol=1e-5, rtol=1e-5)
    # the state is left untouched by the one-shot compute
    assert metric.per_sample()["scores"].shape == (3,)
    # model= uses a ready MIEModel as is
    m2 = gm.create_metric("mie", model=MIEModel.from_pretrained(heads_dir, tiny_backbone(0), proc))
    assert m2.compute(refs, imgs[5:8], ["a", "b", "c"]).item() == pytest.approx(
        metric.compute().item(), abs=1e-5
    )


def test_bad_input_before_weights(heads_dir, imgs):
    metric = gm.create_metric("mie", heads=heads_dir)  # backbone would load lazily: bad input must fail first
    with pytest.raises(InputError, match="got 9 reference images"):
        metric.update([list(imgs[:9])], imgs[9:10], ["p"])
    with pytest.raises(InputError, match="missing"):
        metric.update([[imgs[0]]], imgs[9:10], None)
    with pytest.raises(InputError, match=r"candidates\[0\] is missing"):
        metric.update([[imgs[0]]], [None], ["p"])
    assert "mie" not in metric._backbones
