"""merge_state and load_state_dict accept only a state of the same metric, built with the same options, with
finite values and ids that name one sample each (the other side as a metric, ``metric_state`` or
``state_dict()``); a state dict without its identity entry (an earlier genmetrics) loads with a warning."""

from __future__ import annotations

import io
import math

import pytest
import torch

import genmetrics as gm
from genmetrics.core.metric import SampleMetric
from genmetrics.core.metric_states import IDENTITY_KEY
from genmetrics.errors import InputError
from genmetrics.testing import random_images, spawn_gloo, tiny_dino


def _pairs(n=4, seed=0):
    return random_images(n, 16, seed=seed), random_images(n, 16, seed=seed + 100)


def _filled(name="psnr", n=4, seed=0, ids=None, **options):
    m = gm.create_metric(name, **options)
    m.persistent(True)
    m.update(*_pairs(n, seed), ids=ids)
    return m


def _weights_only_round_trip(state):
    buf = io.BytesIO()
    torch.save(state, buf)
    buf.seek(0)
    return torch.load(buf, weights_only=True)


# ----------------------------------------------------------------------------------- another metric
def test_merge_state_dict_of_another_metric_is_refused():
    psnr, ssim = _filled("psnr"), _filled("ssim", seed=3)
    before = ssim.compute()
    with pytest.raises(InputError, match="another metric"):
        ssim.merge_state(dict(psnr.metric_state))
    with pytest.raises(InputError, match="another metric.*'psnr'"):
        ssim.merge_state(psnr.state_dict())
    assert torch.equal(ssim.compute(), before) and len(ssim.per_sample()["scores"]) == 4


def test_load_state_dict_of_another_metric_is_refused():
    psnr, ssim = _filled("psnr"), _filled("ssim", seed=3)
    before = ssim.per_sample()["scores"]
    with pytest.raises(InputError, match=r"load_state_dict: .*another metric \('psnr'"):
        ssim.load_state_dict(_weights_only_round_trip(psnr.state_dict()))
    assert torch.equal(ssim.per_sample()["scores"], before)  # nothing was set


# ----------------------------------------------------------------------------------- other options
def test_dict_forms_of_merge_state_check_the_options():
    hi, lo = _filled("psnr"), _filled("psnr", max_db=30.0)
    with pytest.raises(InputError, match="other options"):
        hi.merge_state(dict(lo.metric_state))
    with pytest.raises(InputError, match="max_db differ"):
        hi.merge_state(lo.state_dict())
    same = _filled("psnr", seed=5)
    hi.merge_state(same.state_dict())  # the same metric and options: merged
    assert len(hi.per_sample()["scores"]) == 8


def test_metric_state_dict_of_other_options_names_the_option_and_both_values():
    """The ``metric_state`` form carries only a hash of the options; for metrics built in this process the
    refusal names the differing option and both values, as the ``state_dict()`` form does."""
    hi, lo = _filled("psnr", max_db=100.0), _filled("psnr", max_db=30.0)
    before = hi.compute()
    for into, src, there, here in ((hi, lo, "30.0", "100.0"), (lo, hi, "100.0", "30.0")):
        with pytest.raises(InputError) as e:
            into.merge_state(dict(src.metric_state))
        msg = str(e.value)
        assert "\n" not in msg and f"max_db differ: {there} there, {here} here" in msg
    assert torch.equal(hi.compute(), before)
    # a hash no metric of this process made (another process's options): still refused, without names
    state = {k: v for k, v in lo.metric_state.items() if not k.startswith("_options_")}
    with pytest.raises(InputError, match="other options .*options state '_options_0123456789abcdef'"):
        hi.merge_state({**state, "_options_0123456789abcdef": []})


def _cast_floats(state, dtype):
    def cast(v):
        if isinstance(v, list):
            return [cast(t) for t in v]
        return v.to(dtype) if torch.is_tensor(v) and v.is_floating_point() else v

    return {k: cast(v) for k, v in state.items()}


@pytest.mark.parametrize("low", [torch.bfloat16, torch.float16])
def test_a_state_of_lower_precision_than_the_metric_is_refused(low):
    """``precision`` is an option (checked with the others); ``set_dtype`` is not, so a state cast to a
    half-precision dtype would load into a float32 metric and compute a rounded value: refused, naming the
    dtype; a metric given the same ``set_dtype`` takes it, and a float32 state joins a float64 metric."""
    src = _filled("psnr")
    exact = src.compute()
    half = _cast_floats(src.state_dict(), low)
    scores, kept = torch.cat(half["scores"]), torch.cat(src.state_dict()["scores"])
    assert not torch.equal(scores.to(kept.dtype), kept)  # the cast lost digits
    dst = gm.create_metric("psnr")
    dst.persistent(True)
    with pytest.raises(InputError) as e:
        dst.load_state_dict(half)
    msg = str(e.value)
    assert "\n" not in msg and f"state 'scores' holds {low} values" in msg and f"set_dtype({low})" in msg
    with pytest.raises(InputError, match=f"holds {low} values"):
        dst.merge_state(half)
    alike = gm.create_metric("psnr").set_dtype(low)
    alike.persistent(True)
    alike.load_state_dict(half)  # the metric asked for that precision
    got = alike.per_sample()["scores"]
    assert torch.equal(got, scores.to(got.dtype))
    wide = gm.create_metric("psnr").set_dtype(torch.float64)
    wide.merge_state(_cast_floats(src.state_dict(), torch.float32))  # exact in float64
    torch.testing.assert_close(
        wide.compute().double(), exact.double(), rtol=torch.finfo(torch.float32).eps * 4, atol=0
    )


@pytest.mark.parametrize(
    "kind,mine,theirs",
    [
        ("psnr", {"max_db": 100.0}, {"max_db": 30.0}),
        ("ssim", {"precision": "float32"}, {"precision": "float64"}),
        ("dino", {"precision": "fp32"}, {"precision": "bf16"}),
    ],
)
def test_load_state_dict_across_options_is_refused(kind, mine, theirs):
    extra = {"backbone": tiny_dino()} if kind == "dino" else {}
    src, dst = _filled(kind, **extra, **theirs), _filled(kind, seed=7, **extra, **mine)
    option = next(iter(mine))
    with pytest.raises(InputError, match=f"{option} differ"):
        dst.load_state_dict(_weights_only_round_trip(src.state_dict()))
    twin = gm.create_metric(kind, **extra, **theirs)
    twin.persistent(True)
    twin.load_state_dict(_weights_only_round_trip(src.state_dict()))  # built alike: loads and computes
    assert torch.equal(twin.compute(), src.compute())


# ----------------------------------------------------------------------------------- values
@pytest.mark.parametrize("bad", [math.nan, math.inf, -math.inf])
def test_non_finite_states_are_refused(bad):
    src = _filled("psnr")
    sd = src.state_dict()
    sd["scores"] = [sd["scores"][0].clone()]
    sd["scores"][0][1] = bad
    dst = gm.create_metric("psnr")
    dst.persistent(True)
    with pytest.raises(InputError, match="'scores' holds 1 NaN or infinite"):
        dst.load_state_dict(sd)
    with pytest.raises(InputError, match="'scores' holds 1 NaN or infinite"):
        _filled("psnr", seed=9).merge_state(sd)
    assert not dst.has_data()


class _Log(SampleMetric):
    """A plugin whose per-sample value is legitimately -inf for a zero input."""

    name = "log_of_mean"

    def prepare(self, reference, candidates, condition):
        return {"candidates": list(candidates)}

    def score_batch(self, batch):
        return torch.stack(batch["candidates"]).flatten(1).mean(1).double().log()

    def _nonfinite_allowed(self, state):
        return (-math.inf,) if state == "scores" else ()


def test_a_metric_declares_its_legitimate_non_finite_values():
    src = _Log()
    src.persistent(True)
    src.update(candidates=torch.stack([torch.zeros(4), torch.ones(4)]))
    assert src.per_sample()["scores"].tolist() == [-math.inf, 0.0]
    dst = _Log()
    dst.persistent(True)
    dst.load_state_dict(src.state_dict())  # -inf is this metric's value for a zero input: kept
    assert dst.per_sample()["scores"].tolist() == [-math.inf, 0.0]
    sd = src.state_dict()
    sd["scores"] = [torch.tensor([math.nan, 0.0], dtype=torch.float64)]
    with pytest.raises(InputError, match="allowed here: -inf"):
        _Log().load_state_dict(sd)


@pytest.mark.parametrize(
    "edit,needle",
    [
        (lambda sd: sd.pop("sample_ids"), "has no 'sample_ids'"),
        (lambda sd: sd.update(ref_sums=[torch.zeros(1, 3)]), "'ref_sums', a state this metric does not have"),
        (lambda sd: sd.update(scores=["0.5"]), "should be a list of tensors"),
        (lambda sd: sd.update(scores=[torch.zeros(3, dtype=torch.float64)]), "3 rows for 4 sample ids"),
        (lambda sd: sd.update(sample_ids=[torch.zeros(4)]), "int64 ids"),
        (lambda sd: sd.update({IDENTITY_KEY: torch.tensor([1, 2], dtype=torch.uint8)}), "is damaged"),
    ],
)
def test_a_malformed_state_is_named(edit, needle):
    sd = _filled("psnr").state_dict()
    edit(sd)
    dst = gm.create_metric("psnr")
    dst.persistent(True)
    with pytest.raises(InputError, match=needle):
        dst.load_state_dict(sd)


# ----------------------------------------------------------------------------------- sample ids
def test_ids_naming_different_samples_in_two_sources_are_refused():
    """Two metrics fed different images under the same per-process counter ids: 4 + 4 samples, not 4."""
    counter = [0, 1, 2, 3]
    a, b = _filled("psnr", ids=counter), _filled("psnr", seed=1, ids=counter)
    before = a.per_sample()["scores"]
    with pytest.raises(InputError) as e:
        a.merge_state(b)
    assert "4 sample id(s)" in str(e.value) and "'0', '1', '2'" in str(e.value) and "rank" in str(e.value)
    with pytest.raises(InputError, match="4 sample id"):
        a.merge_state(b.state_dict())
    assert torch.equal(a.per_sample()["scores"], before)  # nothing merged
    ranked = _filled("psnr", ids=[f"rank0-{i}" for i in counter])  # the fix the message names
    ranked.merge_state(_filled("psnr", seed=1, ids=[f"rank1-{i}" for i in counter]))
    assert len(ranked.per_sample()["scores"]) == 8


def test_a_padded_copy_of_the_same_sample_still_counts_once():
    ref, cand = _pairs(6)
    a, b = gm.create_metric("psnr"), gm.create_metric("psnr")
    a.update(ref[:4], cand[:4], ids=["s0", "s1", "s2", "s3"])
    b.update(ref[[4, 5, 0]], cand[[4, 5, 0]], ids=["s4", "s5", "s0"])  # s0 padded in again
    a.merge_state(b)
    single = gm.create_metric("psnr")
    single.update(ref, cand, ids=[f"s{i}" for i in range(6)])
    assert sorted(a.per_sample()["ids"]) == sorted(single.per_sample()["ids"])
    assert float(a.compute()) == pytest.approx(float(single.compute()), rel=1e-12)


def test_a_gathered_state_with_conflicting_ids_is_refused_at_compute():
    """What a DDP gather of two processes with per-rank counter ids holds: refused, not de-duplicated."""
    a, b = _filled("psnr", n=2, ids=[0, 1]), _filled("psnr", n=2, seed=1, ids=[0, 1])
    a.scores, a.sample_ids = a.scores + b.scores, a.sample_ids + b.sample_ids
    with pytest.raises(InputError, match=r"compute: 2 sample id\(s\) name different samples"):
        a.compute()


def _counter_worker(rank, world_size):
    m = gm.create_metric("psnr")
    m.update(*_pairs(3, seed=rank), ids=[0, 1, 2])  # a per-process counter
    try:
        m.compute()
    except InputError as e:
        return str(e)
    return "accepted"


@pytest.mark.distributed
def test_ddp_per_rank_counter_ids_are_refused_on_every_rank():
    results = spawn_gloo(_counter_worker, 2)
    assert all("3 sample id(s) name different samples" in r for r in results), results


# ----------------------------------------------------------------------------------- compatibility
def test_a_state_dict_of_an_earlier_genmetrics_loads_with_a_warning():
    src = _filled("psnr")
    legacy = {k: v for k, v in src.state_dict().items() if k != IDENTITY_KEY}
    dst = gm.create_metric("psnr")
    dst.persistent(True)
    with pytest.warns(UserWarning, match="does not say which metric"):
        dst.load_state_dict(legacy)
    assert torch.equal(dst.compute(), src.compute())


def test_state_dicts_are_checked_inside_a_parent_module():
    class Model(torch.nn.Module):
        def __init__(self, **options):
            super().__init__()
            self.lin = torch.nn.Linear(2, 2)
            self.psnr = gm.create_metric("psnr", **options)
            self.psnr.persistent(True)

    src = Model(max_db=30.0)
    src.psnr.update(*_pairs())
    sd = _weights_only_round_trip(src.state_dict())
    assert f"psnr.{IDENTITY_KEY}" in sd
    with pytest.raises(InputError, match="max_db differ"):
        Model().load_state_dict(sd)
    twin = Model(max_db=30.0)
    twin.load_state_dict(sd)  # strict: the identity entry is no unexpected key
    assert torch.equal(twin.psnr.compute(), src.psnr.compute())


def test_a_default_state_dict_stays_empty():
    m = gm.create_metric("psnr")
    m.update(*_pairs())
    assert m.state_dict() == {}
