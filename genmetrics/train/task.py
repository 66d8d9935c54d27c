"""What a family gives the training loop: a :class:`TrainTask` (a model, a collate function, a loss, a
validation, an artifact writer and a data fingerprint)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import save_file
from torch import nn

from genmetrics.data.output.atomic import atomic_output

__all__ = ["TrainTask", "fingerprint_examples"]


class TrainTask:
    """The family side of :func:`genmetrics.train.fit`. Subclass it (or give any object with these methods).

    * :meth:`trainable_module` -- the ``nn.Module`` to prepare and optimise (its parameters with
      ``requires_grad`` are trained and checkpointed; frozen ones are neither).
    * :meth:`collate` -- a list of examples (one micro-batch) -> the batch :meth:`loss` takes. It must not
      draw from the global random generators (the loader fetches one batch ahead).
    * :meth:`loss` -- ``(module, batch) -> (loss, parts)``: the mean loss over the micro-batch and a dict
      of floats to log (e.g. the terms of a weighted sum). Call ``module(...)`` (its ``forward``): in
      multi-process runs it is the DDP wrapper. The logged ``loss`` is always the returned tensor's value (a
      part named ``loss`` is not logged twice); ``kind, step, epoch, lr, grad_norm`` are the loop's names.
    * :meth:`evaluate` -- ``(module, examples) -> {name: value}`` on the validation examples (called on every
      process with the whole list, under ``torch.no_grad()`` and ``module.eval()``; the main process's
      numbers are used everywhere). The examples arrive as given: move tensors to the module's device.
    * :meth:`save` -- ``(module, path)``: write the family's artifact (adapter, heads, config) into the folder
      ``path`` (called on the main process only, with the unwrapped module).
    * :meth:`data_fingerprint` -- ``(examples) -> str``: a hash of the examples' content, for resume checks.
    * :meth:`param_groups` -- optional: ``module -> [{"params": [...], "lr_scale": 5.0}, ...]`` for
      per-group learning rates (``lr_scale`` multiplies ``lr``; ``weight_decay`` may be given per group).

    Only :meth:`trainable_module` and :meth:`loss` are required; the rest have defaults:

    >>> class Offset(TrainTask):  # learn one number: the mean of the examples
    ...     def __init__(self):
    ...         self.net = nn.Linear(1, 1, bias=False)
    ...     def trainable_module(self):
    ...         return self.net
    ...     def loss(self, module, batch):
    ...         return ((module(torch.ones(len(batch), 1)).squeeze(-1) - batch) ** 2).mean(), {}
    >>> task = Offset()
    >>> task.collate([1.0, 2.0]).tolist(), task.data_fingerprint([1.0]) == fingerprint_examples([1.0])
    ([1.0, 2.0], True)
    """

    def trainable_module(self) -> nn.Module:
        """The ``nn.Module`` to prepare and optimise (required: subclasses implement it)."""
        raise NotImplementedError(f"{type(self).__name__}.trainable_module() is not implemented")

    def collate(self, examples: list) -> Any:
        """One micro-batch of examples -> the batch :meth:`loss` takes; by default torch's ``default_collate``."""
        return torch.utils.data.default_collate(examples)

    def loss(self, module: nn.Module, batch: Any) -> tuple[torch.Tensor, dict[str, float]]:
        """``(mean loss over the micro-batch, {part: float})`` for ``batch`` through ``module(...)`` (required)."""
        raise NotImplementedError(f"{type(self).__name__}.loss() is not implemented")

    def evaluate(self, module: nn.Module, examples: list) -> dict[str, float]:
        """``{name: value}`` on the validation examples; needed only when validation examples are given."""
        raise NotImplementedError(
            f"{type(self).__name__}.evaluate() is not implemented; it is needed when "
            "validation examples are given"
        )

    def save(self, module: nn.Module, path: Path) -> None:
        """Write the trainable parameters of ``module`` (those with ``requires_grad``) to
        ``path/trainable.safetensors``, atomically."""
        with atomic_output(Path(path) / "trainable.safetensors") as tmp:  # the write rule (data/output/)
            save_file(
                {n: p.detach().cpu().contiguous() for n, p in module.named_parameters() if p.requires_grad},
                str(tmp),
            )

    def data_fingerprint(self, examples: list) -> str:
        """A hash of the examples' content (:func:`fingerprint_examples`), compared on resume."""
        return fingerprint_examples(examples)

    def param_groups(self, module: nn.Module) -> list[dict[str, Any]] | None:
        """Optional per-group learning rates: None trains every parameter at ``lr``."""
        return None

    def renamed_parameters(self) -> dict[str, str]:
        """Names this task's trained parameters had in an earlier genmetrics, ``{old: new}`` (an old name
        ending in ``.`` renames a prefix): a checkpoint with the old names is refused as such, not as
        another model's."""
        return {}


def _feed(h: Any, obj: Any) -> None:
    if isinstance(obj, torch.Tensor):
        t = obj.detach().cpu().contiguous()
        h.update(f"T{t.dtype}{tuple(t.shape)}".encode())
        h.update(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    elif dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        h.update(type(obj).__name__.encode())
        for f in dataclasses.fields(obj):
            h.update(f.name.encode())
            _feed(h, getattr(obj, f.name))
    elif isinstance(obj, dict):
        h.update(b"{")
        for k in sorted(obj, key=str):
            h.update(str(k).encode())
            _feed(h, obj[k])
        h.update(b"}")
    elif isinstance(obj, (list, tuple)):
        h.update(b"[")
        for x in obj:
            _feed(h, x)
        h.update(b"]")
    else:
        h.update(json.dumps(obj, default=repr).encode())


def fingerprint_examples(examples: list) -> str:
    """A sha256 of the examples' content (tensors by their bytes, dataclasses and containers field by field,
    anything else by its JSON or ``repr``), in order. Files named by path are hashed by name only: a task
    whose examples are file paths should hash the files' content instead.

    >>> a = fingerprint_examples([torch.ones(2), {"label": 1}])
    >>> a == fingerprint_examples([torch.ones(2), {"label": 1}]), a == fingerprint_examples([torch.zeros(2), {"label": 1}])
    (True, False)
    """
    h = hashlib.sha256()
    _feed(h, list(examples))
    return h.hexdigest()
