"""genmetrics.train.config: a device that is not there is one error naming the option."""

from __future__ import annotations

import torch

from tests.reliability.hostile import Cases, _toy, _train_cfg

# ------------------------------------------------------------------------------------ hostile inputs
HOSTILE = Cases()
case = HOSTILE.case


@case(
    "h-device-cuda-missing",
    "silent",
    "TrainLoopConfig(device='cuda') without CUDA: one line naming the option",
)
def _(ctx):
    from genmetrics.train import fit
    from genmetrics.train.config import DeviceUnavailableError

    ctx.monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    ctx.monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    Toy, make_data = _toy()
    ctx.freeze()
    msg = ctx.refused(
        lambda: fit(Toy(), make_data(8), _train_cfg(ctx.out, device="cuda")),
        "device",
        exc=DeviceUnavailableError,
    )
    assert "cpu" in msg and "\n" not in msg


@case("h-device-mps-missing", "silent", "TrainLoopConfig(device='mps') where there is none")
def _(ctx):
    from genmetrics.train import fit
    from genmetrics.train.config import DeviceUnavailableError

    ctx.monkeypatch.setattr(torch.backends.mps, "is_available", lambda: False)
    Toy, make_data = _toy()
    ctx.freeze()
    ctx.refused(
        lambda: fit(Toy(), make_data(8), _train_cfg(ctx.out, device="mps")), "mps", exc=DeviceUnavailableError
    )


test_hostile = HOSTILE.test()
