"""Rows that cannot be learned are refused or warned about (count and first
rows) before any weights load; a device the machine lacks is one line naming the option and the devices
there are; device='cpu' reaches accelerate."""

from __future__ import annotations

import json
import shutil
import warnings
from pathlib import Path

import pytest
import torch

from genmetrics.cli.main import main
from genmetrics.data.jsonl import OddOneOutRecord
from genmetrics.errors import InputError
from genmetrics.mie.train import load_training_pairs, train_mie
from genmetrics.testing import toy_mib_pairs
from genmetrics.tpips.synthetic import aspect_triplets
from genmetrics.tpips.train import train_tpips
from genmetrics.train import TrainLoopConfig, fit
from genmetrics.train.config import DeviceUnavailableError
from genmetrics.train.data_checks import check_triplets

from .toy import Toy, make_data


def _pairs(tmp_path: Path, n: int, edit) -> Path:
    """``n`` toy MIB pairs with ``edit(rows, folder)`` applied to the JSON rows."""
    path = toy_mib_pairs(tmp_path / "data", n)
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    edit(rows, path.parent)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_a_pair_with_one_file_twice_is_refused_before_weights_load(tmp_path):
    def same_file(rows, folder):
        for i in (1, 3):
            rows[i]["candidates"][1] = rows[i]["candidates"][0]

    path = _pairs(tmp_path, 6, same_file)
    with pytest.raises(InputError) as e:  # offline, no provider: reaching the weights would be another error
        train_mie(data=str(path), out=str(tmp_path / "run"), progress=False)
    msg = str(e.value)
    assert str(path) in msg and "2 of 6 pair(s) name the same file" in msg and "'pair1', 'pair3'" in msg
    assert not (tmp_path / "run").exists()


def test_the_cli_says_it_in_one_line(tmp_path, capsys):
    path = _pairs(
        tmp_path, 4, lambda rows, folder: rows[2]["candidates"].__setitem__(1, rows[2]["candidates"][0])
    )
    assert main(["train", "mie", "--data", str(path), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("error: ") and "'pair2'" in err[0] and str(path) in err[0]


def test_identical_content_and_contradictions_are_warned_with_count_and_rows(tmp_path):
    def copies_and_conflicts(rows, folder):
        for i in (0, 4):  # a byte-identical copy under another name
            copy = folder / f"copy{i}.png"
            shutil.copy(rows[i]["candidates"][0], copy)
            rows[i]["candidates"][1] = str(copy)
        swapped = {"candidates": rows[2]["candidates"][::-1], "preference": 1 - rows[2]["preference"]}
        rows[3] = {**rows[2], "id": "pair3", **swapped}  # the same winner, shown the other way round: fine
        rows[5] = {**rows[1], "id": "pair5", "candidates": rows[1]["candidates"][::-1]}  # the other winner

    path = _pairs(tmp_path, 6, copies_and_conflicts)
    with warnings.catch_warnings(record=True) as seen:
        warnings.simplefilter("always")
        records = load_training_pairs(path)
    messages = sorted(str(w.message) for w in seen)
    assert len(records) == 6 and len(messages) == 2
    assert "2 of 6 pair(s) contradict another pair" in messages[0] and "('pair1', 'pair5')" in messages[0]
    assert "2 of 6 pair(s) have two candidates with identical content" in messages[1]
    assert "('pair0', 'pair4')" in messages[1] and str(path) in messages[1]


def test_nothing_learnable_is_refused(tmp_path):
    def all_copies(rows, folder):
        for i, r in enumerate(rows):
            copy = folder / f"copy{i}.png"
            shutil.copy(r["candidates"][0], copy)
            r["candidates"][1] = str(copy)

    with pytest.raises(InputError, match=r"none of the 3 pair\(s\) can be learned"):
        load_training_pairs(_pairs(tmp_path, 3, all_copies))


def test_triplets_of_one_image(tmp_path):
    records = [r for pair in aspect_triplets(2, size=32) for r in pair]
    x = records[0].images[0]
    odd = OddOneOutRecord("same-pixels", (x, x.clone(), x.clone()), "color", (1.0, 1.0, 1.0))
    with pytest.warns(
        UserWarning, match=r"data: 1 of 5 triplet\(s\) hold three images with identical content"
    ):
        check_triplets([*records, odd], "data")
    two_of_three = OddOneOutRecord("two", (x, x.clone(), records[0].images[2]), "color", (0.0, 0.0, 3.0))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        check_triplets([*records, two_of_three], "data")  # two equal images: the third is the odd one

    image = tmp_path / "a.png"
    image.write_bytes(b"not read: the same file is refused by name")
    rows = [{"id": f"t{i}", "images": ["a.png"] * 3, "aspect": "color", "votes": [1, 1, 1]} for i in range(2)]
    data = tmp_path / "triplets.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    with pytest.raises(
        InputError, match=r"triplets.jsonl: 2 of 2 triplet\(s\) name the same file three times"
    ):
        train_tpips(data, tmp_path / "run", progress=False)  # refused before any weights load


# ----------------------------------------------------------------------------------------- device
@pytest.fixture
def no_cuda(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)


def test_a_missing_cuda_device_names_the_option_and_the_devices(tmp_path, no_cuda):
    cfg = TrainLoopConfig(out_dir=tmp_path / "run", lr=0.1, device="cuda", progress=False)
    with pytest.raises(DeviceUnavailableError) as e:
        fit(Toy(), make_data(4), cfg)
    msg = str(e.value)
    assert msg.startswith("TrainLoopConfig: option device: 'cuda' asked for") and "has only cpu" in msg
    assert "\n" not in msg and not isinstance(e.value, ValueError)  # the environment: CLI exit 1
    assert not (tmp_path / "run").exists()


@pytest.mark.parametrize("value,match", [("gpu", "unknown device 'gpu'"), ("cuda:1", "CUDA_VISIBLE_DEVICES")])
def test_a_bad_device_name_is_bad_input(tmp_path, value, match):
    with pytest.raises(InputError, match=match):
        TrainLoopConfig(out_dir=tmp_path, device=value).checked()


def test_device_cpu_trains_and_is_part_of_the_settings(tmp_path):
    cfg = dict(out_dir=tmp_path / "run", lr=0.1, epochs=2, batch_size=2, progress=False)
    res = fit(Toy(kill_at=None), make_data(4), TrainLoopConfig(**cfg, device="cpu"))
    assert res.config["derived"]["device"] == "cpu" and res.config["settings"]["device"] == "cpu"
    with pytest.raises(InputError, match="device: 'cpu' -> None"):
        fit(Toy(), make_data(4), TrainLoopConfig(**cfg, resume=True))


def test_device_cpu_is_used_where_cuda_is_found(tmp_path, monkeypatch):
    """device='cpu' reaches accelerate: on a machine that reports CUDA the accelerator is still built for the
    CPU (it was built with cpu=not torch.cuda.is_available() before). The machine here has no CUDA, so the
    accelerator's arguments are caught and the run stopped there."""
    import genmetrics.train.loop as loop

    class Built(Exception):
        pass

    def caught(**kwargs):
        raise Built(kwargs)

    monkeypatch.setattr(torch.cuda, "is_available", lambda: True)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 1)
    monkeypatch.setattr(loop, "new_accelerator", caught)
    for device, cpu in (("cpu", True), (None, False), ("cuda", False)):
        cfg = TrainLoopConfig(out_dir=tmp_path / str(device), lr=0.1, device=device, progress=False)
        with pytest.raises(Built) as e:
            fit(Toy(), make_data(4), cfg)
        assert e.value.args[0]["cpu"] is cpu, device
