"""The training loop (:func:`fit`): accelerate for devices, processes, accumulation, clipping and state;
transformers' ``get_scheduler`` for the learning-rate schedule."""

from __future__ import annotations

import contextlib
import math
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genmetrics.data.results import atomic_output, destination
from genmetrics.errors import InputError
from genmetrics.train import run_dir as rd
from genmetrics.train.config import RESUME_FREE, TrainLoopConfig, warmup_steps

__all__ = ["TrainResult", "fit"]

TRAINABLE_FILE = "trainable.safetensors"


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


def _progress_bar(total: int, initial: int, enabled: bool):
    from tqdm.auto import tqdm

    from genmetrics.options import env

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
    ...     cfg = TrainLoopConfig(out_dir=d, lr=0.1, weight_decay=0.0, max_steps=200, batch_size=4, warmup_ratio=0.0,
    ...                           progress=False)
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
        return _fit_locked(task, train_examples, cfg, val_examples, out)
    finally:
        if lock is not None:
            lock.release()


def _lock_out_dir(out: Path) -> Any:
    """The main process holds the output-folder lock (``OUT/.genmetrics.lock``, as the leaderboard) while a
    run writes, so a second fit or ``genmetrics train`` into the same folder refuses with one line."""
    import torch.distributed as dist

    from genmetrics.data.results import lock_output_folder

    rank = (
        dist.get_rank() if dist.is_available() and dist.is_initialized() else int(os.environ.get("RANK") or 0)
    )
    if rank != 0:
        return None
    return lock_output_folder(out)


def _fit_locked(
    task: Any, train_examples: list, cfg: TrainLoopConfig, val_examples: list, out: Path
) -> TrainResult:
    from accelerate import Accelerator
    from accelerate.state import AcceleratorState, GradientState
    from accelerate.utils import DistributedDataParallelKwargs, broadcast_object_list, set_seed
    from transformers import get_scheduler

    shared = AcceleratorState._shared_state
    if shared and shared.get("_mixed_precision") not in (None, cfg.mixed_precision):
        AcceleratorState._reset_state()  # an earlier fit in this process used another precision (the process group stays)
    GradientState._reset_state()  # no data loader left registered by an earlier, interrupted fit
    acc = Accelerator(
        mixed_precision=cfg.mixed_precision,
        cpu=not torch.cuda.is_available(),
        gradient_accumulation_steps=cfg.grad_accum,
        kwargs_handlers=[DistributedDataParallelKwargs(find_unused_parameters=cfg.find_unused_parameters)],
    )
    world = acc.num_processes
    loader = torch.utils.data.DataLoader(
        _Examples(train_examples),
        batch_size=cfg.batch_size,
        sampler=_EpochPermutation(len(train_examples), cfg.seed),
        collate_fn=task.collate,
        num_workers=cfg.num_workers,
        generator=torch.Generator().manual_seed(cfg.seed),
    )  # creating an iterator must not draw from the global RNG
    sampler: _EpochPermutation = loader.sampler  # type: ignore[assignment]
    loader = acc.prepare_data_loader(loader)
    n_micro = len(loader)
    steps_per_epoch = math.ceil(n_micro / cfg.grad_accum)
    total = cfg.max_steps or cfg.epochs * steps_per_epoch
    warm = warmup_steps(total, cfg.warmup_ratio)

    settings = {k: v for k, v in cfg.recorded().items() if k not in RESUME_FREE}
    settings.update(
        processes=world,
        data_fingerprint=task.data_fingerprint(train_examples),
        n_train=len(train_examples),
        val_fingerprint=task.data_fingerprint(val_examples) if val_examples else None,
        n_val=len(val_examples),
    )
    record = {
        "settings": settings,
        "derived": {
            "global_batch": cfg.batch_size * cfg.grad_accum * world,
            "micro_batches_per_epoch_per_process": n_micro,
            "steps_per_epoch": steps_per_epoch,
            "total_steps": total,
            "warmup_steps": warm,
            "mixed_precision": str(acc.mixed_precision),
            "device": str(acc.device),
        },
        "options": cfg.recorded(),
    }

    # ---- what is already in out_dir
    ckpts = rd.checkpoints(out)
    finished = (out / rd.RESULT).is_file()
    ckpt: Path | None = None
    if cfg.overwrite and cfg.resume:  # overwrite would delete the checkpoints the resume asks for
        raise InputError(
            f"out_dir {str(out)!r}: resume=True and overwrite=True (CLI: --resume --overwrite) contradict "
            "each other: resume continues the run in the folder, overwrite deletes it; pass one of them"
        )
    if cfg.overwrite:
        acc.wait_for_everyone()
        if acc.is_main_process:
            rd.clear(out)
        acc.wait_for_everyone()
    elif finished:
        done = rd.read_json(out / rd.RESULT)
        if not cfg.resume:
            raise InputError(
                f"out_dir {str(out)!r} holds a finished run ({rd.RESULT}, {done.get('steps')} steps); pass "
                "overwrite=True (CLI: --overwrite) to train again into it, or choose another out_dir"
            )
        rd.refuse_changed(out, "the finished run", done.get("settings", {}), settings)
        return _finished_result(out, done, task)
    elif ckpts:
        if not cfg.resume:
            raise InputError(
                f"out_dir {str(out)!r} holds an unfinished run (newest checkpoint {ckpts[-1].name}); pass "
                "resume=True (CLI: --resume) to continue it, overwrite=True (CLI: --overwrite) to start "
                "over, or choose another out_dir"
            )
        ckpt = ckpts[-1]
        rd.refuse_changed(
            out, f"checkpoint {ckpt.name}", rd.read_json(ckpt / rd.LOOP_STATE)["settings"], settings
        )

    # ---- model, optimizer, schedule
    set_seed(cfg.seed, device_specific=True)
    module = task.trainable_module()
    if not isinstance(module, torch.nn.Module):
        raise InputError(
            f"fit: the task's trainable_module() must return a torch.nn.Module, got {type(module).__name__}"
        )
    module.to(acc.device)
    optimizer = _optimizer(task, module, cfg)
    scheduler = get_scheduler(cfg.scheduler, optimizer, num_warmup_steps=warm, num_training_steps=total)
    model, optimizer = acc.prepare(module, optimizer)
    acc.register_for_checkpointing(scheduler)  # not prepared: accelerate would step it once per process
    raw = acc.unwrap_model(model)
    trained = [p for p in raw.parameters() if p.requires_grad]

    def save_hook(models: list, weights: list, path: str) -> None:
        from safetensors.torch import save_file

        if acc.is_main_process:
            with atomic_output(os.path.join(path, TRAINABLE_FILE)) as tmp:  # the write rule (data/results.py)
                save_file({k: v.cpu().contiguous() for k, v in _trainable_state(raw).items()}, str(tmp))
        weights.clear()  # only the trained weights: a frozen multi-billion-parameter backbone stays out

    def load_hook(models: list, path: str) -> None:
        from safetensors.torch import load_file

        sd = load_file(os.path.join(path, TRAINABLE_FILE))
        mine = _trainable_state(raw)
        if sd.keys() != mine.keys():
            raise InputError(
                f"checkpoint {path} does not match the task's module ({len(sd.keys() ^ mine.keys())} "
                "tensors differ); resume with the same model and options"
            )
        with torch.no_grad():
            for k, t in mine.items():
                t.copy_(sd[k])
        models.clear()

    hooks = [acc.register_save_state_pre_hook(save_hook), acc.register_load_state_pre_hook(load_hook)]

    state: dict[str, Any] = {
        "step": 0,
        "epoch": 0,
        "micro_in_epoch": 0,
        "epoch_progress": 0.0,
        "best_metric": None,
        "best_step": None,
        "bad_evals": 0,
        "stopped_early": False,
    }
    history: list[dict[str, Any]] = []
    if ckpt is not None:
        acc.load_state(str(ckpt))  # weights, optimizer, scheduler, accelerate's step and every RNG
        state.update(rd.read_json(ckpt / rd.LOOP_STATE)["loop"])
        history = rd.read_metrics(out, state["step"])
    acc.wait_for_everyone()
    if acc.is_main_process:
        out.mkdir(parents=True, exist_ok=True)
        from genmetrics.data.results import atomic_write_json

        atomic_write_json(out / rd.CONFIG, record)
        rd.rewrite_metrics(out, history)
    acc.wait_for_everyone()

    def log(row: dict[str, Any]) -> None:
        history.append(row)
        if acc.is_main_process:
            rd.append_metrics(out, row)

    def artifact(name: str) -> None:
        if acc.is_main_process:
            tmp = destination(out / f"{name}.tmp", root=out)  # the write rule: not a link, inside out
            if tmp.exists():
                import shutil

                shutil.rmtree(tmp)
            tmp.mkdir(parents=True)
            task.save(raw, tmp)
            rd.replace_dir(tmp, out / name)
        acc.wait_for_everyone()

    def checkpoint() -> None:
        import shutil

        final = out / rd.CHECKPOINTS / f"step-{state['step']}"
        tmp = destination(final.with_name(final.name + ".tmp"), root=out)  # the write rule
        if acc.is_main_process and tmp.exists():
            shutil.rmtree(tmp)
        acc.wait_for_everyone()
        acc.save_state(str(tmp))
        acc.wait_for_everyone()
        if acc.is_main_process:
            from genmetrics.data.results import atomic_write_json

            atomic_write_json(tmp / rd.LOOP_STATE, {"settings": settings, "loop": state})
            rd.replace_dir(tmp, final)
            for old in rd.checkpoints(out)[: -cfg.keep_checkpoints]:
                shutil.rmtree(old, ignore_errors=True)
        acc.wait_for_everyone()
        last_save[0] = time.monotonic()

    last_save = [time.monotonic()]

    def time_to_save() -> bool:
        """``save_every_minutes`` passed since the last checkpoint (the main process's clock decides for all)."""
        if cfg.save_every_minutes is None:
            return False
        due = [time.monotonic() - last_save[0] >= 60.0 * cfg.save_every_minutes]
        if world > 1:
            broadcast_object_list(due, from_process=0)
        return bool(due[0])

    def evaluate() -> bool:
        """Validate, keep the best artifact; True when early stopping says stop."""
        was = raw.training
        raw.eval()
        with torch.no_grad(), acc.autocast():
            metrics = task.evaluate(raw, val_examples)
        raw.train(was)
        box = [metrics]
        if world > 1:
            broadcast_object_list(box, from_process=0)
        if not isinstance(box[0], dict):
            raise InputError(
                f"fit: the task's evaluate() must return a dict of metrics, got {type(box[0]).__name__}"
            )
        metrics = {
            k: float(v) if isinstance(v, (int, float, torch.Tensor, np.floating, np.integer)) else v
            for k, v in box[0].items()
        }
        if cfg.metric_for_best not in metrics:
            raise InputError(
                f"fit: metric_for_best={cfg.metric_for_best!r} is not among the task's evaluate() "
                f"results {sorted(metrics)}; set metric_for_best to one of them"
            )
        log({"kind": "eval", "step": state["step"], "epoch": state["epoch_progress"], **metrics})
        value = metrics[cfg.metric_for_best]
        if not isinstance(value, float):
            raise InputError(
                f"fit: metric_for_best={cfg.metric_for_best!r} must be a number, evaluate() gave "
                f"{type(value).__name__} {value!r}"[:300]
            )
        if _improved(value, state["best_metric"], cfg):
            state.update(best_metric=value, best_step=state["step"], bad_evals=0)
            artifact(rd.BEST)
        else:
            state["bad_evals"] += 1
        return cfg.early_stopping_patience is not None and state["bad_evals"] >= cfg.early_stopping_patience

    bar = _progress_bar(total, state["step"], cfg.progress and acc.is_main_process)
    model.train()
    try:
        while state["step"] < total and not state["stopped_early"]:
            sampler.epoch = state["epoch"]
            skip = state["micro_in_epoch"]
            epoch_loader = acc.skip_first_batches(loader, skip) if skip else loader
            sums: dict[str, float] = {}
            n_in_step = 0
            for batch in epoch_loader:
                micro = state["micro_in_epoch"]
                group = min(cfg.grad_accum, n_micro - (micro // cfg.grad_accum) * cfg.grad_accum)
                with acc.accumulate(model):
                    loss, parts = task.loss(model, batch)
                    # accelerate divides by grad_accum; a short last group of the epoch is scaled back to a mean
                    acc.backward(loss * (cfg.grad_accum / group))
                    expected_sync = (micro + 1) % cfg.grad_accum == 0 or micro + 1 == n_micro
                    if acc.sync_gradients != expected_sync:
                        raise RuntimeError(
                            f"accelerate's accumulation phase ({acc.sync_gradients}) disagrees with the "
                            f"loop's at micro-batch {micro} of epoch {state['epoch']}"
                        )
                    grad_norm = None
                    if acc.sync_gradients and cfg.max_grad_norm is not None:
                        grad_norm = acc.clip_grad_norm_(trained, cfg.max_grad_norm)
                    lr = optimizer.param_groups[0]["lr"]
                    optimizer.step()
                    if acc.sync_gradients:
                        scheduler.step()
                    optimizer.zero_grad(set_to_none=True)
                state["micro_in_epoch"] = micro + 1
                sums["loss"] = sums.get("loss", 0.0) + float(loss.detach())
                for k, v in (parts or {}).items():
                    sums[k] = sums.get(k, 0.0) + float(v)
                n_in_step += 1
                if not acc.sync_gradients:
                    continue
                keys = sorted(sums)
                mean = acc.reduce(
                    torch.tensor([sums[k] / n_in_step for k in keys], device=acc.device), "mean"
                )
                state["step"] += 1
                end_of_epoch = state["micro_in_epoch"] == n_micro
                state["epoch_progress"] = round(state["epoch"] + state["micro_in_epoch"] / n_micro, 6)
                row = {
                    "kind": "train",
                    "step": state["step"],
                    "epoch": state["epoch_progress"],
                    "lr": lr,
                    **dict(zip(keys, mean.cpu().tolist())),
                }
                if grad_norm is not None:
                    row["grad_norm"] = float(grad_norm)
                log(row)
                sums, n_in_step = {}, 0
                bar.update(1)
                bar.set_postfix(loss=f"{row['loss']:.4f}")
                last = state["step"] >= total
                if end_of_epoch:
                    state.update(epoch=state["epoch"] + 1, micro_in_epoch=0)
                evaluated = False
                if val_examples and (
                    (cfg.eval_every is None and (end_of_epoch or last))
                    or (cfg.eval_every is not None and (state["step"] % cfg.eval_every == 0 or last))
                ):
                    state["stopped_early"] = evaluate() and not last
                    evaluated = True
                if (last or state["stopped_early"]) and not end_of_epoch:
                    with contextlib.suppress(Exception):
                        epoch_loader.end()  # leaving mid-epoch: accelerate's gradient state forgets this loader
                if last or state["stopped_early"]:
                    break
                if (
                    evaluated
                    or end_of_epoch
                    or (cfg.save_every and state["step"] % cfg.save_every == 0)
                    or time_to_save()
                ):
                    checkpoint()
    finally:
        bar.close()
        for h in hooks:
            h.remove()

    artifact(rd.FINAL)
    summary = {
        "finished": True,
        "steps": state["step"],
        "epochs_started": state["epoch"],
        "best_metric": state["best_metric"],
        "best_step": state["best_step"],
        "stopped_early": state["stopped_early"],
        "settings": settings,
    }
    if acc.is_main_process:
        from genmetrics.data.results import atomic_write_json

        atomic_write_json(out / rd.RESULT, summary)
    acc.wait_for_everyone()
    raw.eval()
    return TrainResult(
        out_dir=out,
        final_dir=out / rd.FINAL,
        best_dir=(out / rd.BEST) if val_examples else None,
        history=history,
        best_metric=state["best_metric"],
        best_step=state["best_step"],
        steps=state["step"],
        stopped_early=state["stopped_early"],
        resumed_from=ckpt,
        config=record,
        module=raw,
    )


def _finished_result(out: Path, done: dict[str, Any], task: Any) -> TrainResult:
    """A resume of a finished run with the same settings: nothing to train; its result as recorded."""
    history = rd.read_metrics(out, int(done.get("steps", 0)))
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
