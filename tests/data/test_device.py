"""Devices (genmetrics.data.device): the one list of devices a configuration may name."""

from __future__ import annotations

import pytest
import torch

from genmetrics.data import device as D


@pytest.mark.parametrize("cuda, mps", [(0, False), (2, False), (0, True), (3, True)])
def test_available_devices_lists_cpu_every_cuda_index_and_mps(monkeypatch, cuda, mps):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: cuda > 0)
    monkeypatch.setattr(torch.cuda, "device_count", lambda: cuda)
    monkeypatch.setattr(torch.backends.mps, "is_available", lambda: mps)
    expected = ["cpu"] + [f"cuda:{i}" for i in range(cuda)] + (["mps"] if mps else [])
    assert D.available_devices() == expected


def test_training_and_leaderboard_ask_the_same_function():
    """The training device check and the leaderboard's ``devices`` check read one list (one definition)."""
    from genmetrics.leaderboard import plan
    from genmetrics.train import config

    assert config.available_devices is plan.available_devices is D.available_devices
