"""The torchmetrics conventions and sample ids, each pinned against a hand computation or an explicit second computation."""

from __future__ import annotations

import warnings

import pytest
import torch
import torchmetrics
from packaging.version import Version
from torchmetrics import MetricCollection
from torchmetrics.functional.image import structural_similarity_index_measure as _tm_ssim
from torchmetrics.image import PeakSignalNoiseRatio

import genmetrics as gm
from genmetrics.errors import InputError
from genmetrics.testing import random_images
from tests.contract import tester as T

#: torchmetrics before 1.4.2 padded SSIM's border wrongly (its changelog, PR 2721): parity with its SSIM
#: holds from 1.4.2 on, and is only checked there (.ci/versions runs the oldest admitted torchmetrics)
TM_SSIM_FIXED = Version(torchmetrics.__version__) >= Version("1.4.2")


def structural_similarity_index_measure(*args, **kwargs):
    """torchmetrics' SSIM; None for a torchmetrics before 1.4.2 (nothing to compare with)."""
    return _tm_ssim(*args, **kwargs) if TM_SSIM_FIXED else None


def _pairs(n=6, size=16, seed=0):
    g = torch.Generator().manual_seed(seed)
    ref = torch.rand(n, 3, size, size, generator=g, dtype=torch.float64)
    cand = (ref + 0.3 * torch.rand(n, 3, size, size, generator=g, dtype=torch.float64)).clamp(0, 1)
    return ref.float(), cand.float()  # float32 images: the metrics read them exactly as given


def _psnr_by_hand(ref, cand):
    mse = ((ref.double() - cand.double()) ** 2).flatten(1).mean(1)
    return 10 * torch.log10(1 / mse)


# ------------------------------------------------------------------------------- 15.1 forward
def test_forward_accumulates_every_batch():
    ref, cand = _pairs(9)
    m = gm.create_metric("psnr")
    for sl in (slice(0, 3), slice(3, 5), slice(5, 9)):
        batch_value = m(ref[sl], cand[sl])
        assert float(batch_value) == pytest.approx(float(_psnr_by_hand(ref[sl], cand[sl]).mean()), rel=1e-7)
    assert float(m.compute()) == pytest.approx(float(_psnr_by_hand(ref, cand).mean()), rel=1e-7)
    assert len(m.per_sample()["scores"]) == 9


# ------------------------------------------------------------------------------- 15.2 merge_state
def test_merge_state_keeps_incoming_samples_and_refuses_other_options():
    ref, cand = _pairs(6)
    a, b = gm.create_metric("psnr"), gm.create_metric("psnr")
    a.update(ref[:2], cand[:2])
    b.update(ref[2:], cand[2:])
    a.merge_state(b)
    assert float(a.compute()) == pytest.approx(float(_psnr_by_hand(ref, cand).mean()), rel=1e-7)
    with pytest.raises(InputError, match="max_db differ"):
        a.merge_state(gm.create_metric("psnr", max_db=30.0))


# ------------------------------------------------------------------------------- 15.3 set_dtype
@pytest.mark.parametrize("dtype", [torch.float16, torch.bfloat16])
def test_set_dtype_never_casts_sample_ids(dtype):
    ref, cand = _pairs(3000, size=2, seed=3)
    names = [f"img-{i}" for i in range(3000)]
    m = gm.create_metric("psnr", batch_size=1000)
    m.update(ref, cand, ids=names)
    m.set_dtype(dtype)
    per = m.per_sample()
    assert per["ids"] == names  # all 3000 kept, names intact
    assert m.sample_ids[0].dtype == torch.int64 and m.scores[0].dtype == dtype
    expected = float(_psnr_by_hand(ref, cand).mean())
    assert float(m.compute()) == pytest.approx(expected, rel=1e-2)


# ------------------------------------------------------------------------------- 15.4 compute groups
def test_compute_groups_never_merge_differing_options():
    ref, cand = _pairs(4)
    col = MetricCollection(
        {"hi": gm.create_metric("psnr", max_db=60.0), "lo": gm.create_metric("psnr", max_db=25.0)}
    )
    col.update(ref, cand)  # all PSNRs < 25 dB: both states are equal after this first batch
    col.update(ref, ref)  # identical images: 60 vs 25 dB
    out = col.compute()
    first = _psnr_by_hand(ref, cand)
    assert float(out["hi"]) == pytest.approx(
        float(torch.cat([first, torch.full((4,), 60.0)]).mean()), rel=1e-7
    )
    assert float(out["lo"]) == pytest.approx(
        float(torch.cat([first, torch.full((4,), 25.0)]).mean()), rel=1e-7
    )
    assert len(col.compute_groups) == 2


# ------------------------------------------------------------------------------- 15.7 persistent state
def test_reloaded_persistent_state_computes():
    ref, cand = _pairs(4)
    m = gm.create_metric("psnr")
    m.persistent(True)
    m.update(ref, cand, ids=["a", "b", "c", "d"])
    fresh = gm.create_metric("psnr")
    fresh.persistent(True)
    fresh.load_state_dict(m.state_dict())
    assert float(fresh.compute()) == pytest.approx(float(_psnr_by_hand(ref, cand).mean()), rel=1e-7)
    with pytest.warns(UserWarning, match="already scored"):  # the reloaded ids count as scored
        fresh.update(ref[:1], cand[:1], ids=["a"])


# ------------------------------------------------------------------------------- 15.8 sad forward
def test_sad_forward_on_one_set_keeps_the_accumulated_state():
    ups = T.batches("sad")  # [reference only, candidates only, both]
    m = T.build("sad")
    for u in ups:
        value = m(**u)
        assert set(value) == {"mean", "per_attribute"}
    assert torch.isnan(m(reference=ups[0]["reference"][:1])["mean"])  # one image: undefined, accumulated
    with pytest.raises(InputError):
        m(reference="no-such-file.png")  # a bad batch raises and leaves the state as it was
    expected = T.value_of("sad", [*ups, {"reference": ups[0]["reference"][:1]}])
    T.assert_close(m.compute(), expected)


# ------------------------------------------------------------------------------- 15.9 conventions
def test_plot_uses_card_bounds():
    import matplotlib

    matplotlib.use("Agg")
    ref, cand = _pairs(4)
    m = gm.create_metric("psnr")
    values = [m(ref[:2], cand[:2]), m(ref[2:], cand[2:])]
    assert (m.plot_lower_bound, m.plot_upper_bound) == (0.0, 100.0)
    fig, ax = m.plot(values)
    assert ax.get_ylim()[0] <= 0.0 and ax.get_ylim()[1] >= 100.0
    sad = T.build("sad")
    for u in T.batches("sad"):
        sad.update(**u)
    fig, ax = sad.plot()  # dict results plot their mean
    assert sad.plot_upper_bound is None  # card range [0, inf): no upper bound
    with pytest.raises(RuntimeError):
        m.plot_lower_bound = 3.0


def test_preds_target_keywords():
    ref, cand = _pairs(4)
    psnr = gm.create_metric("psnr")
    expected = float(_psnr_by_hand(ref, cand).mean())
    assert float(psnr(preds=cand, target=ref)) == pytest.approx(expected, rel=1e-7)
    assert float(psnr.compute(preds=cand, target=ref)) == pytest.approx(expected, rel=1e-7)
    col = MetricCollection([gm.create_metric("psnr"), gm.create_metric("ssim")])
    out = col(preds=cand, target=ref)
    assert float(out["PSNR"]) == pytest.approx(expected, rel=1e-7)
    tm = structural_similarity_index_measure(cand.double(), ref.double(), data_range=1.0)
    assert tm is None or float(out["SSIM"]) == pytest.approx(float(tm), rel=1e-7)
    with pytest.raises(InputError, match="both preds= and candidates="):
        psnr.update(preds=cand, candidates=cand, target=ref)
    clip_t = T.build("clip_t")
    with pytest.raises(InputError, match="paired metrics"):
        clip_t.update(preds=random_images(1), condition=["a dog"])


def test_ssim_kernel_size_has_effect():
    ref, cand = _pairs(3, size=32)
    values = {k: float(gm.create_metric("ssim", kernel_size=k).compute(ref, cand)) for k in (5, 7, 11)}
    assert len(set(values.values())) == 3  # the window size changes the value
    # default window (11, sigma 1.5) is torchmetrics' SSIM; another size equals torchmetrics with the sigma
    # whose Gaussian window has that size (sigma 0.9 -> 7 px), computed by our own window code
    ref, cand = ref.double(), cand.double()
    # values[11] came from float32 images, computed in float32: within 1e-6 of float64
    tm = structural_similarity_index_measure(cand, ref, data_range=1.0)
    assert tm is None or values[11] == pytest.approx(float(tm), abs=1e-6)
    seven = float(gm.create_metric("ssim", kernel_size=7, sigma=0.9).compute(ref, cand))
    tm = structural_similarity_index_measure(cand, ref, data_range=1.0, sigma=0.9)
    assert tm is None or seven == pytest.approx(float(tm), abs=1e-9)
    ms = {
        k: float(gm.create_metric("ms_ssim", kernel_size=k, betas=(0.5, 0.5)).compute(ref, cand))
        for k in (3, 7)
    }
    assert ms[3] != ms[7]
    with pytest.raises(InputError, match="odd"):
        gm.create_metric("ssim", kernel_size=8).compute(ref, cand)


def test_psnr_pooled_equals_torchmetrics_default():
    ref, cand = _pairs(6)
    ours = gm.create_metric("psnr", reduction="pooled")
    theirs = PeakSignalNoiseRatio(data_range=1.0)
    for sl in (slice(0, 2), slice(2, 6)):
        ours.update(ref[sl], cand[sl])
        theirs.update(cand[sl].double(), ref[sl].double())
    assert float(ours.compute()) == pytest.approx(float(theirs.compute()), rel=1e-7)
    mse = ((ref.double() - cand.double()) ** 2).mean()
    assert float(ours.compute()) == pytest.approx(float(10 * torch.log10(1 / mse)), rel=1e-7)
    per_image_mean = float(gm.create_metric("psnr").compute(ref, cand))
    assert per_image_mean != pytest.approx(float(ours.compute()), abs=1e-6)  # the two reductions differ
    with pytest.raises(InputError, match="reduction"):
        gm.create_metric("psnr", reduction="sum")


# ------------------------------------------------------------------------------- 14.2 ids and texts
def test_duplicate_ids_within_an_update_are_refused():
    ref, cand = _pairs(3)
    m = gm.create_metric("psnr")
    with pytest.raises(InputError, match="'x' appears twice in one update"):
        m.update(ref, cand, ids=["x", "y", "x"])
    assert not m.has_data()


def test_ids_repeated_across_updates_are_dropped_with_a_warning():
    ref, cand = _pairs(4)
    m = gm.create_metric("psnr")
    m.update(ref[:2], cand[:2], ids=["a", "b"])
    with pytest.warns(UserWarning, match=r"1 sample id\(s\) were already scored.*DistributedSampler"):
        m.update(ref[1:4], cand[1:4], ids=["b", "c", "d"])
    assert m.per_sample()["ids"] == ["a", "b", "c", "d"]
    assert float(m.compute()) == pytest.approx(float(_psnr_by_hand(ref, cand).mean()), rel=1e-7)
    m.reset()  # a new epoch: the same ids are new again
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        m.update(ref[:2], cand[:2], ids=["a", "b"])


def test_unnamed_samples_are_never_deduplicated():
    ref, cand = _pairs(2)
    m = gm.create_metric("psnr")
    m.update(ref, cand)
    m.update(ref, cand)  # the same images again, without ids: both counted
    assert len(m.per_sample()["scores"]) == 4


def test_tensor_ids_are_taken_by_value():
    ref, cand = _pairs(3)
    m = gm.create_metric("psnr")
    m.update(ref[:2], cand[:2], ids=torch.tensor([0, 7]))
    assert m.per_sample()["ids"] == ["0", "7"]
    with pytest.warns(UserWarning, match="already scored"):
        m.update(ref[2:], cand[2:], ids=[7])  # the int 7 is the id tensor(7)
    with pytest.raises(InputError, match=r"ids\[0\]: a tensor id must hold one integer"):
        m.update(ref[:1], cand[:1], ids=[torch.tensor(1.5)])


def test_ids_too_large_for_64_bits_are_named():
    ref, cand = _pairs(1)
    with pytest.raises(InputError, match=r"ids\[0\]: the integer id .* does not fit in 64 bits.*as strings"):
        gm.create_metric("psnr").update(ref, cand, ids=[2**64])
    m = gm.create_metric("psnr")
    m.update(ref, cand, ids=[str(2**64)])
    assert m.per_sample()["ids"] == [str(2**64)]


def test_meta_tensors_are_named():
    meta = torch.empty(1, 3, 8, 8, device="meta")
    ref, cand = _pairs(1, size=8)
    with pytest.raises(InputError, match="candidates: got a meta tensor"):
        gm.create_metric("psnr").update(ref, meta)
    with pytest.raises(InputError, match="reference: got a meta tensor"):
        gm.create_metric("psnr").update(reference=meta, candidates=cand)
    with pytest.raises(InputError, match="ids: .*meta tensor"):
        gm.create_metric("psnr").update(ref, cand, ids=torch.empty(1, dtype=torch.long, device="meta"))


@pytest.mark.parametrize("name", ["clip_t", "clipscore", "raclip"])
def test_over_long_conditions_warn_once_with_the_count(name):
    recipe = T.recipe(name)
    kwargs = {k: v for k, v in recipe["kwargs"].items() if k != "attributes"}
    m = gm.create_metric(name, **kwargs)
    long = " ".join(["a very long prompt about many things"] * 6)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m.update(candidates=random_images(3), condition=[long, "a dog", long])
    cut = [w for w in caught if "truncated" in str(w.message)]
    assert len(cut) == 1, [str(w.message) for w in caught]  # one warning per update, naming the count
    # clip_t / clipscore cut the two long prompts; raclip the positive and negative prompt of the one long text
    assert "2 text(s)" in str(cut[0].message)


def test_tpips_over_long_aspects_warn_once_and_repeated_ids_keep_aspects_aligned():
    m = T.build("tpips")
    u = T.batches("tpips")[1]
    long = " ".join(["the exact pose and lighting of the cat"] * 40)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        m.update(u["reference"], u["candidates"], [long, "color", long + " too"], ids=["a", "b", "c"])
    cut = [str(w.message) for w in caught if "truncated" in str(w.message)]
    assert len(cut) == 1 and "2 aspect text(s)" in cut[0], cut
    with pytest.warns(UserWarning, match="already scored"):
        m.update(u["reference"][:2], u["candidates"][:2], ["lighting", "pose"], ids=["b", "d"])
    per_aspect = m.per_aspect()
    assert set(per_aspect) == {long, "color", long + " too", "pose"}  # "lighting" belonged to the dropped "b"


def test_state_saved_without_persistent_says_so():
    """A state_dict saved without persistent(True) holds no metric state; compute() on the
    reloaded metric says that and how to persist, not 'called before any update()'."""
    ref, cand = _pairs(2)
    saved = gm.create_metric("psnr")
    saved.update(reference=ref, candidates=cand)
    fresh = gm.create_metric("psnr")
    fresh.load_state_dict(saved.state_dict())  # persistent(False), the default: no states in the dict
    with pytest.raises(InputError, match=r"persistent\(True\)"):
        fresh.compute()
    saved.persistent(True)
    again = gm.create_metric("psnr")
    again.persistent(True)
    again.load_state_dict(saved.state_dict())
    assert float(again.compute()) == pytest.approx(float(_psnr_by_hand(ref, cand).mean()), rel=1e-7)
    with pytest.raises(InputError, match="before any update"):  # a metric never loaded keeps the old text
        gm.create_metric("psnr").compute()
