"""One training loop for every learned metric (TPIPS, MIE, ...), on ``accelerate`` and transformers' schedulers.

API::

    from genmetrics.train import TrainLoopConfig, TrainTask, TrainResult, fit

    result: TrainResult = fit(task, train_examples, TrainLoopConfig(out_dir=..., lr=...), val_examples=None)

* ``task`` -- a :class:`TrainTask` (subclass it, or any object with its methods):
  ``trainable_module() -> nn.Module``, ``collate(examples) -> batch``,
  ``loss(module, batch) -> (loss_tensor, {name: float})`` (mean over the micro-batch; call ``module(...)``),
  ``evaluate(module, examples) -> {name: float}`` (only with ``val_examples``),
  ``save(module, path)`` (the family's artifact), ``data_fingerprint(examples) -> str`` (content hash), and
  optionally ``param_groups(module)`` (``[{"params": [...], "lr_scale": 5.0}]``).
* ``train_examples`` / ``val_examples`` -- lists of anything the task's ``collate`` / ``evaluate`` take.
* :class:`TrainLoopConfig` -- ``out_dir, lr, weight_decay=0.01, epochs=1, max_steps=None`` (the run ends at
  whichever comes first; ``None``: no such limit), ``batch_size=4`` (per process micro-batch), ``grad_accum=1, warmup_ratio=0.03, scheduler="cosine", max_grad_norm=1.0,
  seed=3407, eval_every=None`` (None: once per epoch), ``early_stopping_patience=None,
  early_stopping_min_delta=0.0, metric_for_best="loss", greater_is_better=False, save_every=None,
  save_every_minutes=30.0, keep_checkpoints=2, resume=False, overwrite=False, mixed_precision="no",
  device=None`` (CUDA when there is one), ``find_unused_parameters=False,
  num_workers=0, progress=True, extra={}`` (family hyper-parameters, recorded and checked on resume).
* :class:`TrainResult` -- ``out_dir, final_dir, best_dir`` (None without validation), ``history`` (the
  ``metrics.jsonl`` rows), ``best_metric, best_step, steps, stopped_early, resumed_from, config, module``.

What it does:

* AdamW, ``transformers.get_scheduler(scheduler, num_warmup_steps=ceil(warmup_ratio * total),
  num_training_steps=total)`` stepped once per optimizer step; gradient accumulation with
  ``Accelerator.accumulate`` (a short last group of an epoch is re-weighted to a mean); clipping with
  ``Accelerator.clip_grad_norm_``; multi-process through accelerate (``accelerate launch`` or ``torchrun``;
  gloo on CPU). Every process sees ``batch_size`` examples of one seeded per-epoch permutation per
  micro-batch, so 2 processes x ``batch_size`` b equal 1 process x 2b, and ``grad_accum`` 2 x b equals 2b.
* ``out_dir/checkpoints/step-N``: safetensors and JSON only (:mod:`genmetrics.train.checkpoint`): the trained
  parameters and buffers (a frozen backbone is not copied), the optimizer, the schedule, every RNG of every
  process, and ``loop_state.json`` (position in the epoch, early-stopping state). ``resume=True`` continues
  from the newest one with ``Accelerator.skip_first_batches``: the same numbers as a run that was never
  stopped. Nothing is unpickled; a file that cannot be restored stops the resume, naming the file.
* ``out_dir/metrics.jsonl`` (one row per optimizer step and per evaluation), ``out_dir/train_config.json``
  (the options and derived values actually used), ``out_dir/best/`` (the artifact of the best evaluation),
  ``out_dir/final/``, ``out_dir/train_result.json`` (written last; the run is finished).
* Refusals (``InputError``): a resume whose data fingerprint or settings differ from the checkpoint's (one
  message listing every change, ``name: old -> new``); starting in a folder with an unfinished run without
  ``resume=True``; training into a finished run without ``overwrite=True`` (``resume=True`` on a finished
  run with the same settings returns its recorded result without training).
* A progress bar (tqdm) on the main process; off with ``progress=False`` or ``GENMETRICS_PROGRESS=0``.

Example (a linear regression; runs in a second on CPU)::

    >>> import tempfile, torch
    >>> from genmetrics.train import TrainLoopConfig, TrainTask, fit
    >>> class Regression(TrainTask):
    ...     def __init__(self):
    ...         self.net = torch.nn.Linear(3, 1)
    ...     def trainable_module(self):
    ...         return self.net
    ...     def collate(self, examples):
    ...         return torch.stack([x for x, _ in examples]), torch.stack([y for _, y in examples])
    ...     def loss(self, module, batch):
    ...         x, y = batch
    ...         loss = torch.nn.functional.mse_loss(module(x).squeeze(-1), y)
    ...         return loss, {}
    ...     def evaluate(self, module, examples):  # examples as given: move them to the module's device
    ...         x, y = (t.to(module.weight.device) for t in self.collate(examples))
    ...         return {"loss": float(torch.nn.functional.mse_loss(module(x).squeeze(-1), y))}
    >>> g = torch.Generator().manual_seed(0)
    >>> xs = torch.randn(32, 3, generator=g)
    >>> data = [(x, x.sum()) for x in xs]
    >>> with tempfile.TemporaryDirectory() as d:
    ...     res = fit(Regression(), data[:24], TrainLoopConfig(out_dir=d, lr=0.1, epochs=5, batch_size=8,
    ...               warmup_ratio=0.0, progress=False), val_examples=data[24:])
    ...     (res.steps, res.history[-1]["kind"], res.best_dir.name, res.best_metric < res.history[1]["loss"])
    (15, 'eval', 'best', True)
"""

from genmetrics.train.config import TrainLoopConfig
from genmetrics.train.loop import TrainResult, fit
from genmetrics.train.task import TrainTask, fingerprint_examples

__all__ = ["TrainLoopConfig", "TrainResult", "TrainTask", "fingerprint_examples", "fit"]
