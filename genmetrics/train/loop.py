"""The training loop (:func:`fit`): accelerate for devices, processes, accumulation, clipping and state;
transformers' ``get_scheduler`` for the learning-rate schedule.

:func:`fit` checks its inputs, locks the output folder and hands over to :class:`_Run`, whose methods are
the named steps of one run: set up (accelerator, loader, record), look at the folder (fresh, resume,
finished), build (module, optimizer, schedule), restore, train (epoch -> micro-step -> optimizer step ->
log, evaluate, checkpoint), finish (artifact, ``train_result.json``).
"""

from __future__ import annotations

import contextlib
import math
import os
import shutil
import signal
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.distributed as dist
from accelerate.utils import DistributedDataParallelKwargs, broadcast_object_list, set_seed
from tqdm.auto import tqdm
from transformers import get_scheduler

from genmetrics.core.options import env
from genmetrics.data.output.atomic import atomic_write_json
from genmetrics.data.output.lock import lock_output_folder
from genmetrics.data.output.write_rule import destination
from genmetrics.errors import InputError
from genmetrics.train import checkpoint as ck
from genmetrics.train import run_dir as rd
from genmetrics.train._accelerate_state import new_accelerator
from genmetrics.train.config import RESUME_FREE, TrainLoopConfig, total_steps, warmup_steps

__all__ = ["TrainResult", "fit"]


@dataclass
class TrainResult:
    """What :func:`fit` returns. ``history``: the rows of ``metrics.jsonl`` (``kind`` "train": step, epoch
    (epochs done, fractional: 1.0 at the end of the first),
    loss, lr, grad_norm and the task's loss parts; ``kind`` "eval": step, epoch and the task's metrics).
    ``best_dir`` is None without validation examples. ``module`` is the trained (unwrapped) module.

    >>> import dataclasses
    >>> [f.name for f in dataclasses.fields(TrainResult)][:4]
    ['out_dir', 'final_dir', 'best_dir', 'history']
    """

    out_dir: Path
    final_dir: Path
    best_dir: Path | None
    history: list[dict[str, Any]]
    best_metric: float | None
    best_step: int | None
    steps: int
    stopped_early: bool
    resumed_from: Path | None = None
    config: dict[str, Any] = field(default_factory=dict)
    module: Any = None


class _Examples(torch.utils.data.Dataset):
    def __init__(self, examples: list):
        self.examples = examples

    def __len__(self) -> int:
        return len(self.examples)

    def __getitem__(self, i: int) -> Any:
        return self.examples[i]


class _EpochPermutation(torch.utils.data.Sampler):
    """A permutation of ``range(n)`` that depends only on ``(seed, epoch)`` -- the same on every process,
    and recomputed identically after a resume. (No ``set_epoch``/``generator`` attribute on purpose:
    accelerate leaves it alone; the loop sets ``epoch``.)"""

    def __init__(self, n: int, seed: int):
        self.n, self.seed, self.epoch = n, seed, 0

    def __len__(self) -> int:
        return self.n

    def __iter__(self):
        g = torch.Generator().manual_seed(self.seed * 1_000_003 + self.epoch)
        return iter(torch.randperm(self.n, generator=g).tolist())


def _progress_bar(total: int, initial: int, enabled: bool) -> Any:
    setting = env("GENMETRICS_PROGRESS")
    off = not enabled or setting == "0" or (setting is None and not sys.stderr.isatty())
    return tqdm(
        total=total,
        initial=initial,
        desc="train",
        unit="step",
        disable=off,
        file=sys.stderr,
        dynamic_ncols=True,
    )


def _check_examples(examples: Any, name: str) -> list:
    if isinstance(examples, (str, bytes, os.PathLike)) or not hasattr(examples, "__len__"):
        raise InputError(
            f"fit: {name}: expected a list of examples (the task's collate() turns a list of them into "
            f"a batch), got {type(examples).__name__}"
        )
    examples = list(examples)
    if not examples:
        raise InputError(f"fit: {name}: the list of examples is empty")
    return examples


def _optimizer(task: Any, module: torch.nn.Module, cfg: TrainLoopConfig) -> torch.optim.Optimizer:
    groups_fn = getattr(task, "param_groups", None)
    groups = groups_fn(module) if groups_fn is not None else None
    if groups is None:
        params = [p for p in module.parameters() if p.requires_grad]
        if not params:
            raise InputError("fit: the task's trainable_module() has no parameter with requires_grad=True")
        return torch.optim.AdamW(params, lr=cfg.lr, weight_decay=cfg.weight_decay)
    out = []
    for i, g in enumerate(groups):
        if "params" not in g:
            raise InputError(
                f"fit: param_groups()[{i}] has no 'params'; expected {{'params': [...], 'lr_scale': x}}"
            )
        g = dict(g)
        g["lr"] = cfg.lr * float(g.pop("lr_scale", 1.0))
        out.append(g)
    return torch.optim.AdamW(out, lr=cfg.lr, weight_decay=cfg.weight_decay)


def _trainable_state(module: torch.nn.Module) -> dict[str, torch.Tensor]:
    """The trained parameters and the buffers (what a checkpoint must hold; frozen weights are not saved)."""
    state = {n: p.detach() for n, p in module.named_parameters() if p.requires_grad}
    params = dict(module.named_parameters())
    state.update(
        {n: b.detach() for n, b in module.state_dict().items() if n not in params and torch.is_tensor(b)}
    )
    return state


def _improved(value: float, best: float | None, cfg: TrainLoopConfig) -> bool:
    if not math.isfinite(value):
        return False
    if best is None:
        return True
    return (
        value > best + cfg.early_stopping_min_delta
        if cfg.greater_is_better
        else value < best - cfg.early_stopping_min_delta
    )


def _as_metrics(raw: Any, metric_for_best: str) -> dict[str, Any]:
    """The task's ``evaluate()`` result as ``{name: float or as given}``, checked."""
    if not isinstance(raw, dict):
        raise InputError(
            f"fit: the task's evaluate() must return a dict of metrics, got {type(raw).__name__}"
        )
    metrics = {
        k: float(v) if isinstance(v, (int, float, torch.Tensor, np.floating, np.integer)) else v
        for k, v in raw.items()
    }
    if metric_for_best not in metrics:
        raise InputError(
            f"fit: metric_for_best={metric_for_best!r} is not among the task's evaluate() "
            f"results {sorted(metrics)}; set metric_for_best to one of them"
        )
    value = metrics[metric_for_best]
    if not isinstance(value, float):
        raise InputError(
            f"fit: metric_for_best={metric_for_best!r} must be a number, evaluate() gave "
            f"{type(value).__name__} {value!r}"[:300]
        )
    return metrics


_HELD_SIGNALS = (signal.SIGINT, signal.SIGTERM)


@contextlib.contextmanager
def _finish_before_interrupt() -> Iterator[None]:
    """Hold Ctrl-C (SIGINT) and SIGTERM (a scheduler's preemption, ``kill``) while a checkpoint or an
    artifact is written: the write finishes first. Then each held signal is delivered again to the handler
    that was in place: SIGTERM by default ends the process as SIGTERM ends it (exit 143), and Ctrl-C under
    Python's default handler stops the run with ``KeyboardInterrupt`` (the CLI exits 130); an ignored
    signal (a background job of a shell script ignores Ctrl-C) stays ignored and a handler of the user's
    runs. ``resume=True`` continues from the finished write either way. Outside the main thread (no signal
    handlers there) the write runs unprotected."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    received: list[int] = []
    previous = {
        sig: signal.signal(sig, lambda signum, frame: received.append(signum)) for sig in _HELD_SIGNALS
    }
    try:
        yield
    finally:
        for sig, handler in previous.items():
            signal.signal(sig, handler)
    if signal.SIGTERM in received:
        signal.raise_signal(signal.SIGTERM)  # delayed, not swallowed: the handler in place decides
    if signal.SIGINT in received:
        if previous[signal.SIGINT] is not signal.default_int_handler:
            signal.raise_signal(signal.SIGINT)  # ignored, the user's handler, or SIG_DFL: as for SIGTERM
            return
        raise KeyboardInterrupt("interrupted while a checkpoint was written; the write was finished first")


def fit(task: Any, train_examples: Any, cfg: TrainLoopConfig, val_examples: Any = None) -> TrainResult:
    """Train ``task.trainable_module()`` on ``train_examples`` with the options ``cfg``; see
    :mod:`genmetrics.train` for the folder layout and the guarantees (exact resume, refusals).

    Learn the mean of some numbers with one weight; run again with ``resume=True`` and the finished run's
    result comes back without training:

    >>> import dataclasses, tempfile
    >>> from genmetrics.train import TrainTask
    >>> class Offset(TrainTask):
    ...     def __init__(self):
    ...         self.net = torch.nn.Linear(1, 1, bias=False)
    ...         torch.nn.init.zeros_(self.net.weight)
    ...     def trainable_module(self):
    ...         return self.net
    ...     def loss(self, module, batch):
    ...         return ((module(torch.ones(len(batch), 1)).squeeze(-1) - batch) ** 2).mean(), {}
    >>> data = [1.0, 2.0, 3.0, 4.0]
    >>> with tempfile.TemporaryDirectory() as d:
    ...     cfg = TrainLoopConfig(out_dir=d, lr=0.1, weight_decay=0.0, epochs=None, max_steps=200, batch_size=4,
    ...                           warmup_ratio=0.0, progress=False)
    ...     result = fit(Offset(), data, cfg)
    ...     again = fit(Offset(), data, dataclasses.replace(cfg, resume=True))
    ...     round(result.module.weight.detach().item(), 2), result.steps, again.history == result.history
    (2.5, 200, True)
    """
    cfg = cfg.checked()
    train_examples = _check_examples(train_examples, "train_examples")
    val_examples = _check_examples(val_examples, "val_examples") if val_examples is not None else []
    if cfg.early_stopping_patience is not None and not val_examples:
        raise InputError(
            "fit: early_stopping_patience needs validation examples: pass val_examples=... or set "
            "early_stopping_patience=None"
        )
    out: Path = cfg.out_dir  # type: ignore[assignment]
    if out.exists() and not out.is_dir():
        raise InputError(
            f"out_dir {str(out)!r} is a file; expected a folder (or a path that does not exist yet)"
        )
    lock = _lock_out_dir(out)
    try:
        return _Run(task, train_examples, val_examples, cfg, out).run()
    finally:
        if lock is not None:
            lock.release()


def _lock_out_dir(out: Path) -> Any:
    """The main process holds the output-folder lock (``OUT/.genmetrics.lock``, as the leaderboard) while a
    run writes, so a second fit or ``genmetrics train`` into the same folder refuses with one line."""
    rank = (
        dist.get_rank() if dist.is_available() and dist.is_initialized() else int(os.environ.get("RANK") or 0)
    )
    if rank != 0:
        return None
    return lock_output_folder(out)


#: names of a train row that the loop writes itself; a task's loss part may not use them ("loss" is
#: dropped: the logged loss is always the value the optimizer minimised, the one backward() saw)
ROW_KEYS = ("kind", "step", "epoch", "lr", "grad_norm")


@dataclass
class _StepSums:
    """Sums of the logged values over the micro-batches of one optimizer step: ``loss`` is the loss the
    task returned (what backward() saw, before accumulation's scaling), the rest the task's parts."""

    sums: dict[str, float] = field(default_factory=dict)
    n: int = 0

    def add(self, loss: torch.Tensor, parts: dict[str, float] | None) -> None:
        self.sums["loss"] = self.sums.get("loss", 0.0) + float(loss.detach())
        for k, v in (parts or {}).items():
            if k in ROW_KEYS:
                raise InputError(
                    f"fit: the task's loss() returned a part named {k!r}, a name the loop logs itself "
                    f"({', '.join(ROW_KEYS)}); rename the part"
                )
            if k != "loss":
                self.sums[k] = self.sums.get(k, 0.0) + float(v)
        self.n += 1


class _Run:
    """One call of :func:`fit`: the run's objects and its steps as small methods."""

    def __init__(self, task: Any, train: list, val: list, cfg: TrainLoopConfig, out: Path):
        self.task, self.train_examples, self.val_examples, self.cfg, self.out = task, train, val, cfg, out
        self.acc = new_accelerator(
            mixed_precision=cfg.mixed_precision,
            cpu=cfg.device == "cpu" or (cfg.device is None and not torch.cuda.is_available()),
            gradient_accumulation_steps=cfg.grad_accum,
            kwargs_handlers=[
                DistributedDataParallelKwargs(find_unused_parameters=cfg.find_unused_parameters)
            ],
        )
        self.world = self.acc.num_processes
        self.sampler = _EpochPermutation(len(train), cfg.seed)
        self.loader_generator = torch.Generator()
        loader = torch.utils.data.DataLoader(
            _Examples(train),
            batch_size=cfg.batch_size,
            sampler=self.sampler,
            collate_fn=task.collate,
            num_workers=cfg.num_workers,
            generator=self.loader_generator,
        )  # creating an iterator must not draw from the global RNG (it draws its workers' seed from this one)
        self.loader = self.acc.prepare_data_loader(loader)
        self.n_micro = len(self.loader)
        self.steps_per_epoch = math.ceil(self.n_micro / cfg.grad_accum)
        self.total = total_steps(cfg.epochs, cfg.max_steps, self.steps_per_epoch)  # whichever ends first
        self.settings, self.record = self._run_record()
        self.state = ck.LoopState()
        self.history: list[dict[str, Any]] = []
        self.last_save = time.monotonic()

    # ---- set-up
    def _run_record(self) -> tuple[dict[str, Any], dict[str, Any]]:
        """The settings a resume must match, and what ``train_config.json`` records."""
        cfg, task, val = self.cfg, self.task, self.val_examples
        settings = {k: v for k, v in cfg.recorded().items() if k not in RESUME_FREE}
        settings.update(
            processes=self.world,
            data_fingerprint=task.data_fingerprint(self.train_examples),
            n_train=len(self.train_examples),
            val_fingerprint=task.data_fingerprint(val) if val else None,
            n_val=len(val),
        )
        derived = {
            "global_batch": cfg.batch_size * cfg.grad_accum * self.world,
            "micro_batches_per_epoch_per_process": self.n_micro,
            "steps_per_epoch": self.steps_per_epoch,
            "total_steps": self.total,
            "warmup_steps": warmup_steps(self.total, cfg.warmup_ratio),
            "mixed_precision": str(self.acc.mixed_precision),
            "device": str(self.acc.device),
        }
        return settings, {"settings": settings, "derived": derived, "options": cfg.recorded()}

    def _resume_point(self) -> Path | dict[str, Any] | None:
        """What is in the folder: ``None`` (start fresh), the checkpoint to resume from, or the record of
        a finished run (a dict); refusals for every other case."""
        cfg, out = self.cfg, self.out
        if cfg.overwrite and cfg.resume:  # overwrite would delete the checkpoints the resume asks for
            raise InputError(
                f"out_dir {str(out)!r}: resume=True and overwrite=True (CLI: --resume --overwrite) contradict "
                "each other: resume continues the run in the folder, overwrite deletes it; pass one of them"
            )
        if cfg.overwrite:
            self.acc.wait_for_everyone()
            if self.acc.is_main_process:
                rd.clear(out)
            self.acc.wait_for_everyone()
            return None
        if (out / rd.RESULT).is_file():
            return self._finished_record()
        ckpts = rd.checkpoints(out)
        if not ckpts:
            return None
        if not cfg.resume:
            raise InputError(
                f"out_dir {str(out)!r} holds an unfinished run (newest checkpoint {ckpts[-1].name}); pass "
                "resume=True (CLI: --resume) to continue it, overwrite=True (CLI: --overwrite) to start "
                "over, or choose another out_dir"
            )
        before, _ = ck.read_loop_state(ckpts[-1])
        if (out / rd.CONFIG).exists():
            rd.read_json(out / rd.CONFIG)  # rewritten below, but a damaged one is named, not ignored
        rd.refuse_changed(out, f"checkpoint {ckpts[-1].name}", before, self.settings)
        return ckpts[-1]

    def _finished_record(self) -> dict[str, Any]:
        done = ck.check_result(rd.read_json(self.out / rd.RESULT), self.out / rd.RESULT)
        if not self.cfg.resume:
            raise InputError(
                f"out_dir {str(self.out)!r} holds a finished run ({rd.RESULT}, {done.get('steps')} steps); "
                "pass overwrite=True (CLI: --overwrite) to train again into it, or choose another out_dir"
            )
        rd.refuse_changed(self.out, "the finished run", done.get("settings", {}), self.settings)
        return done

    def _build(self) -> None:
        """Seed, module, optimizer and schedule; accelerate prepares the module and the optimizer."""
        cfg, acc = self.cfg, self.acc
        set_seed(cfg.seed, device_specific=True)
        module = self.task.trainable_module()
        if not isinstance(module, torch.nn.Module):
            raise InputError(
                "fit: the task's trainable_module() must return a torch.nn.Module, got "
                f"{type(module).__name__}"
            )
        module.to(acc.device)
        optimizer = _optimizer(self.task, module, cfg)
        self.scheduler = get_scheduler(
            cfg.scheduler,
            optimizer,
            num_warmup_steps=warmup_steps(self.total, cfg.warmup_ratio),
            num_training_steps=self.total,
        )
        self.model, self.optimizer = acc.prepare(module, optimizer)  # the scheduler is not prepared:
        self.raw = acc.unwrap_model(self.model)  # accelerate would step it once per process
        self.trained = [p for p in self.raw.parameters() if p.requires_grad]

    def _parts(self) -> ck.TrainingParts:
        scaler, rank = self.acc.scaler, self.acc.process_index
        renamed = self.task.renamed_parameters()
        return ck.TrainingParts(
            _trainable_state(self.raw), self.optimizer, self.scheduler, scaler, rank, renamed
        )

    def _restore(self, ckpt: Path) -> None:
        """Weights, optimizer, schedule, every RNG and the loop position from ``ckpt``; the metrics log is
        cut back to the checkpoint's step."""
        _, self.state = ck.load_training_state(ckpt, self._parts(), world=self.world)
        self.acc.step = self.state.micro_in_epoch  # accelerate's accumulation counter, as at the save
        self.history = rd.read_metrics(self.out, self.state.step, complete=True)

    def _write_run_files(self) -> None:
        self.acc.wait_for_everyone()
        if self.acc.is_main_process:
            self.out.mkdir(parents=True, exist_ok=True)
            with rd.writing(self.out, self.out / rd.CONFIG):
                atomic_write_json(self.out / rd.CONFIG, self.record)
            with rd.writing(self.out, self.out / rd.METRICS):
                rd.rewrite_metrics(self.out, self.history)
        self.acc.wait_for_everyone()

    # ---- the run
    def run(self) -> TrainResult:
        point = self._resume_point()
        if isinstance(point, dict):
            return _finished_result(self.out, point)
        self._build()
        if point is not None:
            self._restore(point)
        self._write_run_files()
        self._train()
        self._artifact(rd.FINAL)
        self._write_result()
        self.raw.eval()
        return self._result(point)

    def _train(self) -> None:
        bar = _progress_bar(self.total, self.state.step, self.cfg.progress and self.acc.is_main_process)
        self.model.train()
        self.last_save = time.monotonic()
        try:
            while self.state.step < self.total and not self.state.stopped_early:
                if self._epoch(bar):
                    break
        finally:
            bar.close()

    def _epoch(self, bar: Any) -> bool:
        """Train from the current position to the end of the epoch; True when the run ends inside it."""
        self.sampler.epoch = self.state.epoch
        self.loader_generator.manual_seed(self.sampler.seed * 1_000_003 + self.state.epoch)  # workers' seeds
        skip = self.state.micro_in_epoch
        loader = self.acc.skip_first_batches(self.loader, skip) if skip else self.loader
        sums = _StepSums()
        try:
            for batch in loader:
                loss, parts, lr, grad_norm = self._micro_step(batch)
                sums.add(loss, parts)
                if not self.acc.sync_gradients:
                    continue
                if self._after_step(sums, lr, grad_norm, bar):
                    return True
                sums = _StepSums()
        finally:
            loader.end()  # left mid-epoch or by an error: accelerate's gradient state forgets this loader
        return False

    def _micro_step(self, batch: Any) -> tuple[torch.Tensor, dict[str, float], float, Any]:
        """Forward and backward of one micro-batch; the optimizer steps when accelerate syncs."""
        cfg, acc, micro = self.cfg, self.acc, self.state.micro_in_epoch
        group = min(cfg.grad_accum, self.n_micro - (micro // cfg.grad_accum) * cfg.grad_accum)
        grad_norm = None
        with acc.accumulate(self.model):
            loss, parts = self.task.loss(self.model, batch)
            # accelerate divides by grad_accum; a short last group of the epoch is scaled back to a mean
            acc.backward(loss * (cfg.grad_accum / group))
            self._check_phase(micro)
            if acc.sync_gradients and cfg.max_grad_norm is not None:
                grad_norm = acc.clip_grad_norm_(self.trained, cfg.max_grad_norm)
            lr = self.optimizer.param_groups[0]["lr"]
            self.optimizer.step()
            if acc.sync_gradients:
                self.scheduler.step()
            self.optimizer.zero_grad(set_to_none=True)
        self.state.micro_in_epoch = micro + 1
        return loss, parts, lr, grad_norm

    def _check_phase(self, micro: int) -> None:
        expected = (micro + 1) % self.cfg.grad_accum == 0 or micro + 1 == self.n_micro
        if self.acc.sync_gradients != expected:
            raise RuntimeError(
                f"accelerate's accumulation phase ({self.acc.sync_gradients}) disagrees with the "
                f"loop's at micro-batch {micro} of epoch {self.state.epoch}"
            )

    def _after_step(self, sums: _StepSums, lr: float, grad_norm: Any, bar: Any) -> bool:
        """Log the optimizer step, then evaluate and checkpoint when due; True when the run ends here."""
        st = self.state
        st.step += 1
        end_of_epoch = st.micro_in_epoch == self.n_micro
        st.epoch_progress = round(st.epoch + st.micro_in_epoch / self.n_micro, 6)
        self._log_step(sums, lr, grad_norm, bar)
        last = st.step >= self.total
        if end_of_epoch:
            st.epoch, st.micro_in_epoch = st.epoch + 1, 0
        evaluated = self._eval_due(end_of_epoch, last)
        if evaluated:
            st.stopped_early = self._evaluate() and not last
        if last or st.stopped_early:
            return True
        if self._checkpoint_due(evaluated or end_of_epoch):
            self._checkpoint()
        return False

    def _log_step(self, sums: _StepSums, lr: float, grad_norm: Any, bar: Any) -> None:
        keys = sorted(sums.sums)
        local = torch.tensor([sums.sums[k] / sums.n for k in keys], device=self.acc.device)
        mean = self.acc.reduce(local, "mean")
        row = {
            "kind": "train",
            "step": self.state.step,
            "epoch": self.state.epoch_progress,
            "lr": lr,
            **dict(zip(keys, mean.cpu().tolist())),
        }
        if grad_norm is not None:
            row["grad_norm"] = float(grad_norm)
        self._log(row)
        bar.update(1)
        bar.set_postfix(loss=f"{row['loss']:.4f}")

    def _log(self, row: dict[str, Any]) -> None:
        self.history.append(row)
        if self.acc.is_main_process:
            with rd.writing(self.out, self.out / rd.METRICS):
                rd.append_metrics(self.out, row)

    # ---- evaluation and early stopping
    def _eval_due(self, end_of_epoch: bool, last: bool) -> bool:
        if not self.val_examples:
            return False
        if self.cfg.eval_every is None:
            return end_of_epoch or last
        return self.state.step % self.cfg.eval_every == 0 or last

    def _evaluate(self) -> bool:
        """Validate, keep the best artifact; True when early stopping says stop."""
        was = self.raw.training
        self.raw.eval()
        with torch.no_grad(), self.acc.autocast():
            raw = self.task.evaluate(self.raw, self.val_examples)
        self.raw.train(was)
        box = [raw]
        if self.world > 1:
            broadcast_object_list(box, from_process=0)
        metrics = _as_metrics(box[0], self.cfg.metric_for_best)
        st = self.state
        self._log({"kind": "eval", "step": st.step, "epoch": st.epoch_progress, **metrics})
        value = metrics[self.cfg.metric_for_best]
        if _improved(value, st.best_metric, self.cfg):
            st.best_metric, st.best_step, st.bad_evals = value, st.step, 0
            self._artifact(rd.BEST)
        else:
            st.bad_evals += 1
        patience = self.cfg.early_stopping_patience
        return patience is not None and st.bad_evals >= patience

    # ---- files
    def _artifact(self, name: str) -> None:
        """The task's artifact (``best`` / ``final``), written to a temporary folder and moved in place."""
        if self.acc.is_main_process:
            tmp = destination(
                self.out / f"{name}.tmp", root=self.out
            )  # the write rule: not a link, inside out
            with _finish_before_interrupt(), rd.writing(self.out, tmp):
                if tmp.exists():
                    shutil.rmtree(tmp)
                tmp.mkdir(parents=True)
                self.task.save(self.raw, tmp)
                rd.replace_dir(tmp, self.out / name)
        self.acc.wait_for_everyone()

    def _checkpoint_due(self, at_boundary: bool) -> bool:
        """After an evaluation or an epoch end, every ``save_every`` steps, or when ``save_every_minutes``
        passed (the main process's clock decides for all; evaluated last, as it may broadcast)."""
        save_every = self.cfg.save_every
        return at_boundary or bool(save_every and self.state.step % save_every == 0) or self._time_to_save()

    def _time_to_save(self) -> bool:
        if self.cfg.save_every_minutes is None:
            return False
        due = [time.monotonic() - self.last_save >= 60.0 * self.cfg.save_every_minutes]
        if self.world > 1:
            broadcast_object_list(due, from_process=0)
        return bool(due[0])

    def _checkpoint(self) -> None:
        """``checkpoints/step-N``: written to ``step-N.tmp``, completed by ``loop_state.json``, moved in
        place; then only the newest ``keep_checkpoints`` are kept. Ctrl-C waits for the end of the write;
        a full disk names the disk and keeps the checkpoints already finished."""
        final = self.out / rd.CHECKPOINTS / f"step-{self.state.step}"
        tmp = destination(final.with_name(final.name + ".tmp"), root=self.out)  # the write rule
        with _finish_before_interrupt(), rd.writing(self.out, tmp):
            self._write_checkpoint(tmp, final)
        self.last_save = time.monotonic()

    def _write_checkpoint(self, tmp: Path, final: Path) -> None:
        acc = self.acc
        if acc.is_main_process:
            for stale in (self.out / rd.CHECKPOINTS).glob("step-*.tmp"):  # saves cut short earlier
                shutil.rmtree(stale)
            tmp.mkdir(parents=True)
        acc.wait_for_everyone()
        ck.save_training_state(tmp, self._parts(), main=acc.is_main_process)
        acc.wait_for_everyone()
        if acc.is_main_process:
            ck.write_loop_state(tmp, self.settings, self.state)
            rd.replace_dir(tmp, final)
            for old in rd.checkpoints(self.out)[: -self.cfg.keep_checkpoints]:
                shutil.rmtree(old, ignore_errors=True)
        acc.wait_for_everyone()

    def _write_result(self) -> None:
        st = self.state
        summary = {
            "finished": True,
            "steps": st.step,
            "epochs_started": st.epoch,
            "best_metric": st.best_metric,
            "best_step": st.best_step,
            "stopped_early": st.stopped_early,
            "settings": self.settings,
        }
        if self.acc.is_main_process:
            with rd.writing(self.out, self.out / rd.RESULT):
                atomic_write_json(self.out / rd.RESULT, summary)
        self.acc.wait_for_everyone()

    def _result(self, resumed_from: Path | None) -> TrainResult:
        st = self.state
        return TrainResult(
            out_dir=self.out,
            final_dir=self.out / rd.FINAL,
            best_dir=(self.out / rd.BEST) if self.val_examples else None,
            history=self.history,
            best_metric=st.best_metric,
            best_step=st.best_step,
            steps=st.step,
            stopped_early=st.stopped_early,
            resumed_from=resumed_from,
            config=self.record,
            module=self.raw,
        )


def _finished_result(out: Path, done: dict[str, Any]) -> TrainResult:
    """A resume of a finished run with the same settings: nothing to train; its result as recorded."""
    history = rd.read_metrics(out, int(done.get("steps", 0)), complete=True)
    best = out / rd.BEST
    return TrainResult(
        out_dir=out,
        final_dir=out / rd.FINAL,
        best_dir=best if best.is_dir() else None,
        history=history,
        best_metric=done.get("best_metric"),
        best_step=done.get("best_step"),
        steps=int(done.get("steps", 0)),
        stopped_early=bool(done.get("stopped_early")),
        config=rd.read_json(out / rd.CONFIG) if (out / rd.CONFIG).is_file() else {},
        module=None,
    )
