"""psnr's native squared-error kernel (genmetrics/accel/_native.c: psnr at the read bandwidth).

* Bitwise parity with an explicit second computation of its documented summation order (8 float32 lanes, a
  fixed tree), done here with torch float32 ops: the sums are defined by their order, not by the CPU.
* uint8: the exact integer sums.
* The range it reports is the float range in every case the torch path's test covers (-0.0, negatives, inf,
  NaN), and the metric's fallback to the general path still sees a bad value.
* Rows split across threads give the same bits for any thread count and any split.
* What it cannot read (float64, float16, autograd, mixed dtypes) takes the torch path (views and other
  layouts are copied first: tests/accel/test_pixel_native_hostile.py).
* The per-machine choice: a native kernel measured slower is never taken; without the extension the metric
  takes the torch path; the choice is one per process and kept in GENMETRICS_HOME.
"""

from __future__ import annotations

import json
import math
import time

import pytest
import torch

from genmetrics.accel import fastpath
from genmetrics.accel import pixel_native as N
from genmetrics.accel.pixel_native import native_psnr_path
from genmetrics.backbones.weights import genmetrics_home
from genmetrics.baselines.pixel import PSNR
from genmetrics.errors import InputError
from genmetrics.functional import pixel as P
from tests.functional.test_pixel import range_cases

needs_native = pytest.mark.skipif(not N.native_available(), reason="the native kernel was not built here")
EPS32 = 1.1920929e-07


def _psnr(p: torch.Tensor, t: torch.Tensor, *, native: bool) -> torch.Tensor:
    """PSNR per image from the sums of :func:`genmetrics.accel.pixel_native.squared_error_sums_by`."""
    sse, _ = N.squared_error_sums_by(p, t, native=native)
    return P.psnr_from_sse(sse, p[0].numel() if p.shape[0] else 1)


def _pair(b: int, h: int, w: int, seed: int = 0, c: int = 3) -> tuple[torch.Tensor, torch.Tensor]:
    g = torch.Generator().manual_seed(seed)
    t = torch.rand(b, c, h, w, generator=g)
    p = (t + 0.05 * torch.randn(t.shape, generator=g)).clamp(0, 1)
    return p, t


def lane_order_sums(p: torch.Tensor, t: torch.Tensor, block: int = 1024) -> torch.Tensor:
    """The documented order, with torch float32 ops (each op rounds once, as the C code's): per row, the
    groups of 8 terms in blocks of ``block`` terms; in a block, term i goes into float32 lane i mod 8 in
    order, and after the block each lane is added to its float64 lane; the last W mod 8 terms (float32
    squares) are added to float64 lanes 0..; the float64 lanes go ((l0+l4)+(l1+l5))+((l2+l6)+(l3+l7));
    rows in float64."""
    w = p.shape[-1]
    d = p.reshape(-1, w) - t.reshape(-1, w)
    s = d * d  # float32: one rounding for the difference, one for the square
    dacc = torch.zeros(s.shape[0], 8, dtype=torch.float64)
    full = w - w % 8
    for b0 in range(0, full, block):
        acc = torch.zeros(s.shape[0], 8, dtype=torch.float32)
        for i in range(b0, min(full, b0 + block), 8):
            acc = acc + s[:, i : i + 8]
        dacc = dacc + acc.double()
    rest = w - full
    if rest:
        dacc[:, :rest] = dacc[:, :rest] + s[:, full:].double()
    a = dacc
    row = ((a[:, 0] + a[:, 4]) + (a[:, 1] + a[:, 5])) + ((a[:, 2] + a[:, 6]) + (a[:, 3] + a[:, 7]))
    return row.view(p.shape[0], -1).sum(1)


@needs_native
@pytest.mark.parametrize(
    "shape",
    [(3, 3, 5, 1), (2, 1, 4, 7), (4, 3, 9, 8), (3, 3, 16, 29), (2, 2, 3, 300), (2, 1, 2, 2 * 1024 + 77)],
)
def test_float32_sums_are_the_documented_lane_order_bitwise(shape):
    """Widths below 8, of 8, with a tail, long rows, rows of several blocks: the same bits as the explicit
    lane-order computation, and within the arithmetic bound of the float64 sums: (min(W, 1024)/8 + 5) eps
    relative (a float32 lane sums at most 128 terms, difference and square round once each, the float64
    adds are below one eps32 together)."""
    b, c, h, w = shape
    p, t = _pair(b, h, w, c=c, seed=w)
    sse, rng = N.squared_error_sums_by(p, t, with_range=True, native=True)
    assert torch.equal(sse, lane_order_sums(p, t))
    exact = ((p.double() - t.double()) ** 2).sum((1, 2, 3))
    assert torch.all((sse - exact).abs() <= (min(w, 1024) / 8 + 5) * EPS32 * exact)
    both = torch.cat((p.flatten(), t.flatten()))
    assert rng.dtype == torch.float32 and rng.tolist() == [float(both.min()), float(both.max())]


@needs_native
def test_uint8_sums_are_exact_integers():
    """Every difference from -255 to 255, rows long enough that float32 sums would round (W = 700:
    up to 700 * 255^2 > 2^24): the native sums are the exact integer sums."""
    g = torch.Generator().manual_seed(3)
    p = torch.randint(0, 256, (3, 3, 5, 700), generator=g, dtype=torch.uint8)
    t = torch.randint(0, 256, (3, 3, 5, 700), generator=g, dtype=torch.uint8)
    p[0, 0, 0, :] = 0
    t[0, 0, 0, :] = 255
    exact = ((p.long() - t.long()) ** 2).sum((1, 2, 3))
    sse, rng = N.squared_error_sums_by(p, t, with_range=True, native=True)
    assert sse.dtype == torch.float64 and torch.equal(sse, exact.double())
    assert rng.dtype == torch.uint8 and rng.tolist() == [0, 255]
    _, rng = N.squared_error_sums_by(p.clamp(10, 200), t.clamp(20, 250), with_range=True, native=True)
    assert rng.tolist() == [10, 250]


@needs_native
def test_range_is_the_float_range_in_every_case():
    """The cases of the torch path's bit-pattern test (``range_cases``), through the native kernel, and a NaN
    in either input (the NaN makes the sum NaN; the range is then
    the float range with its NaN)."""
    p, t = _pair(3, 8, 8)
    cases = range_cases(p, t)
    for name, (a, b) in cases.items():
        _, rng = N.squared_error_sums_by(a, b, with_range=True, native=True)
        both = torch.cat((a.flatten(), b.flatten())).double()
        assert rng.double().tolist() == [float(both.min()), float(both.max())], name
    for side in (0, 1):
        q = [p.clone(), t.clone()]
        q[side][1, 0, 4, 4] = float("nan")
        sse, rng = N.squared_error_sums_by(q[0], q[1], with_range=True, native=True)
        assert sse[1].isnan() and rng.isnan().any(), side


@needs_native
def test_the_metric_still_names_a_bad_value_and_clamps_a_tolerated_one():
    native = PSNR()
    fastpath.force_path("psnr_native", "native")
    try:
        p, t = _pair(3, 16, 16, seed=1)
        bad = p.clone()
        bad[2, 1, 2, 3] = float("nan")
        with pytest.raises(InputError, match=r"candidates\[2\]"):
            native.score(t, bad)
        over, clamped = p.clone(), p.clone()
        over[0, 0, 0, 0], clamped[0, 0, 0, 0] = 1.0005, 1.0
        a, b = PSNR(), PSNR()
        a.update(reference=t, candidates=over)
        b.update(reference=t, candidates=clamped)
        assert torch.equal(a.per_sample()["scores"], b.per_sample()["scores"])
    finally:
        fastpath.force_path("psnr_native", None)


@needs_native
@pytest.mark.parametrize("dtype", [torch.float32, torch.uint8])
def test_any_thread_count_and_split_gives_the_same_bits(monkeypatch, dtype):
    """Rows split into 1, 2, 3 and 7 parts (7 rows per image, 5 images: parts straddle images) give the
    same sums and range."""
    p, t = _pair(5, 7, 33)
    if dtype == torch.uint8:
        p, t = (p * 255).round().to(dtype), (t * 255).round().to(dtype)
    monkeypatch.setattr(N, "NATIVE_BYTES_PER_THREAD", 1)  # as many parts as threads (and rows) allow
    before = torch.get_num_threads()
    got = []
    try:
        for n in (1, 2, 3, 7):
            torch.set_num_threads(n)
            got.append(N.squared_error_sums_by(p, t, with_range=True, native=True))
    finally:
        torch.set_num_threads(before)
    for sse, rng in got[1:]:
        assert torch.equal(sse, got[0][0]) and torch.equal(rng, got[0][1])


@needs_native
def test_a_row_scored_in_a_batch_equals_it_scored_alone():
    p, t = _pair(6, 12, 20, seed=4)
    whole, _ = N.squared_error_sums_by(p, t, native=True)
    alone = torch.cat([N.squared_error_sums_by(p[i : i + 1], t[i : i + 1], native=True)[0] for i in range(6)])
    assert torch.equal(whole, alone)


@pytest.mark.parametrize(
    "make",
    [
        lambda p, t: (p.double(), t.double()),
        lambda p, t: (p.half(), t.half()),
        lambda p, t: (p, t.double()),
        lambda p, t: (p.requires_grad_(True), t),
    ],
    ids=["float64", "float16", "mixed", "autograd"],
)
def test_what_the_kernel_cannot_read_takes_the_torch_path(make):
    p, t = make(*_pair(2, 8, 8))
    a, ra = N.squared_error_sums_by(p, t, with_range=True, native=True)
    b, rb = N.squared_error_sums_by(p, t, with_range=True)
    assert torch.equal(a, b) and torch.equal(ra, rb)
    if p.requires_grad:
        assert a.requires_grad  # the plain expression kept the graph


def _burn(seconds: float) -> None:
    end = time.process_time() + seconds
    while time.process_time() < end:
        pass


def test_a_native_kernel_measured_slower_is_never_taken(monkeypatch):
    """Plant the fault: the native kernel made 30 ms slower per call. The measurement must keep the torch
    path, and the metric's scores are then the torch path's bits (float32: a path taken only when asked)."""
    monkeypatch.setenv(fastpath.FAST_PATHS_ENV, "psnr_native")
    fastpath.forget_fast_path_choices()
    real = N.native_sums

    def slow(*a, **k):
        _burn(0.03)
        return real(*a, **k)

    monkeypatch.setattr(N, "native_sums", slow)
    monkeypatch.setattr(N, "_native", N._native or object())  # present, even where it was not built
    p, t = _pair(4, 32, 32)
    try:
        assert native_psnr_path(p, t) is False
        m = PSNR()
        m.update(reference=t, candidates=p)
        plain = P.psnr_from_sse(N.squared_error_sums_by(p, t)[0], p[0].numel())
        assert torch.equal(m.per_sample()["scores"], plain.clamp(max=m.max_db))
    finally:
        fastpath.forget_fast_path_choices()


def test_without_the_extension_the_metric_takes_the_torch_path(monkeypatch):
    monkeypatch.setattr(N, "_native", None)
    fastpath.forget_fast_path_choices()
    p, t = _pair(3, 16, 16)
    assert not N.native_available() and native_psnr_path(p, t) is False
    a, _ = N.squared_error_sums_by(p, t, native=True)  # asked for, not there: the torch path, no error
    assert torch.equal(a, N.squared_error_sums_by(p, t)[0])
    assert fastpath.fast_path_choices() == []  # nothing measured


@needs_native
def test_the_choice_is_measured_once_and_recorded_for_the_machine(monkeypatch):
    """The first batch measures (both candidates run); later batches and later processes (the record in
    GENMETRICS_HOME) reuse the choice without measuring."""
    fastpath.forget_fast_path_choices()
    p, t = (x.mul(255).round().to(torch.uint8) for x in _pair(4, 32, 32))  # uint8: an exact, automatic path
    calls = {"native": 0}
    real = N.native_sums

    def counted(*a, **k):
        calls["native"] += 1
        return real(*a, **k)

    monkeypatch.setattr(N, "native_sums", counted)
    first = native_psnr_path(p, t)
    measured = calls["native"]
    assert measured >= 3  # best of 3 rounds
    assert native_psnr_path(p, t) is first and calls["native"] == measured
    fastpath.forget_fast_path_choices()  # as a new process: the record answers
    assert native_psnr_path(p, t) is first and calls["native"] == measured
    record = json.loads((genmetrics_home() / fastpath.STORE_NAME).read_text())
    assert [k for k in record if "psnr_native" in k and "uint8" in k]
    fastpath.forget_fast_path_choices()


def _build_variant(tmp_path, flags: list[str]):
    """The kernel built with extra ``flags`` into ``tmp_path`` and loaded as a module (None where this
    machine has no C compiler or Python headers)."""
    import importlib.machinery
    import importlib.util
    import shutil
    import subprocess
    import sysconfig
    from pathlib import Path

    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    include = sysconfig.get_paths()["include"]
    if cc is None or not (Path(include) / "Python.h").exists():
        return None
    src = Path(N.__file__).with_name("_native.c")
    so = tmp_path / ("_native" + (sysconfig.get_config_var("EXT_SUFFIX") or ".so"))
    cmd = [cc, "-shared", "-fPIC", "-O3", "-ffp-contract=off", "-fno-math-errno", f"-I{include}", *flags]
    subprocess.run([*cmd, str(src), "-o", str(so)], check=True, capture_output=True)
    loader = importlib.machinery.ExtensionFileLoader("genmetrics.accel._native", str(so))
    spec = importlib.util.spec_from_file_location("genmetrics.accel._native", so, loader=loader)
    mod = importlib.util.module_from_spec(spec)
    loader.exec_module(mod)
    return mod


def _cpu_flags() -> set[str]:
    try:
        with open("/proc/cpuinfo") as f:
            return {w for line in f if line.startswith("flags") for w in line.split(":", 1)[1].split()}
    except OSError:
        return set()


_AVX512 = '-DGM_ONLY_TARGET="avx512f,avx512bw,avx512vl"'
_AVX2 = '-DGM_ONLY_TARGET="avx2"'


@needs_native
@pytest.mark.parametrize(
    "flags",
    [
        ["-DGM_NO_CLONES"],
        ["-DGM_NO_CLONES", "-DGM_NO_VECTOR"],
        ["-DGM_NO_CLONES", _AVX2],
        ["-DGM_NO_CLONES", _AVX512],
    ],
    ids=["baseline", "scalar", "avx2", "avx512"],
)
def test_every_build_of_the_kernel_gives_the_same_bits(monkeypatch, tmp_path, flags):
    """The installed build (on x86-64 Linux: AVX-512, AVX2 and baseline SSE2 clones, picked by the CPU)
    against a baseline-only build, the scalar loop that compilers without vector extensions (MSVC) build,
    and AVX2-only and AVX-512-only builds: the same sums and ranges, bit for bit, on float32 and uint8 rows
    of several widths (rows of several blocks included). The AVX-512 build is compiled on every x86-64
    machine and run where the CPU has AVX-512 (F, BW, VL)."""
    import platform

    if flags[-1] in (_AVX2, _AVX512) and platform.machine() not in ("x86_64", "AMD64"):
        pytest.skip("x86-64 target builds")
    mod = _build_variant(tmp_path, flags)
    if mod is None:
        pytest.skip("no C compiler or Python headers here")
    need = {_AVX2: {"avx2"}, _AVX512: {"avx512f", "avx512bw", "avx512vl"}}.get(flags[-1], set())
    if not need <= _cpu_flags():
        pytest.skip(f"built; this CPU cannot run it (lacks {sorted(need - _cpu_flags())})")
    cases = [_pair(3, 5, w, seed=w) for w in (1, 7, 8, 29, 300, 2 * 1024 + 77)]
    cases += [((p * 255).round().to(torch.uint8), (t * 255).round().to(torch.uint8)) for p, t in cases]
    cases.append(_pair(2, 4, 16, seed=9))
    cases[-1][0][1, 0, 2, 5] = float("nan")
    installed = [N.squared_error_sums_by(p, t, with_range=True, native=True) for p, t in cases]
    monkeypatch.setattr(N, "_native", mod)
    for (p, t), (sse, rng) in zip(cases, installed):
        other, orng = N.squared_error_sums_by(p, t, with_range=True, native=True)
        assert torch.equal(other.nan_to_num(-1.0), sse.nan_to_num(-1.0)), (p.dtype, p.shape)
        assert torch.equal(orng.nan_to_num(-1.0), rng.nan_to_num(-1.0)), (p.dtype, p.shape)


@needs_native
def test_a_long_row_stays_within_its_block_bound():
    """One 2^22-pixel float32 row: a float32 lane sums at most 1024/8 terms before it goes into float64, so
    the sum is within (128 + 5) eps32 of the float64 one whatever the row length, and the PSNR within
    10/ln(10) * that in dB (the same row once summed in whole-row float32 lanes was 8.9e-4 dB off)."""
    g = torch.Generator().manual_seed(22)
    t = torch.rand(1, 1, 1, 1 << 22, generator=g)
    p = (t + 0.05 * torch.randn(t.shape, generator=g)).clamp(0, 1)
    sse, _ = N.squared_error_sums_by(p, t, native=True)
    exact = ((p.double() - t.double()) ** 2).sum((1, 2, 3))
    rel = (128 + 5) * EPS32
    assert float((sse - exact).abs().max()) <= rel * float(exact.max())
    db, db_exact = _psnr(p, t, native=True), P.psnr_from_sse(exact, t[0].numel())
    assert float((db - db_exact).abs().max()) <= 10 / math.log(10) * rel / (1 - rel)


@needs_native
@pytest.mark.parametrize("shape", [(3, 3, 8, 8), (2, 3, 5, 3000), (2, 3, 100, 300)])
@pytest.mark.parametrize("layout", ["contiguous", "channels_last"])
def test_uint8_torch_sums_are_the_kernel_s_bits_so_the_kernel_may_be_chosen_by_timing(shape, layout):
    """uint8: the torch path (blocked or plain) and the kernel both give the exact integer sums (checked
    against an int64 recomputation), so which one a timing picks cannot change a score."""
    g = torch.Generator().manual_seed(1)
    p = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    t = torch.randint(0, 256, shape, generator=g, dtype=torch.uint8)
    if layout == "channels_last":
        p, t = (
            p.contiguous(memory_format=torch.channels_last),
            t.contiguous(memory_format=torch.channels_last),
        )
    exact = (p.long() - t.long()).pow(2).flatten(1).sum(1).double()
    torch_sums, torch_rng = P.squared_error_sums(p, t, with_range=True)
    native_sums, native_rng = N.squared_error_sums_by(p, t, with_range=True, native=True)
    assert torch.equal(torch_sums, exact) and torch.equal(native_sums, exact)
    assert torch.equal(torch_rng, native_rng)
    scores = []
    for path in ("torch", "native"):
        fastpath.force_path(N.PSNR_NATIVE, path)
        try:
            m = PSNR()
            m.update(reference=list(t.contiguous()), candidates=list(p.contiguous()))
            scores.append(m.per_sample()["scores"])
        finally:
            fastpath.force_path(N.PSNR_NATIVE, None)
    assert torch.equal(scores[0], scores[1])


def test_float32_kernel_is_taken_only_when_asked_for(monkeypatch):
    """float32 sums of the kernel round differently from the torch path's: unless GENMETRICS_FAST_PATHS names
    psnr_native (or says all) it is neither measured nor taken, even where it would measure faster."""
    monkeypatch.setattr(N, "_native", N._native or object())
    p, t = _pair(2, 8, 8)
    fastpath.forget_fast_path_choices()
    try:
        for setting in ("", "exact", "off", "onednn_packed_linear"):
            monkeypatch.setenv(fastpath.FAST_PATHS_ENV, setting)
            assert native_psnr_path(p, t) is False and fastpath.fast_path_choices() == []
        monkeypatch.setenv(fastpath.FAST_PATHS_ENV, "off")  # off: not even the exact uint8 path
        u8 = p.mul(255).round().to(torch.uint8)
        assert native_psnr_path(u8, u8) is False and fastpath.fast_path_choices() == []
        monkeypatch.setenv(fastpath.FAST_PATHS_ENV, "psnr_natve")
        with pytest.raises(InputError, match=r"GENMETRICS_FAST_PATHS.*psnr_natve.*psnr_native"):
            native_psnr_path(p, t)
    finally:
        fastpath.forget_fast_path_choices()
