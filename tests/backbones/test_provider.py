"""The public backbone-provider hook (genmetrics.backbones.provider): in-process and through
GENMETRICS_BACKBONE_PROVIDER for CLI subprocesses; default-weights loaders ask it first."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from PIL import Image

import genmetrics as gm
from genmetrics.backbones import provider as P
from genmetrics.errors import InputError
from genmetrics.testing import random_images, tiny_backbones, tiny_clip, tiny_dino

REPO = Path(__file__).resolve().parents[2]
SPEC = "genmetrics.testing:tiny_backbones"


def _recorder(calls: list):
    def fn(kind, weights, **options):
        calls.append((kind, weights, options))
        return tiny_backbones(kind, weights, **options)

    return fn


def test_nothing_installed_means_real_loading(monkeypatch):
    monkeypatch.delenv(P.ENV_VAR, raising=False)
    assert (
        P.current_provider() is None and P.provide("open_clip", "x") is None and P.describe_provider() is None
    )


def test_use_provider_nests_and_restores(monkeypatch):
    monkeypatch.delenv(P.ENV_VAR, raising=False)
    a, b = (lambda k, w, **o: "a"), (lambda k, w, **o: "b")
    with P.use_provider(a):
        with P.use_provider(b):
            assert P.provide("dino", "w") == "b"
        assert P.provide("dino", "w") == "a"
    assert P.current_provider() is None
    with pytest.raises(RuntimeError), P.use_provider(a):
        raise RuntimeError("boom")
    assert P.current_provider() is None  # restored on error too
    assert P.set_provider(a) is None and P.set_provider(None) is a


def test_environment_variable_and_in_process_precedence(monkeypatch):
    monkeypatch.setenv(P.ENV_VAR, SPEC)
    assert P.current_provider() is tiny_backbones and P.describe_provider() == SPEC
    other = lambda k, w, **o: None  # noqa: E731
    with P.use_provider(other):
        assert P.current_provider() is other  # in-process wins


@pytest.mark.parametrize(
    "spec, fragment",
    [
        ("genmetrics.testing", "expected 'package.module:function'"),
        ("genmetrics.nope:fn", "cannot import it"),
        ("genmetrics.testing:no_such_fn", "cannot import it"),
        ("genmetrics.backbones.provider:ENV_VAR", "not a function"),
    ],
)
def test_bad_environment_variable_is_named(monkeypatch, spec, fragment):
    monkeypatch.setenv(P.ENV_VAR, spec)
    with pytest.raises(InputError, match=P.ENV_VAR) as e:
        P.current_provider()
    assert fragment in str(e.value)


def test_loaders_ask_the_provider_with_kind_and_weights():
    from genmetrics.backbones.hf import load_vlm
    from genmetrics.backbones.openclip import load_open_clip

    calls: list = []
    with P.use_provider(_recorder(calls)):
        model, preprocess, tok = load_open_clip("ViT-B-16/openai")
        vlm, proc = load_vlm("Qwen/Qwen3.5-0.8B", for_generation=True, device="cpu")
        dino = gm.create_metric("dino")
        dino(reference=random_images(1), candidates=random_images(1, seed=1))
    assert calls[0] == ("open_clip", "ViT-B-16-quickgelu/openai", {})  # the resolved weights name
    assert calls[1] == ("vlm", "Qwen/Qwen3.5-0.8B", {"vlm_kind": None, "for_generation": True})
    assert calls[2] == ("dino", "facebook/dinov2-base", {})
    assert preprocess is None and not model.training
    assert type(vlm).__name__ == "Qwen3_5ForConditionalGeneration"  # the weights name picked Qwen3.5


def test_provided_backbone_scores_like_the_same_backbone_passed_explicitly():
    ref, cand = random_images(3, seed=1), random_images(3, seed=2)
    with P.use_provider(tiny_backbones):
        via_hook = gm.create_metric("clip_i")(reference=ref, candidates=cand)
    model, _ = tiny_clip()
    explicit = gm.create_metric("clip_i", backbone=model)(reference=ref, candidates=cand)
    assert torch.equal(via_hook, explicit)
    with P.use_provider(tiny_backbones):
        via_hook = gm.create_metric("dino")(reference=ref, candidates=cand)
    assert torch.equal(
        via_hook, gm.create_metric("dino", backbone=tiny_dino())(reference=ref, candidates=cand)
    )


@pytest.mark.slow
def test_cli_subprocess_takes_backbones_from_the_environment_variable(tmp_path):
    """``genmetrics score`` for an open_clip metric and a VLM metric, with no weights on disk: the values
    equal the same metrics built in-process on the same tiny models."""
    for d in ("ref", "gen"):
        (tmp_path / d).mkdir()
    refs, gens = random_images(2, 32, seed=3), random_images(2, 32, seed=4)
    for i in range(2):
        Image.fromarray(refs[i].permute(1, 2, 0).numpy()).save(tmp_path / "ref" / f"s{i}.png")
        Image.fromarray(gens[i].permute(1, 2, 0).numpy()).save(tmp_path / "gen" / f"s{i}.png")
    env = {
        **os.environ,
        P.ENV_VAR: SPEC,
        "PYTHONPATH": str(REPO),
        "GENMETRICS_PROGRESS": "0",
        "GENMETRICS_HOME": str(tmp_path / "empty-home"),
    }
    ref_files = [str(tmp_path / "ref" / f"s{i}.png") for i in range(2)]
    gen_files = [str(tmp_path / "gen" / f"s{i}.png") for i in range(2)]
    for args in (["clip_i"], ["tpips", "--condition", "lighting"]):
        proc = subprocess.run(
            [
                sys.executable,
                "-m",
                "genmetrics",
                "score",
                *args,
                "-r",
                str(tmp_path / "ref"),
                "-c",
                str(tmp_path / "gen"),
                "--json",
            ],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
        )
        assert proc.returncode == 0, proc.stderr
        with P.use_provider(tiny_backbones):
            m = gm.create_metric(args[0])
            m.update(reference=ref_files, candidates=gen_files, condition=args[2:] * 2 or None)
            want = m.compute()
        assert json.loads(proc.stdout)["value"] == pytest.approx(float(want), abs=1e-5), args
    env.pop(P.ENV_VAR)
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "genmetrics",
            "score",
            "clip_i",
            "-r",
            str(tmp_path / "ref"),
            "-c",
            str(tmp_path / "gen"),
        ],
        env={**env, "GENMETRICS_OFFLINE": "1", "HF_HUB_OFFLINE": "1"},
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 1 and "weights" in proc.stderr.lower()  # without the hook: real weights, absent
