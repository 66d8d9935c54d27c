"""The public Metric API the leaderboard and the CLI use (has_data, options, backbones, state snapshots),
and a static check that they use nothing private of torchmetrics or genmetrics."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

import genmetrics as gm
from genmetrics.backbones.provider import use_provider
from genmetrics.core.registry import metric_class
from genmetrics.testing import random_images, tiny_backbones, tiny_dino
from tests.reliability.hostile import Cases

PACKAGE = Path(__file__).resolve().parents[2] / "genmetrics"
PRIVATE = {
    "_defaults",
    "_update_count",
    "_backbones",
    "_computed",
    "_reductions",
    "_id_names",
    "_given_options",
}


def _pairs(seed: int, n: int = 3) -> dict:
    return {"reference": random_images(n, 16, seed=seed), "candidates": random_images(n, 16, seed=seed + 100)}


def test_options_rebuild_an_equal_metric_and_leave_runtime_options_out():
    m = gm.create_metric("ms_ssim", betas=(0.3, 0.4, 0.3), kernel_size=7, batch_size=2, device="cpu")
    assert m.options() == {"betas": (0.3, 0.4, 0.3), "kernel_size": 7}
    again = gm.create_metric("ms_ssim", **m.options())
    x = {"reference": random_images(2, 32, seed=1), "candidates": random_images(2, 32, seed=2)}
    assert torch.equal(m(**x), again(**x))
    # positional options are named too (raclip metrics take their attribute list first)
    model, tok = tiny_backbones("open_clip", "x")
    sad = metric_class("sad")(["smiling", "wearing hat"], backbone=model, tokenizer=tok)
    assert sad.options()["attributes"] == ["smiling", "wearing hat"]


def test_has_data_follows_update_and_reset():
    m = gm.create_metric("psnr")
    assert not m.has_data()
    m.update(**_pairs(1))
    assert m.has_data()
    m.reset()
    assert not m.has_data()
    with pytest.raises(gm.InputError):
        m.update(reference=random_images(2, 16), candidates=random_images(3, 16))
    assert not m.has_data()  # an update that raised on bad input scored nothing


def test_backbones_are_the_modules_in_use():
    dino = tiny_dino()
    assert gm.create_metric("dino", backbone=dino).backbones() == {"backbone": dino}
    lazy = gm.create_metric("clip_i")
    assert lazy.backbones() == {}  # default weights load on first scoring, not before
    with use_provider(tiny_backbones):
        lazy(**_pairs(2))
    assert set(lazy.backbones()) == {"backbone"}
    lazy.backbones().clear()  # a copy: the metric keeps its backbone
    assert set(lazy.backbones()) == {"backbone"}


def test_state_snapshot_restores_exactly_and_is_reusable():
    m = gm.create_metric("ssim")
    m.update(**_pairs(1), ids=["a", "b", "c"])
    only_a = m.compute().clone()
    snap = m.state_snapshot()
    for seed in (2, 3):
        m.update(**_pairs(seed), ids=["d", "e", "f"])
        assert not torch.equal(m.compute(), only_a)
        m.restore_state(snap)
        assert torch.equal(m.compute(), only_a)
        assert m.per_sample()["ids"] == ["a", "b", "c"]


def _private_uses(path: Path) -> list[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and node.attr in PRIVATE:
            out.append(f"{path.name}:{node.lineno} .{node.attr}")
        if (
            isinstance(node, ast.Call)
            and getattr(node.func, "id", "") in ("getattr", "hasattr", "setattr")
            and len(node.args) > 1
            and isinstance(node.args[1], ast.Constant)
            and node.args[1].value in PRIVATE
        ):
            out.append(f"{path.name}:{node.lineno} {node.func.id}(..., {node.args[1].value!r})")  # type: ignore[attr-defined]
    return out


@pytest.mark.parametrize("folder", ["leaderboard", "cli"])
def test_leaderboard_and_cli_use_only_public_metric_api(folder):
    uses = [u for p in sorted((PACKAGE / folder).glob("*.py")) for u in _private_uses(p)]
    assert not uses, (
        f"private Metric attributes used: {uses}; use has_data(), options(), backbones(), "
        "state_snapshot()/restore_state(), per_sample()"
    )


def test_private_use_checker_sees_both_forms(tmp_path):
    f = tmp_path / "x.py"
    f.write_text("a = m._update_count\nb = getattr(m, '_backbones', None)\nc = m.has_data()\n")
    assert len(_private_uses(f)) == 2


# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case(
    "h-global-torch-threads-grad", "silent", "scoring leaves torch's grad mode and default dtype as they were"
)
def _(ctx):
    import genmetrics as gm
    from genmetrics.testing import random_images

    ctx.freeze()
    g, dt = torch.is_grad_enabled(), torch.get_default_dtype()
    m = gm.create_metric("psnr")
    m.update(reference=random_images(1, 16), candidates=random_images(1, 16, seed=1))
    m.compute()
    assert torch.is_grad_enabled() == g and torch.get_default_dtype() == dt


test_hostile = HOSTILE.test()
