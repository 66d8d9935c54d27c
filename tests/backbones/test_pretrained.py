"""genmetrics' own records of the default open_clip weights (``genmetrics.backbones.pretrained``) say what the
installed open_clip says, cover every metric's default open_clip weights, and resolve to the same download
as open_clip itself; with them `genmetrics weights download` fails offline without importing open_clip or
torch (it imported open_clip to resolve a tag: 6.5 CPU s, 14 s wall on a loaded 2-core machine)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import open_clip.pretrained as ocp
import pytest

from genmetrics.backbones._openclip_compat import safetensors_alternatives
from genmetrics.backbones.precheck import weights_kind
from genmetrics.backbones.pretrained import (
    HF_WEIGHTS_NAME,
    OPEN_CLIP_PRETRAINED,
    SAFE_ALTERNATIVES,
    open_clip_record,
)
from genmetrics.cli import weights as weights_cli
from genmetrics.core.registry import get_card, list_metrics
from tests.backbones.test_precheck import offline_env

ROOT = Path(__file__).resolve().parents[2]
LIMIT_S = 5.0
DEFAULTS = sorted({get_card(n).default_weights for n in list_metrics() if get_card(n).default_weights})


@pytest.mark.parametrize("weights", sorted(OPEN_CLIP_PRETRAINED))
def test_each_record_is_what_open_clip_records(weights):
    model, tag = weights.split("/", 1)
    theirs = ocp.get_pretrained_cfg(model, tag)
    assert open_clip_record(weights) == {k: theirs[k] for k in OPEN_CLIP_PRETRAINED[weights]}
    assert set(OPEN_CLIP_PRETRAINED[weights]) <= {"hf_hub", "url"}  # the download fields, nothing else


def test_the_hub_file_names_are_open_clip_s():
    assert HF_WEIGHTS_NAME == ocp.HF_WEIGHTS_NAME
    for name, safe in SAFE_ALTERNATIVES.items():
        assert list(safe) == safetensors_alternatives(name)


def test_every_default_open_clip_weights_is_recorded():
    """A metric's default open_clip weights resolve without open_clip (the offline `weights download`)."""
    clip = [w for w in DEFAULTS if weights_kind(w) == "open_clip"]
    assert clip and all(open_clip_record(w) is not None for w in clip), clip


@pytest.mark.parametrize("weights", [*DEFAULTS, "hf-hub:timm/vit_base_patch16_clip_224.openai"])
def test_resolving_from_the_records_is_resolving_with_open_clip(weights, monkeypatch):
    """The same source, repository, files and folder whether the record or open_clip answers (a second
    computation: the records emptied, so open_clip's own pretrained table is read)."""
    ours = weights_cli.resolve(weights)
    monkeypatch.setattr("genmetrics.backbones.pretrained.OPEN_CLIP_PRETRAINED", {})
    monkeypatch.setattr("genmetrics.backbones.pretrained.SAFE_ALTERNATIVES", {})
    monkeypatch.setattr("genmetrics.backbones.precheck.weights_kind", lambda w: None)  # no hub-id shortcut
    theirs = weights_cli.resolve(weights)
    assert (ours.source, ours.repo, ours.files, ours.dest) == (
        theirs.source,
        theirs.repo,
        theirs.files,
        theirs.dest,
    )
    assert {k: theirs.cfg[k] for k in ours.cfg} == ours.cfg  # the fields open_clip's download reads


def test_weights_download_offline_imports_neither_open_clip_nor_torch(tmp_path):
    env = offline_env(tmp_path)
    code = textwrap.dedent(
        """
        import contextlib, io, json, sys, time
        from genmetrics.cli.main import main
        out = {}
        for argv in (["weights", "download", "clipscore"], ["weights", "download", "dino"]):
            err = io.StringIO()
            t0 = time.perf_counter()
            with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
                rc = main(argv)
            out[argv[-1]] = [rc, err.getvalue(), time.perf_counter() - t0]
        out["imported"] = sorted(m for m in sys.modules if m.startswith(("torch", "open_clip", "transformers")))
        print(json.dumps(out))
        """
    )
    t0 = time.perf_counter()
    r = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, env=env, cwd=ROOT, timeout=600
    )
    wall = time.perf_counter() - t0
    assert r.returncode == 0, r.stderr[-3000:]
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got.pop("imported") == []
    for metric, (rc, err, took) in got.items():
        (weights,) = weights_cli.metric_weights(metric)
        assert (
            rc == 1 and err.startswith(f"error: cannot download {weights}: the hub ") and err.count("\n") == 1
        )
        assert f"`genmetrics weights download {metric}`" in err and took < LIMIT_S, (err, took)
    assert wall < 2 * LIMIT_S  # two commands and the interpreter's start-up
