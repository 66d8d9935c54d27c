"""genmetrics.train.checkpoint: resuming from poisoned, pickled, torn or interrupted checkpoints is refused naming
the file, or continues to the weights of a run that never stopped."""

from __future__ import annotations

import json
import math
import os
import signal
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from safetensors.torch import load_file, save_file

from genmetrics.errors import InputError
from genmetrics.train import TrainLoopConfig, fit
from tests.reliability.hostile import Cases, Ctx, _toy, _train_cfg, snapshot

from .toy import Toy, make_data

# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


def killed_run(ctx: Ctx) -> Path:
    """A run in ``ctx.out`` killed in step 3, after the end-of-epoch checkpoint ``step-2``."""
    from genmetrics.train import fit

    Toy, make_data = _toy()
    with pytest.raises(KeyboardInterrupt):
        fit(Toy(kill_at=3), make_data(8), _train_cfg(ctx.out))
    return ctx.out / "checkpoints" / "step-2"


def resume(ctx: Ctx):
    from genmetrics.train import fit

    Toy, make_data = _toy()
    return fit(Toy(), make_data(8), _train_cfg(ctx.out, resume=True))


def _resume_refused(ctx: Ctx, plant: Callable[[Path], Path]) -> None:
    ck = killed_run(ctx)
    bad = plant(ck)
    ctx.freeze()
    msg = ctx.refused(lambda: resume(ctx), bad.name)
    assert "\n" not in msg


#: a pickle payload planted as (or next to) one file of a training checkpoint: the resume is refused
_RESUME_PICKLES = (
    (
        "h-resume-custom-checkpoint-pkl",
        "resume: accelerate's custom_checkpoint_0.pkl planted",
        "custom_checkpoint_0.pkl",
    ),
    ("h-resume-random-states-pkl", "resume: accelerate's random_states_0.pkl planted", "random_states_0.pkl"),
    (
        "h-resume-optimizer-bin",
        "resume: an optimizer.bin pickle planted next to the safe files",
        "optimizer.bin",
    ),
    ("h-resume-rng-is-pickle", "resume: rng-0.safetensors replaced by a pickle", "rng-0.safetensors"),
    (
        "h-resume-trainable-is-pickle",
        "resume: trainable.safetensors replaced by a pickle",
        "trainable.safetensors",
    ),
    (
        "h-resume-optimizer-is-pickle",
        "resume: optimizer.safetensors replaced by a pickle",
        "optimizer.safetensors",
    ),
    ("h-resume-scheduler-json-pickle", "resume: scheduler.json holds pickle bytes", "scheduler.json"),
    ("h-resume-loopstate-pickle", "resume: loop_state.json holds pickle bytes", "loop_state.json"),
    (
        "h-resume-pytorch-model-bin",
        "resume: a pytorch_model.bin pickle planted in the checkpoint",
        "pytorch_model.bin",
    ),
)


def _resume_pickle_case(name: str):
    return lambda ctx: _resume_refused(ctx, lambda ck: ctx.payload(ck / name))


for _id, _what, _name in _RESUME_PICKLES:
    case(_id, "pickle", _what)(_resume_pickle_case(_name))


# ============================================================== 3. poisoned numbers (poison)
def _edit(path: Path, fn: Callable[[dict[str, torch.Tensor]], None]) -> None:
    t = dict(load_file(str(path)))
    fn(t)
    save_file(t, str(path))


def _resume_poison(ctx: Ctx, file: str, fn, *fragments: str) -> None:
    ck = killed_run(ctx)
    _edit(ck / file, fn)
    ctx.freeze()
    ctx.refused(lambda: resume(ctx), file, *fragments)


def _first(t: dict[str, torch.Tensor]) -> str:
    return sorted(t)[0]


@case("h-resume-trainable-shape", "poison", "resume: a trainable tensor of another shape")
def _(ctx):
    def f(t):
        k = _first(t)
        t[k] = torch.zeros(*t[k].shape, 2)

    _resume_poison(ctx, "trainable.safetensors", f)


@case("h-resume-trainable-missing", "poison", "resume: a trainable tensor missing")
def _(ctx):
    _resume_poison(ctx, "trainable.safetensors", lambda t: t.pop(_first(t)))


@case("h-resume-trainable-extra", "poison", "resume: an extra tensor in trainable.safetensors")
def _(ctx):
    _resume_poison(ctx, "trainable.safetensors", lambda t: t.__setitem__("evil.weight", torch.zeros(3)))


@case(
    "h-resume-trainable-nan",
    "poison",
    "resume: NaN in a trainable tensor",
)
def _(ctx):
    def f(t):
        k = _first(t)
        t[k] = t[k].clone()
        t[k].view(-1)[0] = float("nan")

    _resume_poison(ctx, "trainable.safetensors", f)


@case(
    "h-resume-trainable-inf",
    "poison",
    "resume: +inf in a trainable tensor",
)
def _(ctx):
    def f(t):
        k = _first(t)
        t[k] = t[k].clone()
        t[k].view(-1)[0] = float("inf")

    _resume_poison(ctx, "trainable.safetensors", f)


@case("h-resume-optimizer-shape", "poison", "resume: an optimizer moment of another shape")
def _(ctx):
    def f(t):
        k = next(k for k in sorted(t) if t[k].dim() > 0)
        t[k] = torch.zeros(t[k].numel() + 1)

    _resume_poison(ctx, "optimizer.safetensors", f)


@case(
    "h-resume-optimizer-nan",
    "poison",
    "resume: NaN in an optimizer moment",
)
def _(ctx):
    def f(t):
        k = next(k for k in sorted(t) if t[k].dim() > 0)
        t[k] = t[k].clone()
        t[k].view(-1)[0] = float("nan")

    _resume_poison(ctx, "optimizer.safetensors", f)


@case("h-resume-rng-truncated", "poison", "resume: the torch RNG state cut short")
def _(ctx):
    def f(t):
        k = _first(t)
        t[k] = t[k][: max(1, t[k].numel() // 2)].clone()

    _resume_poison(ctx, "rng-0.safetensors", f)


@case("h-resume-loopstate-negative-step", "poison", "resume: loop_state.json with step = -5")
def _(ctx):
    ck = killed_run(ctx)
    p = ck / "loop_state.json"
    d = json.loads(p.read_text())
    d["loop"]["step"] = -5
    p.write_text(json.dumps(d))
    ctx.freeze()
    ctx.refused(lambda: resume(ctx), "loop_state.json")


def _loop_field(ctx: Ctx, name: str, value: Any) -> None:
    ck = killed_run(ctx)
    p = ck / "loop_state.json"
    d = json.loads(p.read_text())
    d["loop"][name] = value
    p.write_text(json.dumps(d))
    ctx.freeze()
    ctx.refused(lambda: resume(ctx), "loop_state.json", name)


@case("h-resume-loopstate-best-nan", "poison", "resume: loop_state.json with best_metric = NaN")
def _(ctx):
    _loop_field(ctx, "best_metric", float("nan"))


@case("h-resume-loopstate-step-float", "poison", "resume: loop_state.json with step = 2.5")
def _(ctx):
    _loop_field(ctx, "step", 2.5)


@case("h-resume-loopstate-extra-key", "poison", "resume: loop_state.json with an unknown field")
def _(ctx):
    ck = killed_run(ctx)
    p = ck / "loop_state.json"
    d = json.loads(p.read_text())
    d["loop"]["__class__"] = "os.system"
    p.write_text(json.dumps(d))
    ctx.freeze()
    ctx.refused(lambda: resume(ctx), "loop_state.json")


# ================================================================= 4. faults during long work (fault)
@case("h-sigint-mid-save", "fault", "Ctrl-C during a checkpoint write: write finished, stop, resume equal")
def _(ctx):
    from genmetrics.train import checkpoint as ck
    from genmetrics.train import fit

    Toy, make_data = _toy()
    ref_dir = ctx.root / "ref_run"
    ctx.allow(ref_dir)
    t_ref = Toy()
    fit(t_ref, make_data(8), _train_cfg(ref_dir))
    real = ck.save_training_state
    fired: list[int] = []

    def hit(*a, **k):
        if not fired:
            fired.append(1)
            os.kill(os.getpid(), signal.SIGINT)
        return real(*a, **k)

    ctx.freeze()
    ctx.monkeypatch.setattr(ck, "save_training_state", hit)
    # Python's own Ctrl-C handler, whatever this process inherited: a test run started in the background of
    # a non-interactive shell ignores SIGINT, and a held Ctrl-C then stays ignored (tests/train/
    # test_signals_handlers.py covers that case)
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            fit(Toy(), make_data(8), _train_cfg(ctx.out))
    finally:
        signal.signal(signal.SIGINT, previous)
    ctx.monkeypatch.setattr(ck, "save_training_state", real)
    assert fired and list((ctx.out / "checkpoints").iterdir())
    t2 = Toy()
    fit(t2, make_data(8), _train_cfg(ctx.out, resume=True))
    for k, v in t_ref.net.state_dict().items():
        assert torch.equal(v, t2.net.state_dict()[k]), k


@case(
    "h-enospc-checkpoint", "fault", "a full disk (ENOSPC) while writing a checkpoint: one line, nothing lost"
)
def _(ctx):
    import errno

    from genmetrics.train import checkpoint as ck
    from genmetrics.train import fit

    Toy, make_data = _toy()
    real = ck.save_training_state
    calls: list[int] = []

    def full(*a, **k):
        calls.append(1)
        if len(calls) == 2:
            raise OSError(errno.ENOSPC, "No space left on device")
        return real(*a, **k)

    ctx.freeze()
    ctx.monkeypatch.setattr(ck, "save_training_state", full)
    with pytest.raises(Exception) as e:
        fit(Toy(), make_data(8), _train_cfg(ctx.out, save_every=1))
    assert "space" in str(e.value) and "Traceback" not in str(e.value)
    ctx.monkeypatch.setattr(ck, "save_training_state", real)
    assert [p.name for p in (ctx.out / "checkpoints").iterdir() if not p.name.endswith(".tmp")]


@case("h-resume-train-config-malformed", "fault", "resume: train_config.json is not JSON")
def _(ctx):
    killed_run(ctx)
    (ctx.out / "train_config.json").write_text("{oops")
    ctx.freeze()
    ctx.refused(lambda: resume(ctx), "train_config.json")


@case("h-resume-metrics-torn-tail", "fault", "resume: metrics.jsonl torn in its last line continues")
def _(ctx):
    from genmetrics.train import fit

    Toy, make_data = _toy()
    ref_dir = ctx.root / "ref_run"
    ctx.allow(ref_dir)
    t_ref = Toy()
    fit(t_ref, make_data(8), _train_cfg(ref_dir))
    killed_run(ctx)
    with open(ctx.out / "metrics.jsonl", "a") as f:
        f.write('{"step": 9, "lo')
    ctx.freeze()
    t2 = Toy()
    fit(t2, make_data(8), _train_cfg(ctx.out, resume=True))
    for k, v in t_ref.net.state_dict().items():
        assert torch.equal(v, t2.net.state_dict()[k]), k
    for line in (ctx.out / "metrics.jsonl").read_text().splitlines():
        json.loads(line)


@case("h-resume-metrics-damaged-middle", "fault", "resume: metrics.jsonl damaged before its last line")
def _(ctx):
    killed_run(ctx)
    p = ctx.out / "metrics.jsonl"
    lines = p.read_text().splitlines()
    assert len(lines) >= 2
    lines[0] = "{garbage"
    p.write_text("\n".join(lines) + "\n")
    ctx.freeze()
    ctx.refused(lambda: resume(ctx), "metrics.jsonl")


@case("h-resume-finished-kept", "fault", "resume of a finished run trains nothing and keeps the weights")
def _(ctx):
    from genmetrics.train import fit

    Toy, make_data = _toy()
    t = Toy()
    fit(t, make_data(8), _train_cfg(ctx.out))
    files = snapshot(ctx.out, [])
    ctx.freeze()
    t2 = Toy(init_seed=99)
    fit(t2, make_data(8), _train_cfg(ctx.out, resume=True))
    after = snapshot(ctx.out, [])
    lost = [p for p in files if p not in after]
    assert not lost, lost


@case("h-kill-mid-step-resume-equal", "fault", "a run killed mid-step resumes to the uninterrupted weights")
def _(ctx):
    from genmetrics.train import fit

    Toy, make_data = _toy()
    ref_dir = ctx.root / "ref_run"
    ctx.allow(ref_dir)
    t_ref = Toy()
    fit(t_ref, make_data(8), _train_cfg(ref_dir))
    killed_run(ctx)
    ctx.freeze()
    t2 = Toy(init_seed=5)
    fit(t2, make_data(8), _train_cfg(ctx.out, resume=True))
    for k, v in t_ref.net.state_dict().items():
        assert torch.equal(v, t2.net.state_dict()[k]), k


test_hostile = HOSTILE.test()


# ------------------------------------------------------------------- a finished run's record of the wrong type
# A finished run's ``train_result.json`` that is valid JSON but holds values of the wrong type: a resume names
# the file and the key (InputError, CLI exit 2), never an AttributeError / TypeError from inside the loop (the
# CLI printed a traceback for those: it maps only InputError / ValueError / OSError to a line).
def _cfg(out, **kw):
    base = dict(out_dir=out, lr=0.05, epochs=1, batch_size=4, grad_accum=1, warmup_ratio=0.0, progress=False)
    return TrainLoopConfig(**{**base, **kw})


@pytest.fixture(scope="module")
def finished(tmp_path_factory):
    out = tmp_path_factory.mktemp("finished") / "run"
    fit(Toy(), make_data(8), _cfg(out))
    return out, json.loads((out / "train_result.json").read_text())


BAD = {
    "settings": [[], "a JSON object"],
    "steps": ["2", [2], -1, True, 2.5, None],
    "best_metric": ["0.1", [0.1], True],
    "best_step": ["1", -1, 1.5],
    "stopped_early": ["no", 0, None],
    "epochs_started": ["1", [1], -1],
}
CASES = [(key, value) for key, values in BAD.items() for value in values]


@pytest.mark.parametrize(("key", "value"), CASES, ids=[f"{k}={v!r}" for k, v in CASES])
def test_a_result_of_the_wrong_type_is_named(finished, tmp_path, key, value):
    out, good = finished
    run = tmp_path / "run"
    run.mkdir()
    for entry in out.iterdir():  # the result file only is replaced; the rest is read as it is
        if entry.is_file() and entry.name != "train_result.json":
            (run / entry.name).write_bytes(entry.read_bytes())
    (run / "train_result.json").write_text(json.dumps({**good, key: value}))
    with pytest.raises(InputError) as e:
        fit(Toy(), make_data(8), _cfg(run, resume=True))
    msg = str(e.value)
    assert "train_result.json" in msg and repr(key) in msg and "overwrite=True" in msg


def test_the_good_result_still_resumes(finished, tmp_path):
    """The control of the cases above: the same copy with the file as written resumes to the finished run."""
    out, good = finished
    run = tmp_path / "run"
    run.mkdir()
    for entry in out.iterdir():
        if entry.is_file():
            (run / entry.name).write_bytes(entry.read_bytes())
    res = fit(Toy(), make_data(8), _cfg(run, resume=True))
    assert res.steps == good["steps"] == 2 and res.module is None  # nothing trained: the recorded result
    assert res.best_metric is None or math.isfinite(res.best_metric)


@pytest.mark.parametrize("planted", ["notes.txt", "x\udcff.json", "a_folder"])
def test_a_planted_entry_in_a_checkpoint_is_named_in_one_readable_line(tmp_path, planted):
    """A stray file (also one whose name is not UTF-8) or folder in a checkpoint stops the resume with a
    sentence that names it (it read "a file that is not part in a checkpoint")."""
    from genmetrics.train.checkpoint import check_folder, state_files

    for name in state_files(1, False):
        (tmp_path / name).write_text("")
    (tmp_path / planted).mkdir() if planted == "a_folder" else (tmp_path / planted).write_text("")
    with pytest.raises(InputError) as e:
        check_folder(tmp_path, 1, False)
    msg = str(e.value)
    assert msg.startswith(f"{tmp_path / planted}: an unexpected file in a checkpoint;") and "\n" not in msg
