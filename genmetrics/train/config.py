"""The options of :func:`genmetrics.train.fit` and which of them a resume must keep."""

from __future__ import annotations

import math
import os
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

import genmetrics.core.options as opt
from genmetrics.data.device import available_devices
from genmetrics.errors import GenmetricsError, InputError

__all__ = ["DeviceUnavailableError", "TrainLoopConfig", "SCHEDULERS", "RESUME_FREE", "available_devices"]

# transformers.get_scheduler names that take (num_warmup_steps, num_training_steps) and nothing else
SCHEDULERS = ("cosine", "linear", "constant_with_warmup", "constant", "cosine_with_restarts", "polynomial")
MIXED_PRECISION = ("no", "fp16", "bf16")
DEVICES = ("cpu", "cuda", "mps")  # None: CUDA when there is one, else the CPU
# options that do not change the trained numbers: a resume may change them freely
RESUME_FREE = (
    "out_dir",
    "resume",
    "overwrite",
    "progress",
    "save_every",
    "save_every_minutes",
    "keep_checkpoints",
    "num_workers",
)
_OWNER = "TrainLoopConfig"


class DeviceUnavailableError(GenmetricsError, RuntimeError):
    """A device the configuration asks for does not exist on this machine (an environment problem: the CLI
    exits 1); the message names the option and the devices that exist.

    >>> issubclass(DeviceUnavailableError, RuntimeError), issubclass(DeviceUnavailableError, ValueError)
    (True, False)
    """


def _training_device(value: Any) -> str | None:
    value = opt.device("device", value, owner=_OWNER)
    if value is None or value == "auto":
        return None
    if value not in DEVICES:
        raise InputError(
            f"{_OWNER}: option device: {value!r} is not a training device; expected None (CUDA when there is "
            "one, else the CPU), 'cpu', 'cuda' or 'mps' (accelerate places one process per GPU: choose GPUs "
            "with CUDA_VISIBLE_DEVICES)"
        )
    present = available_devices()
    if value != "cpu" and not any(d.split(":")[0] == value for d in present):
        raise DeviceUnavailableError(
            f"{_OWNER}: option device: {value!r} asked for, but this machine has only {', '.join(present)} "
            f"(torch finds no {value.upper()} device); set device='cpu' or leave it unset"
        )
    return value


def _run_length(epochs: Any, max_steps: Any) -> tuple[int | None, int | None]:
    """``epochs`` and ``max_steps`` checked: positive integers or None, not both None."""
    epochs, max_steps = (
        None if v is None else opt.integer(name, v, lo=1, owner=_OWNER)
        for name, v in (("epochs", epochs), ("max_steps", max_steps))
    )
    if epochs is None and max_steps is None:
        raise InputError(
            f"{_OWNER}: options epochs and max_steps are both None: the run would never end; give epochs "
            "(passes over the data), max_steps (a cap on optimizer steps) or both"
        )
    return epochs, max_steps


@dataclass
class TrainLoopConfig:
    """Options of the training loop (family hyper-parameters go in ``extra``; they are recorded in
    ``train_config.json`` and a resume with other values is refused like any other option).

    * ``batch_size``: examples per micro-batch per process; one optimizer step sees
      ``batch_size * grad_accum * processes`` examples (the *global batch*).
    * ``epochs`` / ``max_steps``: the run ends after ``epochs`` passes over the data or ``max_steps`` optimizer
      steps, whichever comes first (:func:`total_steps`); ``None`` removes that limit (not both). The
      schedule (warm-up, decay) is laid out over that total.
    * ``warmup_ratio``: ``ceil(warmup_ratio * total_steps)`` warm-up steps (as transformers' Trainer).
    * ``eval_every``: ``None`` evaluates once per epoch, ``N`` every N optimizer steps (and at the end).
    * ``early_stopping_patience``: stop after that many evaluations in a row that do not improve
      ``metric_for_best`` by more than ``early_stopping_min_delta``; ``None`` never stops early.
    * ``device``: ``None`` (CUDA when there is one, else the CPU), ``"cpu"``, ``"cuda"`` or ``"mps"``; a device
      this machine lacks is a :class:`DeviceUnavailableError` naming the option and the devices there are.
    * ``save_every``: ``None`` checkpoints after each evaluation and at the end of each epoch; ``N`` also
      every N optimizer steps; and whenever ``save_every_minutes`` have passed since the last checkpoint (so a
      long epoch without validation does not lose its work). The newest ``keep_checkpoints`` are kept.

    >>> cfg = TrainLoopConfig(out_dir="~/runs/a", lr=1e-4, extra={"lora_r": 16}).checked()
    >>> cfg.out_dir.is_absolute(), cfg.scheduler, cfg.recorded()["extra"]
    (True, 'cosine', {'lora_r': 16})
    >>> TrainLoopConfig(out_dir="runs/a", lr=0).checked()  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: ...lr...
    """

    out_dir: str | os.PathLike = "train_out"
    lr: float = 1e-4
    weight_decay: float = 0.01
    epochs: int | None = 1
    max_steps: int | None = None
    batch_size: int = 4
    grad_accum: int = 1
    warmup_ratio: float = 0.03
    scheduler: str = "cosine"
    max_grad_norm: float | None = 1.0
    seed: int = 3407
    eval_every: int | None = None
    early_stopping_patience: int | None = None
    early_stopping_min_delta: float = 0.0
    metric_for_best: str = "loss"
    greater_is_better: bool = False
    save_every: int | None = None
    save_every_minutes: float | None = 30.0
    keep_checkpoints: int = 2
    resume: bool = False
    overwrite: bool = False
    mixed_precision: str = "no"
    device: str | None = None
    find_unused_parameters: bool = False
    num_workers: int = 0
    progress: bool = True
    extra: dict[str, Any] = field(default_factory=dict)

    def checked(self) -> TrainLoopConfig:
        """A copy with every option parsed and range-checked (``InputError`` naming the option)."""
        c = TrainLoopConfig(**asdict(self))
        c.out_dir = Path(opt.expand_user(self.out_dir, what="out_dir"))
        c.lr = opt.number("lr", c.lr, lo=0.0, lo_open=True, owner=_OWNER)
        c.weight_decay = opt.number("weight_decay", c.weight_decay, lo=0.0, owner=_OWNER)
        c.epochs, c.max_steps = _run_length(c.epochs, c.max_steps)
        c.batch_size = opt.integer("batch_size", c.batch_size, lo=1, hi=opt.COUNT_MAX, owner=_OWNER)
        c.grad_accum = opt.integer("grad_accum", c.grad_accum, lo=1, hi=opt.COUNT_MAX, owner=_OWNER)
        c.warmup_ratio = opt.number(
            "warmup_ratio", c.warmup_ratio, lo=0.0, hi=1.0, hi_open=True, owner=_OWNER
        )
        c.scheduler = opt.choice("scheduler", c.scheduler, SCHEDULERS, owner=_OWNER)
        if c.max_grad_norm is not None:
            c.max_grad_norm = opt.number("max_grad_norm", c.max_grad_norm, lo=0.0, lo_open=True, owner=_OWNER)
        c.seed = opt.seed("seed", c.seed, owner=_OWNER)
        for name in ("eval_every", "early_stopping_patience", "save_every"):
            if getattr(c, name) is not None:
                setattr(c, name, opt.integer(name, getattr(c, name), lo=1, owner=_OWNER))
        c.early_stopping_min_delta = opt.number(
            "early_stopping_min_delta", c.early_stopping_min_delta, lo=0.0, owner=_OWNER
        )
        if not isinstance(c.metric_for_best, str) or not c.metric_for_best:
            raise InputError(
                f"{_OWNER}: option metric_for_best: expected the name of a metric returned by the "
                f"task's evaluate(), got {c.metric_for_best!r}"
            )
        if c.save_every_minutes is not None:
            c.save_every_minutes = opt.number(
                "save_every_minutes", c.save_every_minutes, lo=0.0, owner=_OWNER
            )
        c.keep_checkpoints = opt.integer("keep_checkpoints", c.keep_checkpoints, lo=1, owner=_OWNER)
        c.mixed_precision = opt.choice("mixed_precision", c.mixed_precision, MIXED_PRECISION, owner=_OWNER)
        c.device = _training_device(c.device)
        c.num_workers = opt.integer("num_workers", c.num_workers, lo=0, hi=opt.MAX_WORKERS, owner=_OWNER)
        for name in ("greater_is_better", "resume", "overwrite", "find_unused_parameters", "progress"):
            setattr(c, name, opt.flag(name, getattr(c, name), owner=_OWNER))
        if not isinstance(c.extra, dict):
            raise InputError(
                f"{_OWNER}: option extra: expected a dict of family hyper-parameters, got "
                f"{type(c.extra).__name__}"
            )
        return c

    def recorded(self) -> dict[str, Any]:
        """The options as written to ``train_config.json`` (``out_dir`` as text)."""
        d = asdict(self)
        d["out_dir"] = str(self.out_dir)
        return d


def total_steps(epochs: int | None, max_steps: int | None, steps_per_epoch: int) -> int:
    """Optimizer steps of a run: ``epochs`` passes of ``steps_per_epoch`` steps, capped at ``max_steps``
    (``None``: no such limit; at least one of the two is given).

    >>> total_steps(3, 600, 225), total_steps(3, 600, 10), total_steps(None, 600, 10), total_steps(3, None, 10)
    (600, 30, 600, 30)
    """
    limits = [n for n in (max_steps, None if epochs is None else epochs * steps_per_epoch) if n is not None]
    return min(limits)


def warmup_steps(total_steps: int, warmup_ratio: float) -> int:
    return int(math.ceil(warmup_ratio * total_steps))
