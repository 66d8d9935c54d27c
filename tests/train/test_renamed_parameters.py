"""A TPIPS training checkpoint of an earlier genmetrics names the fusion parameters by their old attributes
(``register_vector``, ``head.*``; now ``fusion.register``, ``fusion.head.*``): resuming one is refused with one
line naming the file, the rename and the fix, not as another model's checkpoint and not with a traceback of
a missing key. The planted folder is a real run's checkpoint whose tensors are re-written under the old
names (the names the pre-rename ``TPIPSModel`` gave them)."""

from __future__ import annotations

from pathlib import Path

import pytest
from safetensors.torch import load_file, save_file

from genmetrics.errors import InputError
from genmetrics.testing import tiny_qwen3vl, tiny_qwen3vl_processor
from genmetrics.tpips.synthetic import aspect_triplets
from genmetrics.tpips.train import TrainConfig, train_tpips

OLD = {"early": ("fusion.register", "register_vector"), "mid": ("fusion.head.", "head.")}


def _run(out: Path, variant: str, **kw):
    records = [r for pair in aspect_triplets(2, size=32) for r in pair]
    cfg = TrainConfig(variant=variant, max_steps=2, batch_size=2, image_size=32, save_every=1)
    return train_tpips(
        records,
        out,
        config=cfg,
        backbone=tiny_qwen3vl(),
        processor=tiny_qwen3vl_processor(),
        progress=False,
        **kw,
    )


def _plant_old_names(out: Path, variant: str) -> Path:
    """Keep the step-1 checkpoint only, its fusion tensors under the old names; the run unfinished."""
    (out / "train_result.json").unlink()
    ckpt = out / "checkpoints" / "step-1"
    path = ckpt / "trainable.safetensors"
    new, old = OLD[variant]
    tensors = load_file(str(path))
    assert any(k.startswith(new) for k in tensors)  # the run trained that variant's fusion parameters
    save_file({(old + k[len(new) :] if k.startswith(new) else k): v for k, v in tensors.items()}, str(path))
    return path


def _files(out: Path) -> dict[Path, int]:
    return {p: p.stat().st_mtime_ns for p in out.rglob("*") if p.is_file() and p.name != ".genmetrics.lock"}


@pytest.mark.parametrize("variant", ["early", "mid"])
def test_resuming_a_checkpoint_with_the_old_names(tmp_path, variant):
    out = tmp_path / "run"
    _run(out, variant)
    path = _plant_old_names(out, variant)
    before = _files(out)
    with pytest.raises(InputError) as e:
        _run(out, variant, resume=True)
    msg = str(e.value)
    new, old = OLD[variant]
    rename = f"{old}* -> {new}*" if old.endswith(".") else f"{old} -> {new}"
    assert msg.startswith(
        f"{path}: written by an earlier genmetrics, before the task's parameters were renamed"
    )
    assert rename in msg and "overwrite=True (CLI: --overwrite)" in msg and "\n" not in msg
    assert "same model and options" not in msg  # not the advice for another model's checkpoint
    assert _files(out) == before  # nothing written (the folder lock aside)
    # the advice works: starting over trains the run again
    assert _run(out, variant, overwrite=True).steps == 2


def test_another_models_checkpoint_is_still_named_as_such(tmp_path):
    """A mid-fusion checkpoint resumed as early fusion: the names differ, but not by the renames."""
    out = tmp_path / "run"
    _run(out, "mid")
    (out / "train_result.json").unlink()
    with pytest.raises(InputError) as e:
        _run(out, "early", resume=True)
    assert "written by an earlier genmetrics" not in str(e.value)
