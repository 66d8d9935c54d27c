"""A Lightning validation loop over every registered metric (used by test_every_metric.py)."""

from __future__ import annotations

from typing import Any

import lightning as L
import torch
from torch import nn

from tests.contract.tester import batches, build

N_ITEMS = 4  # validation items: item i feeds batch i of every recipe (even, so 2 ranks get no padding)


class MetricsModule(L.LightningModule):
    """Item ``i`` forwards batch ``i`` of each metric's recipe (if it has one). Scalar metrics are logged as
    metric objects (``self.log(name, metric)``: Lightning calls compute() and reset() at epoch end); the
    others log the mean of ``compute()`` at epoch end."""

    def __init__(self, names: list[str], scalar_names: list[str]) -> None:
        super().__init__()
        self.names = list(names)
        self.scalar_names = set(scalar_names)
        self.metrics = nn.ModuleDict({n: build(n) for n in names})
        self.inputs = {n: batches(n) for n in names}

    def validation_step(self, batch: Any, batch_idx: int) -> None:
        i = int(batch[0][0])
        for name in self.names:
            ups = self.inputs[name]
            if i < len(ups):
                self.metrics[name](**ups[i])
            if name in self.scalar_names:
                self.log(name, self.metrics[name], on_step=False, on_epoch=True, batch_size=1)

    def on_validation_epoch_end(self) -> None:
        for name in self.names:
            if name in self.scalar_names:
                continue
            value = self.metrics[name].compute()  # synchronised across processes
            value = value["mean"] if isinstance(value, dict) else value.double().mean()
            self.log(name, float(value), rank_zero_only=True)
            self.metrics[name].reset()


def validate(names: list[str], scalar_names: list[str], *, devices: int) -> dict[str, float]:
    module = MetricsModule(names, scalar_names)
    data = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(torch.arange(N_ITEMS)), batch_size=1)
    trainer = L.Trainer(
        accelerator="cpu",
        devices=devices,
        strategy="ddp_spawn" if devices > 1 else "auto",
        logger=False,
        enable_checkpointing=False,
        enable_progress_bar=False,
        enable_model_summary=False,
    )
    (logged,) = trainer.validate(module, dataloaders=data, verbose=False)
    return {k: float(v) for k, v in logged.items()}
