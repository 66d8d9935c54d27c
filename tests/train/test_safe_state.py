"""Nothing in a run folder is ever unpickled: a payload planted in any file of a checkpoint or
run folder never runs, and the resume stops with one error naming the file; a resume that cannot restore
every piece of state (RNG included) stops; a wrong-shape tensor names the file and the tensor; the safe
loader of genmetrics/backbones/weights.py refuses every pickle form with the file and the safe format."""

from __future__ import annotations

import json
import os
import pickle
import shutil
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file, save_file

from genmetrics.backbones.weights import load_state_dict
from genmetrics.errors import InputError
from genmetrics.train import TrainLoopConfig, fit

from .toy import Toy, make_data, params


class Payload:
    """Unpickling this creates the marker file (what a crafted checkpoint would do)."""

    def __init__(self, marker: Path):
        self.marker = str(marker)

    def __reduce__(self):
        return (exec, (f"open({self.marker!r}, 'w').close()",))


def _cfg(out, **kw):
    base = dict(
        out_dir=out, lr=0.05, epochs=2, batch_size=4, grad_accum=1, warmup_ratio=0.0, seed=3, progress=False
    )
    return TrainLoopConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def killed_run(tmp_path_factory):
    """An unfinished run (dropout on): killed in step 3, after the end-of-epoch checkpoint at step 2."""
    root = tmp_path_factory.mktemp("safe")
    with pytest.raises(KeyboardInterrupt):
        fit(Toy(dropout=0.2, kill_at=3), make_data(8), _cfg(root / "run"), val_examples=make_data(4, seed=1))
    assert sorted(p.name for p in (root / "run" / "checkpoints").iterdir()) == ["step-2"]
    return root / "run"


def _copy(run: Path, tmp_path: Path) -> Path:
    out = tmp_path / "run"
    shutil.copytree(run, out)
    return out


def _resume(out: Path):
    return fit(Toy(dropout=0.2), make_data(8), _cfg(out, resume=True), val_examples=make_data(4, seed=1))


CKPT = Path("checkpoints") / "step-2"
PLANTED = [
    CKPT / "trainable.safetensors",  # the model
    CKPT / "optimizer.safetensors",
    CKPT / "optimizer.json",
    CKPT / "scheduler.json",
    CKPT / "rng-0.safetensors",
    CKPT / "loop_state.json",
    CKPT / "custom_checkpoint_0.pkl",  # accelerate's scheduler pickle (an older genmetrics wrote these)
    CKPT / "optimizer.bin",
    CKPT / "random_states_0.pkl",
    Path("train_config.json"),
    Path("metrics.jsonl"),
]


@pytest.mark.parametrize("form", ["torch.save", "pickle"])
@pytest.mark.parametrize("rel", PLANTED, ids=[str(p) for p in PLANTED])
def test_planted_payload_never_runs_and_is_named(killed_run, tmp_path, rel, form):
    out = _copy(killed_run, tmp_path)
    marker = tmp_path / "MARKER"
    target = out / rel
    if form == "torch.save":
        torch.save({"w": Payload(marker)}, target)
    else:
        target.write_bytes(pickle.dumps({"w": Payload(marker)}))
    with pytest.raises(InputError) as e:
        _resume(out)
    assert str(target) in str(e.value) and "overwrite=True" in str(e.value)
    assert not marker.exists()
    # the payload is live: unpickling it really would have created the marker
    pickle.loads(pickle.dumps(Payload(marker)))
    assert marker.exists()


def test_a_finished_run_with_a_planted_result_is_named(tmp_path):
    out = tmp_path / "done"
    fit(Toy(), make_data(8), _cfg(out))
    marker = tmp_path / "MARKER"
    (out / "train_result.json").write_bytes(pickle.dumps(Payload(marker)))
    with pytest.raises(InputError, match="train_result.json"):
        fit(Toy(), make_data(8), _cfg(out, resume=True))
    assert not marker.exists()


def test_the_checkpoint_holds_only_safe_files(killed_run):
    ck = killed_run / CKPT
    assert sorted(p.name for p in ck.iterdir()) == [
        "loop_state.json",
        "optimizer.json",
        "optimizer.safetensors",
        "rng-0.safetensors",
        "scheduler.json",
        "trainable.safetensors",
    ]
    for p in ck.glob("*.json"):
        json.loads(p.read_text())
    for p in ck.glob("*.safetensors"):
        load_file(str(p))


@pytest.mark.parametrize("name", ["rng-0.safetensors", "scheduler.json", "optimizer.safetensors"])
def test_a_resume_that_cannot_restore_every_piece_stops(killed_run, tmp_path, name):
    """accelerate skipped an unreadable RNG state with an INFO line and went on; a missing or truncated
    piece of state now stops the resume and names the file."""
    out = _copy(killed_run, tmp_path)
    (out / CKPT / name).unlink()
    with pytest.raises(InputError, match=f"{name}: missing"):
        _resume(out)
    out = _copy(killed_run, tmp_path / "b")
    data = (out / CKPT / name).read_bytes()
    (out / CKPT / name).write_bytes(data[: len(data) // 2])
    with pytest.raises(InputError, match=f"{name}: cannot be read"):
        _resume(out)


@pytest.mark.parametrize(
    "name,key,wrong",
    [("trainable.safetensors", "3.weight", [1, 9]), ("optimizer.safetensors", "state.0.exp_avg", [8, 5])],
)
def test_a_wrong_shape_tensor_names_the_file_and_the_tensor(killed_run, tmp_path, name, key, wrong):
    out = _copy(killed_run, tmp_path)
    path = out / CKPT / name
    sd = load_file(str(path))
    sd[key] = torch.zeros(*wrong)
    save_file(sd, str(path))
    with pytest.raises(InputError) as e:
        _resume(out)
    assert str(path) in str(e.value) and repr(key) in str(e.value) and str(wrong) in str(e.value)


@pytest.mark.parametrize(
    "rel,text,needle",
    [
        (CKPT / "loop_state.json", '{"settings": {}, "loop": {"step": 2', "cannot be read as JSON"),
        (CKPT / "loop_state.json", "[1, 2]", "not a loop state"),
        (CKPT / "scheduler.json", '{"base_lrs": "0.05"}', "should hold the keys"),
        (CKPT / "optimizer.json", '{"param_groups": [], "scalars": {}}', "should be a list of 1"),
        (Path("train_config.json"), '{"settings": ', "cannot be read"),
        (Path("metrics.jsonl"), '{"kind": "train"\n{"step": 1}\n', "metrics.jsonl:1"),
    ],
)
def test_malformed_json_in_the_run_folder_is_named(killed_run, tmp_path, rel, text, needle):
    out = _copy(killed_run, tmp_path)
    (out / rel).write_text(text)
    with pytest.raises(InputError) as e:
        _resume(out)
    assert str(out / rel) in str(e.value) and needle in str(e.value)


def test_a_tampered_loop_state_is_refused_field_by_field(killed_run, tmp_path):
    out = _copy(killed_run, tmp_path)
    path = out / CKPT / "loop_state.json"
    state = json.loads(path.read_text())
    state["loop"]["micro_in_epoch"] = -1
    path.write_text(json.dumps(state))
    with pytest.raises(InputError, match=r"loop\.micro_in_epoch' should be an integer >= 0, got -1"):
        _resume(out)


def _edit_json(path: Path, edit) -> None:
    data = json.loads(path.read_text())
    edit(data)
    path.write_text(json.dumps(data))


def _times(key, factor):
    return lambda d: d.update({key: [x * factor for x in d[key]]})


@pytest.mark.parametrize(
    "name,edit,needle",
    [  # learning rates x1000 in the schedule resumed silently (final weights 0.032 off the uninterrupted run)
        (
            "scheduler.json",
            lambda d: (_times("base_lrs", 1000)(d), _times("_last_lr", 1000)(d)),
            "base learning rates",
        ),
        ("scheduler.json", _times("_last_lr", 1000), r"learning rates \[.*\] at step 2"),
        ("scheduler.json", lambda d: d.update(last_epoch=5, _step_count=6), "the schedule is at step 5"),
        ("scheduler.json", lambda d: d.update(_step_count=9), "'_step_count' is 9"),
        (
            "optimizer.json",
            lambda d: d["param_groups"][0].update(lr=d["param_groups"][0]["lr"] * 1000),
            r"param_groups\[0\]\.lr",
        ),
        (
            "optimizer.json",
            lambda d: d["param_groups"][0].update(weight_decay=0.5),
            r"param_groups\[0\]\.weight_decay is 0\.5",
        ),
        (
            "optimizer.json",
            lambda d: d["param_groups"][0].update(initial_lr=5.0),
            r"param_groups\[0\]\.initial_lr",
        ),
    ],
)
def test_training_files_must_match_what_the_recorded_run_produces(killed_run, tmp_path, name, edit, needle):
    out = _copy(killed_run, tmp_path)
    path = out / CKPT / name
    _edit_json(path, edit)
    with pytest.raises(InputError, match=needle) as e:
        _resume(out)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


@pytest.mark.parametrize(
    "edit,needle",
    [
        (lambda sd: sd.pop("state.1.exp_avg_sq"), "parameter 1's optimizer state lacks state.1.exp_avg_sq"),
        (lambda sd: sd.pop("state.0.step"), "lacks state.0.step"),
        (
            lambda sd: sd.update({"state.2.max_exp_avg_sq": torch.zeros(1, 8)}),
            "has extra state.2.max_exp_avg_sq",
        ),
        (
            lambda sd: sd.update({"state.0.step": torch.tensor(99.0)}),
            r"'state.0.step' is 99.0, expected one integer in \[1, 2\]",
        ),
        (lambda sd: sd.update({"state.3.exp_avg_sq": -torch.ones(1)}), "negative values"),
    ],
)
def test_an_incomplete_optimizer_state_is_one_line(killed_run, tmp_path, edit, needle):
    """A missing moment tensor was a raw KeyError at the first optimizer step after the resume."""
    out = _copy(killed_run, tmp_path)
    path = out / CKPT / "optimizer.safetensors"
    sd = load_file(str(path))
    edit(sd)
    save_file(sd, str(path))
    with pytest.raises(InputError, match=needle) as e:
        _resume(out)
    assert str(path) in str(e.value) and "\n" not in str(e.value)


def test_the_untouched_copy_still_resumes_exactly(killed_run, tmp_path):
    """The fixture's run, resumed, equals the run never stopped (the refusals above changed a copy only)."""
    full = fit(Toy(dropout=0.2), make_data(8), _cfg(tmp_path / "full"), val_examples=make_data(4, seed=1))
    res = _resume(_copy(killed_run, tmp_path))
    assert res.resumed_from.name == "step-2" and res.history == full.history
    for k, v in params(full.module).items():
        assert torch.equal(params(res.module)[k], v), k


# ----------------------------------------------------------------- genmetrics/backbones/weights.py
def _legacy(obj, path):
    torch.save(obj, path, _use_new_zipfile_serialization=False)


@pytest.mark.parametrize(
    "name,write",
    [
        ("head.pt", lambda obj, p: torch.save(obj, p)),
        ("head_legacy.pt", _legacy),
        ("optimizer.bin", lambda obj, p: torch.save(obj, p)),
        ("adapter_model.bin", lambda obj, p: p.write_bytes(pickle.dumps(obj, protocol=4))),
        ("weights.pkl", lambda obj, p: p.write_bytes(pickle.dumps(obj, protocol=2))),
    ],
)
def test_safe_loader_refuses_every_pickle_form(tmp_path, name, write):
    marker = tmp_path / "MARKER"
    path = tmp_path / name
    write({"w": Payload(marker)}, path)
    with pytest.raises(InputError) as e:
        load_state_dict(path)
    msg = str(e.value)
    assert str(path) in msg and ".safetensors" in msg and "never unpickles" in msg and "\n" not in msg
    assert (
        "weights_only` set to `False`" not in msg
    )  # torch's hint to turn the protection off is not passed on
    assert not marker.exists()


def test_safe_loader_accepts_plain_tensors_and_refuses_other_shapes(tmp_path):
    torch.save({"w": torch.ones(2)}, tmp_path / "zip.pt")
    _legacy({"w": torch.ones(2)}, tmp_path / "legacy.pt")
    assert load_state_dict(tmp_path / "zip.pt")["w"].tolist() == [1.0, 1.0]
    assert load_state_dict(tmp_path / "legacy.pt")["w"].tolist() == [1.0, 1.0]
    torch.save([torch.ones(2)], tmp_path / "list.pt")
    with pytest.raises(InputError, match="holds list, not a flat dict of named tensors"):
        load_state_dict(tmp_path / "list.pt")
    (tmp_path / "bad.safetensors").write_bytes(os.urandom(64))
    with pytest.raises(InputError, match="bad.safetensors' is corrupt"):
        load_state_dict(tmp_path / "bad.safetensors")


def _tamper_rng(ck: Path, tensors=None, meta=None) -> None:
    from safetensors import safe_open

    path = ck / "rng-0.safetensors"
    t = load_file(str(path))
    with safe_open(str(path), "pt") as f:
        m = f.metadata()
    save_file({**t, **(tensors or {})}, str(path), metadata={**m, **(meta or {})})


@pytest.mark.parametrize(
    "tensors,meta,fragment",
    [
        ({"numpy": "cut"}, None, "numpy random state should be 624"),
        ({"python": "cut"}, None, "Python random state should be 625"),
        ({"torch": "cut"}, None, "torch random state should be uint8 of shape"),
        (None, {"numpy": json.dumps(["MT19937", 10_000, 0, 0.0])}, "out-of-range metadata"),
        (None, {"numpy": json.dumps(["PCG64", 0, 0, 0.0])}, "out-of-range metadata"),
        (None, {"python": json.dumps(["3", None])}, "out-of-range metadata"),
    ],
)
def test_a_tampered_rng_state_is_named(killed_run, tmp_path, tensors, meta, fragment):
    """A random state of the wrong length or with out-of-range metadata (numpy raised a raw IndexError
    from ``set_state``) stops the resume with one line naming rng-0.safetensors."""
    out = _copy(killed_run, tmp_path)
    ck = out / CKPT
    if tensors:
        t = load_file(str(ck / "rng-0.safetensors"))
        tensors = {k: t[k][:10].clone() for k in tensors}
    _tamper_rng(ck, tensors, meta)
    with pytest.raises(InputError) as e:
        _resume(out)
    msg = str(e.value)
    assert "\n" not in msg and str(ck / "rng-0.safetensors") in msg and fragment in msg
