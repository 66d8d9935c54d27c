"""psnr's native squared-error kernel (``_native.c``, built by setup.py as ``genmetrics.accel._native``) and
the choice of it.

The kernel reads both inputs once per row and keeps the squared-difference sum and the running min and max.
Its float32 row sums use 8 lanes (term ``i`` into lane ``i mod 8``) in blocks of 1024 terms, each block's
lanes added into float64 lanes, those added as ``((0+4)+(1+5))+((2+6)+(3+7))``: relative error at most
``(min(W, 1024)/8 + 5) eps``, the same bits on every CPU (AVX-512, AVX2, SSE2 and scalar builds), but not
the bits of the torch sums of :func:`genmetrics.functional.pixel.squared_error_sums`: on float32 images it
is a bit-changing fast path, taken only when asked for (``GENMETRICS_FAST_PATHS=psnr_native``). Its uint8
sums are exact integers, as the torch path's are: there it is an exact fast path, taken where measured
faster.
"""

from __future__ import annotations

import importlib
import threading
from typing import Any

import torch

from genmetrics.accel.fastpath import STORE_NAME, choose_path
from genmetrics.errors import InputError
from genmetrics.functional import pixel as P

_native: Any
try:  # optional: built from _native.c by setup.py where a C compiler was found (docs/performance.md)
    _native = importlib.import_module("genmetrics.accel._native")
except ImportError:  # pragma: no cover - depends on the build
    _native = None

#: bytes of both inputs each thread of the native kernel gets at least (smaller batches run in one thread)
NATIVE_BYTES_PER_THREAD = 4 << 20


def native_available() -> bool:
    """Whether the native squared-error kernel (``genmetrics/accel/_native.c``) was built here.

    >>> isinstance(native_available(), bool)
    True
    """
    return _native is not None


def native_ok(preds: torch.Tensor, target: torch.Tensor) -> bool:
    """The inputs the native kernel reads: strided on the CPU, both float32 or both uint8, of one shape with
    an image axis and pixels, no autograd (other layouts than the contiguous one are copied first: the bits
    must not depend on the layout).

    >>> x = torch.zeros(2, 3, 4, 4)
    >>> native_ok(x, x) == native_available(), native_ok(x.double(), x.double())
    (True, False)
    """
    return (
        _native is not None
        and preds.device.type == "cpu"
        and target.device.type == "cpu"
        and preds.dtype == target.dtype
        and preds.dtype in (torch.float32, torch.uint8)
        and preds.shape == target.shape
        and preds.dim() >= 2
        and preds.numel() > 0
        and preds.layout == target.layout == torch.strided
        and not (torch.is_grad_enabled() and (preds.requires_grad or target.requires_grad))
    )


def native_sums(
    preds: torch.Tensor, target: torch.Tensor, with_range: bool
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`~genmetrics.functional.pixel.squared_error_sums` by the native kernel (inputs that :func:`native_ok` accepts): one read of each
    input. The rows are split into contiguous parts, one per torch thread (at least
    :data:`NATIVE_BYTES_PER_THREAD` each); every row is summed the same way whatever the split, so the sums
    do not depend on the thread count.

    >>> u = torch.full((2, 3, 4, 4), 7, dtype=torch.uint8)
    >>> native_sums(u, u - 2, True)[0].tolist() if native_available() else [192.0, 192.0]  # 48 px x 2^2
    [192.0, 192.0]
    """
    assert _native is not None
    # channels_last, a view, an expanded tensor: copied, so they get the bits of the same images contiguous
    preds, target = preds.contiguous(), target.contiguous()
    u8 = preds.dtype == torch.uint8
    # uint8 sums are exact integers whatever the rows: one row per image (no per-row start-up and tail)
    b, w = preds.shape[0], (preds[0].numel() if u8 else preds.shape[-1])
    rows = preds.numel() // w
    kind = 1 if u8 else 0
    out = torch.empty(rows, dtype=torch.float64)
    size = preds.element_size()
    parts = max(1, min(torch.get_num_threads(), 2 * rows * w * size // NATIVE_BYTES_PER_THREAD, rows))
    bounds = [rows * i // parts for i in range(parts + 1)]
    pa, ta, oa = preds.data_ptr(), target.data_ptr(), out.data_ptr()

    def run(i: int, got: list) -> None:
        r0, r1 = bounds[i], bounds[i + 1]
        got[i] = _native.sse_rows(kind, pa + r0 * w * size, ta + r0 * w * size, r1 - r0, w, oa + r0 * 8)

    got: list = [None] * parts
    go, stop, done = threading.Event(), threading.Event(), [threading.Event() for _ in range(parts)]

    def work(i: int) -> None:
        try:
            go.wait()
            if not stop.is_set():
                run(i, got)
        finally:
            done[i].set()

    # Ctrl-C must not return while a thread still reads the inputs or writes ``out`` (the caller frees
    # them): the threads read nothing until all have started, and from then on each is waited for
    workers = [threading.Thread(target=work, args=(i,), daemon=True) for i in range(1, parts)]
    try:
        for t in workers:
            t.start()
        go.set()
        run(0, got)
    finally:
        if go.is_set():
            _wait_all(done[1:])
        else:  # interrupted while starting them: the started threads end without reading anything
            stop.set()
            go.set()
    if any(g is None for g in got):  # a thread failed (its traceback was printed): its rows are unwritten
        raise RuntimeError("squared_error_sums: a thread of the native kernel failed; native=False avoids it")
    sse = out.view(b, -1).sum(1)
    if not with_range:
        return sse, None
    if not bool(torch.isfinite(sse).all()) and not u8:  # NaN (or inf) in an input: the exact float range
        return sse, P.float_range(preds, target)
    lo, hi = min(g[0] for g in got), max(g[1] for g in got)
    return sse, torch.tensor([lo, hi], dtype=preds.dtype)


def _wait_all(events: list[threading.Event]) -> None:
    """Wait until every event is set, even through repeated Ctrl-C (re-raised after; only one landing inside
    the ``except`` clause itself can still cut the wait short). Events, not ``Thread.join``: on Python 3.11
    a join interrupted by Ctrl-C marks the thread stopped while it still runs (bpo-45274's fix)."""
    interrupted: BaseException | None = None
    while True:
        try:
            for e in events:
                e.wait()
            break
        except BaseException as exc:  # KeyboardInterrupt, or an exception a signal handler raised
            interrupted = interrupted or exc
    if interrupted is not None:
        raise interrupted


def squared_error_sums_by(
    preds: torch.Tensor, target: torch.Tensor, *, with_range: bool = False, native: bool = False
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """:func:`genmetrics.functional.pixel.squared_error_sums`, by the native kernel when ``native`` and
    :func:`native_ok` (its documented order: the same bits for uint8, float32 rounding otherwise).

    >>> u = torch.full((1, 3, 4, 4), 200, dtype=torch.uint8)
    >>> squared_error_sums_by(u, u - 3, native=True)[0].tolist() == P.squared_error_sums(u, u - 3)[0].tolist()
    True
    """
    # a negative-bit view (``z.conj().imag``) holds its values negated in memory: the kernel reads memory
    preds, target = preds.resolve_neg(), target.resolve_neg()
    if native and native_ok(preds, target):
        return native_sums(preds, target, with_range)
    return P.squared_error_sums(preds, target, with_range=with_range)


#: bytes of each input the measurement of :func:`native_psnr_path` times (the first rows of the batch)
NATIVE_PROBE_BYTES = 8 << 20
#: the name the choice is kept under (and that ``GENMETRICS_FAST_PATHS`` names to allow it on float32)
PSNR_NATIVE = "psnr_native"


def native_psnr_path(preds: torch.Tensor, target: torch.Tensor) -> bool:
    """Whether psnr takes the native squared-error kernel for inputs like these: only where it was built, is
    allowed (:func:`~genmetrics.accel.fastpath.fast_path_allowed`: uint8 inputs give the torch path's exact
    bits, so always; float32 only when asked for) and, timed on this machine against the torch path (the
    first rows of this batch, interleaved, best of 3, on at most :data:`NATIVE_PROBE_BYTES` of rows;
    :func:`~genmetrics.accel.fastpath.choose_path`), was at least 5% faster. The choice is made once per
    dtype and thread count and kept in ``GENMETRICS_HOME/fast_paths.json``.
    ``force_path("psnr_native", "torch")`` turns it off.

    >>> from genmetrics.accel.fastpath import force_path
    >>> force_path("psnr_native", "torch")
    >>> native_psnr_path(torch.zeros(2, 3, 8, 8), torch.zeros(2, 3, 8, 8))
    False
    >>> force_path("psnr_native", None)
    """
    if not native_available() or not native_ok(preds, target):
        return False
    key = (PSNR_NATIVE, str(preds.dtype).removeprefix("torch."), torch.get_num_threads())
    w = preds.shape[
        -1
    ]  # the first rows of the batch, at most NATIVE_PROBE_BYTES (one huge image: part of it)
    k = max(1, min(preds.numel() // w, NATIVE_PROBE_BYTES // (w * preds.element_size())))
    p, t = preds.reshape(-1, w)[:k].unsqueeze(0), target.reshape(-1, w)[:k].unsqueeze(0)

    def candidates() -> dict[str, Any]:
        return {
            "torch": lambda: squared_error_sums_by(p, t, with_range=True),
            "native": lambda: squared_error_sums_by(p, t, with_range=True, native=True),
        }

    exact = preds.dtype == torch.uint8  # exact integer sums on both paths
    path = choose_path(key, candidates, baseline="torch", exact=exact).path
    if path not in ("torch", "native"):  # a typo in force_path, or a record edited by hand
        raise InputError(
            f"psnr_native: fast path {path!r} (forced by force_path or recorded in GENMETRICS_HOME/"
            f"{STORE_NAME}): expected 'torch' or 'native'; call force_path('psnr_native', 'torch'), "
            "'native' or None, or delete that file"
        )
    return path == "native"
