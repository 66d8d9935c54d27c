"""The packed oneDNN products of the CLIP towers: a bit-changing fast path, never taken unless asked for
(``GENMETRICS_FAST_PATHS``); asked for, it is chosen per machine from a measured micro-benchmark, and a path
measured slower than the plain one -- or faster by less than the noise margin -- is never taken. Timings are
injected here, so the tests say the same on every CPU."""

from __future__ import annotations

import itertools

import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from genmetrics.accel import clip_packed, fastpath
from genmetrics.accel._torch_internals import onednn_linear_available
from genmetrics.backbones.clip_vision import encode_image
from genmetrics.raclip.model import dense_tokens
from genmetrics.testing import tiny_clip

times = st.lists(st.floats(min_value=1e-4, max_value=10.0), min_size=1, max_size=5)


@settings(max_examples=200, deadline=None)
@given(base=times, alt=times, margin=st.sampled_from([0.0, 0.05, 0.2]))
def test_decide_never_takes_a_path_measured_slower(base, alt, margin):
    path = fastpath.decide({"plain": base, "packed": alt}, "plain", margin=margin)
    if path == "packed":
        assert min(alt) * (1 + margin) <= min(base)  # faster by at least the margin
    else:
        assert min(alt) * (1 + margin) > min(base)  # only when it did not measure faster enough


def test_choose_path_measures_interleaved_once_per_key():
    calls = []
    clock = itertools.count()

    def run(name, ticks):
        def f():
            calls.append(name)
            for _ in range(ticks - 1):
                next(clock)

        return f

    def make():
        return {"plain": run("plain", 4), "packed": run("packed", 2)}

    try:
        c = fastpath.choose_path(
            ("t", 1), make, baseline="plain", exact=True, repeats=3, timer=lambda: float(next(clock))
        )
        assert c.path == "packed" and c.speedups() == {"packed": 2.0}
        assert calls == ["plain", "packed", "packed", "plain", "plain", "packed"]  # order rotated per round
        assert (
            fastpath.choose_path(("t", 1), make, baseline="plain", exact=True) is c and len(calls) == 6
        )  # kept
        assert (
            fastpath.choose_path(
                ("t", 2),
                lambda: {"plain": run("plain", 2), "packed": run("packed", 2)},
                baseline="plain",
                exact=True,
                timer=lambda: float(next(clock)),
            ).path
            == "plain"
        )  # tie
    finally:
        fastpath.forget_fast_path_choices()


class _FakeProducts:
    """Replaces the micro-benchmark's work: each candidate advances a fake clock by its given cost."""

    def __init__(self, plain: float, packed: float) -> None:
        self.now = 0.0
        self.cost = {"plain": plain, "packed": packed}
        self.measured = 0

    def timer(self) -> float:
        return self.now

    def candidates(self, blk, m, dtype=torch.float32):
        self.measured += 1

        def spend(name):
            def f():
                self.now += self.cost[name]

            return f

        return {name: spend(name) for name in self.cost}


@pytest.fixture
def fake(monkeypatch):
    if not onednn_linear_available():
        pytest.skip("no oneDNN packed linear in this torch build: the plain path is the only one")
    monkeypatch.setenv(fastpath.FAST_PATHS_ENV, clip_packed.PACKED_LINEAR)  # asked for
    fastpath.forget_fast_path_choices()
    clip_packed.release_packed_weights()
    made = {}

    def install(plain: float, packed: float) -> _FakeProducts:
        f = _FakeProducts(plain, packed)
        monkeypatch.setattr(clip_packed, "_product_candidates", f.candidates)
        monkeypatch.setattr(fastpath, "default_timer", f.timer)
        made["f"] = f
        return f

    yield install
    fastpath.forget_fast_path_choices()
    clip_packed.release_packed_weights()


def _count_packed_products(monkeypatch) -> list[int]:
    n = [0]
    real = clip_packed.linear_pointwise

    def counting(*a, **k):
        n[0] += 1
        return real(*a, **k)

    monkeypatch.setattr(clip_packed, "linear_pointwise", counting)
    return n


@pytest.mark.parametrize(
    ("plain", "packed", "taken"),
    [(1.0, 1.3, False), (1.0, 0.97, False), (1.0, 1.0, False), (1.0, 0.8, True)],
    ids=["slower", "within-noise", "equal", "faster"],
)
def test_packed_products_only_where_measured_faster(fake, monkeypatch, plain, packed, taken):
    """encode_image and the RA-CLIPScore pass take the packed products exactly when the (injected)
    measurement says they are at least 5% faster; otherwise not one packed product runs."""
    f = fake(plain, packed)
    model = tiny_clip()[0]
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    n = _count_packed_products(monkeypatch)
    with torch.no_grad():
        emb = encode_image(model, x)
        z, _, _ = dense_tokens(model, x)
    assert f.measured == 1  # one measurement for the tower's width, shared by both
    assert (n[0] > 0) is taken and (clip_packed.packed_tower() is model.visual) is taken
    torch.testing.assert_close(emb, model.encode_image(x), atol=1e-5, rtol=1e-5)  # same function either way
    torch.testing.assert_close(z[:, 0], emb, atol=1e-5, rtol=1e-5)


@pytest.mark.parametrize("setting", ["", "exact", "off", "psnr_native"])
def test_not_asked_for_the_packed_products_never_run_even_where_measured_faster(fake, monkeypatch, setting):
    """They round differently from ``F.linear``: unless GENMETRICS_FAST_PATHS names them (or says "all"),
    nothing is measured, no packed product runs, and the tower gives the plain path's bits."""
    f = fake(1.0, 0.1)  # a measurement would take them
    monkeypatch.setenv(fastpath.FAST_PATHS_ENV, setting)
    model = tiny_clip()[0]
    x = torch.randn(2, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    n = _count_packed_products(monkeypatch)
    with torch.no_grad():
        emb = encode_image(model, x)
        fastpath.force_path(clip_packed.PACKED_LINEAR, "plain")
        try:
            plain = encode_image(model, x)
        finally:
            fastpath.force_path(clip_packed.PACKED_LINEAR, None)
    assert f.measured == 0 and n[0] == 0 and clip_packed.packed_tower() is None
    assert torch.equal(emb, plain) and fastpath.fast_path_choices() == []


def test_one_choice_for_every_batch_so_rows_do_not_depend_on_the_batch(fake):
    """The two kernels round differently, so the choice must not depend on the batch being scored: it is
    made once per tower width and thread count (at MEASURE_ROWS rows), and every batch size uses it."""
    f = fake(1.0, 0.5)
    model = tiny_clip()[0]
    x = torch.randn(5, 3, 32, 32, generator=torch.Generator().manual_seed(0))
    with torch.no_grad():
        batch = encode_image(model, x)
        alone = torch.cat([encode_image(model, x[i : i + 1]) for i in range(5)])
        f.cost["packed"] = 2.0  # a new measurement would now say "plain": none is made
        again = encode_image(model, x[:2])
    assert f.measured == 1 and clip_packed.packed_tower() is model.visual
    torch.testing.assert_close(alone, batch, atol=1e-6, rtol=0)
    torch.testing.assert_close(again, batch[:2], atol=1e-6, rtol=0)
    (choice,) = fastpath.fast_path_choices()
    assert choice["key"] == [clip_packed.PACKED_LINEAR, 64, 128, torch.get_num_threads()]


def test_forced_path_overrides_the_measurement(fake):
    f = fake(1.0, 2.0)  # packed measured slower ...
    blk = tiny_clip()[0].visual.transformer.resblocks[0]
    fastpath.force_path(clip_packed.PACKED_LINEAR, "packed")  # ... but forced (benchmarks, tests)
    try:
        assert clip_packed.packed_products_pay_off(blk) and f.measured == 0
    finally:
        fastpath.force_path(clip_packed.PACKED_LINEAR, None)
    assert not clip_packed.packed_products_pay_off(blk) and f.measured == 1


def test_real_measurement_runs_and_is_reported(monkeypatch):
    """Without injection the micro-benchmark runs on this machine's kernels and its result is listed."""
    if not onednn_linear_available():
        pytest.skip("no oneDNN packed linear")
    monkeypatch.setenv(fastpath.FAST_PATHS_ENV, "all")
    fastpath.forget_fast_path_choices()
    try:
        with torch.no_grad():
            taken = clip_packed.packed_products_pay_off(tiny_clip()[0].visual.transformer.resblocks[0])
        (choice,) = fastpath.fast_path_choices()
        assert choice["path"] == ("packed" if taken else "plain")
        assert choice["key"][:3] == [clip_packed.PACKED_LINEAR, 64, 128] and "packed" in choice["speedups"]
    finally:
        fastpath.forget_fast_path_choices()


def test_a_measured_choice_is_kept_for_later_processes_on_the_machine(tmp_path, monkeypatch):
    """Runs on one machine take one path (the kernels round differently, so a choice flipped by a timing
    under load would change a score's last bits between runs): the first measurement is recorded in
    GENMETRICS_HOME/fast_paths.json and later processes read it instead of measuring."""
    import json

    from genmetrics.accel import fastpath

    monkeypatch.setenv("GENMETRICS_HOME", str(tmp_path))
    fastpath.forget_fast_path_choices()
    key = ("persist_demo", 7)
    first = fastpath.choose_path(
        key, lambda: {"plain": lambda: None, "alt": lambda: None}, baseline="plain", exact=True
    )
    stored = json.loads((tmp_path / fastpath.STORE_NAME).read_text())
    assert [v["path"] for v in stored.values()] == [first.path]
    fastpath.forget_fast_path_choices()  # a new process

    def must_not_measure():
        raise AssertionError("measured again although the machine recorded its choice")

    assert fastpath.choose_path(key, must_not_measure, baseline="plain", exact=True).path == first.path
    # a damaged record is ignored (measured again), never trusted
    (tmp_path / fastpath.STORE_NAME).write_text("{not json")
    fastpath.forget_fast_path_choices()
    again = fastpath.choose_path(key, lambda: {"plain": lambda: None}, baseline="plain", exact=True)
    assert again.path == "plain" and again.times
    fastpath.forget_fast_path_choices()


def test_pack_key_changes_when_weights_are_handed_over_at_the_same_address():
    """Values rewritten in one buffer and given again with ``.data =`` keep address and version: red when the
    packed weights' key holds those alone (the stale packed copy was served)."""
    np = pytest.importorskip("numpy")
    lin = torch.nn.Linear(4, 4)
    buf = lin.weight.detach().numpy().copy()
    lin.weight.data = torch.from_numpy(buf)
    before = clip_packed._pack_key(lin)
    assert before == clip_packed._pack_key(lin)  # unchanged weights: the packed copy is reused
    np.multiply(buf, 2.0, out=buf)
    lin.weight.data = torch.from_numpy(buf)
    assert clip_packed._pack_key(lin) != before
