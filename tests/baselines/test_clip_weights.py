"""Hostile and faulty open_clip weight files: a pickle is refused before anything in it
runs, with one ``error:`` line naming the file and the safe formats; tensors that are non-finite, missing,
extra or of the wrong shape are refused naming the file and the tensor."""

from __future__ import annotations

import json
import os
import pickle
from pathlib import Path

import open_clip
import pytest
import torch
from safetensors.torch import save_file

from genmetrics.backbones.openclip import load_open_clip
from genmetrics.cli.main import main
from genmetrics.errors import InputError
from genmetrics.testing import random_images, write_images

MODEL = "gm-test-tiny-vit"  # a registered open_clip config, so MODEL:PATH builds it without downloads
TINY = dict(
    embed_dim=32,
    quick_gelu=True,
    vision_cfg=dict(image_size=32, patch_size=8, width=64, layers=2, head_width=16, mlp_ratio=2.0),
    text_cfg=dict(context_length=16, vocab_size=49408, width=32, heads=4, layers=1),
)


@pytest.fixture(scope="module")
def state(tmp_path_factory) -> dict[str, torch.Tensor]:
    cfg_dir = tmp_path_factory.mktemp("cfg")
    (cfg_dir / f"{MODEL}.json").write_text(json.dumps(TINY))
    open_clip.add_model_config(cfg_dir)
    torch.manual_seed(0)
    model = open_clip.create_model(MODEL, pretrained=None)
    return {k: v.detach().clone().contiguous() for k, v in model.state_dict().items()}


class Payload:
    """Unpickling this creates ``marker`` (stands for any code a pickle can run)."""

    def __init__(self, marker: Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (open, (str(self.marker), "w"))


def _refused(path: Path, match: str) -> str:
    with pytest.raises(InputError, match=match) as e:
        load_open_clip(f"{MODEL}:{path}")
    msg = str(e.value)
    assert str(path) in msg and "\n" not in msg
    return msg


def test_intact_weights_load_in_both_safe_formats(state, tmp_path):
    save_file(state, tmp_path / "ok.safetensors")
    torch.save(state, tmp_path / "ok.pt")
    for f in ("ok.safetensors", "ok.pt"):
        model, _, _ = load_open_clip(f"{MODEL}:{tmp_path / f}")
        got = model.state_dict()
        assert all(torch.equal(got[k], v) for k, v in state.items())


@pytest.mark.parametrize("how", ["raw-pickle", "legacy-torch-save", "zip-with-code"])
def test_a_pickle_never_runs_and_is_refused_naming_the_file(state, tmp_path, how):
    marker = tmp_path / "pwned"
    path = tmp_path / "weights.pt"
    payload = {**state, "visual.proj": Payload(marker)}
    if how == "raw-pickle":
        path.write_bytes(pickle.dumps(payload))
    elif how == "legacy-torch-save":
        torch.save(payload, path, _use_new_zipfile_serialization=False)
    else:
        torch.save({"state_dict": payload}, path)  # torch's zip format, a pickle inside
    assert not marker.exists()
    msg = _refused(path, "safetensors")
    assert not marker.exists(), "a pickle payload ran"
    assert ("never unpickles" in msg) if how != "zip-with-code" else ("weights_only=True" in msg)


def test_refused_pickle_is_one_error_line_in_the_cli(state, tmp_path, capsys):
    marker = tmp_path / "pwned"
    path = tmp_path / "weights.pt"
    torch.save({"state_dict": {**state, "logit_scale": Payload(marker)}}, path)
    write_images(tmp_path / "imgs", random_images(2, 32, seed=0))
    imgs = str(tmp_path / "imgs")
    rc = main(["score", "clip_i", "-r", imgs, "-c", imgs, "--weights", f"{MODEL}:{path}"])
    err = capsys.readouterr().err.strip().splitlines()
    assert rc == 2 and len(err) == 1 and err[0].startswith("error:") and str(path) in err[0], err
    assert "safetensors" in err[0] and not marker.exists()


@pytest.mark.parametrize(
    ("fault", "tensor"),
    [
        ("nan", "visual.transformer.resblocks.1.mlp.c_fc.weight"),
        ("inf", "logit_scale"),
        ("missing", "visual.ln_post.bias"),
        ("extra", "visual.extra_head.weight"),
        ("shape", "visual.proj"),
    ],
)
@pytest.mark.parametrize("fmt", ["safetensors", "pt"])
def test_faulty_tensors_are_refused_naming_file_and_tensor(state, tmp_path, fault, tensor, fmt):
    bad = dict(state)
    if fault == "nan":
        bad[tensor] = bad[tensor].clone()
        bad[tensor][0, 0] = float("nan")
    elif fault == "inf":
        bad[tensor] = torch.full_like(bad[tensor], float("inf"))
    elif fault == "missing":
        del bad[tensor]
    elif fault == "extra":
        bad[tensor] = torch.zeros(3, 3)
    else:
        bad[tensor] = torch.zeros(64, 31)
    path = tmp_path / f"w.{fmt}"
    save_file(bad, path) if fmt == "safetensors" else torch.save(bad, path)
    msg = _refused(path, "NaN/inf" if fault in ("nan", "inf") else "do not fit")
    assert tensor in msg


def test_mislabelled_and_unreadable_files(state, tmp_path):
    st = tmp_path / "w.pt"
    save_file(state, st)  # safetensors bytes under a torch suffix
    _refused(st, "rename it to .safetensors")
    zp = tmp_path / "w.safetensors"
    torch.save(state, zp)
    _refused(zp, r"rename it to \.pt")
    text = tmp_path / "notes.pt"
    text.write_text("not weights")
    _refused(text, "unknown format")
    torn = tmp_path / "torn.pt"
    torch.save(state, torn)
    torn.write_bytes(torn.read_bytes()[: os.path.getsize(torn) // 2])  # a killed download
    _refused(torn, "not a readable open_clip checkpoint")
