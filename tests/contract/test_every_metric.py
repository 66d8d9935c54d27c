"""The contract tester (tester.py) run for every registered metric on the tiny backbones."""

from __future__ import annotations

import copy
import io
import pickle

import pytest
import torch
from torchmetrics import MetricCollection

from genmetrics.core.metric import SampleMetric
from genmetrics.testing import spawn_gloo
from tests.contract import tester as T

NAMES = T.NAMES


@pytest.mark.parametrize("name", NAMES)
def test_class_forward(name):
    T.class_test(name)


@pytest.mark.parametrize("name", NAMES)
def test_merge_state(name):
    ups = T.batches(name)
    first, second = T.build(name), T.build(name)
    for u in ups[:1]:
        first.update(**u)
    for u in ups[1:]:
        second.update(**u)
    first.merge_state(second)
    T.assert_close(first.compute(), T.reference(name), what="merge_state")
    if isinstance(first, SampleMetric):
        # torchmetrics' order: the incoming samples first (a means hides the order, per_sample shows it)
        single = T.build(name)
        for u in [*ups[1:], *ups[:1]]:
            single.update(**u)
        T.assert_close(first.per_sample()["scores"], single.per_sample()["scores"], what="merge_state order")
    # a state dict merges too (torchmetrics' dict form)
    third, fourth = T.build(name), T.build(name)
    third.update(**ups[0])
    for u in ups[1:]:
        fourth.update(**u)
    third.merge_state({k: v for k, v in fourth.metric_state.items() if not k.startswith("_options_")})
    T.assert_close(third.compute(), T.reference(name), what="merge_state(dict)")


@pytest.mark.parametrize("name", NAMES)
def test_pickle_and_torch_save_mid_run(name):
    ups = T.batches(name)
    m = T.build(name)
    m.update(**ups[0])
    restored = [pickle.loads(pickle.dumps(m))]
    buf = io.BytesIO()
    torch.save(m, buf)
    buf.seek(0)
    restored.append(torch.load(buf, weights_only=False))
    for r in restored:
        for u in ups[1:]:
            r.update(**u)
        T.assert_close(r.compute(), T.reference(name), what="after a pickle round trip")


@pytest.mark.parametrize("name", NAMES)
def test_state_dict_round_trip(name):
    ups = T.batches(name)
    m = T.build(name)
    m.persistent(True)
    for u in ups[:-1]:
        m.update(**u)
    buf = io.BytesIO()
    torch.save(m.state_dict(), buf)
    buf.seek(0)
    state = torch.load(buf, weights_only=True)
    fresh = T.build(name)
    fresh.persistent(True)
    fresh.load_state_dict(state)
    T.assert_close(fresh.compute(), T.value_of(name, ups[:-1]), what="reloaded state")
    fresh.update(**ups[-1])  # and it keeps accumulating
    T.assert_close(fresh.compute(), T.reference(name), what="reloaded state + update")


TOL = {torch.float64: 1e-5, torch.float32: 1e-5, torch.float16: 2e-3, torch.bfloat16: 2e-2}


@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("name", NAMES)
def test_set_dtype(name, dtype):
    ups = T.batches(name)
    m = T.build(name)
    for u in ups:
        m.update(**u)
    ids_before = [t.clone() for t in getattr(m, "sample_ids", [])]
    m.set_dtype(dtype)
    for before, after in zip(ids_before, getattr(m, "sample_ids", [])):
        assert after.dtype == torch.int64 and torch.equal(before, after)
    for k, v in m.metric_state.items():
        for t in v if isinstance(v, list) else [v]:
            assert t.dtype == dtype or not t.is_floating_point(), (k, t.dtype)
    value = m.compute()
    # states rounded to `dtype`: compare with the reference within that dtype's precision; set metrics
    # (sufficient statistics of divergences) are only asked for a finite value of the same structure
    if isinstance(m, SampleMetric) or dtype == torch.float64:
        T.assert_close(value, T.reference(name), rtol=TOL[dtype], atol=TOL[dtype] * 100, what=str(dtype))
        if isinstance(m, SampleMetric):
            per = m.per_sample()
            assert len(per["ids"]) == sum(int(t.numel()) for t in ids_before)
    else:
        ref = T.reference(name)
        assert (value.keys() if isinstance(value, dict) else 1) == (
            ref.keys() if isinstance(ref, dict) else 1
        )


OTHER = {"mie": {"token_budget": 8192}}  # an option that changes nothing for the recipe's inputs


@pytest.mark.parametrize("name", NAMES)
def test_metric_collection_compute_groups(name):
    ups = T.batches(name)
    other = OTHER.get(name, {"data_range": 255.0})  # the recipes feed uint8 images: states stay equal
    col = MetricCollection(
        {"a": T.build(name), "b": T.build(name), "c": T.build(name, **other)}, compute_groups=True
    )
    for u in ups:
        col.update(**u)
    groups = sorted(sorted(g) for g in col.compute_groups.values())
    assert groups == [["a", "b"], ["c"]], groups  # equal options share one state; other options never do
    values = col.compute()
    flat = {k: v for k, v in values.items()}
    ref = T.reference(name)
    if isinstance(ref, dict):  # MetricCollection flattens dict results as "<name>_<key>"
        for key in ref:
            T.assert_close(flat[f"a_{key}"], ref[key])
            T.assert_close(flat[f"b_{key}"], ref[key])
    else:
        T.assert_close(flat["a"], ref)
        T.assert_close(flat["b"], ref)


# --------------------------------------------------------------------------- two gloo processes
@pytest.fixture(scope="module")
def ddp_results():
    # no fast path that changes bits runs unless asked for, so the ranks and this process give the same
    # bits whatever each measured (tests/accel/test_fastpath.py)
    return spawn_gloo(T.ddp_worker, 2, (NAMES,))


@pytest.mark.distributed
@pytest.mark.parametrize("name", NAMES)
def test_ddp_class_forward(name, ddp_results):
    ups = T.batches(name)
    for rank in range(2):
        res = ddp_results[rank][name]
        for i, value in zip(res["forward_idx"], res["forward"]):
            T.assert_close(value, T.value_of(name, [ups[i]]), what=f"rank {rank} forward batch {i}")
        T.assert_close(res["final"], T.reference(name), what=f"rank {rank} compute")
        if "per_sample" in res:
            # the gathered samples are every rank's, in rank order, with the values each rank computed:
            # a single process fed the same batches in that order (same batch shapes, one thread) computes
            # the same float32 products bit for bit. Fed all batches in ONE update it would not: oneDNN
            # picks its float32 GEMM kernel by problem size, so one image embedded in a batch of 2 and in a
            # batch of 4 differs in the last bits (~2 ulp) on AVX2 CPUs (AMD Zen 3), not on AVX-512 ones;
            # hcs then centres the embeddings (C_img), which amplifies that to ~1e-6 of the score.
            order = [i for r in range(2) for i in range(r, len(ups), 2)]
            threads = torch.get_num_threads()
            torch.set_num_threads(1)  # as in the gloo workers
            try:
                single = T.build(name)
                for i in order:
                    single.update(**ups[i])
                expected = single.per_sample()["scores"]
            finally:
                torch.set_num_threads(threads)
            got = res["per_sample"]["scores"]
            assert got.shape == expected.shape  # every rank's samples, gathered
            T.assert_close(got, expected, rtol=1e-9, atol=0, what="per_sample gathered")
    even = ups[: len(ups) // 2 * 2]
    for step in range(len(even) // 2):
        expected = T.value_of(name, even[2 * step : 2 * step + 2])
        for rank in range(2):
            T.assert_close(ddp_results[rank][name]["step"][step], expected, what="dist_sync_on_step")


@pytest.mark.distributed
@pytest.mark.parametrize("name", NAMES)
def test_ddp_reference_ignores_the_process_group(name, ddp_results):
    """``T.value_of`` (the reference here and in torchmetrics' harness, test_torchmetrics_harness.py, whose
    DDP pool calls it inside each rank) gives the value of its own batches in a process group too. Built
    as a plain metric it synced on ``compute()``: each rank's reference was both ranks' value, and 10 of 13
    metrics failed the harness's DDP pool on the reference, not on genmetrics."""
    ups = T.batches(name)
    for rank in range(2):
        T.assert_close(
            ddp_results[rank][name]["reference_in_group"],
            T.value_of(name, [ups[rank]]),
            what=f"reference of rank {rank}'s batch computed in the process group",
        )


@pytest.mark.distributed
@pytest.mark.parametrize("name", NAMES)
def test_ddp_empty_rank(name, ddp_results):
    for rank in range(2):
        T.assert_close(
            ddp_results[rank][name]["empty_rank"], T.reference(name), what=f"empty rank, rank {rank}"
        )


@pytest.mark.distributed
@pytest.mark.parametrize("name", [n for n in NAMES if T.per_candidate(n)])
def test_ddp_sampler_padding_counted_once(name, ddp_results):
    for rank in range(2):
        T.assert_close(ddp_results[rank][name]["padded"], T.reference(name), what="padded shards with ids")


# --------------------------------------------------------------------------- Lightning
def _scalar_names():
    return [n for n in NAMES if not isinstance(T.reference(n), dict) and T.reference(n).ndim == 0]


@pytest.fixture(scope="module")
def lightning_results():
    pytest.importorskip("lightning")
    from tests.contract.lightning_module import validate

    return {
        1: validate(NAMES, _scalar_names(), devices=1),
        2: validate(NAMES, _scalar_names(), devices=2),
    }


@pytest.mark.distributed
@pytest.mark.parametrize("devices", [1, 2], ids=["one_process", "ddp_spawn_2"])
@pytest.mark.parametrize("name", NAMES)
def test_lightning_validation_epoch_value(name, devices, lightning_results):
    logged = lightning_results[devices]
    assert logged[name] == pytest.approx(T.scalar(T.reference(name)), rel=1e-6, abs=1e-6)
    if name == "psnr":  # and by hand: the mean over every image of 10 log10(1 / MSE)
        whole = T.merged(T.batches(name))
        ref, cand = whole["reference"].double() / 255, whole["candidates"].double() / 255
        by_hand = (10 * torch.log10(1 / ((ref - cand) ** 2).flatten(1).mean(1))).mean()
        assert logged[name] == pytest.approx(float(by_hand), rel=1e-6)


def test_copies_share_the_backbone():
    m = T.build("clip_i")
    twin = copy.deepcopy(m)
    assert twin.backbones()["backbone"] is m.backbones()["backbone"]
