"""A training checkpoint in safe formats only (safetensors and JSON): nothing is ever unpickled.

``checkpoints/step-N/`` holds every piece of state a resume needs, each file checked against the object it
restores before anything is changed:

=========================  =====================================================================
``trainable.safetensors``  the trained parameters and the buffers (a frozen backbone is not copied)
``optimizer.safetensors``  the optimizer's per-parameter tensors, ``state.<index>.<name>``
``optimizer.json``         its parameter groups (hyper-parameters, parameter indices)
``scheduler.json``         the learning-rate schedule's ``state_dict``
``scaler.json``            the fp16 gradient scaler's ``state_dict`` (only when there is one)
``rng-<rank>.safetensors`` every random generator of process ``<rank>``: torch (CPU and each CUDA device),
                           numpy and Python (their scalars in the file's metadata)
``loop_state.json``        the settings and the loop's position (written last: the checkpoint is complete)
=========================  =====================================================================

The data order is not a file: the permutation of an epoch is a function of ``(seed, epoch)`` and the
position in it is in ``loop_state.json``. A file that is missing, unreadable, of another shape or type, or
any other file in the folder (a pickle from accelerate's ``save_state``, a planted file) stops the resume
with an :class:`~genmetrics.errors.InputError` that names the file (and the tensor).
"""

from __future__ import annotations

import json
import math
import random
from dataclasses import asdict, dataclass, field, fields
from pathlib import Path
from typing import Any

import numpy as np
import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import save_file

from genmetrics.data.output.atomic import atomic_output, atomic_write_text
from genmetrics.errors import InputError
from genmetrics.train.run_dir import LOOP_STATE

__all__ = [
    "LoopState",
    "TrainingParts",
    "check_folder",
    "check_result",
    "load_training_state",
    "read_loop_state",
    "save_training_state",
    "state_files",
    "write_loop_state",
]

TRAINABLE = "trainable.safetensors"
OPTIMIZER_TENSORS, OPTIMIZER_JSON = "optimizer.safetensors", "optimizer.json"
SCHEDULER, SCALER = "scheduler.json", "scaler.json"
PICKLE_SUFFIXES = (".bin", ".pkl", ".pt", ".pth", ".pickle", ".ckpt")
_START_OVER = "pass overwrite=True (CLI: --overwrite) to start over, or choose another out_dir"


@dataclass
class LoopState:
    """Where the loop is (the ``loop`` part of ``loop_state.json``); :meth:`from_json` checks every field.

    >>> LoopState.from_json({**asdict(LoopState()), "step": 4}, "loop_state.json").step
    4
    >>> LoopState.from_json({**asdict(LoopState()), "step": "4"}, "loop_state.json")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: loop_state.json: 'loop.step' should be an integer >= 0, got '4'; ...
    """

    step: int = 0
    epoch: int = 0
    micro_in_epoch: int = 0
    epoch_progress: float = 0.0
    best_metric: float | None = None
    best_step: int | None = None
    bad_evals: int = 0
    stopped_early: bool = False

    @classmethod
    def from_json(cls, loop: Any, where: str | Path) -> LoopState:
        """The loop state from the ``loop`` dict of ``loop_state.json``; raises
        :class:`~genmetrics.errors.InputError` naming ``where`` and the field when a field is missing,
        extra or of the wrong type or range."""
        names = [f.name for f in fields(cls)]
        if not isinstance(loop, dict) or sorted(loop) != sorted(names):
            got = sorted(loop) if isinstance(loop, dict) else type(loop).__name__
            raise InputError(f"{where}: 'loop' should hold exactly {names}, got {got}; {_START_OVER}")
        for name in names:
            value, ok = loop[name], _loop_field_ok(name, loop[name])
            if not ok:
                raise InputError(
                    f"{where}: 'loop.{name}' should be {_LOOP_TYPES[name]}, got {value!r}; {_START_OVER}"
                )
        return cls(**loop)


_LOOP_TYPES = {
    "step": "an integer >= 0",
    "epoch": "an integer >= 0",
    "micro_in_epoch": "an integer >= 0",
    "bad_evals": "an integer >= 0",
    "best_step": "an integer >= 0 or null",
    "epoch_progress": "a number >= 0",
    "best_metric": "a finite number or null",
    "stopped_early": "true or false",
}


def _loop_field_ok(name: str, v: Any) -> bool:
    is_int = isinstance(v, int) and not isinstance(v, bool)
    if name == "stopped_early":
        return isinstance(v, bool)
    if name in ("best_step", "best_metric") and v is None:
        return True
    if name == "best_metric":
        return isinstance(v, (int, float)) and not isinstance(v, bool) and bool(np.isfinite(v))
    if name == "epoch_progress":
        return isinstance(v, (int, float)) and not isinstance(v, bool) and v >= 0
    return is_int and v >= 0


@dataclass
class TrainingParts:
    """The objects a checkpoint saves and restores: the module's trained tensors (parameters and buffers,
    by name), the optimizer, the schedule, the fp16 gradient scaler (or None), this process's rank and the
    task's renamed parameters (``{old: new}``, :meth:`TrainTask.renamed_parameters`).

    >>> net = torch.nn.Linear(2, 1)
    >>> parts = TrainingParts(dict(net.named_parameters()), torch.optim.AdamW(net.parameters()), None)
    >>> sorted(parts.trainable), parts.rank
    (['bias', 'weight'], 0)
    """

    trainable: dict[str, torch.Tensor]
    optimizer: Any
    scheduler: Any
    scaler: Any = None
    rank: int = 0
    renamed: dict[str, str] = field(default_factory=dict)


# ---------------------------------------------------------------------------------------- reading files
def _read_json(path: Path) -> Any:
    try:
        return json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise InputError(f"{path}: missing; the checkpoint is incomplete: {_START_OVER}") from None
    except (OSError, ValueError) as e:
        raise InputError(
            f"{path}: cannot be read as JSON ({type(e).__name__}: {str(e)[:120]}); training state is read "
            f"only from JSON and safetensors files: {_START_OVER}"
        ) from None


def _read_safetensors(path: Path) -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    try:
        with safe_open(str(path), framework="pt") as f:
            tensors, meta = {k: f.get_tensor(k) for k in f.keys()}, dict(f.metadata() or {})
    except FileNotFoundError:
        raise InputError(f"{path}: missing; the checkpoint is incomplete: {_START_OVER}") from None
    except (OSError, SafetensorError, ValueError, RuntimeError) as e:
        raise InputError(
            f"{path}: cannot be read as safetensors ({type(e).__name__}: {str(e)[:120]}); training state is "
            f"read only from safetensors and JSON files: {_START_OVER}"
        ) from None
    for k, t in tensors.items():  # a NaN / inf in saved state would train on silently
        if t.is_floating_point() and not bool(torch.isfinite(t).all()):
            bad = int((~torch.isfinite(t)).sum())
            raise InputError(
                f"{path}: tensor {k!r} holds {bad} NaN or infinite value(s): the file is damaged or the run "
                f"had diverged before this checkpoint; resume from an earlier step-N checkpoint (move this one "
                f"away) or {_START_OVER}"
            )
    return tensors, meta


def _like(saved: Any, current: Any, where: str, key: str) -> Any:
    """``saved`` (from JSON) checked to have the structure and types of ``current``; tuples come back."""
    if isinstance(current, dict):
        if not isinstance(saved, dict) or sorted(saved) != sorted(map(str, current)):
            raise InputError(
                f"{where}: {key or 'the file'} should hold the keys {sorted(map(str, current))}; {_START_OVER}"
            )
        return {k: _like(saved[str(k)], v, where, f"{key}.{k}".lstrip(".")) for k, v in current.items()}
    if isinstance(current, (list, tuple)):
        if not isinstance(saved, list) or len(saved) != len(current):
            raise InputError(
                f"{where}: '{key}' should be a list of {len(current)}, got {saved!r}"[:300]
                + f"; {_START_OVER}"
            )
        items = [_like(s, c, where, f"{key}[{i}]") for i, (s, c) in enumerate(zip(saved, current))]
        return tuple(items) if isinstance(current, tuple) else items
    numeric = (int, float)
    same = type(saved) is type(current) or (
        isinstance(current, float) and isinstance(saved, numeric) and not isinstance(saved, bool)
    )
    if not same:
        raise InputError(
            f"{where}: '{key}' should be {type(current).__name__}, got {saved!r}"[:300] + f"; {_START_OVER}"
        )
    return float(saved) if isinstance(current, float) else saved


# ---------------------------------------------------------------------------------------- the folder
def state_files(world: int, has_scaler: bool) -> set[str]:
    """The files of a complete checkpoint of a run with ``world`` processes.

    >>> sorted(state_files(2, False))  # doctest: +NORMALIZE_WHITESPACE
    ['loop_state.json', 'optimizer.json', 'optimizer.safetensors', 'rng-0.safetensors', 'rng-1.safetensors',
     'scheduler.json', 'trainable.safetensors']
    """
    names = {TRAINABLE, OPTIMIZER_TENSORS, OPTIMIZER_JSON, SCHEDULER, LOOP_STATE}
    names |= {f"rng-{r}.safetensors" for r in range(world)}
    return names | ({SCALER} if has_scaler else set())


def check_folder(folder: Path, world: int, has_scaler: bool) -> None:
    """Refuse a checkpoint with a file that is not one of ours (a pickle is named as such) or a missing one.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     for name in state_files(1, False) | {"custom_checkpoint_0.pkl"}:
    ...         _ = (Path(d) / name).write_text("")
    ...     check_folder(Path(d), 1, False)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: ...custom_checkpoint_0.pkl: a pickle file in a checkpoint; genmetrics never unpickles...
    """
    expected = state_files(world, has_scaler)
    for entry in sorted(folder.iterdir()):
        if entry.name in expected or entry.name.startswith("."):
            continue
        kind = "a pickle file" if entry.name.endswith(PICKLE_SUFFIXES) else "an unexpected file"
        raise InputError(
            f"{entry}: {kind} in a checkpoint; genmetrics never unpickles training state and reads only "
            f"{', '.join(sorted(expected))} (safetensors and JSON). A checkpoint written by an earlier "
            f"genmetrics (accelerate's pickles) cannot be resumed safely: {_START_OVER}"
        )
    missing = sorted(expected - {p.name for p in folder.iterdir()})
    if missing:
        raise InputError(f"{folder / missing[0]}: missing; the checkpoint is incomplete: {_START_OVER}")


def read_loop_state(folder: Path) -> tuple[dict[str, Any], LoopState]:
    """The settings recorded with a checkpoint and its :class:`LoopState`, both checked (a round trip is
    :func:`write_loop_state`'s example).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     _ = (Path(d) / "loop_state.json").write_text('{"settings": {}, "loop": {"step": 1}}')
    ...     read_loop_state(Path(d))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: ...loop_state.json: 'loop' should hold exactly ['step', 'epoch', ...
    """
    path = folder / LOOP_STATE
    data = _read_json(path)
    if not isinstance(data, dict) or not isinstance(data.get("settings"), dict) or "loop" not in data:
        raise InputError(
            f"{path}: not a loop state (expected {{'settings': {{...}}, 'loop': {{...}}}}); {_START_OVER}"
        )
    return data["settings"], LoopState.from_json(data["loop"], path)


#: the fields of ``train_result.json`` checked on a resume, as the loop-state field whose rule they follow
_RESULT_FIELDS = {
    "steps": "step",
    "epochs_started": "epoch",
    "best_metric": "best_metric",
    "best_step": "best_step",
    "stopped_early": "stopped_early",
}


def check_result(done: dict[str, Any], path: Path) -> dict[str, Any]:
    """A finished run's ``train_result.json`` (read as a JSON object) checked field by field: ``settings``
    an object and ``steps`` present, each recorded field of the type the loop writes (a key an older
    genmetrics did not write may be absent).

    >>> check_result({"steps": 4, "settings": {}, "stopped_early": False}, Path("train_result.json"))["steps"]
    4
    >>> check_result({"steps": "4", "settings": {}}, Path("train_result.json"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: train_result.json: 'steps' should be an integer >= 0, got '4'; ...
    """
    if not isinstance(done.get("settings"), dict):
        raise InputError(
            f"{path}: 'settings' should be a JSON object, got {done.get('settings')!r}"[:300]
            + f"; {_START_OVER}"
        )
    for key, rule in _RESULT_FIELDS.items():
        if (key in done or key == "steps") and not _loop_field_ok(rule, done.get(key)):
            raise InputError(
                f"{path}: {key!r} should be {_LOOP_TYPES[rule]}, got {done.get(key)!r}"[:300]
                + f"; {_START_OVER}"
            )
    return done


# ---------------------------------------------------------------------------------------- saving
def _optimizer_parts(optimizer: Any) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    sd = optimizer.state_dict()
    tensors, scalars = {}, {}
    for index, per_param in sd["state"].items():
        for name, value in per_param.items():
            if torch.is_tensor(value):
                tensors[f"state.{index}.{name}"] = value.detach().cpu().contiguous()
            else:
                scalars[f"state.{index}.{name}"] = value
    return tensors, {"param_groups": sd["param_groups"], "scalars": scalars}


def _rng_parts() -> tuple[dict[str, torch.Tensor], dict[str, str]]:
    version, mt, gauss = random.getstate()
    name, keys, pos, has_gauss, cached = np.random.get_state()
    tensors = {
        "torch": torch.get_rng_state(),
        "python": torch.tensor(mt, dtype=torch.int64),
        "numpy": torch.from_numpy(np.asarray(keys, dtype=np.int64)),
    }
    if torch.cuda.is_available():
        tensors.update({f"cuda.{i}": torch.cuda.get_rng_state(i) for i in range(torch.cuda.device_count())})
    meta = {"python": json.dumps([version, gauss]), "numpy": json.dumps([name, pos, has_gauss, cached])}
    return tensors, meta


def save_training_state(folder: Path, parts: TrainingParts, *, main: bool) -> None:
    """Write this process's part of a checkpoint into ``folder`` (the main process writes the shared files,
    every process its ``rng-<rank>.safetensors``); ``loop_state.json`` is written by the caller, last.

    A round trip restores the weights, the optimizer, the schedule and the random stream:

    >>> import tempfile
    >>> from transformers import get_scheduler
    >>> def parts(seed):
    ...     net = torch.nn.Linear(2, 1)
    ...     torch.nn.init.constant_(net.weight, seed)
    ...     opt = torch.optim.AdamW(net.parameters(), lr=0.1)
    ...     return net, opt, get_scheduler("cosine", opt, num_warmup_steps=1, num_training_steps=4)
    >>> net, opt, sched = parts(0.0)
    >>> net(torch.ones(1, 2)).sum().backward(); opt.step(); sched.step()
    >>> with tempfile.TemporaryDirectory() as d:
    ...     save_training_state(Path(d), TrainingParts(dict(net.named_parameters()), opt, sched), main=True)
    ...     write_loop_state(Path(d), {}, LoopState(step=1))
    ...     expected = torch.rand(2)  # the next draws after the save
    ...     net2, opt2, sched2 = parts(5.0)
    ...     parts2 = TrainingParts(dict(net2.named_parameters()), opt2, sched2)
    ...     _, loop = load_training_state(Path(d), parts2, world=1)
    ...     torch.equal(torch.rand(2), expected), torch.equal(net2.weight, net.weight)
    (True, True)
    >>> sched2.state_dict() == sched.state_dict(), loop.step, opt2.state_dict()["state"][0]["step"].item()
    (True, 1, 1.0)
    """
    if main:
        trainable = {k: v.detach().cpu().contiguous() for k, v in parts.trainable.items()}
        with atomic_output(folder / TRAINABLE) as tmp:  # the write rule (data/output/)
            save_file(trainable, str(tmp))
        tensors, rest = _optimizer_parts(parts.optimizer)
        with atomic_output(folder / OPTIMIZER_TENSORS) as tmp:
            save_file(tensors, str(tmp))
        atomic_write_text(folder / OPTIMIZER_JSON, json.dumps(rest))
        atomic_write_text(folder / SCHEDULER, json.dumps(parts.scheduler.state_dict()))
        if parts.scaler is not None:
            atomic_write_text(folder / SCALER, json.dumps(parts.scaler.state_dict()))
    tensors, meta = _rng_parts()
    with atomic_output(folder / f"rng-{parts.rank}.safetensors") as tmp:
        save_file(tensors, str(tmp), metadata=meta)


def write_loop_state(folder: Path, settings: dict[str, Any], state: LoopState) -> None:
    """Write ``loop_state.json`` (atomically): the last file of a checkpoint, which marks it complete.

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     write_loop_state(Path(d), {"lr": 0.1}, LoopState(step=3, epoch=1))
    ...     read_loop_state(Path(d))
    ({'lr': 0.1}, LoopState(step=3, epoch=1, micro_in_epoch=0, epoch_progress=0.0, best_metric=None, best_step=None, bad_evals=0, stopped_early=False))
    """
    atomic_write_text(
        folder / LOOP_STATE, json.dumps({"settings": settings, "loop": asdict(state)}, indent=2)
    )


# ---------------------------------------------------------------------------------------- loading
def _new_name(name: str, renamed: dict[str, str]) -> str:
    """``name`` under the renames ``{old: new}`` (an old name ending in ``.`` is a prefix)."""
    for old, new in renamed.items():
        if name == old or (old.endswith(".") and name.startswith(old)):
            return new + name[len(old) :]
    return name


def name_mismatch(path: Path, saved: set[str], module: set[str], renamed: dict[str, str]) -> str:
    """Why the tensor names in ``path`` are not the module's: the task's renames (an earlier genmetrics's
    checkpoint) or another model / options.

    >>> names = {"lora_A", "head.w"}
    >>> name_mismatch(Path("t.safetensors"), names, {"lora_A", "fusion.head.w"}, {"head.": "fusion.head."})  # doctest: +ELLIPSIS
    "t.safetensors: written by an earlier genmetrics, before the task's parameters were renamed (head.* -> fusion.head.*: 'head.w' is now 'fusion.head.w'); ..."
    >>> name_mismatch(Path("t.safetensors"), names, {"lora_A", "mlp.w"}, {})  # doctest: +ELLIPSIS
    "t.safetensors: does not match the task's module (in the file only: ['head.w']; in the module only: ['mlp.w']); ..."
    """
    extra, missing = sorted(saved - module), sorted(module - saved)
    if renamed and {_new_name(n, renamed) for n in saved} == module:
        used = [
            f"{old}* -> {new}*" if old.endswith(".") else f"{old} -> {new}"
            for old, new in renamed.items()
            if any(_new_name(n, {old: new}) != n for n in extra)
        ]
        return (
            f"{path}: written by an earlier genmetrics, before the task's parameters were renamed "
            f"({'; '.join(used)}: {extra[0]!r} is now {_new_name(extra[0], renamed)!r}); its tensors and "
            f"optimizer state follow the old layout and are not converted: {_START_OVER}"
        )
    return (
        f"{path}: does not match the task's module (in the file only: {extra[:3]}; in the module only: "
        f"{missing[:3]}); resume with the same model and options, or {_START_OVER}"
    )


def _load_trainable(path: Path, trainable: dict[str, torch.Tensor], renamed: dict[str, str]) -> None:
    saved, _ = _read_safetensors(path)
    if saved.keys() != trainable.keys():
        raise InputError(name_mismatch(path, set(saved), set(trainable), renamed))
    for name, t in trainable.items():
        s = saved[name]
        if s.shape != t.shape or s.dtype != t.dtype:
            raise InputError(
                f"{path}: tensor {name!r} is {s.dtype} {list(s.shape)}, the task's module has {t.dtype} "
                f"{list(t.shape)}; resume with the same model and options, or {_START_OVER}"
            )
    with torch.no_grad():
        for name, t in trainable.items():
            t.copy_(saved[name])


def _param_shapes(optimizer: Any) -> list[torch.Size]:
    return [p.shape for group in optimizer.param_groups for p in group["params"]]


#: relative tolerance of a recorded learning rate: the schedule's own float64 product, written as JSON (which
#: round-trips a float64 exactly); a few units in the last place cover another libm's cosine
_LR_RTOL = 16 * float(np.finfo(np.float64).eps)


def _lr_text(lrs: list[float]) -> str:
    return "[" + ", ".join(f"{x:.6g}" for x in lrs) + "]"


def _check_schedule(path: Path, saved: dict[str, Any], scheduler: Any, step: int) -> list[float] | None:
    """``scheduler.json`` checked against the schedule this run builds from its recorded settings: the same
    base learning rates, positioned at the checkpoint's optimizer step, and (for a ``LambdaLR``, every
    transformers schedule) the learning rates the schedule gives at that step. Returns those rates."""
    fresh = scheduler.state_dict()
    base, mine = saved.get("base_lrs"), fresh.get("base_lrs")
    if mine is not None and (base is None or not np.allclose(base, mine, rtol=_LR_RTOL, atol=0.0)):
        raise InputError(
            f"{path}: base learning rates {_lr_text(base or [])} differ from {_lr_text(mine)}, what the "
            f"recorded settings give (lr and the task's lr scales); the file was edited or belongs to "
            f"another run: {_START_OVER}"
        )
    if "last_epoch" in saved and saved["last_epoch"] != step:
        raise InputError(
            f"{path}: the schedule is at step {saved['last_epoch']}, loop_state.json at step {step}; the "
            f"files come from different checkpoints: {_START_OVER}"
        )
    if "_step_count" in saved and saved["_step_count"] != step + 1:
        raise InputError(
            f"{path}: '_step_count' is {saved['_step_count']}, a schedule at step {step} has counted "
            f"{step + 1}; {_START_OVER}"
        )
    lambdas = getattr(scheduler, "lr_lambdas", None)
    if lambdas is None or mine is None:
        return None
    expected = [b * f(step) for b, f in zip(mine, lambdas)]
    last = saved.get("_last_lr")
    if last is not None and not np.allclose(last, expected, rtol=_LR_RTOL, atol=0.0):
        raise InputError(
            f"{path}: learning rates {_lr_text(last)} at step {step}, where the schedule of the recorded "
            f"settings gives {_lr_text(expected)}; the file was edited or belongs to another run: "
            f"{_START_OVER}"
        )
    return expected


def _check_groups(where: str, groups: list[dict[str, Any]], current: list[dict[str, Any]], lrs: Any) -> None:
    """Every hyper-parameter of each saved parameter group as the recorded settings build it, and its
    learning rate the schedule's at the checkpoint's step."""
    for i, (g, c) in enumerate(zip(groups, current)):
        if g["params"] != c["params"]:
            raise InputError(
                f"{where}: the parameter groups hold other parameters than the task's; {_START_OVER}"
            )
        for k in sorted(c):
            if k in ("lr", "params") or g[k] == c[k]:
                continue
            if isinstance(c[k], float) and np.isclose(g[k], c[k], rtol=_LR_RTOL, atol=0.0):
                continue
            raise InputError(
                f"{where}: param_groups[{i}].{k} is {g[k]!r}, the recorded settings give {c[k]!r}; the file "
                f"was edited or belongs to another run: {_START_OVER}"
            )
        if lrs is not None and not np.isclose(g["lr"], lrs[i], rtol=_LR_RTOL, atol=0.0):
            raise InputError(
                f"{where}: param_groups[{i}].lr is {g['lr']:.6g}, the schedule gives {lrs[i]:.6g} at this "
                f"step; the file was edited or belongs to another run: {_START_OVER}"
            )


def _check_moments(
    path: Path, state: dict[int, dict[str, Any]], groups: list[dict[str, Any]], step: int
) -> None:
    """Each parameter's AdamW state complete (a missing tensor would be a ``KeyError`` at the next step),
    its step count an integer in [1, the loop's step], its second moment >= 0."""
    amsgrad = {i: bool(g.get("amsgrad")) for g in groups for i in g["params"]}
    for index, per in sorted(state.items()):
        expected = {"step", "exp_avg", "exp_avg_sq"} | ({"max_exp_avg_sq"} if amsgrad.get(index) else set())
        if set(per) != expected:
            lacking = sorted(expected - set(per)) or sorted(set(per) - expected)
            raise InputError(
                f"{path}: parameter {index}'s optimizer state {'lacks' if expected - set(per) else 'has extra'} "
                f"{', '.join(f'state.{index}.{n}' for n in lacking)} (AdamW keeps {', '.join(sorted(expected))}); "
                f"the file is damaged: resume from an earlier step-N checkpoint (move this one away) or "
                f"{_START_OVER}"
            )
        n = per["step"]
        value = float(n) if n.numel() == 1 else math.nan
        if not (value.is_integer() and 1 <= value <= max(step, 1)):
            raise InputError(
                f"{path}: 'state.{index}.step' is {n.tolist()}, expected one integer in [1, {step}] (the "
                f"optimizer steps of the loop); {_START_OVER}"
            )
        if bool((per["exp_avg_sq"] < 0).any()):
            raise InputError(
                f"{path}: 'state.{index}.exp_avg_sq' holds negative values (a second moment is >= 0); the "
                f"file is damaged: {_START_OVER}"
            )


def _load_optimizer(folder: Path, optimizer: Any, lrs: Any = None, step: int | None = None) -> None:
    tensors, _ = _read_safetensors(folder / OPTIMIZER_TENSORS)
    rest = _read_json(folder / OPTIMIZER_JSON)
    where = str(folder / OPTIMIZER_JSON)
    if not isinstance(rest, dict) or sorted(rest) != ["param_groups", "scalars"]:
        raise InputError(f"{where}: expected {{'param_groups': [...], 'scalars': {{...}}}}; {_START_OVER}")
    current = optimizer.state_dict()["param_groups"]
    groups = _like(rest["param_groups"], current, where, "param_groups")
    _check_groups(where, groups, current, lrs)
    shapes = _param_shapes(optimizer)
    state: dict[int, dict[str, Any]] = {}
    for key, t in tensors.items():
        index, name = _state_key(key, len(shapes), folder / OPTIMIZER_TENSORS)
        if name != "step" and t.shape != shapes[index]:
            raise InputError(
                f"{folder / OPTIMIZER_TENSORS}: tensor {key!r} has shape {list(t.shape)}, its parameter has "
                f"{list(shapes[index])}; resume with the same model and options, or {_START_OVER}"
            )
        state.setdefault(index, {})[name] = t
    if step is not None:
        _check_moments(folder / OPTIMIZER_TENSORS, state, groups, step)
    if not isinstance(rest["scalars"], dict) or rest["scalars"]:
        raise InputError(f"{where}: 'scalars' should be empty for AdamW, got {rest['scalars']!r}"[:300])
    optimizer.load_state_dict({"state": state, "param_groups": groups})


def _state_key(key: str, n_params: int, path: Path) -> tuple[int, str]:
    parts = key.split(".")
    ok = len(parts) == 3 and parts[0] == "state" and parts[1].isdigit() and int(parts[1]) < n_params
    if not ok or parts[2] not in ("step", "exp_avg", "exp_avg_sq", "max_exp_avg_sq"):
        raise InputError(
            f"{path}: tensor {key!r} is not an AdamW state of one of {n_params} parameters; {_START_OVER}"
        )
    return int(parts[1]), parts[2]


def _rng_states(path: Path) -> tuple[Any, Any, dict[str, torch.Tensor]]:
    """The random states in ``rng-<rank>.safetensors``, checked (nothing is set yet)."""
    tensors, meta = _read_safetensors(path)
    expected = {"torch", "python", "numpy"}
    if torch.cuda.is_available():
        expected |= {f"cuda.{i}" for i in range(torch.cuda.device_count())}
    if set(tensors) != expected or set(meta) != {"python", "numpy"}:
        raise InputError(
            f"{path}: expected the random states {sorted(expected)}, found {sorted(tensors)} (a run moved to a "
            f"machine with other devices cannot continue its random streams); {_START_OVER}"
        )
    words = tensors["python"], tensors["numpy"]
    numpy_now: Any = np.random.get_state()  # (name, keys, pos, has_gauss, cached)
    sizes = len(random.getstate()[1]), len(numpy_now[1])
    for what, t, size in zip(("Python", "numpy"), words, sizes, strict=True):
        if t.dtype != torch.int64 or t.shape != (size,) or bool((t < 0).any() | (t >= 2**32).any()):
            raise InputError(
                f"{path}: the {what} random state should be {size} 32-bit words, got {t.dtype} of shape "
                f"{list(t.shape)}; {_START_OVER}"
            )
    if tensors["torch"].dtype != torch.uint8 or tensors["torch"].shape != torch.get_rng_state().shape:
        raise InputError(
            f"{path}: the torch random state should be uint8 of shape {list(torch.get_rng_state().shape)}, got "
            f"{tensors['torch'].dtype} of shape {list(tensors['torch'].shape)}; {_START_OVER}"
        )
    try:
        version, gauss = json.loads(meta["python"])
        name, pos, has_gauss, cached = json.loads(meta["numpy"])
        if not (
            type(version) is int
            and (gauss is None or type(gauss) in (int, float))
            and name == numpy_now[0]
            and type(pos) is int
            and 0 <= pos <= sizes[1]
            and has_gauss in (0, 1)
            and type(cached) in (int, float)
        ):
            raise ValueError(f"python {meta['python']}, numpy {meta['numpy']}")
    except (ValueError, TypeError) as e:
        raise InputError(
            f"{path}: unreadable or out-of-range metadata of the Python / numpy states ({e}); {_START_OVER}"
        ) from None
    python = (version, tuple(int(x) for x in words[0].tolist()), gauss)
    return python, (name, words[1].numpy().astype(np.uint32), pos, has_gauss, cached), tensors


def _set_rng(path: Path) -> None:
    """Set every random generator from ``path``; a state the generators refuse leaves them as they were."""
    python, numpy_state, tensors = _rng_states(path)
    old = random.getstate(), np.random.get_state(), torch.get_rng_state()
    try:
        random.setstate(python)
        np.random.set_state(numpy_state)
        torch.set_rng_state(tensors["torch"])
    except (ValueError, TypeError, OverflowError, RuntimeError, IndexError) as e:
        random.setstate(old[0])
        np.random.set_state(old[1])
        torch.set_rng_state(old[2])
        raise InputError(f"{path}: not a valid random state ({e}); {_START_OVER}") from None
    for i in range(torch.cuda.device_count() if torch.cuda.is_available() else 0):
        torch.cuda.set_rng_state(tensors[f"cuda.{i}"], i)


def load_training_state(
    folder: Path, parts: TrainingParts, *, world: int
) -> tuple[dict[str, Any], LoopState]:
    """Check the whole checkpoint ``folder``, then restore the module's trained tensors, the optimizer, the
    schedule, the scaler and this process's random generators; returns the recorded settings and the
    :class:`LoopState`. Every refusal names the file (a round trip is :func:`save_training_state`'s example).

    >>> import tempfile
    >>> with tempfile.TemporaryDirectory() as d:
    ...     load_training_state(Path(d), TrainingParts({}, None, None), world=1)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: ...loop_state.json: missing; the checkpoint is incomplete: pass overwrite=True ...
    """
    check_folder(folder, world, parts.scaler is not None)
    settings, loop = read_loop_state(folder)
    current = parts.scheduler.state_dict()
    sched = _like(_read_json(folder / SCHEDULER), current, str(folder / SCHEDULER), "")
    if sched.get("lr_lambdas") != current.get("lr_lambdas"):
        raise InputError(f"{folder / SCHEDULER}: 'lr_lambdas' differ from the schedule's; {_START_OVER}")
    expected_lrs = _check_schedule(folder / SCHEDULER, sched, parts.scheduler, loop.step)
    scale = None
    if parts.scaler is not None:
        scale = _like(_read_json(folder / SCALER), parts.scaler.state_dict(), str(folder / SCALER), "")
    _load_trainable(folder / TRAINABLE, parts.trainable, parts.renamed)
    _load_optimizer(folder, parts.optimizer, expected_lrs, loop.step)
    parts.scheduler.load_state_dict(sched)
    if parts.scaler is not None:
        parts.scaler.load_state_dict(scale)
    _set_rng(folder / f"rng-{parts.rank}.safetensors")
    return settings, loop
