"""genmetrics against the libraries users would otherwise pick, on the same inputs.

Pixel metrics (psnr, ssim, ms_ssim): ``--pairs`` image pairs of ``--size`` px (float32 tensors in [0,1],
or with ``--dtype uint8`` the same images as uint8 0..255; candidates are noisy copies of their
references), scored in chunks of ``--batch`` by genmetrics,
torchmetrics' float32 classes, piq and pyiqa (each only where installed; ``pip install -e .[bench]``).
``clipscore``: genmetrics' ``clipscore`` on a random open_clip ViT-B-16 against torchmetrics'
``CLIPScore`` on a random transformers ``CLIPModel`` of the same size (different random weights, so
only the speeds compare; genmetrics' scores are checked instead against float64 copies of its own model:
the untrimmed text tower and ``encode_image``, see ``_clipscore_errors``). Every line also carries CPU
seconds of the process per tool (``*_per_cpu_s``, ``cpu_ratio_vs_*``), which a loaded machine disturbs less
than wall time.

Rounds are interleaved (every tool once per round, order rotated), speeds are medians over rounds, at
``--threads`` threads. One JSON line per metric: pairs (images) per second of each tool, genmetrics'
ratio to each, the largest per-image difference to each, and genmetrics' largest difference to an
explicit float64 computation (torchmetrics' functional code on float64 tensors).

Every line comes from fresh processes, one per allocator state (``--allocator both``, the default): glibc's
default, which returns freed memory to the OS so that a tool pays minor page faults when it takes it back,
and ``no_trim`` (:data:`NO_TRIM_ENV`: freed memory kept in the process: page-fault-free rounds). Both states
hold for every tool of a line; the line gives each ratio per state (``_default``, ``_no_trim``), each tool's
minor page faults per round per state, and as the headline ratio the lower of the two.

    python benchmarks/peers.py                         # full workload: 256 pairs of 256x256, 5 rounds
    python benchmarks/peers.py --pairs 32 --rounds 3   # quick look
    python benchmarks/peers.py --metrics psnr --dtype uint8   # decoded 8-bit images, as files give them
    python benchmarks/peers.py --metrics psnr_kernels   # what bounds psnr here (see bench_psnr_kernels)

With uint8 inputs torchmetrics' psnr (class and functional) takes the uint8 tensors with ``data_range=255``
(it converts them to float32 itself); the other peers get each chunk converted to float32 in [0,1] inside
their timed call, as a user of theirs must; genmetrics takes the uint8 tensors.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
import warnings
from collections.abc import Callable
from functools import partial
from typing import Any

import torch

PIXEL = ("psnr", "ssim", "ms_ssim")

#: CPU flags that decide which fast paths exist (bf16 / AMX units, vector width)
FLAGS = ("avx2", "fma", "avx512f", "avx512_bf16", "avx512_vnni", "amx_tile", "amx_bf16", "amx_fp16", "bf16")


def cpu_identity() -> dict[str, Any]:
    """The CPU this run measured: model name, family/model numbers, the flags in :data:`FLAGS` it has,
    torch's dispatch level, cores seen."""
    import os
    import platform

    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if not line.strip():
                    break  # the first processor is enough
                k, _, v = line.partition(":")
                info[k.strip()] = v.strip()
    except OSError:
        pass
    flags = set(info.get("flags", info.get("Features", "")).split())
    return {
        "cpu": info.get("model name") or platform.processor() or platform.machine(),
        "cpu_family_model": f"{info.get('cpu family', '?')}/{info.get('model', '?')}",
        "cpu_flags": [f for f in FLAGS if f in flags],
        "torch_cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cpus": os.cpu_count(),
    }


def _best_cpu_s(f: Callable[[], Any], reps: int) -> float:
    best = float("inf")
    for _ in range(reps):
        c0 = time.process_time()
        f()
        best = min(best, time.process_time() - c0)
    return best


def machine_limits(reps: int = 5) -> dict[str, float]:
    """This core's limits, measured now at the run's thread count (best CPU time of ``reps``): read
    bandwidth (``sum`` of a 256 MiB float32 buffer: one streaming read, far beyond the caches) and matmul
    throughput of 1024^3 float32 and bfloat16 products (``2 n^3`` flops each)."""
    big = torch.rand(64 << 20)
    bw = big.numel() * 4 / _best_cpu_s(big.sum, reps)
    del big
    out = {"read_gb_per_s": round(bw / 1e9, 3)}
    n = 1024
    for name, dtype in (("float32", torch.float32), ("bfloat16", torch.bfloat16)):
        a, b = torch.randn(n, n).to(dtype), torch.randn(n, n).to(dtype)
        a @ b  # warm-up (packing, oneDNN primitive creation)
        out[f"matmul_{name}_gflop_per_s"] = round(
            2 * n**3 / _best_cpu_s(partial(torch.matmul, a, b), reps) / 1e9, 2
        )
    return out


#: ViT-B/16's products at a batch of 32 images (6304 rows): in-projection, out-projection, MLP in and out
VIT_B16_GEMMS = ((32 * 197, 768, 2304), (32 * 197, 768, 768), (32 * 197, 768, 3072), (32 * 197, 3072, 768))


def matmul_peaks(reps: int = 3, *, model_shapes: tuple = VIT_B16_GEMMS) -> dict[str, Any]:
    """The matmul peak as the best of the two CPU libraries torch calls: MKL (``torch.mm``; float32) and
    oneDNN (``torch.ops.mkldnn._linear_pointwise`` on weights packed once, the path genmetrics' packed
    products take; ``torch.mm`` of bfloat16 is oneDNN too), at 2048^3 and at the model's own shapes
    ``(rows, in, out)``, float32 and, where oneDNN runs it, bfloat16. GFLOP/s per library and shape, and
    ``matmul_peak_{dtype}_gflop_per_s`` = the best of all of them."""
    from genmetrics.accel._torch_internals import (
        linear_pointwise,
        onednn_linear_available,
        reorder_linear_weight,
    )

    out: dict[str, Any] = {
        "mkldnn_enabled": torch.backends.mkldnn.is_available() and torch.backends.mkldnn.enabled
    }
    dtypes = [torch.float32]
    if torch.ops.mkldnn._is_mkldnn_bf16_supported():
        dtypes.append(torch.bfloat16)
    shapes = [(2048, 2048, 2048), *model_shapes]
    g = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for dtype in dtypes:
            name = str(dtype).removeprefix("torch.")
            best = 0.0
            for m, k, n in shapes:
                x = torch.randn(m, k, generator=g).to(dtype)
                w = torch.randn(n, k, generator=g).to(dtype)
                wt = w.t().contiguous()
                flops = 2.0 * m * k * n
                tools: dict[str, Callable[[], Any]] = {"torch_mm": partial(torch.mm, x, wt)}
                if onednn_linear_available():
                    packed = reorder_linear_weight(w, m)
                    tools["onednn_linear"] = partial(linear_pointwise, x, packed, None)
                for lib, f in tools.items():
                    f()  # warm-up: packing, primitive creation
                    rate = flops / _best_cpu_s(f, reps) / 1e9
                    out[f"{lib}_{name}_{m}x{k}x{n}_gflop_per_s"] = round(rate, 1)
                    best = max(best, rate)
            out[f"matmul_peak_{name}_gflop_per_s"] = round(best, 1)
    return out


def _status_kb(field: str) -> float | None:
    try:
        with open("/proc/self/status") as f:
            for line in f:
                if line.startswith(field + ":"):
                    return float(line.split()[1])
    except OSError:
        pass
    return None


def reset_peak_rss() -> bool:
    """Reset this process's peak RSS (Linux: ``5`` into ``/proc/self/clear_refs``), so each metric's line
    reports its own peak; False where the kernel does not allow it (the peak is then the process's)."""
    try:
        with open("/proc/self/clear_refs", "w") as f:
            f.write("5")
        return True
    except OSError:
        return False


def peak_rss_mb() -> float:
    """Peak resident memory since the last :func:`reset_peak_rss` (VmHWM), else since the process began."""
    hwm = _status_kb("VmHWM")
    if hwm is not None:
        return round(hwm / 1024, 1)
    import resource

    return round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1)


MACHINE: dict[str, Any] = {}


def _chunks(n: int, b: int) -> list[slice]:
    return [slice(i, min(n, i + b)) for i in range(0, n, b)]


def _float64_reference(metric: str, ref: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
    from torchmetrics.functional.image import (
        multiscale_structural_similarity_index_measure,
        peak_signal_noise_ratio,
        structural_similarity_index_measure,
    )

    out = []
    # float64 convolutions go through im2col on the CPU: 32 ssim pairs of 256 px at once asked for 10 GB
    for sl in _chunks(ref.shape[0], 32 if metric == "psnr" else 2):
        p, t = cand[sl].double(), ref[sl].double()
        if ref.dtype == torch.uint8:  # the exact [0,1] values of 8-bit images
            p, t = p / 255.0, t / 255.0
        if metric == "psnr":
            v = peak_signal_noise_ratio(p, t, data_range=1.0, reduction="none", dim=(1, 2, 3))
        elif metric == "ssim":
            v = structural_similarity_index_measure(p, t, data_range=1.0, reduction="none")
        else:
            v = multiscale_structural_similarity_index_measure(
                p, t, data_range=1.0, reduction="none", normalize="relu"
            )
        out.append(v.reshape(-1))
    return torch.cat(out)


def _unit_float(x: torch.Tensor) -> torch.Tensor:
    """A chunk as float32 in [0,1]: uint8 divided by 255, float unchanged (what a peer without uint8 input
    needs)."""
    return x.to(torch.float32).div_(255.0) if x.dtype == torch.uint8 else x


def _pixel_tools(metric: str, batch: int) -> dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]]:
    """Each tool's per-image scores of ``(ref, cand)`` (float in [0,1] or uint8 0..255) in chunks of ``batch``."""
    import genmetrics

    tools: dict[str, Callable[[torch.Tensor, torch.Tensor], torch.Tensor]] = {}

    def gm(ref: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
        m = genmetrics.create_metric(metric, batch_size=batch)
        m.update(reference=ref, candidates=cand)
        return m.per_sample()["scores"]

    tools["genmetrics"] = gm

    from torchmetrics.image import (
        MultiScaleStructuralSimilarityIndexMeasure,
        PeakSignalNoiseRatio,
        StructuralSimilarityIndexMeasure,
    )

    def tm(ref: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
        if metric == "psnr":  # takes uint8 itself (converts to float32), with its data_range
            dr = 255.0 if ref.dtype == torch.uint8 else 1.0
            m = PeakSignalNoiseRatio(data_range=dr, reduction="none", dim=(1, 2, 3))
            for sl in _chunks(ref.shape[0], batch):
                m.update(cand[sl], ref[sl])
            return m.compute().reshape(-1)
        if metric == "ssim":
            m = StructuralSimilarityIndexMeasure(data_range=1.0, reduction="none")
        else:
            m = MultiScaleStructuralSimilarityIndexMeasure(data_range=1.0, reduction="none", normalize="relu")
        for sl in _chunks(ref.shape[0], batch):
            m.update(_unit_float(cand[sl]), _unit_float(ref[sl]))
        return m.compute().reshape(-1)

    tools["torchmetrics"] = tm
    if metric == "psnr":
        from torchmetrics.functional.image import peak_signal_noise_ratio

        def tmf(ref: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:  # per image, as genmetrics
            dr = 255.0 if ref.dtype == torch.uint8 else 1.0
            return torch.cat(
                [
                    peak_signal_noise_ratio(cand[sl], ref[sl], data_range=dr, reduction="none", dim=(1, 2, 3))
                    for sl in _chunks(ref.shape[0], batch)
                ]
            )

        def tmf_batch(ref: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:  # defaults: one value per chunk
            dr = 255.0 if ref.dtype == torch.uint8 else 1.0
            return torch.stack(
                [
                    peak_signal_noise_ratio(cand[sl], ref[sl], data_range=dr)
                    for sl in _chunks(ref.shape[0], batch)
                ]
            )

        tools["torchmetrics_functional"] = tmf
        tools["torchmetrics_functional_pooled"] = tmf_batch
    try:
        import piq

        def pq(ref: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
            out = []
            for sl in _chunks(ref.shape[0], batch):
                c, r = _unit_float(cand[sl]), _unit_float(ref[sl])
                if metric == "psnr":
                    v = piq.psnr(c, r, data_range=1.0, reduction="none")
                elif metric == "ssim":
                    v = piq.ssim(c, r, data_range=1.0, reduction="none", downsample=False)
                else:
                    v = piq.multi_scale_ssim(c, r, data_range=1.0, reduction="none")
                out.append(v.reshape(-1))
            return torch.cat(out)

        tools["piq"] = pq
    except ImportError:
        pass
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")
            import pyiqa
        name = {"psnr": "psnr", "ssim": "ssimc", "ms_ssim": "ms_ssim"}[metric]
        opts = {"test_y_channel": False} if metric == "ms_ssim" else {}
        iqa = pyiqa.create_metric(name, device="cpu", **opts)

        def pi(ref: torch.Tensor, cand: torch.Tensor) -> torch.Tensor:
            return torch.cat(
                [
                    iqa(_unit_float(cand[sl]), _unit_float(ref[sl])).reshape(-1)
                    for sl in _chunks(ref.shape[0], batch)
                ]
            )

        tools["pyiqa"] = pi
    except ImportError:
        pass
    return tools


#: CPU seconds of this process per tool call (median over rounds), next to the wall-clock medians: at one
#: thread they do not count the time the process waited for a core on a loaded machine
CPU_TIMES: dict[str, float] = {}
#: each tool's best round (CPU seconds) in the last :func:`_interleaved` run
CPU_BEST: dict[str, float] = {}
#: each tool's median minor page faults per round in the last :func:`_interleaved` run
MINOR_FAULTS: dict[str, float] = {}
#: glibc settings under which freed memory stays in the process (no page faults from re-mapping it):
#: ``--allocator no_trim`` runs the whole benchmark under them, in a fresh process, for every tool alike
#: (``MALLOC_MMAP_MAX_=0`` would keep every block off mmap, but the heap then fragments: 17 GB for ssim)
NO_TRIM_ENV = {
    "MALLOC_TRIM_THRESHOLD_": str(1 << 40),
    "MALLOC_MMAP_THRESHOLD_": str(1 << 40),
    "MALLOC_TOP_PAD_": str(1 << 28),
}
#: the data-segment limit of each fresh process of ``--allocator both`` (GB)
MEMORY_LIMIT_GB = 8.0
#: the allocator states every peer line is measured in (``--allocator both``: one fresh process each)
ALLOCATORS = ("default", "no_trim")
#: the keys of a line that compare genmetrics with a peer (headline: the lower of the two states)
_RATIO_PREFIXES = ("cpu_ratio_vs_", "ratio_vs_", "ratio_text_")


def fair_line(lines: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """One peer line from the same metric measured in fresh processes under each allocator state of
    :data:`ALLOCATORS` (``{state: line}``): the page-fault-free (``no_trim``) line's fields, every ratio
    to a peer as ``<ratio>_<state>`` per state and ``<ratio>`` = the lower of them (the headline), and each
    tool's minor page faults per round per state.

    >>> a = {"metric": "psnr", "cpu_ratio_vs_tm": 4.0, "tm_minor_faults_per_round": 9.0}
    >>> b = {"metric": "psnr", "cpu_ratio_vs_tm": 2.5, "tm_minor_faults_per_round": 0.0}
    >>> line = fair_line({"default": a, "no_trim": b})
    >>> line["cpu_ratio_vs_tm"], line["cpu_ratio_vs_tm_default"], line["tm_minor_faults_per_round_default"]
    (2.5, 4.0, 9.0)
    """
    base = lines.get("no_trim") or next(iter(lines.values()))
    out: dict[str, Any] = {k: v for k, v in base.items() if k != "allocator"}
    out["allocator"] = "+".join(lines)
    for key in base:
        per = {state: line.get(key) for state, line in lines.items()}
        numeric = [v for v in per.values() if isinstance(v, (int, float)) and not isinstance(v, bool)]
        if key.startswith(_RATIO_PREFIXES) and len(numeric) == len(lines):
            out[key] = min(numeric)
            out.update({f"{key}_{state}": v for state, v in per.items()})
        elif key.endswith("_minor_faults_per_round") or key.endswith("_per_cpu_s"):
            out.update({f"{key}_{state}": v for state, v in per.items()})
            out.pop(key, None)
    return out


def run_fair(metrics: list[str], argv: list[str]) -> None:
    """Each metric of ``metrics`` in one fresh process per allocator state (this script with
    ``--metrics M --allocator STATE``, the other options as given), printed as :func:`fair_line`."""
    import subprocess

    rest, skip = [], False
    for a in argv:  # the caller's options without --metrics / --allocator
        if skip:
            skip = False
            continue
        if a in ("--metrics", "--allocator"):
            skip = True
            continue
        if not a.startswith(("--metrics=", "--allocator=")):
            rest.append(a)
    import resource

    def limit() -> None:  # a run whose heap grows without bound fails alone instead of meeting the OOM killer
        cap = int(MEMORY_LIMIT_GB * 2**30)
        resource.setrlimit(resource.RLIMIT_DATA, (cap, cap))

    for metric in metrics:
        lines: dict[str, dict[str, Any]] = {}
        failed: dict[str, str] = {}
        single = metric in ("startup", "limits", "psnr_kernels")  # no peer: one state is the figure
        for state in ALLOCATORS[:1] if single else ALLOCATORS:
            cmd = [sys.executable, __file__, *rest, "--metrics", metric, "--allocator", state]
            run = subprocess.run(cmd, capture_output=True, text=True, preexec_fn=limit)
            if run.returncode == 0:
                lines[state] = json.loads(run.stdout.strip().splitlines()[-1])
            else:
                failed[state] = f"exit {run.returncode}: {run.stderr.strip().splitlines()[-1:] or ''}"
        line = fair_line(lines) if len(lines) > 1 else next(iter(lines.values()), {"metric": metric})
        line.update({f"failed_{state}": why for state, why in failed.items()})
        print(json.dumps(line), flush=True)


def _minflt() -> int:
    import resource

    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt


def _interleaved(tools: dict[str, Callable[[], Any]], rounds: int) -> tuple[dict[str, float], dict[str, Any]]:
    times: dict[str, list[float]] = {k: [] for k in tools}
    cpus: dict[str, list[float]] = {k: [] for k in tools}
    faults: dict[str, list[int]] = {k: [] for k in tools}
    last: dict[str, Any] = {}
    names = list(tools)
    for r in range(rounds):
        order = names[r % len(names) :] + names[: r % len(names)]
        for k in order:
            f0, t0, c0 = _minflt(), time.perf_counter(), time.process_time()
            last[k] = tools[k]()
            times[k].append(time.perf_counter() - t0)
            cpus[k].append(time.process_time() - c0)
            faults[k].append(_minflt() - f0)
    MINOR_FAULTS.clear()
    MINOR_FAULTS.update({k: statistics.median(v) for k, v in faults.items()})
    CPU_TIMES.clear()
    CPU_TIMES.update({k: statistics.median(v) for k, v in cpus.items()})
    CPU_BEST.clear()
    CPU_BEST.update({k: min(v) for k, v in cpus.items()})
    return {k: statistics.median(v) for k, v in times.items()}, last


def _cpu_fields(n: int, unit: str) -> dict[str, float]:
    """``<tool>_<unit>_per_cpu_s`` and ``cpu_ratio_vs_<tool>`` from the last :func:`_interleaved` run."""
    out = {f"{k}_{unit}_per_cpu_s": round(n / t, 3) for k, t in CPU_TIMES.items()}
    out.update({f"{k}_minor_faults_per_round": v for k, v in MINOR_FAULTS.items()})
    out.update(
        {
            f"cpu_ratio_vs_{k}": round(t / CPU_TIMES["genmetrics"], 3)
            for k, t in CPU_TIMES.items()
            if k != "genmetrics"
        }
    )
    return out


def bench_pixel(metric: str, args: argparse.Namespace) -> dict[str, Any]:
    reset_peak_rss()
    g = torch.Generator().manual_seed(0)
    ref = torch.rand(args.pairs, 3, args.size, args.size, generator=g)
    cand = (ref + 0.08 * torch.randn(ref.shape, generator=g)).clamp_(0.0, 1.0)
    if args.dtype == "uint8":  # the same images as 8-bit values (what decoded files give)
        ref, cand = ((x * 255.0).round_().to(torch.uint8) for x in (ref, cand))
    input_bytes = 2 * ref.numel() * ref.element_size()
    tools = _pixel_tools(metric, args.batch)
    rss_inputs = peak_rss_mb()
    med, vals = _interleaved({k: (lambda f=f: f(ref, cand)) for k, f in tools.items()}, args.rounds)
    peak = peak_rss_mb()
    ref64 = _float64_reference(metric, ref, cand)
    gm = vals["genmetrics"].double().cpu()
    line: dict[str, Any] = {
        "benchmark": "peers",
        "metric": metric,
        "pairs": args.pairs,
        "size": args.size,
        "dtype": args.dtype,
        "batch": args.batch,
        "threads": torch.get_num_threads(),
        "rounds": args.rounds,
        **MACHINE,
    }
    for k, t in med.items():
        line[f"{k}_pairs_per_s"] = round(args.pairs / t, 3)
    for k in med:
        if k != "genmetrics" and vals[k].numel() == gm.numel():
            line[f"ratio_vs_{k}"] = round(med[k] / med["genmetrics"], 3)
            line[f"max_abs_diff_{k}"] = float((vals[k].double().cpu() - gm).abs().max())
        elif k != "genmetrics":
            line[f"ratio_vs_{k}"] = round(med[k] / med["genmetrics"], 3)
    line["genmetrics_max_abs_diff_vs_float64"] = float((gm - ref64).abs().max())
    line.update(_cpu_fields(args.pairs, "pairs"))
    # each tool's share of this core's read bandwidth: the inputs (both images, read once) per CPU second
    bw = MACHINE.get("read_gb_per_s")
    if bw:
        for k, t in CPU_TIMES.items():
            line[f"{k}_read_fraction"] = round(input_bytes / t / (bw * 1e9), 3)
            # like for like: the tool's best round against the best of the bandwidth's repetitions
            line[f"{k}_read_fraction_best"] = round(input_bytes / CPU_BEST[k] / (bw * 1e9), 3)
    line["input_mb"] = round(input_bytes / 2**20, 1)
    line["rss_with_inputs_mb"] = rss_inputs  # inputs, interpreter, torch and the tools' imports
    line["peak_rss_mb"] = peak
    return line


def bench_psnr_kernels(args: argparse.Namespace) -> dict[str, Any]:
    """What bounds psnr on this core, in one process (rounds interleaved, median CPU ms per ``--pairs``
    float32 pairs in chunks of ``--batch``): ``floor`` = ``sum`` of both inputs (one streaming read),
    ``cdist`` = ``torch.cdist(p=2, donot_use_mm)`` on ``[rows, 1, W]`` views (the one public op that fuses
    the difference and its squared sum; no range check), ``range_check`` = ``aminmax`` of both inputs'
    bit patterns (the metric must check the range of float inputs), ``sub_norm`` = the blocked squared
    errors without the range check, ``kernel`` = ``squared_error_sums(with_range=True)`` (torch path),
    ``native_kernel`` = the same with ``native=True`` (the C kernel where built, else the torch path again;
    ``native_built`` says which), ``metric`` = the
    whole ``PSNR`` metric, ``torchmetrics_functional`` = its per-image psnr. Each ``*_floor_fraction`` is
    ``floor`` over that time (1.0 = reads its inputs as fast as a plain ``sum``)."""
    from torchmetrics.functional.image import peak_signal_noise_ratio

    import genmetrics
    from genmetrics.accel import pixel_native as N
    from genmetrics.accel.pixel_native import native_psnr_path
    from genmetrics.functional import pixel as P

    g = torch.Generator().manual_seed(0)
    ref = torch.rand(args.pairs, 3, args.size, args.size, generator=g)
    cand = (ref + 0.08 * torch.randn(ref.shape, generator=g)).clamp_(0.0, 1.0)
    u8 = args.dtype == "uint8"
    if u8:  # the same images as 8-bit values: the floor reads the same bytes (as float32 words)
        ref, cand = (ref * 255).round().to(torch.uint8), (cand * 255).round().to(torch.uint8)
    chunks = _chunks(args.pairs, args.batch)
    w = args.size
    data_range = 255.0 if u8 else 1.0
    kept = genmetrics.create_metric("psnr", batch_size=args.batch)

    def metric() -> Any:
        m = genmetrics.create_metric("psnr", batch_size=args.batch)
        m.update(reference=ref, candidates=cand)
        return m.per_sample()["scores"]

    def metric_update() -> Any:  # a metric made once (an eval loop's): update, per-sample scores, reset
        kept.update(reference=ref, candidates=cand)
        out = kept.per_sample()["scores"]
        kept.reset()
        return out

    def words(x: torch.Tensor) -> torch.Tensor:
        return x.view(torch.float32) if u8 else x

    tools: dict[str, Callable[[], Any]] = {
        "floor": lambda: (words(ref).sum(), words(cand).sum()),
        "cdist": lambda: [
            torch.cdist(
                cand[s].reshape(-1, 1, w).float(),
                ref[s].reshape(-1, 1, w).float(),
                compute_mode="donot_use_mm_for_euclid_dist",
            )
            for s in chunks
        ],
        "range_check": lambda: [
            (torch.aminmax(words(cand[s]).view(torch.int32)), torch.aminmax(words(ref[s]).view(torch.int32)))
            for s in chunks
        ],
        "sub_norm": lambda: [P.squared_error_sums(cand[s], ref[s]) for s in chunks],
        "kernel": lambda: [P.squared_error_sums(cand[s], ref[s], with_range=True) for s in chunks],
        "native_kernel": lambda: [
            N.squared_error_sums_by(cand[s], ref[s], with_range=True, native=True) for s in chunks
        ],
        "metric": metric,
        "metric_update": metric_update,
        "torchmetrics_functional": lambda: [
            peak_signal_noise_ratio(cand[s], ref[s], data_range=data_range, reduction="none", dim=(1, 2, 3))
            for s in chunks
        ],
    }
    metric()  # the first metric pays its lazy imports (seconds): not part of any round
    _interleaved(tools, args.rounds)
    floor = CPU_TIMES["floor"]
    line: dict[str, Any] = {
        "benchmark": "peers",
        "metric": "psnr_kernels",
        "pairs": args.pairs,
        "size": args.size,
        "batch": args.batch,
        "rounds": args.rounds,
        "dtype": args.dtype,
        **MACHINE,
    }
    line["native_built"] = N.native_available()
    line["metric_path"] = "native" if native_psnr_path(cand[chunks[0]], ref[chunks[0]]) else "torch"
    line.update({f"{k}_cpu_ms": round(t * 1e3, 1) for k, t in CPU_TIMES.items()})
    line.update({f"{k}_floor_fraction": round(floor / t, 3) for k, t in CPU_TIMES.items() if k != "floor"})
    line["floor_gb_per_s"] = round(2 * ref.numel() * ref.element_size() / floor / 1e9, 3)
    line["metric_over_native_kernel"] = round(CPU_TIMES["metric"] / CPU_TIMES["native_kernel"], 3)
    line["metric_update_over_native_kernel"] = round(
        CPU_TIMES["metric_update"] / CPU_TIMES["native_kernel"], 3
    )
    line["goal_metric_over_kernel"] = 1.15
    line["torchmetrics_functional_over_metric"] = round(
        CPU_TIMES["torchmetrics_functional"] / CPU_TIMES["metric"], 3
    )
    line["torchmetrics_functional_over_kernel"] = round(
        CPU_TIMES["torchmetrics_functional"] / CPU_TIMES["kernel"], 3
    )
    line["torchmetrics_functional_over_native_kernel"] = round(
        CPU_TIMES["torchmetrics_functional"] / CPU_TIMES["native_kernel"], 3
    )
    return line


def _hf_clip_b16() -> tuple[Any, Any]:
    """A random transformers CLIPModel with ViT-B/16's sizes and a processor for torchmetrics' CLIPScore."""
    from open_clip.tokenizer import SimpleTokenizer
    from transformers import CLIPConfig, CLIPImageProcessor, CLIPModel

    torch.manual_seed(0)
    cfg = CLIPConfig(
        text_config={
            "hidden_size": 512,
            "intermediate_size": 2048,
            "num_attention_heads": 8,
            "num_hidden_layers": 12,
            "max_position_embeddings": 77,
            "vocab_size": 49408,
            "bos_token_id": 49406,
            "eos_token_id": 49407,
        },
        vision_config={
            "hidden_size": 768,
            "intermediate_size": 3072,
            "num_attention_heads": 12,
            "num_hidden_layers": 12,
            "image_size": 224,
            "patch_size": 16,
        },
        projection_dim=512,
    )

    class TensorCLIP(CLIPModel):  # transformers 5 returns output objects; torchmetrics 1.9 expects tensors
        def get_image_features(self, *a: Any, **k: Any) -> torch.Tensor:
            out = super().get_image_features(*a, **k)
            return out if isinstance(out, torch.Tensor) else out.pooler_output

        def get_text_features(self, *a: Any, **k: Any) -> torch.Tensor:
            out = super().get_text_features(*a, **k)
            return out if isinstance(out, torch.Tensor) else out.pooler_output

    model = TensorCLIP(cfg).eval()
    images = CLIPImageProcessor(size={"shortest_edge": 224}, crop_size={"height": 224, "width": 224})
    tok = SimpleTokenizer()

    class Processor:  # the CLIP BPE (open_clip's copy; no files to download), padded to the longest like HF's
        def __call__(self, text: Any = None, images_: Any = None, **kw: Any) -> dict[str, torch.Tensor]:
            imgs = kw.pop("images", images_)
            if imgs is not None:
                return dict(images(imgs, return_tensors="pt"))
            ids = tok(text)
            n = int((ids != 0).sum(1).max())
            ids = ids[:, :n]
            return {"input_ids": ids, "attention_mask": (ids != 0).long()}

    return model, Processor()


def _clipscore_errors(
    oc: Any, tok: Any, imgs: torch.Tensor, prompts: list[str], ours: torch.Tensor, text_dtype: str
) -> dict[str, float]:
    """Where genmetrics' clipscore stands against explicit computations (score units, max over images).

    The reference for each side is the untrimmed open_clip path run in float64 (``copy.deepcopy(model)
    .double()``): ``text64`` = ``encode_text`` on the full 77-token context, ``img64`` = ``encode_image``
    (on the first 8 images; float64 image towers are slow). "plain" is what a user writes with open_clip
    in float32: ``encode_image`` + untrimmed ``encode_text``.
    """
    import copy

    from genmetrics.backbones.openclip import clip_image_batch, encode_image

    nf = torch.nn.functional.normalize

    def score(img: torch.Tensor, txt: torch.Tensor) -> torch.Tensor:
        return 100.0 * (nf(img.double(), dim=-1) * nf(txt.double(), dim=-1)).sum(-1)

    with torch.inference_mode():
        x = clip_image_batch(list(imgs), oc)
        img_fast, img_plain = encode_image(oc, x), oc.encode_image(x)
        ids = tok(prompts)
        txt32 = oc.encode_text(ids)
        m64 = copy.deepcopy(oc).double()
        txt64 = m64.encode_text(ids)
        k = min(8, len(prompts))
        img64 = m64.encode_image(x[:k].double())
    plain, ref = score(img_plain, txt32), score(img_fast, txt64)
    return {
        # the text side: genmetrics (trimmed, cached, text_dtype) against the float64 untrimmed text tower,
        # with the same image embeddings as genmetrics used
        "genmetrics_max_abs_diff_vs_float64_text": float((ours - ref).abs().max()),
        "untrimmed_float32_text_error_vs_float64": float((score(img_fast, txt32) - ref).abs().max()),
        # the image side: genmetrics' block-by-block tower against open_clip's encode_image (float32 both)
        "fast_image_tower_max_abs_diff_vs_encode_image": float((score(img_plain, txt64) - ref).abs().max()),
        "fast_image_tower_error_vs_float64": float(
            (score(img_fast[:k], txt64[:k]) - score(img64, txt64[:k])).abs().max()
        ),
        "encode_image_error_vs_float64": float(
            (score(img_plain[:k], txt64[:k]) - score(img64, txt64[:k])).abs().max()
        ),
        # both sides: genmetrics against the plain float32 open_clip computation
        "genmetrics_max_abs_diff_vs_plain_float32": float((ours - plain).abs().max()),
    }


def _image_tower_flops(oc: Any) -> float:
    """Flops of one 224 px image through ``encode_image``, counted by torch's FlopCounterMode with
    ``nn.MultiheadAttention``'s fused path off and attention on the math kernel (the fused kernels'
    products are invisible to the counter: with them on, ViT-B/16 counts 22.5 of its 35.1 GFLOP)."""
    from torch.nn.attention import SDPBackend, sdpa_kernel
    from torch.utils.flop_counter import FlopCounterMode

    was = torch.backends.mha.get_fastpath_enabled()
    torch.backends.mha.set_fastpath_enabled(False)
    try:  # and attention as plain products (the CPU flash kernel is not counted either)
        with torch.inference_mode(), sdpa_kernel(SDPBackend.MATH), FlopCounterMode(display=False) as fc:
            oc.encode_image(torch.zeros(1, 3, 224, 224))
    finally:
        torch.backends.mha.set_fastpath_enabled(was)
    return float(fc.get_total_flops())


def bench_limits(args: argparse.Namespace) -> dict[str, Any]:
    """This CPU's limits (read bandwidth; matmul peaks of MKL and oneDNN, float32 and bfloat16) and the
    image tower's FLOPs per 224 px image of a random ViT-B/16: analytic and counted by FlopCounterMode
    (fused attention off); ``flop_count_ratio`` = counted / analytic (1.0 when both see every product)."""
    import open_clip

    from genmetrics.backbones.clip_vision import vision_tower_flops

    oc = open_clip.create_model("ViT-B-16-quickgelu", pretrained=None).eval()
    analytic, counted = float(vision_tower_flops(oc.visual)), _image_tower_flops(oc)
    return {
        "benchmark": "peers",
        "metric": "limits",
        **MACHINE,
        "image_tower_gflop_per_image": round(analytic / 1e9, 2),
        "image_tower_gflop_per_image_flopcounter": round(counted / 1e9, 2),
        "flop_count_ratio": round(counted / analytic, 4),
    }


def bench_clipscore(args: argparse.Namespace) -> dict[str, Any]:
    import open_clip
    from torchmetrics.multimodal.clip_score import CLIPScore as TMCLIPScore

    import genmetrics

    reset_peak_rss()
    n = args.clip_images
    g = torch.Generator().manual_seed(0)
    imgs = (torch.rand(n, 3, 256, 256, generator=g) * 255).to(torch.uint8)
    words = [
        "a photo of",
        "a red",
        "small",
        "dog",
        "cat",
        "on a table",
        "in the snow",
        "painting of",
        "city at night",
        "two",
        "people",
        "walking",
        "with an umbrella",
        "close-up",
        "wooden",
        "house",
    ]
    prompts = [" ".join(words[(i * 7 + j * 3) % len(words)] for j in range(3 + i % 6)) for i in range(n)]
    torch.manual_seed(0)
    oc = open_clip.create_model("ViT-B-16-quickgelu", pretrained=None).eval()
    tok = open_clip.get_tokenizer("ViT-B-16-quickgelu")
    tm = TMCLIPScore(model_name_or_path=_hf_clip_b16)

    def gm() -> torch.Tensor:
        m = genmetrics.create_metric(
            "clipscore", backbone=oc, tokenizer=tok, batch_size=args.batch, text_dtype=args.text_dtype
        )
        m.update(candidates=imgs, condition=prompts)
        return m.per_sample()["scores"]

    def tmf() -> torch.Tensor:
        tm.reset()
        for sl in _chunks(n, args.batch):
            tm.update(list(imgs[sl]), prompts[sl])
        return tm.compute()

    other = "model" if args.text_dtype == "float64" else "float64"

    def gm_other() -> torch.Tensor:  # the other text precision, for its cost
        m = genmetrics.create_metric(
            "clipscore", backbone=oc, tokenizer=tok, batch_size=args.batch, text_dtype=other
        )
        m.update(candidates=imgs, condition=prompts)
        return m.per_sample()["scores"]

    from genmetrics.accel import clip_packed, fastpath
    from genmetrics.backbones.clip_vision import vision_tower_flops

    # paid once per process and model (not per round): the per-machine micro-benchmark that decides whether
    # the packed oneDNN products pay here, and packing the tower's weights where they do
    clip_packed.release_packed_weights()
    fastpath.forget_fast_path_choices()
    t0, c0 = time.perf_counter(), time.process_time()
    with torch.inference_mode():
        packed = clip_packed.packed_vision_blocks(oc.visual)
    pack_s, pack_cpu_s = time.perf_counter() - t0, time.process_time() - c0
    peak = fastpath.matmul_gflops()
    med, vals = _interleaved(
        {"genmetrics": gm, f"genmetrics_text_{other}": gm_other, "torchmetrics": tmf}, args.rounds
    )
    peak = max(peak, fastpath.matmul_gflops())  # measured before and after the rounds: the better one
    # MKL's 1024^3 sgemm is not this CPU's best: the best of MKL and oneDNN at 2048^3 and the model's shapes
    peak = max(peak, MACHINE.get("matmul_peak_float32_gflop_per_s", 0.0))
    flops = vision_tower_flops(oc.visual) * n  # both tools' image towers do these (HF: no less)
    line: dict[str, Any] = {
        "benchmark": "peers",
        "metric": "clipscore",
        "cpu": fastpath.cpu_description(),
        "torch": torch.__version__,
        "images": n,
        "model": "ViT-B/16 (random)",
        "batch": args.batch,
        "threads": torch.get_num_threads(),
        "rounds": args.rounds,
        "text_dtype": args.text_dtype,
        **MACHINE,
        "genmetrics_images_per_s": round(n / med["genmetrics"], 3),
        "torchmetrics_images_per_s": round(n / med["torchmetrics"], 3),
        "ratio_vs_torchmetrics": round(med["torchmetrics"] / med["genmetrics"], 3),
        "max_abs_diff_torchmetrics": None,
        f"genmetrics_text_{other}_images_per_s": round(n / med[f"genmetrics_text_{other}"], 3),
        f"ratio_text_{other}_vs_torchmetrics": round(
            med["torchmetrics"] / med[f"genmetrics_text_{other}"], 3
        ),
        **_cpu_fields(n, "images"),
        # paid once per model (not per round): the micro-benchmark and, where packed pays, the packing
        "packed_weights": packed is not None,
        "fast_path_choices": fastpath.fast_path_choices(),
        "choose_and_pack_once_s": round(pack_s, 3),
        "choose_and_pack_once_cpu_s": round(pack_cpu_s, 3),
        # the machine's limit, measured in the same run: each tool's image-tower FLOPs per CPU second of its
        # whole run (text tower and preprocessing included, so a lower bound of the tower's efficiency)
        "matmul_gflops_fp32": round(peak, 1),
        "genmetrics_fraction_of_matmul_peak": round(flops / CPU_TIMES["genmetrics"] / 1e9 / peak, 3),
        "torchmetrics_fraction_of_matmul_peak": round(flops / CPU_TIMES["torchmetrics"] / 1e9 / peak, 3),
    }
    line["peak_rss_mb"] = peak_rss_mb()
    line["model_mb"] = round(sum(p.numel() * p.element_size() for p in oc.parameters()) / 2**20, 1)
    line["input_mb"] = round(imgs.numel() / 2**20, 1)
    counted = _image_tower_flops(oc)
    flops = float(vision_tower_flops(oc.visual))  # analytic: every product, attention included
    line["image_tower_gflop_per_image"] = round(flops / 1e9, 2)
    line["image_tower_gflop_per_image_flopcounter"] = round(counted / 1e9, 2)
    peak32 = MACHINE.get("matmul_peak_float32_gflop_per_s") or MACHINE.get("matmul_float32_gflop_per_s")
    if peak32:  # the image tower's share of the float32 matmul peak (text tower and the rest not counted)
        line["genmetrics_matmul_fraction"] = round(flops * n / CPU_TIMES["genmetrics"] / (peak32 * 1e9), 3)
        line["torchmetrics_matmul_fraction"] = round(
            flops * n / CPU_TIMES["torchmetrics"] / (peak32 * 1e9), 3
        )
    try:
        line.update(_clipscore_errors(oc, tok, imgs, prompts, vals["genmetrics"].double(), args.text_dtype))
    except Exception as e:  # noqa: BLE001 - a benchmark line still comes out
        line["clipscore_errors"] = f"error: {e}"
    return line


def import_times(code: list[str], env: dict[str, str], rounds: int) -> dict[str, int]:
    """``{module: microseconds}``: each module's own import time (``python -X importtime``, "self" column),
    the least over ``rounds`` runs of ``python <code>`` (a module's least time is the one least disturbed by
    other work on the machine)."""
    import subprocess

    best: dict[str, int] = {}
    for _ in range(rounds):
        run = subprocess.run(
            [sys.executable, "-X", "importtime", *code], capture_output=True, text=True, env=env, check=True
        )
        for line in run.stderr.splitlines():
            parts = line.removeprefix("import time:").split("|")
            if len(parts) == 3 and parts[0].strip().isdigit():
                name, us = parts[2].strip(), int(parts[0])
                best[name] = min(us, best.get(name, us))
    return best


def bench_startup(args: argparse.Namespace) -> dict[str, Any]:
    """What ``genmetrics score psnr`` on 12 PNG pairs adds to ``import torch`` (the floor of every command),
    fresh processes, measured two ways:

    * CPU seconds (user + system of the child) of ``genmetrics list``, ``score psnr``, ``import torchmetrics``
      and ``import torch``, in ``--rounds`` interleaved rounds (rotating order); the figure is the paired
      difference ``score psnr - import torch`` of each round (the two run next to each other, under the
      same load), as the median and the least over rounds;
    * the modules ``score psnr`` imports beyond ``import torch``: their number (deterministic) and the sum
      of their own import times (``-X importtime``, each module's least over 3 runs)."""
    import subprocess
    import tempfile
    from pathlib import Path

    from PIL import Image

    tmp = Path(tempfile.mkdtemp(prefix="gm_startup_"))
    g = torch.Generator().manual_seed(0)
    for role in ("ref", "gen"):
        (tmp / role).mkdir()
        for i in range(12):
            a = (torch.rand(64, 64, 3, generator=g) * 255).to(torch.uint8).numpy()
            Image.fromarray(a).save(tmp / role / f"{i:02d}.png")
    cli = ["-c", "from genmetrics.cli.main import entry; entry()"]
    codes: dict[str, list[str]] = {
        "list": [*cli, "list"],
        "score_psnr_12": [*cli, "score", "psnr", "-r", str(tmp / "ref"), "-c", str(tmp / "gen")],
        # the same command in a process that imports torch first and then reports its own CPU seconds from
        # there: genmetrics' share without the noise of a 2-3 s torch import on either side of a difference
        "score_psnr_12_after_torch": [
            "-c",
            "import sys, time, torch\nc = time.process_time()\nfrom genmetrics.cli.main import main\n"
            f"rc = main({['score', 'psnr', '-r', str(tmp / 'ref'), '-c', str(tmp / 'gen')]!r})\n"
            "print('CPU_AFTER_TORCH', time.process_time() - c, file=sys.stderr)\nsys.exit(rc)",
        ],
        "import_torchmetrics": ["-c", "import torchmetrics"],  # what the metric base class costs by itself
        "import_torch": ["-c", "import torch"],  # the floor: every command imports torch
    }
    import resource

    def cpu() -> float:  # user + system CPU seconds of finished children (robust to a loaded machine)
        r = resource.getrusage(resource.RUSAGE_CHILDREN)
        return r.ru_utime + r.ru_stime

    times: dict[str, list[float]] = {k: [] for k in codes}
    cpus: dict[str, list[float]] = {k: [] for k in codes}
    # bytecode cached, as an installed package has it (pip compiles at install): a first untimed round
    # writes the .pyc files that PYTHONDONTWRITEBYTECODE would keep every round compiling from source
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    names = list(codes)
    after_torch: list[float] = []
    for r in range(args.rounds + 1):
        for k in names[r % len(names) :] + names[: r % len(names)]:
            t0, c0 = time.perf_counter(), cpu()
            run = subprocess.run(
                [sys.executable, *codes[k]], check=True, capture_output=True, env=env, text=True
            )
            if r == 0:
                continue
            times[k].append(time.perf_counter() - t0)
            cpus[k].append(cpu() - c0)
            if k == "score_psnr_12_after_torch":
                after_torch.append(float(run.stderr.split("CPU_AFTER_TORCH")[-1].split()[0]))
    paired = [a - b for a, b in zip(cpus["score_psnr_12"], cpus["import_torch"])]
    floor = import_times(codes["import_torch"], env, 3)
    mods = import_times(codes["score_psnr_12"], env, 3)
    extra = {m: us for m, us in mods.items() if m not in floor}
    # the exact set: -X importtime does not see modules loaded through importlib.import_module
    listing = tmp / "modules.json"
    after = (
        "import json, sys\nfrom genmetrics.cli.main import main\nmain({argv!r})\n"
        "open({out!r}, 'w').write(json.dumps(sorted(sys.modules)))\n"
    )
    subprocess.run(
        [sys.executable, "-c", after.format(argv=codes["score_psnr_12"][2:], out=str(listing))],
        check=True,
        capture_output=True,
        env=env,
    )
    beyond = set(json.loads(listing.read_text()))
    subprocess.run(
        [
            sys.executable,
            "-c",
            after.replace("from genmetrics.cli.main import main\nmain({argv!r})", "import torch").format(
                out=str(listing)
            ),
        ],
        check=True,
        capture_output=True,
        env=env,
    )
    beyond -= set(json.loads(listing.read_text()))
    by_package: dict[str, int] = {}
    for m, us in extra.items():
        by_package[m.split(".")[0]] = by_package.get(m.split(".")[0], 0) + us
    t0 = time.perf_counter()
    subprocess.run([sys.executable, "-c", "pass"], check=True)
    bare = time.perf_counter() - t0
    return {
        "benchmark": "peers",
        "metric": "startup",
        "rounds": args.rounds,
        **MACHINE,
        "python_bare_s": round(bare, 3),
        **{f"{k}_s": round(statistics.median(v), 3) for k, v in times.items()},
        **{f"{k}_cpu_s": round(statistics.median(v), 3) for k, v in cpus.items()},
        # what genmetrics adds to the floor of every command (goal <= 0.1 CPU s): paired per round
        "score_psnr_12_over_import_torch_cpu_s": round(statistics.median(paired), 3),
        "score_psnr_12_over_import_torch_cpu_s_min": round(min(paired), 3),
        "score_psnr_12_over_import_torch_cpu_s_rounds": [round(d, 3) for d in paired],
        # in one process: CPU seconds from `import torch` done to the command's end (the headline figure)
        "score_psnr_12_after_import_torch_cpu_s": round(statistics.median(after_torch), 3),
        "score_psnr_12_after_import_torch_cpu_s_min": round(min(after_torch), 3),
        "modules_beyond_torch": len(beyond),
        "genmetrics_modules": len([m for m in beyond if m.split(".")[0] == "genmetrics"]),
        # -X importtime's own times of the modules it sees beyond torch (not those loaded by import_module)
        "import_beyond_torch_ms": round(sum(extra.values()) / 1000, 1),
        "import_beyond_torch_ms_by_package": {
            k: round(v / 1000, 1) for k, v in sorted(by_package.items(), key=lambda kv: -kv[1])
        },
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--pairs", type=int, default=256)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--batch", type=int, default=32)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--clip-images", type=int, default=64)
    ap.add_argument(
        "--text-dtype", default="float64", choices=("float64", "model"), help="clipscore's text_dtype"
    )
    ap.add_argument("--metrics", default="psnr,ssim,ms_ssim,clipscore,startup")
    ap.add_argument(
        "--dtype", default="float32", choices=("float32", "uint8"), help="pixel metrics' input tensors"
    )
    ap.add_argument(
        "--peaks", action="store_true", help="measure the MKL / oneDNN matmul peaks (else with clipscore)"
    )
    ap.add_argument(
        "--allocator",
        default="both",
        choices=("both", *ALLOCATORS),
        help="both (default): every line from fresh processes in each state, ratios per state and the lower "
        "as headline; default: glibc's (memory returned to the OS, page faults when it is taken again); "
        "no_trim: NO_TRIM_ENV, set for a fresh process (page-fault-free rounds). The same for every tool",
    )
    args = ap.parse_args()
    if args.allocator == "both":
        run_fair(args.metrics.split(","), sys.argv[1:])
        return
    if args.allocator == "no_trim" and any(os.environ.get(k) != v for k, v in NO_TRIM_ENV.items()):
        os.execve(sys.executable, [sys.executable, *sys.argv], {**os.environ, **NO_TRIM_ENV})
    MACHINE["allocator"] = args.allocator
    torch.set_num_threads(args.threads)
    MACHINE.update(cpu_identity())
    MACHINE["threads"] = torch.get_num_threads()
    MACHINE.update(machine_limits())
    if args.peaks or {"clipscore", "limits"} & set(args.metrics.split(",")):
        MACHINE.update(matmul_peaks())
    for metric in args.metrics.split(","):
        if metric == "startup":
            line = bench_startup(args)
        elif metric == "limits":
            line = bench_limits(args)
        elif metric == "psnr_kernels":
            line = bench_psnr_kernels(args)
        else:
            line = bench_clipscore(args) if metric == "clipscore" else bench_pixel(metric, args)
        print(json.dumps(line), flush=True)


if __name__ == "__main__":
    main()
