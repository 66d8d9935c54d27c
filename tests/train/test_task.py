"""What a family gives the training loop (genmetrics.train.task): the required hooks name the class when missing,
the defaults collate with torch, save only the trained parameters (read back equal), and the examples'
fingerprint changes with their content and order, never with a dict's key order."""

from __future__ import annotations

import dataclasses

import pytest
import torch
from safetensors.torch import load_file
from torch import nn

from genmetrics.train.task import TrainTask, fingerprint_examples


class Bare(TrainTask):
    pass


@pytest.mark.parametrize("call", ["trainable_module", "loss", "evaluate"])
def test_a_missing_hook_names_the_class(call):
    args = {"trainable_module": (), "loss": (nn.Linear(1, 1), None), "evaluate": (nn.Linear(1, 1), [])}[call]
    with pytest.raises(NotImplementedError, match=rf"^Bare\.{call}\(\) is not implemented"):
        getattr(Bare(), call)(*args)


def test_the_defaults():
    task = Bare()
    batch = task.collate([{"x": torch.ones(2), "y": 1}, {"x": torch.zeros(2), "y": 2}])
    assert torch.equal(batch["x"], torch.stack([torch.ones(2), torch.zeros(2)])) and batch["y"].tolist() == [
        1,
        2,
    ]
    assert task.param_groups(nn.Linear(1, 1)) is None and task.renamed_parameters() == {}
    assert task.data_fingerprint([1, "a"]) == fingerprint_examples([1, "a"])


def test_save_writes_only_the_trained_parameters(tmp_path):
    net = nn.Sequential(nn.Linear(3, 2), nn.Linear(2, 1))
    net[0].requires_grad_(False)
    Bare().save(net, tmp_path / "artifact")
    saved = load_file(str(tmp_path / "artifact" / "trainable.safetensors"))
    trained = {n: p for n, p in net.named_parameters() if p.requires_grad}
    assert saved.keys() == trained.keys() == {"1.weight", "1.bias"}
    assert all(torch.equal(saved[n], trained[n]) for n in saved)
    assert sorted(p.name for p in (tmp_path / "artifact").iterdir()) == ["trainable.safetensors"]


@dataclasses.dataclass
class Example:
    image: torch.Tensor
    label: int


def test_the_fingerprint_follows_the_content():
    a = [Example(torch.arange(4.0), 1), {"b": 2, "a": [1, 2]}, "text", None]
    same = [Example(torch.arange(4.0), 1), {"a": [1, 2], "b": 2}, "text", None]  # dict key order: no matter
    assert fingerprint_examples(a) == fingerprint_examples(same)
    changed = [
        [Example(torch.arange(4.0), 2), *a[1:]],  # a field
        [Example(torch.arange(4.0).double(), 1), *a[1:]],  # a dtype, same values
        [Example(torch.arange(4.0).reshape(2, 2), 1), *a[1:]],  # a shape, same bytes
        [a[1], a[0], *a[2:]],  # the order
        a[:-1],  # one example fewer
        [*a[:3], "None"],  # None against its text
    ]
    prints = {fingerprint_examples(c) for c in changed}
    assert len(prints) == len(changed) and fingerprint_examples(a) not in prints
