"""The DataLoader iterator's private shutdown (genmetrics.data.io._torch_loader): the installed torch still has
it (red naming the member and the torch version when a release drops it), and calling it stops the workers at
once, while a traceback still holds the iterator."""

from __future__ import annotations

import os
import sys
import time

import pytest
import torch

from genmetrics.data.io import _torch_loader as TL


def test_the_installed_torch_has_the_private_shutdown():
    missing = TL.loader_private_apis_missing()
    assert not missing, (
        f"torch {torch.__version__} has no {missing}: update genmetrics/data/io/_torch_loader.py (until then "
        "a pipeline closed early leaves its decoding workers to garbage collection)"
    )


def test_the_check_sees_a_missing_method(monkeypatch):
    from torch.utils.data import dataloader

    monkeypatch.delattr(dataloader._MultiProcessingDataLoaderIter, "_shutdown_workers")
    assert TL.loader_private_apis_missing() == [TL.PRIVATE_APIS[1]]
    monkeypatch.delattr(dataloader, "_MultiProcessingDataLoaderIter")
    assert TL.loader_private_apis_missing() == list(TL.PRIVATE_APIS)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    with open(f"/proc/{pid}/stat") as f:  # a zombie is gone for this purpose
        return f.read().split(") ")[1][0] != "Z"


class _Slow(torch.utils.data.Dataset):
    def __len__(self):
        return 64

    def __getitem__(self, i):
        return torch.tensor([i])


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc to see the worker processes")
def test_shutdown_stops_the_workers_while_a_traceback_holds_the_iterator():
    it = iter(torch.utils.data.DataLoader(_Slow(), batch_size=2, num_workers=2))
    next(it)
    pids = [w.pid for w in it._workers]
    assert pids and all(_alive(p) for p in pids)
    try:
        raise RuntimeError("an error while the iterator is referenced")
    except RuntimeError as e:
        kept = e.__traceback__  # as sys.last_traceback would: the iterator is still referenced here
        TL.shutdown_loader_workers(it)
        deadline = time.monotonic() + 10
        while any(_alive(p) for p in pids) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert not any(_alive(p) for p in pids)
        assert kept is not None
    TL.shutdown_loader_workers(it)  # twice: harmless
