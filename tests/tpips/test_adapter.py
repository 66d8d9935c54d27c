"""Trust in TPIPS adapter folders: a tampered or faulty head file or peft adapter
(NaN / inf, wrong shape, extra or missing tensors) is refused at load with the file and the tensor named; a
pickle (``adapter_model.bin``, ``tpips_head.pt``, a pickle renamed ``.safetensors``) is refused with one line
naming the file and the safe format, and a planted payload never runs; the base weights are recorded so that
the adapter loads from any working folder, and a failure says where it looked."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from genmetrics.backbones.hf import add_lora
from genmetrics.backbones.provider import use_provider
from genmetrics.errors import InputError, WeightsUnavailableError
from genmetrics.testing import (
    tiny_backbones,
    tiny_qwen3vl,
    tiny_qwen3vl_for_generation,
    tiny_qwen3vl_processor,
)
from genmetrics.tpips.loading import load_tpips
from genmetrics.tpips.model import TPIPSModel
from genmetrics.tpips.triplet import TPIPSTripletModel

from .conftest import make_triplets


class Payload:
    """Unpickling this creates the folder ``marker`` (what an attacker's code would do)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (os.makedirs, (self.marker,))


def plant(path: Path, marker: Path) -> None:
    path.write_bytes(pickle.dumps(Payload(marker)))


def saved(tmp_path: Path, variant: str, lora: bool = True) -> Path:
    proc = tiny_qwen3vl_processor()
    if variant == "triplet":
        model = TPIPSTripletModel(tiny_qwen3vl_for_generation(seed=0), proc, image_size=64)
    else:
        backbone = tiny_qwen3vl(seed=0)
        backbone = add_lora(backbone, r=4, target_modules=["q_proj", "v_proj"]) if lora else backbone
        model = TPIPSModel(backbone, proc, variant, probe_layers=2, mid_hidden=16)
    return model.save_pretrained(tmp_path / variant)


def load(folder: Path, variant: str = "late"):
    backbone = tiny_qwen3vl_for_generation(seed=0) if variant == "triplet" else tiny_qwen3vl(seed=0)
    return load_tpips(folder, backbone=backbone, processor=tiny_qwen3vl_processor())


def edit(path: Path, fn) -> None:
    tensors = dict(load_file(str(path)))
    fn(tensors)
    save_file(tensors, str(path))


def first(tensors: dict[str, torch.Tensor], part: str = "") -> str:
    return sorted(k for k in tensors if part in k)[0]


FAULTS = {
    "nan": (lambda t, k: t[k].view(-1).__setitem__(0, float("nan")), r"holds 1 NaN or infinite"),
    "inf": (lambda t, k: t[k].view(-1).__setitem__(-1, float("inf")), r"holds 1 NaN or infinite"),
    "shape": (
        lambda t, k: t.__setitem__(k, torch.zeros(3, 5)),
        r"has shape \(3, 5\)|has shape torch.Size\(\[3, 5\]\)",
    ),
    "extra": (lambda t, k: t.__setitem__(k + ".planted", torch.zeros(2)), r"unexpected tensor"),
    "missing": (lambda t, k: t.pop(k), r"is missing"),
}


@pytest.mark.parametrize("fault", sorted(FAULTS))
@pytest.mark.parametrize("variant", ["mid", "early", "triplet"])
def test_faulty_head_file_is_refused_naming_file_and_tensor(tmp_path, variant, fault):
    folder = saved(tmp_path, variant)
    head = folder / "tpips_head.safetensors"
    change, message = FAULTS[fault]
    key = first(load_file(str(head)))
    edit(head, lambda t: change(t, key))
    with pytest.raises(InputError, match=message) as err:
        load(folder, variant)
    assert str(head) in str(err.value)
    assert repr(key if fault != "extra" else key + ".planted") in str(err.value)


@pytest.mark.parametrize("fault", sorted(FAULTS))
def test_faulty_peft_adapter_is_refused_naming_file_and_tensor(tmp_path, fault):
    folder = saved(tmp_path, "late")
    weights = folder / "adapter_model.safetensors"
    change, message = FAULTS[fault]
    key = first(load_file(str(weights)), "lora_A")
    edit(weights, lambda t: change(t, key))
    with pytest.raises(InputError, match=message) as err:
        load(folder)
    assert str(weights) in str(err.value)
    named = key + ".planted" if fault == "extra" else key
    if fault == "shape":  # peft names the parameter it was loading into (with the adapter's name)
        named = key.replace(".weight", ".default.weight")
    assert repr(named) in str(err.value), str(err.value)


def test_head_file_that_a_variant_needs_is_required(tmp_path):
    folder = saved(tmp_path, "mid")
    (folder / "tpips_head.safetensors").unlink()
    with pytest.raises(
        InputError, match=r"no tpips_head\.safetensors, but a mid TPIPS model keeps trained tensors"
    ):
        load(folder)
    late = saved(tmp_path, "late")
    (late / "tpips_head.safetensors").unlink()  # late fusion has no head tensors: nothing is lost
    assert load(late).variant == "late"


@pytest.mark.parametrize("planted", ["adapter_model.bin", "tpips_head.pt", "tpips_head.safetensors"])
def test_planted_pickles_never_run(tmp_path, planted):
    """The pickle takes the place of the safe file; loading is refused with the file named and the payload's
    marker never appears (nothing unpickles it)."""
    folder = saved(tmp_path, "mid")
    marker = tmp_path / "PWNED"
    if planted == "adapter_model.bin":
        (folder / "adapter_model.safetensors").unlink()
    elif planted == "tpips_head.pt":
        (folder / "tpips_head.safetensors").unlink()
    plant(folder / planted, marker)
    with pytest.raises(InputError) as err:
        load(folder, "mid")
    msg = str(err.value)
    assert planted in msg and "safetensors" in msg and "\n" not in msg
    assert not marker.exists()


def test_planted_pickle_on_the_command_line_is_one_error_line(tmp_path, capsys):
    """`genmetrics evaluate-human tpips --adapter DIR` with a pickled peft adapter: exit 2, one `error:` line
    naming the file and safetensors, no traceback, no code run."""
    from genmetrics.cli.main import main

    folder = saved(tmp_path, "late")
    (folder / "adapter_model.safetensors").unlink()
    marker = tmp_path / "PWNED"
    plant(folder / "adapter_model.bin", marker)
    data = make_triplets(tmp_path / "data", n=2)
    with use_provider(tiny_backbones):
        rc = main(["evaluate-human", "tpips", "--data", str(data), "--adapter", str(folder)])
    err = capsys.readouterr().err
    lines = [x for x in err.splitlines() if x.strip()]
    assert rc == 2, err
    assert len(lines) == 1 and lines[0].startswith("error:"), err
    assert "adapter_model.bin" in lines[0] and "safetensors" in lines[0] and "Traceback" not in err
    assert not marker.exists()


def test_base_weights_recorded_so_any_working_folder_finds_them(tmp_path, monkeypatch):
    """Saved with a relative weights path from one folder, loaded from another: found (absolute, and relative
    to the adapter when the run moves together with its weights); gone: the error lists every place looked."""
    work = tmp_path / "work"
    (work / "models").mkdir(parents=True)
    tiny_qwen3vl(seed=0).save_pretrained(work / "models" / "base")
    tiny_qwen3vl_processor().save_pretrained(work / "models" / "base")
    monkeypatch.chdir(work)
    model = TPIPSModel(
        add_lora(tiny_qwen3vl(seed=0), r=4, target_modules=["q_proj"]), tiny_qwen3vl_processor()
    )
    folder = model.save_pretrained(work / "runs" / "final", base_weights="models/base")
    cfg = json.loads((folder / "tpips.json").read_text())
    assert cfg["base_weights"] == str((work / "models" / "base").resolve())
    assert cfg["base_weights_relative"] == "../../models/base"
    x = [torch.randint(0, 256, (3, 64, 64), dtype=torch.uint8, generator=torch.Generator().manual_seed(1))]
    expected = model.similarity(x, x[:1], "color")

    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert torch.equal(load_tpips(work / "runs" / "final").similarity(x, x[:1], "color"), expected)

    moved = tmp_path / "moved"  # the run and its weights moved together: the relative record finds them
    shutil.move(str(work), str(moved))
    assert torch.equal(load_tpips(moved / "runs" / "final").similarity(x, x[:1], "color"), expected)

    shutil.rmtree(moved / "models")
    with pytest.raises(WeightsUnavailableError) as err:
        load_tpips(moved / "runs" / "final")
    msg = str(err.value)
    assert str(work / "models" / "base") in msg and "relative to the adapter" in msg and "--weights" in msg


def test_training_records_the_backbone_path_absolute(tmp_path, monkeypatch):
    from genmetrics.tpips.synthetic import aspect_triplets
    from genmetrics.tpips.train import TrainConfig, train_tpips

    (tmp_path / "models").mkdir()
    tiny_qwen3vl(seed=0).save_pretrained(tmp_path / "models" / "base")
    tiny_qwen3vl_processor().save_pretrained(tmp_path / "models" / "base")
    monkeypatch.chdir(tmp_path)
    records = [r for pair in aspect_triplets(1, size=64) for r in pair]
    res = train_tpips(
        records,
        "run",
        config=TrainConfig(max_steps=1, batch_size=2, image_size=64),
        weights="models/base",
        progress=False,
    )
    cfg = json.loads((res.adapter_dir / "tpips.json").read_text())
    assert cfg["base_weights"] == str((tmp_path / "models" / "base").resolve())
    monkeypatch.chdir(tmp_path / "run")
    assert load_tpips(tmp_path / "run" / "final").variant == "late"
