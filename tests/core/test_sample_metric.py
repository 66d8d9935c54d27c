"""Sample metrics (genmetrics.core.sample_metric): the public plugin hooks (``prepare``, ``score_batch``,
``compute_state``) and their old private names, which still work for one release with a
``DeprecationWarning``; two gloo processes with uneven shards and sampler padding give the one-process
result."""

from __future__ import annotations

import pytest
import torch

import genmetrics as gm
from genmetrics.core.metric import Metric, SampleMetric
from genmetrics.core.metric_base import RENAMED_HOOKS
from genmetrics.testing import random_images, spawn_gloo


class NewStyle(SampleMetric):
    def prepare(self, reference, candidates, condition):
        return {"reference": list(reference), "candidates": list(candidates)}

    def score_batch(self, batch):
        r, c = torch.stack(batch["reference"]), torch.stack(batch["candidates"])
        return (r - c).abs().flatten(1).mean(1).double()


def _old_style() -> type:
    class OldStyle(SampleMetric):
        def _prepare(self, reference, candidates, condition):
            return {"reference": list(reference), "candidates": list(candidates)}

        def _score_batch(self, batch):
            r, c = torch.stack(batch["reference"]), torch.stack(batch["candidates"])
            return (r - c).abs().flatten(1).mean(1).double()

    return OldStyle


def test_old_hook_names_warn_once_per_class_and_score_the_same():
    with pytest.warns(DeprecationWarning) as caught:
        old = _old_style()
    assert sorted(str(w.message).split()[2] for w in caught) == ["_prepare();", "_score_batch();"]
    assert all("rename it to" in str(w.message) for w in caught)
    g = torch.Generator().manual_seed(0)
    ref, cand = torch.rand(5, 3, 4, 4, generator=g), torch.rand(5, 3, 4, 4, generator=g)
    a, b = old(batch_size=2), NewStyle(batch_size=3)
    a.update(ref, cand)
    b.update(ref, cand)
    assert torch.equal(a.per_sample()["scores"], b.per_sample()["scores"])
    # the explicit second computation: mean absolute difference per sample
    assert torch.equal(b.per_sample()["scores"], (ref - cand).abs().flatten(1).mean(1).double())


def test_an_old_subclass_of_a_builtin_reaches_its_parent_under_the_old_name():
    psnr_cls = type(gm.create_metric("psnr"))
    with pytest.warns(DeprecationWarning, match="_score_batch"):

        class Halved(psnr_cls):  # type: ignore[misc, valid-type]
            def _score_batch(self, batch):
                return super()._score_batch(batch) / 2

    x = torch.full((2, 3, 8, 8), 0.5)
    y = x + 0.1
    assert torch.equal(Halved().score(x, y), psnr_cls().score(x, y) / 2)


def test_an_old_set_level_compute_state_is_called():
    with pytest.warns(DeprecationWarning, match="compute_state"):

        class Count(Metric):
            def __init__(self, **kw):
                super().__init__(**kw)
                self.add_state("n", default=torch.zeros((), dtype=torch.float64), dist_reduce_fx="sum")

            def update(self, reference=None, candidates=None, condition=None, *, ids=None):
                self.n += len(candidates)

            def _compute_state(self):
                return self.n * 1.0

    m = Count()
    m.update(candidates=[1, 2, 3])
    m.update(candidates=[4])
    assert float(m.compute()) == 4.0 and float(m.compute(candidates=[1, 2])) == 2.0


def test_every_hook_is_public_on_the_base_classes():
    for old, new in RENAMED_HOOKS:
        owner = Metric if new == "compute_state" else SampleMetric
        assert new in owner.__dict__ and owner.__dict__[new].__doc__, new
        assert getattr(owner, old) is getattr(owner, new), old


def _returning(result) -> SampleMetric:
    """A metric whose ``score_batch`` gives ``result(b)`` for a chunk of ``b`` samples."""

    class Plugin(NewStyle):
        sample_states = ("extra",)

        def __init__(self, **kw):
            super().__init__(**kw)
            self.add_state("extra", default=[], dist_reduce_fx="cat")

        def score_batch(self, batch):
            return result(len(batch["reference"]))

    return Plugin(batch_size=2)


@pytest.mark.parametrize(
    "result, arrived",
    [
        (lambda b: torch.zeros(b + 1), "shape (3,) for 2 samples"),  # one score too many
        (lambda b: torch.zeros(b, 2, 2), "shape (2, 2, 2) for 2 samples"),  # a map, not [b] or [b, C]
        (lambda b: torch.tensor(0.5), "shape () for 2 samples"),  # a mean, not per sample
        (lambda b: [0.5] * b, "as list for 2 samples"),
        (lambda b: {"value": torch.zeros(b)}, "without 'score'"),
        (lambda b: torch.zeros(b, dtype=torch.complex64), "as torch.complex64"),  # imaginary part dropped
        (lambda b: {"score": torch.zeros(b), "extra": torch.zeros(7)}, "extra 'extra' of shape (7,)"),
    ],
)
def test_a_score_batch_of_the_wrong_kind_is_one_error_naming_the_hook_and_the_fix(result, arrived):
    """Each of these used to be a deep torch error, a silently wrong score or a state with rows that do not
    match its ids; the error names ``Plugin.score_batch``, what arrived and what to return."""
    metric = _returning(result)
    x = torch.rand(4, 3, 4, 4)
    with pytest.raises(TypeError, match="Plugin.score_batch returned") as e:
        metric.update(x, x.flip(0))
    assert arrived in str(e.value) and "return a real tensor [b] or [b, C]" in str(e.value)
    assert not metric.has_data()


def test_the_accepted_kinds_score_as_float64():
    """Integer and ``[b, C]`` scores are numbers: kept as float64, the mean per column as documented. NaN
    passes through to the caller (the leaderboard and ``score`` name the sample whose score it is)."""
    x = torch.rand(3, 3, 4, 4)
    nan = _returning(lambda b: torch.full((b,), float("nan")))
    nan.update(x, x)
    assert nan.per_sample()["scores"].isnan().all()
    # integer and [b, C] scores are numbers: kept as float64, the mean per column as documented
    ints = _returning(lambda b: torch.arange(b, dtype=torch.int64))
    ints.update(x, x)
    assert ints.per_sample()["scores"].tolist() == [0.0, 1.0, 0.0]  # chunks of batch_size=2
    cols = _returning(lambda b: torch.ones(b, 2) * torch.tensor([1.0, 3.0]))
    cols.update(x, x)
    assert cols.compute().tolist() == [1.0, 3.0]


@pytest.mark.parametrize("prepared", [None, [1, 2], ("reference", "candidates")])
def test_prepare_must_return_a_dict(prepared):
    class Plugin(NewStyle):
        def prepare(self, reference, candidates, condition):
            return prepared

    x = torch.rand(2, 3, 4, 4)
    with pytest.raises(
        TypeError, match=rf"Plugin.prepare returned {type(prepared).__name__}; it must return a dict"
    ):
        Plugin().update(x, x)


def test_a_class_with_both_hook_names_is_told_which_one_runs():
    """Half-way through the rename, ``_score_batch`` next to ``score_batch`` was silently never called."""
    with pytest.warns(
        DeprecationWarning, match=r"implements both _score_batch\(\) and score_batch\(\); only "
    ):

        class Both(NewStyle):
            def _score_batch(self, batch):
                return torch.zeros(len(batch["reference"]), dtype=torch.float64)

            def score_batch(self, batch):
                return super().score_batch(batch)

    assert Both._score_batch is Both.score_batch  # the old name reaches the one that runs, as for NewStyle
    x = torch.rand(2, 3, 4, 4)
    assert torch.equal(Both()(x, x + 0.5), NewStyle()(x, x + 0.5))


def test_an_alias_of_the_public_hook_under_the_old_name_is_not_warned_about(recwarn):
    class Aliased(NewStyle):
        def score_batch(self, batch):
            return super().score_batch(batch)

        _score_batch = score_batch

    assert not [w for w in recwarn if issubclass(w.category, DeprecationWarning)]


def test_a_plugin_breaking_the_contract_is_one_cli_line_exit_1(tmp_path, monkeypatch, capsys):
    """A class contradicting its card, or a ``score_batch`` of the wrong shape, used to end ``genmetrics
    score`` in a ``TypeError`` traceback (the CLI maps only genmetrics' own errors to one line)."""
    import sys
    import types

    from genmetrics.cli.main import main
    from genmetrics.core.registry import MetricCard, ReferenceKind, register_metric, unregister_metric
    from genmetrics.errors import PluginError
    from genmetrics.testing import random_images, write_images

    assert issubclass(PluginError, TypeError)  # what a plugin's own tests may catch
    mod = types.ModuleType("_gm_cli_plugin")

    class Flat(SampleMetric):
        def prepare(self, reference, candidates, condition):
            return {"candidates": list(candidates)}

        def score_batch(self, batch):
            return torch.zeros(1)  # one score per chunk, not per sample

    Flat.__module__, Flat.__qualname__ = mod.__name__, "Flat"
    mod.Flat = Flat  # type: ignore[attr-defined]
    mod.Contra = type(  # type: ignore[attr-defined]
        "Contra", (Flat,), {"__module__": mod.__name__, "__qualname__": "Contra", "higher_is_better": True}
    )
    monkeypatch.setitem(sys.modules, mod.__name__, mod)
    for name in ("Flat", "Contra"):
        register_metric(
            MetricCard(
                name=f"_gm_{name.lower()}",
                factory=f"{mod.__name__}:{name}",
                family="t",
                summary="s",
                inputs={"candidates": "images"},
                higher_is_better=False,
                range=None,
                reference=ReferenceKind.NONE,
            )
        )
    files = write_images(tmp_path / "c", random_images(3, 8))
    try:
        for name, said in (
            ("_gm_flat", "Flat.score_batch returned scores of shape (1,) for 3 samples"),
            ("_gm_contra", "Contra.higher_is_better = True but its metric card"),
        ):
            rc = main(["score", name, "--candidates", str(files[0].parent), "--batch-size", "4"])
            err = capsys.readouterr().err
            assert rc == 1 and err.startswith(f"error: {said}") and err.count("\n") == 1, err
    finally:
        unregister_metric("_gm_flat")
        unregister_metric("_gm_contra")


@pytest.mark.parametrize(
    "value, said",
    [
        (None, "returned NoneType"),
        ([1.0], "returned list"),
        ("0.5", "returned str"),
        (torch.tensor(1 + 2j), "returned Tensor torch.complex64"),
        ({"mean": [1.0]}, "returned list under 'mean'"),
    ],
)
def test_a_set_level_compute_state_of_the_wrong_kind_is_refused(value, said):
    """These used to come back from ``compute()`` as the metric's value (``None``, a list, text)."""
    from genmetrics.errors import PluginError

    class SetLevel(Metric):
        def __init__(self, **kw):
            super().__init__(**kw)
            self.add_state("n", default=torch.zeros(()), dist_reduce_fx="sum")

        def update(self, reference=None, candidates=None, condition=None, *, ids=None):
            self.n += len(candidates)

        def compute_state(self):
            return value

    m = SetLevel()
    m.update(candidates=torch.rand(2, 3, 4, 4))
    for call in (m.compute, lambda: m.score(candidates=torch.rand(2, 3, 4, 4))):
        with pytest.raises(PluginError, match=f"SetLevel.compute_state {said}; return a real tensor"):
            call()
    ok = {"mean": torch.tensor(0.5), "n": 2}  # tensors and numbers pass as they are
    value = ok
    got = m.compute()
    assert got.keys() == ok.keys() and got["n"] == 2 and float(got["mean"]) == 0.5


# ------------------------------------------------------------------ two processes, uneven shards
N_GLOO = 7


def _gloo_data():
    return (
        random_images(N_GLOO, 16, seed=1),
        random_images(N_GLOO, 16, seed=2),
        [f"img{i}" for i in range(N_GLOO)],
    )


def _gloo_shard(rank, world_size):
    # DistributedSampler-style: pad by repeating the first samples so every rank has ceil(N/W)
    per = -(-N_GLOO // world_size)
    order = list(range(N_GLOO)) + list(range(per * world_size - N_GLOO))
    return order[rank::world_size]


def _gloo_worker(rank, world_size, name):
    ref, cand, ids = _gloo_data()
    idx = _gloo_shard(rank, world_size)
    m = gm.create_metric(name, batch_size=2)
    for part in (idx[:1], idx[1:]):  # uneven update calls
        if part:
            m.update(ref[part], cand[part], ids=[ids[i] for i in part])
    value = m.compute()
    per = m.per_sample()
    return value.item(), per["scores"].tolist(), per["ids"]


@pytest.mark.distributed
@pytest.mark.parametrize("name", ["psnr", "ssim"])
def test_two_processes_equal_one(name):
    ref, cand, ids = _gloo_data()
    single = gm.create_metric(name)
    single.update(ref, cand, ids=ids)
    expected = single.compute().item()
    results = spawn_gloo(_gloo_worker, 2, (name,))
    for value, per, names in results:
        assert value == pytest.approx(expected, abs=1e-9)
        assert len(per) == N_GLOO and sorted(names) == sorted(ids)
    assert sorted(results[0][1]) == pytest.approx(sorted(single.per_sample()["scores"].tolist()))
    assert torch.isfinite(torch.tensor(expected))
