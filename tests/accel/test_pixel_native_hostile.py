"""A hostile user's pass over psnr's native kernel (genmetrics/accel/_native.c).

The kernel reads raw addresses in threads of its own, so the cases here are those where an address, a thread
or a record can go wrong: Ctrl-C while the threads read, a thread that fails, tensors whose memory is not
their values (a negative-bit view), layouts the kernel cannot read (the score's bits must not depend on the
layout), thread counts above the rows, concurrent callers, a fork, values that are bad only in a row's
tail, tampered choices, and the CLI on folders of mixed image modes and sizes.
"""

from __future__ import annotations

import json
import multiprocessing as mp
import re
import signal
import threading
import time

import pytest
import torch
from PIL import Image

from genmetrics.accel import fastpath
from genmetrics.accel import pixel_native as N
from genmetrics.accel.pixel_native import native_psnr_path
from genmetrics.baselines.pixel import PSNR
from genmetrics.errors import InputError
from genmetrics.functional import pixel as P
from tests.accel.test_pixel_native import EPS32, _pair, _psnr, needs_native


@pytest.fixture
def forced_native():
    fastpath.force_path("psnr_native", "native")
    yield
    fastpath.force_path("psnr_native", None)


class _WorkerKernel:
    """The real kernel, with a hook run first in every worker thread (not in the calling thread)."""

    def __init__(self, hook):
        self.real, self.hook = N._native, hook
        self.started = self.finished = 0
        self.lock = threading.Lock()

    def sse_rows(self, *args):
        if threading.current_thread() is threading.main_thread():
            return self.real.sse_rows(*args)
        with self.lock:
            self.started += 1
        self.hook()
        out = self.real.sse_rows(*args)
        with self.lock:
            self.finished += 1
        return out


@needs_native
def test_ctrl_c_returns_only_after_every_kernel_thread_stopped_reading(monkeypatch):
    """Ctrl-C (a real SIGINT to the main thread) while the kernel's worker threads run: the
    KeyboardInterrupt may reach the caller only once no thread still reads the inputs or writes the
    output (after it, the caller frees them: a thread still running would read freed memory and write
    into whatever was allocated there next)."""

    def interrupt_then_work():
        signal.pthread_kill(threading.main_thread().ident, signal.SIGINT)
        time.sleep(0.3)  # the main thread gets the signal while this worker still has its rows to do

    kernel = _WorkerKernel(interrupt_then_work)
    monkeypatch.setattr(N, "_native", kernel)
    monkeypatch.setattr(N, "NATIVE_BYTES_PER_THREAD", 1)
    before = torch.get_num_threads()
    old = signal.signal(signal.SIGINT, signal.default_int_handler)
    p, t = _pair(4, 8, 8)
    try:
        torch.set_num_threads(4)
        with pytest.raises(KeyboardInterrupt):
            N.squared_error_sums_by(p, t, native=True)
            time.sleep(2)  # not interrupted inside the call: the signal is still on its way
        assert kernel.started >= 1 and kernel.finished == kernel.started
    finally:
        signal.signal(signal.SIGINT, old)
        torch.set_num_threads(before)


@needs_native
def test_ctrl_c_while_the_kernel_threads_start_leaves_no_thread_reading(monkeypatch):
    """Ctrl-C landing in ``Thread.start`` (the thread exists, the start did not return): the started
    threads must end without reading the inputs the caller is about to free."""
    kernel = _WorkerKernel(lambda: None)
    monkeypatch.setattr(N, "_native", kernel)
    monkeypatch.setattr(N, "NATIVE_BYTES_PER_THREAD", 1)
    real_start, calls = threading.Thread.start, []

    def start(self):
        real_start(self)
        calls.append(self)
        if len(calls) == 2:
            raise KeyboardInterrupt

    monkeypatch.setattr(threading.Thread, "start", start)
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(4)
        with pytest.raises(KeyboardInterrupt):
            N.squared_error_sums_by(*_pair(4, 8, 8), native=True)
        for t in calls:
            t.join(10)
        assert len(calls) == 2 and kernel.started == 0
    finally:
        torch.set_num_threads(before)


@needs_native
@pytest.mark.parametrize("with_range", [False, True])
def test_a_kernel_thread_that_fails_raises_instead_of_returning_unwritten_sums(monkeypatch, with_range):
    """Plant the fault: the kernel raises in a worker thread. The sums of its rows were never written
    (``torch.empty``): the call must raise, not return them."""

    def fail():
        raise MemoryError("planted")

    monkeypatch.setattr(N, "_native", _WorkerKernel(fail))
    monkeypatch.setattr(N, "NATIVE_BYTES_PER_THREAD", 1)
    monkeypatch.setattr(threading, "excepthook", lambda args: None)  # the planted fault is expected
    before = torch.get_num_threads()
    try:
        torch.set_num_threads(3)
        with pytest.raises(RuntimeError, match="native"):
            N.squared_error_sums_by(*_pair(3, 4, 8), with_range=with_range, native=True)
    finally:
        torch.set_num_threads(before)


@needs_native
def test_a_negative_bit_view_is_read_as_its_values():
    """``z.conj().imag`` is a real float32 view whose memory holds the values negated (the negative bit);
    a one-element one is contiguous. The kernel must not read the raw memory as the values (and the torch
    path's bit-pattern view must not refuse it)."""
    z = torch.complex(torch.zeros(1, 1, 1, 1), torch.full((1, 1, 1, 1), 0.25)).conj().imag
    assert z.is_neg() and z.is_contiguous() and float(z) == -0.25
    t = torch.full((1, 1, 1, 1), 0.25)
    sse, rng = N.squared_error_sums_by(z, t, with_range=True, native=True)
    assert sse.tolist() == [0.25] and rng.tolist() == [-0.25, 0.25]  # (-0.25 - 0.25)^2
    assert N.squared_error_sums_by(t, z, native=True)[0].tolist() == [0.25]  # as the target
    assert _psnr(z, t, native=True).tolist() == P.psnr(z.resolve_neg(), t).tolist()
    tsse, trng = N.squared_error_sums_by(z, t, with_range=True)  # the torch path: as its values too
    assert torch.equal(tsse, sse) and torch.equal(trng, rng)


def _layouts(p: torch.Tensor, t: torch.Tensor):
    """The same images in memory layouts other than the contiguous one."""
    cl = torch.channels_last
    yield "channels_last", p.contiguous(memory_format=cl), t.contiguous(memory_format=cl)
    yield "transposed storage", p.transpose(2, 3).contiguous().transpose(2, 3), t
    yield "strided rows", torch.cat((p, p), 3)[..., ::2], t
    yield "expanded", p[:1].expand_as(p), t


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_the_native_sums_do_not_depend_on_the_memory_layout(dtype):
    """The native sums of the same images in any layout are the bits of the contiguous images' sums
    (the torch path's are layout-free too): a channels_last batch may not round differently."""
    p, t = _pair(3, 9, 13)
    if dtype == torch.uint8:
        p, t = (p * 255).round().to(dtype), (t * 255).round().to(dtype)
    for name, a, b in _layouts(p, t):
        want = N.squared_error_sums_by(a.contiguous(), b.contiguous(), with_range=True, native=True)
        got = N.squared_error_sums_by(a, b, with_range=True, native=True)
        assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), name


@needs_native
def test_psnr_scores_do_not_depend_on_the_memory_layout(forced_native):
    """With the native path taken: a channels_last batch scores the bits of the same images contiguous."""
    p, t = _pair(4, 16, 16, seed=2)
    cl = torch.channels_last
    a, b = PSNR(), PSNR()
    a.update(reference=t, candidates=p)
    b.update(reference=t.contiguous(memory_format=cl), candidates=p.contiguous(memory_format=cl))
    assert torch.equal(a.per_sample()["scores"], b.per_sample()["scores"])
    u, v = (p * 255).round().to(torch.uint8), (t * 255).round().to(torch.uint8)
    a, b = PSNR(), PSNR()
    a.update(reference=v, candidates=u)
    b.update(reference=v.contiguous(memory_format=cl), candidates=u.contiguous(memory_format=cl))
    assert torch.equal(a.per_sample()["scores"], b.per_sample()["scores"])


@pytest.mark.parametrize("path", ["bogus", "Native", "plain"])
def test_a_forced_path_that_is_not_torch_or_native_is_an_input_error(path):
    """``force_path("psnr_native", "Native")`` (a typo) must not silently keep the torch path."""
    fastpath.force_path("psnr_native", path)
    try:
        p, t = _pair(2, 8, 8)
        with pytest.raises(InputError, match=r"psnr_native.*'torch' or 'native'"):
            native_psnr_path(p, t)
        with pytest.raises(InputError, match=repr(path)):
            PSNR().score(t, p)
    finally:
        fastpath.force_path("psnr_native", None)


@needs_native
def test_a_tampered_record_takes_a_valid_path_or_measures_again(monkeypatch):
    """fast_paths.json that is not a JSON object, or not one per key: measured again; a record of "native"
    where the extension is missing: the torch path; a path this code does not know: an InputError naming
    the file."""
    from genmetrics.backbones.weights import genmetrics_home

    monkeypatch.setenv(fastpath.FAST_PATHS_ENV, "psnr_native")  # float32: the record is read when asked for
    p, t = _pair(3, 8, 8)
    key = ("psnr_native", "float32", torch.get_num_threads())
    store = genmetrics_home() / fastpath.STORE_NAME
    store.parent.mkdir(parents=True, exist_ok=True)
    try:
        for text in ("[1, 2]", "{not json", json.dumps({fastpath._machine_key(key): "native"})):
            fastpath.forget_fast_path_choices()
            store.write_text(text)
            assert native_psnr_path(p, t) in (True, False), text
        fastpath.forget_fast_path_choices()
        store.write_text(json.dumps({fastpath._machine_key(key): {"path": "bogus"}}))
        with pytest.raises(InputError, match=r"'bogus'.*fast_paths\.json.*delete that file"):
            native_psnr_path(p, t)
        fastpath.forget_fast_path_choices()
        store.write_text(json.dumps({fastpath._machine_key(key): {"path": "native"}}))
        monkeypatch.setattr(N, "_native", None)
        assert native_psnr_path(p, t) is False
    finally:
        fastpath.forget_fast_path_choices()


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_thread_counts_above_the_rows_give_the_same_bits(monkeypatch, dtype):
    """1..8 threads on batches of 1 to 3 rows (fewer rows than threads) and on one wide row."""
    monkeypatch.setattr(N, "NATIVE_BYTES_PER_THREAD", 1)
    before = torch.get_num_threads()
    cases = [_pair(1, 1, 5, c=1), _pair(1, 3, 17, c=1), _pair(3, 1, 9, c=1), _pair(1, 1, 40001, c=1)]
    if dtype == torch.uint8:
        cases = [((p * 255).round().to(dtype), (t * 255).round().to(dtype)) for p, t in cases]
    try:
        for p, t in cases:
            torch.set_num_threads(1)
            want = N.squared_error_sums_by(p, t, with_range=True, native=True)
            for k in range(2, 9):
                torch.set_num_threads(k)
                got = N.squared_error_sums_by(p, t, with_range=True, native=True)
                assert torch.equal(got[0], want[0]) and torch.equal(got[1], want[1]), (p.shape, k)
    finally:
        torch.set_num_threads(before)


@needs_native
def test_two_python_threads_scoring_at_once_get_their_own_sums(monkeypatch):
    monkeypatch.setattr(N, "NATIVE_BYTES_PER_THREAD", 1)
    pairs = [_pair(6, 16, 24, seed=s) for s in range(2)]
    want = [N.squared_error_sums_by(p, t, with_range=True, native=True) for p, t in pairs]
    got: list = [[], []]

    def score(i):
        for _ in range(20):
            got[i].append(N.squared_error_sums_by(*pairs[i], with_range=True, native=True))

    threads = [threading.Thread(target=score, args=(i,)) for i in range(2)]
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    for i in range(2):
        assert len(got[i]) == 20
        assert all(torch.equal(s, want[i][0]) and torch.equal(r, want[i][1]) for s, r in got[i])


def _child_sums(queue) -> None:
    p, t = _pair(4, 8, 8)
    queue.put(N.squared_error_sums_by(p, t, native=True)[0].tolist())


@needs_native
@pytest.mark.skipif("fork" not in mp.get_all_start_methods(), reason="no fork on this platform")
def test_a_fork_after_the_kernel_threads_ran_scores_the_same(monkeypatch):
    monkeypatch.setattr(N, "NATIVE_BYTES_PER_THREAD", 1)
    p, t = _pair(4, 8, 8)
    want = N.squared_error_sums_by(p, t, native=True)[0].tolist()  # the kernel's threads ran here first
    ctx = mp.get_context("fork")
    queue = ctx.SimpleQueue()
    child = ctx.Process(target=_child_sums, args=(queue,))
    child.start()
    child.join(60)
    assert child.exitcode == 0 and queue.get() == want


@needs_native
@pytest.mark.parametrize("where", ["preds tail", "target tail", "target last row, last column"])
def test_a_bad_value_in_a_row_tail_is_named_exactly(forced_native, where):
    """W = 13 (5 terms in the tail after one full 8-lane step): a NaN / inf / -0.5 placed in the tail of
    a row, in the last row, in the target only; the error names that image."""
    for bad in (float("nan"), float("inf"), -0.5):
        p, t = _pair(3, 5, 13, seed=3)
        if where == "preds tail":
            p[1, 2, 2, 10] = bad
            side, idx = "candidates", 1
        elif where == "target tail":
            t[0, 0, 1, 12] = bad
            side, idx = "reference", 0
        else:
            t[2, 2, 4, 12] = bad
            side, idx = "reference", 2
        with pytest.raises(InputError, match=rf"{side}\[{idx}\]"):
            PSNR().score(t, p)
    p, t = _pair(3, 5, 13, seed=3)
    t[2, 2, 4, 12] = -0.0  # -0.0 is in range: the score of +0.0
    t0 = t.clone()
    t0[2, 2, 4, 12] = 0.0
    assert torch.equal(PSNR().score(t, p), PSNR().score(t0, p))


@needs_native
def test_wide_uint8_rows_are_exact_past_the_int32_partial_sums():
    """W = 70001 > 2 * 32768: three int32 partial sums per row, every one at its largest (255^2 terms)."""
    p = torch.zeros(2, 1, 2, 70001, dtype=torch.uint8)
    t = torch.full_like(p, 255)
    t[1, 0, 1, -1] = 0
    sse, rng = N.squared_error_sums_by(p, t, with_range=True, native=True)
    assert sse.tolist() == [2 * 70001 * 255**2, (2 * 70001 - 1) * 255**2] and rng.tolist() == [0, 255]


def _write_mixed_folders(root) -> None:
    """Reference / candidate pairs of modes L, RGB, RGBA, P and I;16-free 8-bit, of three sizes (one pair of
    every size, widths with a tail after 8 lanes)."""
    g = torch.Generator().manual_seed(5)
    (root / "ref").mkdir()
    (root / "gen").mkdir()
    sizes = [(9, 13), (16, 16), (7, 29), (9, 13), (16, 16)]
    modes = ["RGB", "L", "RGBA", "P", "RGB"]
    for i, ((h, w), mode) in enumerate(zip(sizes, modes)):
        ref = torch.randint(0, 256, (h, w, 3), generator=g, dtype=torch.uint8)
        gen = (ref.int() + torch.randint(-25, 26, (h, w, 3), generator=g)).clamp(0, 255).to(torch.uint8)
        for d, img in (("ref", ref), ("gen", gen)):
            Image.fromarray(img.numpy()).convert(mode).save(root / d / f"s{i}.png")


@needs_native
def test_cli_scores_of_mixed_modes_and_sizes_agree_with_and_without_the_kernel(tmp_path, capsys):
    """`genmetrics score psnr` on folders of mixed modes and sizes: per-image scores with the native kernel
    and with the torch path within the arithmetic bound. Both sum rows of W <= 29 float32 terms with
    relative error <= (W/8 + 5) eps (native) and (W + 2) eps (torch), so the sums differ by at most
    (W/8 + W + 7) eps relative = 41 eps; PSNR moves by 10 log10(1 + d) <= 4.35 d dB."""
    from genmetrics.cli.main import main

    _write_mixed_folders(tmp_path)
    got = {}
    for path in ("native", "torch"):
        fastpath.force_path("psnr_native", path)
        try:
            out = tmp_path / f"{path}.jsonl"
            argv = [
                "score",
                "psnr",
                "--reference",
                str(tmp_path / "ref"),
                "--candidates",
                str(tmp_path / "gen"),
            ]
            rc = main([*argv, "--json", "--out", str(out), "--batch-size", "2"])
            err = capsys.readouterr().err
            assert rc == 0, err
            got[path] = {r["id"]: r["score"] for r in map(json.loads, out.read_text().splitlines())}
        finally:
            fastpath.force_path("psnr_native", None)
    assert sorted(got["native"]) == sorted(got["torch"]) == [f"s{i}" for i in range(5)]
    for k, v in got["native"].items():
        assert abs(v - got["torch"][k]) <= 4.35 * 41 * EPS32, k


@needs_native
def test_the_per_machine_measurement_takes_a_channels_last_batch(monkeypatch):
    """The first batch of a process is timed on both paths: a channels_last one too (its rows are not a
    view of its memory)."""
    monkeypatch.setenv(fastpath.FAST_PATHS_ENV, "psnr_native")  # float32: measured only when asked for
    fastpath.forget_fast_path_choices()
    p, t = _pair(2, 8, 12)
    cl = torch.channels_last
    try:
        assert native_psnr_path(p.contiguous(memory_format=cl), t.contiguous(memory_format=cl)) in (
            True,
            False,
        )
        assert fastpath.fast_path_choices()  # measured
    finally:
        fastpath.forget_fast_path_choices()


@pytest.mark.parametrize("native", [False, True])
def test_inputs_of_two_shapes_are_refused_not_mixed(native):
    """[2,3,8,8] against [2,3,64,1] (one numel): the torch path's row views read them as the same pixels
    and summed (silently); broadcasting shapes failed deep inside with a size message. One ValueError
    naming both shapes, on either path; a 1-D input (no image axis) too."""
    p = torch.rand(2, 3, 8, 8)
    for other in ((2, 3, 64, 1), (2, 3, 8, 1), (1, 3, 8, 8)):
        want = rf"\(2, 3, 8, 8\) and {re.escape(str(other))}"
        with pytest.raises(ValueError, match=want):
            N.squared_error_sums_by(p, torch.rand(other), native=native)
        with pytest.raises(ValueError, match=want):
            _psnr(p, torch.rand(other), native=native)
    with pytest.raises(ValueError, match=r"\[B,\.\.\.,W\].*\(5,\)"):
        N.squared_error_sums_by(torch.rand(5), torch.rand(5), native=native)


@pytest.mark.parametrize("native", [False, True])
def test_an_empty_batch_scores_nothing_and_empty_images_are_refused(native):
    """B = 0: no scores (psnr already meant it: ``n`` is 1 for an empty batch); images with no pixels: no
    PSNR (0 / 0), a ValueError naming the shape, as a range of no values."""
    for dtype in (torch.float32, torch.uint8):
        x = torch.zeros(0, 3, 8, 8, dtype=dtype)
        sse, rng = N.squared_error_sums_by(x, x, native=native)
        assert sse.shape == (0,) and sse.dtype == torch.float64 and rng is None
        assert _psnr(x, x, native=native).shape == (0,)
        with pytest.raises(ValueError, match=r"no values.*\(0, 3, 8, 8\)"):
            N.squared_error_sums_by(x, x, with_range=True, native=native)
    for shape in ((2, 3, 0, 8), (2, 3, 8, 0)):
        e = torch.zeros(shape)
        with pytest.raises(ValueError, match=r"no values.*" + re.escape(str(shape))):
            N.squared_error_sums_by(e, e, native=native)


def _ddp_psnr_worker(rank: int, world_size: int) -> dict:
    """One gloo rank: its half of the pairs scored with the kernel's threads (2 per rank, one row each)."""
    torch.set_num_threads(2)
    P.NATIVE_BYTES_PER_THREAD = 1
    fastpath.force_path("psnr_native", "native")
    p, t = _pair(6, 16, 21, seed=7)
    m = PSNR()
    m.update(reference=t[rank::world_size], candidates=p[rank::world_size])
    return {"mean": m.compute(), "scores": m.per_sample()["scores"]}


@needs_native
@pytest.mark.distributed
def test_two_gloo_ranks_with_the_kernels_threads_equal_one_process():
    """DDP: each rank splits its rows across threads; the synced mean equals one process's, and the gathered
    per-image scores are the bits of the same images scored in one process."""
    from genmetrics.testing import spawn_gloo

    fastpath.force_path("psnr_native", "native")
    try:
        p, t = _pair(6, 16, 21, seed=7)
        m = PSNR()
        m.update(reference=t, candidates=p)
        single = m.per_sample()["scores"]
        results = spawn_gloo(_ddp_psnr_worker, 2)
    finally:
        fastpath.force_path("psnr_native", None)
    gathered = torch.cat((single[0::2], single[1::2]))  # per_sample() gathers rank 0's, then rank 1's
    for res in results:
        assert torch.equal(res["scores"], gathered)
        assert abs(float(res["mean"]) - float(single.mean())) <= 1e-12 * abs(float(single.mean()))


def test_uint8_batches_score_within_the_bound_with_and_without_the_kernel():
    """uint8 tensors (the one-pass path, no range check): the kernel's sums are exact integers, the torch
    path's are float32 row norms squared, within (W + 2) eps relative plus the square's rounding (3 eps
    more): PSNR differs by at most 4.35 (W + 5) eps dB. Without the extension both give the torch bits."""
    g = torch.Generator().manual_seed(11)
    t = torch.randint(0, 256, (5, 3, 12, 37), generator=g, dtype=torch.uint8)
    p = (t.int() + torch.randint(-30, 31, t.shape, generator=g)).clamp(0, 255).to(torch.uint8)
    got = {}
    for path in ("native", "torch"):
        fastpath.force_path("psnr_native", path)
        try:
            m = PSNR()
            m.update(reference=t, candidates=p)
            got[path] = m.per_sample()["scores"]
        finally:
            fastpath.force_path("psnr_native", None)
    exact = ((p.long() - t.long()) ** 2).flatten(1).sum(1).double()
    want = P.psnr_from_sse(exact, p[0].numel(), data_range=255.0)
    if N.native_available():
        assert torch.equal(got["native"], want)  # exact sums: the float64 PSNR of the exact MSE
    assert (got["torch"] - want).abs().max() <= 4.35 * (37 + 5) * EPS32
