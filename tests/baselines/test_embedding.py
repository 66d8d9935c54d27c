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
        with pytest.raises(WeightsUnavailableError, match="(?i)no such file or folder") as e:
            DINOSimilarity(weights=spelling)._load_default()
        assert repr(spelling) in str(e.value) and "cannot be reached" not in str(e.value)
    assert not asked


def test_dino_loads_default_weights_from_the_hugging_face_cache_offline(tmp_path):
    """facebook/dinov2-base in the Hugging Face cache (HF_HOME, where other programs put it), none in
    GENMETRICS_HOME, downloads off: DINOSimilarity() loads it (red before: 'weights are not available', the loader
    looked in GENMETRICS_HOME only while the pre-check counted the Hugging Face cache) and scores exactly what
    the same model passed as backbone= scores. A folder given as weights that holds no config.json says so."""
    import os
    import subprocess
    import sys
    import textwrap
    from pathlib import Path

    root = Path(__file__).resolve().parents[2]
    env = {k: v for k, v in os.environ.items() if not k.startswith(("GENMETRICS_", "HF_", "TRANSFORMERS_"))}
    env.update(
        GENMETRICS_HOME=str(tmp_path / "home"),
        HF_HOME=str(tmp_path / "hf"),
        HF_HUB_OFFLINE="1",
        PYTHONPATH=str(root),
    )
    script = textwrap.dedent(
        f"""
        import os, pytest, torch
        from pathlib import Path
        from genmetrics.baselines.embedding import DINOSimilarity
        from genmetrics.errors import WeightsUnavailableError
        from genmetrics.testing import random_images, tiny_dino

        model = tiny_dino(seed=3)
        repo = Path({str(tmp_path / "hf")!r}) / "hub" / "models--facebook--dinov2-base"
        snap = repo / "snapshots" / ("0" * 40)
        model.save_pretrained(snap)
        (repo / "refs").mkdir(parents=True)
        (repo / "refs" / "main").write_text("0" * 40)
        x, y = random_images(3, 32, seed=1), random_images(3, 32, seed=2)
        cached = DINOSimilarity()
        assert torch.equal(cached.score(x, y), DINOSimilarity(backbone=model).score(x, y))
        assert not Path({str(tmp_path / "home")!r}, "hf").exists() or not any(Path({str(tmp_path / "home")!r}, "hf").iterdir())
        (empty := Path({str(tmp_path / "empty")!r})).mkdir()
        with pytest.raises(WeightsUnavailableError, match="The folder has no config.json"):
            DINOSimilarity(weights=str(empty))._load_default()
        print("ok")
        """
    )
    r = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True, text=True, timeout=300)
    assert r.returncode == 0 and r.stdout.strip() == "ok", r.stderr[-3000:]
