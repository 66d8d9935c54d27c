"""Weight files that torch.load(weights_only=True) reads without complaint but that hold no usable weights:
a meta tensor (no data: copying it into a model fails later, deep inside), a sparse or a complex tensor
(not a model's dense real weights), an empty file and a folder (both were reported as "a pickle of objects
other than tensors (EOFError / IsADirectoryError)", which sends the user looking for code in the file).
Each is refused at load time naming the file (and the tensor); dense real tensors of any float dtype load."""

from __future__ import annotations

import pytest
import torch

from genmetrics.backbones.weights import load_state_dict
from genmetrics.errors import InputError

BAD_TENSORS = {
    "meta": (torch.empty(2, device="meta"), "meta"),
    "sparse": (torch.eye(2).to_sparse(), "sparse"),
    "complex": (torch.zeros(2, dtype=torch.complex64), "complex"),
}


@pytest.mark.parametrize("kind", list(BAD_TENSORS))
def test_a_tensor_without_usable_values_is_named(tmp_path, kind):
    tensor, said = BAD_TENSORS[kind]
    path = tmp_path / "w.pt"
    torch.save({"ok": torch.ones(2), "layer.weight": tensor}, path)
    with pytest.raises(InputError) as e:
        load_state_dict(path)
    msg = str(e.value)
    assert str(path) in msg and "'layer.weight'" in msg and said in msg and "\n" not in msg


@pytest.mark.parametrize("kind", ["empty", "folder"])
def test_an_empty_file_or_a_folder_is_named_for_what_it_is(tmp_path, kind):
    path = tmp_path / "w.pt"
    path.mkdir() if kind == "folder" else path.write_bytes(b"")
    with pytest.raises(InputError) as e:
        load_state_dict(path)
    msg = str(e.value)
    assert str(path) in msg and "pickle" not in msg
    assert ("is a folder" if kind == "folder" else "is empty (0 bytes)") in msg


def test_dense_real_tensors_of_every_float_dtype_still_load(tmp_path):
    """The control: half, bfloat16, a slice (a view of a larger storage) and integer buffers are weights."""
    sd = {
        "h": torch.ones(2, dtype=torch.float16),
        "b": torch.ones(2, dtype=torch.bfloat16),
        "s": torch.arange(6.0)[2:4],
        "n": torch.tensor([3]),
    }
    torch.save(sd, tmp_path / "w.pt")
    out = load_state_dict(tmp_path / "w.pt")
    assert out.keys() == sd.keys() and all(torch.equal(out[k], v) for k, v in sd.items())
