"""A toy regression task for the training-loop tests (importable: spawned gloo workers need it)."""

from __future__ import annotations

import torch

from genmetrics.train import TrainTask


def make_data(n: int, seed: int = 0) -> list[tuple[torch.Tensor, torch.Tensor]]:
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, 4, generator=g)
    y = x @ torch.tensor([1.0, -2.0, 0.5, 0.0]) + 0.1 * torch.randn(n, generator=g)
    return [(x[i], y[i]) for i in range(n)]


class Toy(TrainTask):
    """Linear -> Dropout -> Tanh -> Linear, MSE; ``kill_at``: raise KeyboardInterrupt at that loss call;
    ``script``: evaluate() returns these values in turn (and records the weights it saw)."""

    def __init__(
        self,
        dropout: float = 0.0,
        kill_at: int | None = None,
        script: list[float] | None = None,
        init_seed: int = 1,
    ):
        torch.manual_seed(init_seed)
        self.net = torch.nn.Sequential(
            torch.nn.Linear(4, 8), torch.nn.Dropout(dropout), torch.nn.Tanh(), torch.nn.Linear(8, 1)
        )
        self.kill_at, self.script, self.calls, self.seen = kill_at, script, 0, []

    def trainable_module(self):
        return self.net

    def collate(self, examples):
        return torch.stack([x for x, _ in examples]), torch.stack([y for _, y in examples])

    def loss(self, module, batch):
        self.calls += 1
        if self.kill_at is not None and self.calls == self.kill_at:
            raise KeyboardInterrupt("killed by the test")
        x, y = batch
        err = module(x).squeeze(-1) - y
        return (err**2).mean(), {"mae": float(err.detach().abs().mean())}

    def evaluate(self, module, examples):
        self.seen.append({k: v.detach().cpu().clone() for k, v in module.state_dict().items()})
        x, y = (
            t.to(next(module.parameters()).device) for t in self.collate(examples)
        )  # the loop moves batches only
        mse = float(((module(x).squeeze(-1) - y) ** 2).mean())
        if self.script is not None:
            return {"loss": self.script[len(self.seen) - 1], "mse": mse}
        return {"loss": mse}


def params(module) -> dict[str, torch.Tensor]:
    return {k: v.detach().cpu().clone() for k, v in module.state_dict().items()}


def tiny_mie(data, out, *, vlm=None, n_pairs: int = 6, **options):
    """``train_mie`` on the tiny Qwen3.5 and ``n_pairs`` toy pairs written under ``data``: 64 px images,
    one unfrozen layer, no validation, no progress bar; ``options`` override."""
    from genmetrics.mie.train import train_mie
    from genmetrics.testing import tiny_qwen35, tiny_qwen35_processor, toy_mib_pairs

    defaults = dict(unfreeze_layers=1, image_size=64, batch_pairs=2, val_fraction=0.0, progress=False)
    pairs = str(toy_mib_pairs(data, n_pairs))
    vlm = vlm if vlm is not None else tiny_qwen35()
    return train_mie(
        data=pairs, out=str(out), vlm=vlm, processor=tiny_qwen35_processor(), **{**defaults, **options}
    )
