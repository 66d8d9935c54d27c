"""Weight files that torch.load(weights_only=True) reads without complaint but that hold no usable weights:
a meta tensor (no data: copying it into a model fails later, deep inside), a sparse or a complex tensor
(not a model's dense real weights), an empty file and a folder (both were reported as "a pickle of objects
other than tensors (EOFError / IsADirectoryError)", which sends the user looking for code in the file).
Each is refused at load time naming the file (and the tensor); dense real tensors of any float dtype load."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch

from genmetrics.backbones.weights import load_state_dict
from genmetrics.errors import InputError
from tests.reliability.hostile import Cases, Ctx, Payload

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


# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


# ======================================================================== 1. pickles never run (pickle)
def _safe_loader_refuses(ctx: Ctx, name: str, save: Callable[[Path, Any], None]) -> None:
    from genmetrics.backbones.weights import load_state_dict

    p = ctx.inp / name
    save(p, {"w": torch.zeros(2), "obj": Payload(ctx.marker)})
    ctx.freeze()
    msg = ctx.refused(lambda: load_state_dict(p), str(p))
    assert "\n" not in msg and "safetensors" in msg


@case("h-pkl-zip-pt", "pickle", "load_state_dict: a torch.save zip .pt holding an object")
def _(ctx):
    _safe_loader_refuses(ctx, "model.pt", lambda p, o: torch.save(o, p))


@case("h-pkl-legacy-pth", "pickle", "load_state_dict: a legacy (non-zip) torch .pth holding an object")
def _(ctx):
    _safe_loader_refuses(
        ctx, "model.pth", lambda p, o: torch.save(o, p, _use_new_zipfile_serialization=False)
    )


@case("h-pkl-raw-pkl", "pickle", "load_state_dict: a raw pickle .pkl")
def _(ctx):
    _safe_loader_refuses(ctx, "state.pkl", lambda p, o: p.write_bytes(pickle.dumps(o)))


@case("h-pkl-renamed-safetensors", "pickle", "load_state_dict: a raw pickle named .safetensors")
def _(ctx):
    _safe_loader_refuses(ctx, "model.safetensors", lambda p, o: p.write_bytes(pickle.dumps(o)))


@case("h-pkl-optimizer-bin", "pickle", "load_state_dict: accelerate-style optimizer.bin (zip pickle)")
def _(ctx):
    _safe_loader_refuses(ctx, "optimizer.bin", lambda p, o: torch.save(o, p))


@case("h-pkl-adapter-bin-legacy", "pickle", "load_state_dict: peft adapter_model.bin, legacy pickle")
def _(ctx):
    _safe_loader_refuses(
        ctx, "adapter_model.bin", lambda p, o: torch.save(o, p, _use_new_zipfile_serialization=False)
    )


@case("h-pkl-protocol0", "pickle", "load_state_dict: a protocol-0 (text) pickle named .pt")
def _(ctx):
    _safe_loader_refuses(ctx, "old.pt", lambda p, o: p.write_bytes(pickle.dumps(o, protocol=0)))


@case("h-pkl-nested-object", "pickle", "load_state_dict: a plain dict whose nested list hides the object")
def _(ctx):
    _safe_loader_refuses(ctx, "nested.pt", lambda p, o: torch.save({"w": torch.zeros(1), "x": [[o]]}, p))


test_hostile = HOSTILE.test()
