"""``update`` never waits for the device: no value is read back to the host per batch.

On a GPU a read of a device value (``.item()``, ``bool(t)``, ``float(t)``, ``.tolist()``, ``.cpu()``) stalls
the host until the device has finished everything queued, so an eval loop or a scoring run would wait once
per batch. Decided here:

* ``update`` with device tensors (uint8 images, as the input pipeline decodes them) makes **no** host
  synchronisation, after a first ``update`` that loads the model and fills the text caches;
* ``compute`` may synchronise (it returns values), but a fixed number of times: the same after the recipe's
  batches as after three times as many;
* the VLM families (TPIPS, MIE) are outside this rule: their chat batches are built on the host from token
  counts and image grids, and transformers' Qwen3-VL forward itself reads its grid sizes back, so they
  synchronise per batch by design (docs/performance.md, "Preprocessing on the device").

Checked two ways: on a CUDA machine with ``torch.cuda.set_sync_debug_mode`` (every synchronising call
warns), and here on the CPU with a proxy that counts the Python-level host reads of tensors made from
genmetrics code during ``update``, and the tensors made from host data with ``device=`` (a blocking copy on a
GPU) (red before the ssim taps and the RA-CLIP logit scale were cached and the sample ids copied without
blocking).
"""

from __future__ import annotations

import collections
import contextlib
import os
import traceback
import warnings
from typing import Any

import pytest
import torch

from tests.contract import tester as T

#: host reads by design (see the module docstring)
VLM_FAMILIES = {"tpips", "mie"}
NAMES = [n for n in T.NAMES if n not in VLM_FAMILIES]
READS = ("item", "tolist", "__bool__", "__float__", "__int__", "__index__", "cpu", "numpy")
#: host data copied to a device with a blocking copy (which waits for the device) when given ``device=``
FROM_HOST = ("tensor", "as_tensor")
PACKAGE = os.path.dirname(os.path.dirname(T.gm.__file__)) + os.sep + "genmetrics" + os.sep


@contextlib.contextmanager
def counting_reads() -> Any:
    """Count calls of the host-read methods of ``torch.Tensor`` made directly from genmetrics code, and
    tensors made from host data straight onto a device (a blocking host-to-device copy)."""
    seen: collections.Counter[str] = collections.Counter()
    originals = {m: getattr(torch.Tensor, m) for m in READS}

    def wrap(name: str, f: Any) -> Any:
        def read(self: torch.Tensor, *a: Any, **k: Any) -> Any:
            caller = traceback.extract_stack(limit=2)[0]
            if caller.filename.startswith(PACKAGE):
                seen[f"{os.path.relpath(caller.filename, PACKAGE)}:{caller.lineno} {name}"] += 1
            return f(self, *a, **k)

        return read

    def made(name: str, f: Any) -> Any:
        def make(*a: Any, **k: Any) -> Any:
            caller = traceback.extract_stack(limit=2)[0]
            if k.get("device") is not None and caller.filename.startswith(PACKAGE):
                seen[f"{os.path.relpath(caller.filename, PACKAGE)}:{caller.lineno} {name}(device=)"] += 1
            return f(*a, **k)

        return make

    factories = {m: getattr(torch, m) for m in FROM_HOST}
    for m, f in originals.items():
        setattr(torch.Tensor, m, wrap(m, f))
    for m, f in factories.items():
        setattr(torch, m, made(m, f))
    try:
        yield seen
    finally:
        for m, f in originals.items():
            setattr(torch.Tensor, m, f)
        for m, f in factories.items():
            setattr(torch, m, f)


def test_the_proxy_sees_a_read():
    """The counter catches a host read made from genmetrics code (and only from there)."""
    from genmetrics.raclip.model import logit_scale_of

    model = torch.nn.Module()
    model.logit_scale = torch.nn.Parameter(torch.tensor(4.6052))
    with counting_reads() as seen:
        float(torch.ones(1))  # from the test: not counted
        logit_scale_of(model)  # first read of this parameter: counted
        logit_scale_of(model)  # cached: not counted
    assert sum(seen.values()) == 1, seen


@pytest.mark.parametrize("name", NAMES)
def test_update_makes_no_host_read(name):
    ups = T.batches(name)
    m = T.build(name)
    m.update(**ups[0])  # loads the model, fills the text caches
    with counting_reads() as seen:
        for u in ups[1:] or ups:
            m.update(**u)
    assert not seen, f"{name}: host reads during update: {dict(seen)}"


def test_logit_scale_follows_the_parameter():
    """The cached scale is the parameter's current value: an in-place change is seen."""
    from genmetrics.raclip.model import logit_scale_of

    model = torch.nn.Module()
    model.logit_scale = torch.nn.Parameter(torch.tensor(0.0))
    assert logit_scale_of(model) == 1.0
    with torch.no_grad():
        model.logit_scale.fill_(1.0)
    assert logit_scale_of(model) == float(torch.tensor(1.0).exp())


# ----------------------------------------------------------------------------------------------- CUDA
cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")


def _to(u: dict[str, Any], device: str) -> dict[str, Any]:
    return {k: v.to(device) if isinstance(v, torch.Tensor) else v for k, v in u.items()}


@contextlib.contextmanager
def counting_syncs() -> Any:
    """Every synchronising CUDA call warns under sync debug mode 1; collect them."""
    previous = torch.cuda.get_sync_debug_mode()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        torch.cuda.set_sync_debug_mode("warn")
        try:
            yield caught
        finally:
            torch.cuda.synchronize()
            torch.cuda.set_sync_debug_mode(previous)


def _syncs(caught: list[Any]) -> list[str]:
    return [str(w.message)[:120] for w in caught if "synchroniz" in str(w.message).lower()]


@cuda
@pytest.mark.parametrize("name", NAMES)
def test_cuda_update_does_not_synchronise(name):
    ups = [_to(u, "cuda") for u in T.batches(name)]
    m = T.build(name, device="cuda")
    m.update(**ups[0])
    torch.cuda.synchronize()
    with counting_syncs() as caught:
        for u in ups[1:] or ups:
            m.update(**u)
    assert not _syncs(caught), f"{name}: update synchronised: {_syncs(caught)[:3]}"


@cuda
@pytest.mark.parametrize("name", NAMES)
def test_cuda_compute_synchronises_a_fixed_number_of_times(name):
    ups = [_to(u, "cuda") for u in T.batches(name)]
    counts = []
    for reps in (1, 3):  # set metrics need both sides before they have a value: the recipe is the least
        m = T.build(name, device="cuda")
        for _ in range(reps):
            for u in ups:
                m.update(**u)
        torch.cuda.synchronize()
        with counting_syncs() as caught:
            m.compute()
        counts.append(len(_syncs(caught)))
    assert counts[0] == counts[1], f"{name}: compute synchronised {counts} times after 1x and 3x the recipe"


def test_float_image_check_reads_once():
    """A float image's range and finiteness check reads the device once (uint8: never); NaN, inf and
    out-of-range values are still refused."""
    from genmetrics.data.io.images import to_tensor
    from genmetrics.errors import InputError

    with counting_reads() as seen:
        to_tensor(torch.rand(3, 8, 8))
    assert sum(seen.values()) == 1, seen
    with counting_reads() as seen:
        to_tensor(torch.zeros(3, 8, 8, dtype=torch.uint8))
    assert not seen, seen
    for bad in (float("nan"), float("inf"), -float("inf"), 1.5, -0.5):
        x = torch.rand(3, 8, 8)
        x[1, 2, 3] = bad
        with pytest.raises(InputError):
            to_tensor(x)


@pytest.mark.parametrize("name", NAMES)
def test_compute_reads_a_fixed_number_of_times(name):
    """``compute`` may read values back, but as often after the recipe's batches as after three times as many
    (set metrics need both sides before they have a value, so the recipe is the smallest run)."""
    ups = T.batches(name)
    counts = []
    for reps in (1, 3):
        m = T.build(name)
        for _ in range(reps):
            for u in ups:
                m.update(**u)
        with counting_reads() as seen:
            m.compute()
        counts.append(sum(seen.values()))
    assert counts[0] == counts[1], (
        f"{name}: compute read {counts} times after {len(ups)} and {3 * len(ups)} batches"
    )
