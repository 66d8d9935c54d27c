"""genmetrics.baselines.embedding: a poisoned feature cache under clip_i is detected, not scored."""

from __future__ import annotations

import warnings

import torch
from safetensors.torch import load_file, save_file

from tests.reliability.hostile import Cases

# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case("h-clip-i-cache-wrong-dim", "poison", "clip_i with cache_dir: every entry replaced by 3-d vectors")
def _(ctx):
    import genmetrics as gm
    from genmetrics.testing import random_images, tiny_clip

    ref, cand = random_images(2, 32, seed=1), random_images(2, 32, seed=2)
    kw = dict(backbone=tiny_clip()[0], cache_dir=str(ctx.out))
    m = gm.create_metric("clip_i", **kw)
    m.update(reference=ref, candidates=cand)
    clean = m.compute()
    for f in ctx.out.rglob("*.safetensors"):
        save_file({k: torch.ones(3) for k in load_file(str(f))}, str(f))
    ctx.freeze()
    m2 = gm.create_metric("clip_i", **kw)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        m2.update(reference=ref, candidates=cand)
    again = m2.compute()
    again = again["clip_i"] if isinstance(again, dict) else again
    clean = clean["clip_i"] if isinstance(clean, dict) else clean
    assert torch.allclose(torch.as_tensor(again), torch.as_tensor(clean), atol=1e-5), (again, clean)


test_hostile = HOSTILE.test()


def test_dino_with_a_local_path_that_does_not_exist_says_so_and_never_blames_the_hub(tmp_path, monkeypatch):
    """``--weights /no/such/dir`` used to be tried as a hub id: 'the hub ... cannot be reached' without a
    network, which sends the user after the wrong cause. A hub id (ORG/NAME) still goes to the hub."""
    import pytest

    from genmetrics.backbones import hub
    from genmetrics.baselines.embedding import DINOSimilarity
    from genmetrics.errors import WeightsUnavailableError

    monkeypatch.setenv("GENMETRICS_HOME", str(tmp_path / "home"))
    asked: list[bool] = []
    monkeypatch.setattr(
        hub, "unreachable", lambda *a, **k: asked.append(True) or "the hub cannot be reached: test"
    )
    for spelling in (str(tmp_path / "no" / "such"), "./no/such", "~/no-such-weights-dir", "a/b/c"):
        with pytest.raises(WeightsUnavailableError, match="no such file or folder") as e:
            DINOSimilarity(weights=spelling)._load_default()
        assert repr(spelling) in str(e.value) and "cannot be reached" not in str(e.value)
    assert not asked
