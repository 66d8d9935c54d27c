"""genmetrics.backbones.openclip: open_clip weight files that hold Python objects are refused unread."""

from __future__ import annotations

import torch

from tests.reliability.hostile import Cases, Payload, _images

# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case("h-openclip-legacy-pickle", "pickle", "open_clip --weights MODEL:x.pt, a legacy pickle", cli=True)
def _(ctx):
    from genmetrics.backbones.openclip import load_open_clip

    p = ctx.inp / "w.pt"
    torch.save({"obj": Payload(ctx.marker)}, p, _use_new_zipfile_serialization=False)
    ctx.freeze()
    ctx.refused(lambda: load_open_clip(f"ViT-B-32:{p}"), str(p))
    refs = _images(ctx.inp / "r")
    ctx.freeze()
    argv = ["score", "clip_i", "-r", str(refs), "-c", str(refs), "--weights", f"ViT-B-32:{p}"]
    ctx.cli(argv, 2, "w.pt")


@case("h-openclip-zip-object", "pickle", "open_clip weights: a zip .bin holding a Python object")
def _(ctx):
    from genmetrics.backbones.openclip import load_open_clip

    p = ctx.inp / "open_clip_model.bin"
    torch.save({"visual.proj": torch.zeros(2), "o": Payload(ctx.marker)}, p)
    ctx.freeze()
    ctx.refused(lambda: load_open_clip(f"ViT-B-32:{p}"), str(p))


test_hostile = HOSTILE.test()


def test_a_missing_model_path_checkpoint_is_named_as_spelt(tmp_path):
    """``--weights ViT-B-32:/no/such.safetensors`` was reported as 'ViT-B-32//no/such.safetensors'."""
    import pytest

    from genmetrics.backbones.openclip import load_open_clip
    from genmetrics.errors import WeightsUnavailableError

    path = tmp_path / "no-such.safetensors"
    with pytest.raises(WeightsUnavailableError) as e:
        load_open_clip(f"ViT-B-32:{path}")
    assert f"weights 'ViT-B-32:{path}' are not available (no such file or folder)" in str(e.value)
