"""Every registered metric through torchmetrics' OWN test harness: ``MetricTester`` from the
torchmetrics test suite of the installed release, in one process and in its DDP pool of 2 gloo processes,
against a reference (torchmetrics' functional for psnr / ssim; for the others a fresh metric given all
batches in one update, whose per-sample path the family tests pin by hand), plus torchmetrics' wrappers
``Running``, ``BootStrapper``, ``MetricTracker``, ``MultitaskWrapper`` and ``MinMaxMetric`` over every
registered metric (through the recipes in tests/recipes).

The harness is not part of genmetrics (its code is never committed here): point
``GENMETRICS_TORCHMETRICS_TESTS`` at the ``tests/`` folder of the installed torchmetrics release, e.g.
``git archive v1.9.0 tests/unittests | tar x -C /tmp/tm`` in a torchmetrics clone, then
``GENMETRICS_TORCHMETRICS_TESTS=/tmp/tm/tests pytest tests/contract/test_torchmetrics_harness.py``.
"""

from __future__ import annotations

import importlib.util
import os
import sys
import tempfile
from pathlib import Path

import pytest
import torch
from torchmetrics import wrappers as tw

from genmetrics import wrappers as gw
from genmetrics.core.registry import metric_class
from tests.contract import tester as T

HARNESS = os.environ.get("GENMETRICS_TORCHMETRICS_TESTS")
pytestmark = [
    pytest.mark.skipif(
        not HARNESS,
        reason="torchmetrics' own test harness is not available: set GENMETRICS_TORCHMETRICS_TESTS to the "
        "tests/ folder of the installed torchmetrics release (git archive v<version> tests/unittests)",
    ),
    pytest.mark.slow,
]

if HARNESS:
    sys.path.insert(0, HARNESS)
    if importlib.util.find_spec("cachier") is None:
        # the harness's on-disk cache of reference values (package cachier) is not needed: a stand-in module
        # on sys.path, which the DDP pool's spawned processes inherit too
        stub = Path(tempfile.mkdtemp(prefix="genmetrics-tm-harness-"))
        (stub / "cachier.py").write_text("def cachier(*args, **kwargs):\n    return lambda fn: fn\n")
        sys.path.insert(0, str(stub))
    from unittests._helpers.testers import MetricTester  # noqa: E402
    from unittests.conftest import NUM_PROCESSES, setup_ddp  # noqa: E402

#: the harness compares with atol: float32 products differ in the last bits with the batch composition
#: (one image in a batch of 2 vs 4: ~2 ulp on AVX2, see tests/contract/test_every_metric.py), scores
#: scaled x100 (clipscore, hcs) and centred (hcs) amplify it to ~1e-5; PSNR from float32 row sums of 32
#: px has 32 * 1.19e-7 relative MSE error, 10 / ln 10 * 4e-6 = 1.7e-5 dB
ATOL = 1e-4


def _harnessed(name: str) -> type:
    """The metric's class with torchmetrics' calling convention of the harness: ``metric(preds, target)``
    where ``preds`` is a list of recipe batches (dicts of reference / candidates / condition)."""
    base = metric_class(name)

    def __init__(self, **kwargs):  # noqa: N807
        base.__init__(self, **{**T.recipe(name)["kwargs"], **kwargs})

    def update(self, preds, target=None):
        base.update(self, **T.merged(preds))

    cls_name = f"Harnessed_{name}"
    cls = type(cls_name, (base,), {"__init__": __init__, "update": update, "__module__": __name__})
    cls.__qualname__ = cls_name
    return cls


for _name in T.NAMES:  # module attributes, so the DDP pool's processes unpickle them by name
    globals()[f"Harnessed_{_name}"] = _harnessed(_name)


def _reference(name):
    """The harness's reference: a pure function of the batches it is given. The harness calls it inside
    every rank of its DDP pool (each rank on its own batch, then every rank on all batches), so a
    reference that is itself a metric must not sync on ``compute()`` (``T.value_of`` builds it with
    ``sync_on_compute=False``; a synced reference of rank 0's batch was both ranks' value)."""

    def ref(preds, target):
        whole = T.merged(preds)
        if name in ("psnr", "ssim"):
            from torchmetrics.functional.image import (
                peak_signal_noise_ratio,
                structural_similarity_index_measure,
            )

            r, c = whole["reference"].double() / 255, whole["candidates"].double() / 255
            if name == "psnr":
                return peak_signal_noise_ratio(
                    c, r, data_range=1.0, reduction="elementwise_mean", dim=(1, 2, 3)
                )
            return structural_similarity_index_measure(c, r, data_range=1.0)
        return T.value_of(name, preds)

    ref.__qualname__ = ref.__name__ = f"reference_{name}"
    return ref


for _name in T.NAMES:
    globals()[f"reference_{_name}"] = _reference(_name)


def _inputs(name: str) -> tuple[list, list]:
    """The recipe's samples in NUM_PROCESSES batches that each define a value alone (the harness checks
    every batch; a set metric's batch then holds both sets): each input split in equal parts."""
    whole, n = T.merged(T.batches(name)), NUM_PROCESSES

    def part(v, i):
        step = len(v) // n
        return v[i * step : (i + 1) * step if i < n - 1 else len(v)]

    batches = [{k: part(v, i) for k, v in whole.items()} for i in range(n)]
    return [[b] for b in batches], [[None] for _ in batches]


@pytest.fixture(scope="module")
def ddp_pool():
    from torch.multiprocessing import get_context

    pool = get_context("spawn").Pool(processes=NUM_PROCESSES)
    pool.starmap(setup_ddp, [(rank, NUM_PROCESSES) for rank in range(NUM_PROCESSES)])
    pytest.pool = pool  # where MetricTester looks for its DDP pool
    yield pool
    del pytest.pool
    pool.close()
    pool.join()


class TestWithTorchmetricsHarness(MetricTester if HARNESS else object):  # type: ignore[misc]
    atol = ATOL

    @pytest.mark.parametrize("name", T.NAMES)
    def test_class_one_process(self, name):
        preds, target = _inputs(name)
        self.run_class_metric_test(
            ddp=False,
            preds=preds,
            target=target,
            metric_class=globals()[f"Harnessed_{name}"],
            reference_metric=globals()[f"reference_{name}"],
            check_scriptable=False,
        )

    @pytest.mark.distributed
    @pytest.mark.parametrize("dist_sync_on_step", [False, True], ids=["sync_on_compute", "sync_on_step"])
    @pytest.mark.parametrize("name", T.NAMES)
    def test_class_ddp_two_gloo_processes(self, name, dist_sync_on_step, ddp_pool):
        preds, target = _inputs(name)
        self.run_class_metric_test(
            ddp=True,
            preds=preds,
            target=target,
            metric_class=globals()[f"Harnessed_{name}"],
            reference_metric=globals()[f"reference_{name}"],
            dist_sync_on_step=dist_sync_on_step,
            check_scriptable=False,
        )

    @pytest.mark.parametrize("name", ["psnr", "ssim"])
    def test_differentiability(self, name):
        g = torch.Generator().manual_seed(0)
        preds = torch.rand(2, 4, 3, 16, 16, generator=g)
        target = torch.rand(2, 4, 3, 16, 16, generator=g)
        fn = {"psnr": _psnr_fn, "ssim": _ssim_fn}[name]
        self.run_differentiability_test(
            preds, target, metric_module=_paired(name), metric_functional=fn, metric_args={}
        )


def _paired(name):
    """The metric with torchmetrics' positional order ``(preds, target)``."""
    base = metric_class(name)

    class Paired(base):  # type: ignore[misc, valid-type]
        def update(self, preds, target):
            base.update(self, reference=target, candidates=preds)

    return Paired


def _psnr_fn(preds, target):
    return metric_class("psnr")().score(target, preds)


def _ssim_fn(preds, target):
    return metric_class("ssim")(kernel_size=7).score(target, preds)


# ------------------------------------------------------------------ torchmetrics' wrappers, every metric
@pytest.mark.parametrize("name", T.NAMES)
def test_wrappers_over_every_metric(name):
    ups = T.batches(name)
    # Running: the last two batches
    running = tw.Running(T.build(name), window=2)
    for u in ups:
        running(**u)
    T.assert_close(running.compute(), T.value_of(name, ups[-2:]), what="Running")
    # MinMaxMetric: raw value, min and max of the values computed so far (scalar results)
    if not isinstance(T.reference(name), dict) and T.reference(name).ndim == 0:
        minmax = tw.MinMaxMetric(T.build(name))
        seen = []
        for i, u in enumerate(ups):
            minmax.update(**u)
            out = minmax.compute()
            seen.append(float(T.value_of(name, ups[: i + 1])))
            assert float(out["raw"]) == pytest.approx(seen[-1], abs=ATOL)
            assert float(out["min"]) == pytest.approx(min(seen), abs=ATOL)
            assert float(out["max"]) == pytest.approx(max(seen), abs=ATOL)
        # BootStrapper: torchmetrics' own resamples tensor inputs only (a list input, such as mie's lists of
        # reference images per row, is taken for its sizes and crashes it); genmetrics.wrappers' resamples
        # lists too (docs/torchmetrics.md, "Wrappers")
        tensors_only = all(isinstance(v, torch.Tensor) for v in ups[0].values() if v is not None)
        boot_cls = tw.BootStrapper if tensors_only else gw.BootStrapper
        boot = boot_cls(T.build(name), num_bootstraps=3, sampling_strategy="multinomial")
        boot.update(**ups[0])
        assert set(boot.compute()) == {"mean", "std"}
    # MetricTracker: one value per epoch, best of equal epochs is the first
    tracker = tw.MetricTracker(T.build(name), maximize=bool(T.build(name).higher_is_better))
    for _ in range(2):
        tracker.increment()
        for u in ups:
            tracker.update(**u)
    values = tracker.compute_all()
    first = values["mean"][0] if isinstance(values, dict) else values[0]
    T.assert_close(first, T.scalar(T.reference(name)) if isinstance(values, dict) else T.reference(name))
    # MultitaskWrapper: a dict of tasks, each fed its own inputs
    multi = tw.MultitaskWrapper({name: globals()[f"Harnessed_{name}"]()})
    for u in ups:
        multi.update({name: [u]}, {name: None})  # (task_preds, task_targets), passed positionally
    T.assert_close(multi.compute()[name], T.reference(name), what="MultitaskWrapper")
