"""Fast paths: which kernel computes a step, chosen so that a score never depends on the choice.

A "fast path" computes the same function as a reference one (``F.linear``, psnr's torch sums) with another
kernel. Two kinds:

* **exact** fast paths give the reference path's bits on every input they accept (psnr's native kernel on
  uint8 images: exact integer sums either way). They are taken automatically, where a micro-benchmark on the
  machine measured them faster; the timing only changes the speed.
* **bit-changing** fast paths (:data:`BIT_CHANGING`: the packed oneDNN products of the CLIP towers, psnr's
  native kernel on float32 images) round differently from the reference in the last bits. They are never
  taken unless asked for: ``GENMETRICS_FAST_PATHS=all`` or a comma list of their names (read at each
  choice), or :func:`force_path` in code. Only then does a timing decide whether they run.

``GENMETRICS_FAST_PATHS=off`` takes the reference path everywhere (:func:`fast_paths_mode`).

Whether a fast path is faster depends on the CPU: the packed oneDNN products were 1.37x ``F.linear`` on an
AMD EPYC with AVX-512, 0.93-1.05x on an Intel Xeon (AVX-512, AMX), and on an AMD EPYC Zen 3 (AVX2) faster
below about 800 rows and slower above (docs/performance.md). So no rule is hard-coded: the first time a
shape is met, :func:`choose_path` times the candidates on it (interleaved, best of ``repeats``) and keeps the
choice for the process. An alternative is taken only when its measured time beats the reference path's by at
least ``margin`` (5%). A measured choice is also written to ``GENMETRICS_HOME/fast_paths.json`` (keyed by the
CPU, its kernel flags, the torch version and the shape), so later processes of the machine skip the
measurement; delete the file to measure again.

The choices made so far are listed by :func:`fast_path_choices` (benchmarks print them with the CPU);
:func:`cpu_description` names the machine.
"""

from __future__ import annotations

import functools
import json
import platform
import time
import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch

from genmetrics.data.caches.homefile import HomeFileError, home_lock, read_json_record
from genmetrics.errors import InputError
from genmetrics.options import env

#: the environment variable that turns fast paths on or off (:func:`fast_paths_mode`)
FAST_PATHS_ENV = "GENMETRICS_FAST_PATHS"
#: the fast paths that may change a score's last bits, by the name their choices are kept under: taken
#: only when :data:`FAST_PATHS_ENV` names them (or says ``all``) or :func:`force_path` forces them
BIT_CHANGING: dict[str, str] = {
    "onednn_packed_linear": "the CLIP vision towers' products on packed oneDNN weights (float32 and bfloat16)",
    "psnr_native": "psnr's native kernel on float32 images (8-lane float32 row sums; uint8 sums are exact)",
}
#: required margin: the alternative must take at most 1/(1+MARGIN) of the plain path's time
MARGIN = 0.05
#: the flags that decide which kernels a CPU runs (lscpu / /proc/cpuinfo names)
_KERNEL_FLAGS = (
    "avx",
    "avx2",
    "fma",
    "avx512f",
    "avx512_bf16",
    "avx512_vnni",
    "amx_bf16",
    "amx_tile",
    "asimd",
    "sve",
)


@dataclass(frozen=True)
class PathChoice:
    """The outcome of one measurement: the path taken, the measured times (seconds, per candidate) and the
    speed-up of the taken path over the plain one (1.0 when the plain path is taken).

    >>> c = PathChoice("plain", "plain", {"plain": [1.0], "packed": [1.2]})
    >>> c.path, c.speedup, c.speedups()
    ('plain', 1.0, {'packed': 0.833})
    """

    path: str
    baseline: str
    times: dict[str, list[float]] = field(default_factory=dict)

    def speedups(self) -> dict[str, float]:
        """Best plain time / best time of each alternative (below 1: the alternative is slower)."""
        base = min(self.times[self.baseline])
        return {k: round(base / min(v), 3) for k, v in self.times.items() if k != self.baseline}

    @property
    def speedup(self) -> float:
        """The chosen path's speed over the plain one (1.0 when the plain path was chosen)."""
        return 1.0 if self.path == self.baseline else self.speedups()[self.path]


def _home() -> Path:
    """``GENMETRICS_HOME`` (default ``~/.cache/genmetrics``), where the record of measured choices lives."""
    root = env("GENMETRICS_HOME")
    return root if root is not None else Path.home() / ".cache" / "genmetrics"


def fast_paths_mode() -> tuple[str, frozenset[str]]:
    """``(mode, names)`` from :data:`FAST_PATHS_ENV`: ``("exact", {})`` when unset or ``exact`` (only fast
    paths that give the reference bits), ``("off", {})`` (reference paths only), ``("all", {})`` (every fast
    path), or ``("exact", {names})`` for a comma list of :data:`BIT_CHANGING` names taken besides the exact
    ones. An unknown name raises :class:`~genmetrics.errors.InputError` naming the variable.

    >>> import os
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {FAST_PATHS_ENV: "psnr_native"}):
    ...     fast_paths_mode()
    ('exact', frozenset({'psnr_native'}))
    >>> with mock.patch.dict(os.environ, {FAST_PATHS_ENV: ""}):
    ...     fast_paths_mode()
    ('exact', frozenset())
    """
    raw = str(env(FAST_PATHS_ENV, "exact")).strip().lower()
    if raw in ("exact", "off", "all"):
        return raw, frozenset()
    # "exact" in a list is the default it always is; "off" and "all" are whole settings
    names = frozenset(n.strip() for n in raw.split(",") if n.strip()) - {"exact"}
    whole = sorted(names & {"off", "all"})
    if whole:
        raise InputError(
            f"environment variable {FAST_PATHS_ENV}={raw!r}: {whole[0]!r} is a setting of its own and cannot be "
            f"listed with fast path names; set {FAST_PATHS_ENV}={whole[0]}, or list only names of "
            f"{sorted(BIT_CHANGING)}"
        )
    unknown = sorted(names - set(BIT_CHANGING))
    if unknown:
        raise InputError(
            f"environment variable {FAST_PATHS_ENV}: unknown fast path(s) {unknown}; expected 'exact' (the "
            f"default), 'off', 'all' or a comma list of {sorted(BIT_CHANGING)}; fix or unset it"
        )
    return "exact", names


def fast_path_allowed(name: str, *, exact: bool) -> bool:
    """Whether the fast path ``name`` may run: an ``exact`` one (the reference bits on every input it takes)
    unless :data:`FAST_PATHS_ENV` is ``off``; a bit-changing one only where that variable names it or says
    ``all``.

    >>> import os
    >>> from unittest import mock
    >>> with mock.patch.dict(os.environ, {FAST_PATHS_ENV: ""}):
    ...     fast_path_allowed("psnr_native", exact=True), fast_path_allowed("psnr_native", exact=False)
    (True, False)
    >>> with mock.patch.dict(os.environ, {FAST_PATHS_ENV: "off"}):
    ...     fast_path_allowed("psnr_native", exact=True)
    False
    """
    mode, names = fast_paths_mode()
    if mode == "off":
        return False
    return exact or mode == "all" or name in names


_CHOICES: dict[tuple, PathChoice] = {}
_FORCED: dict[str, str] = {}
#: the file under GENMETRICS_HOME that keeps this machine's measured choices across processes
STORE_NAME = "fast_paths.json"


def _machine_key(key: tuple) -> str:
    cpu = _cpu()
    return json.dumps([cpu["model"], cpu["machine"], cpu["flags"], torch.__version__, *map(str, key)])


@functools.lru_cache(maxsize=1)
def _cpu() -> dict[str, Any]:
    return cpu_description()


#: seconds a process waits for another one measuring (a measurement takes well under a second)
LOCK_WAIT = 10.0
_warned: set[str] = set()


def _warn_once(text: str) -> None:
    if text not in _warned:
        _warned.add(text)
        warnings.warn(text, stacklevel=3)


def _recorded() -> dict[str, Any]:
    """The record, read with bounded size, nesting and time; an unusable one (a FIFO, a device, too deep,
    not JSON) is named once and treated as empty (the path is measured again)."""
    path = _home() / STORE_NAME
    try:
        data = read_json_record(path, max_bytes=4 << 20)
    except HomeFileError as e:
        _warn_once(f"fast-path record not used: {e}")
        return {}
    if data is None:  # no record yet: the first measurement writes it
        return {}
    if not isinstance(data, dict):
        _warn_once(
            f"fast-path record not used: {path} holds a JSON {type(data).__name__}, not an object of "
            "measured choices; the fast paths are measured again and the file rewritten"
        )
        return {}
    return data


def _entry(key: tuple) -> Any:
    """The recorded entry for ``key``, or ``None``; one that is not ``{"path": NAME, ...}`` (a string, a
    number, a list, a null path) is named once and treated as missing (measured again, then rewritten)."""
    rec = _recorded().get(_machine_key(key))
    if rec is not None and not _usable(rec):
        got = f"path {rec.get('path')!r}" if isinstance(rec, dict) else f"a {type(rec).__name__}"
        _warn_once(
            f"fast-path record not used: {_home() / STORE_NAME}: the entry for {key[0]} holds {got}, "
            'not {"path": NAME, ...}; that path is measured again and the entry rewritten'
        )
        return None
    return rec


class _machine_lock:
    """``GENMETRICS_HOME/fast_paths.lock`` held while one process measures and records, so processes started
    together (DDP ranks) take one path; without a usable home (read-only, a planted link) no lock, as before.
    ``held`` is ``False`` when another process kept the lock for more than :data:`LOCK_WAIT` seconds (a stopped
    or hung process): the caller then takes the plain path without measuring."""

    held: bool = True

    def __enter__(self) -> _machine_lock:
        from genmetrics.data.results import destination  # here: output locking only when a choice is measured

        self._ctx: Any = None
        try:
            path = destination(_home() / "fast_paths.lock", root=_home())
            ctx = home_lock(path, wait=LOCK_WAIT)
            ctx.__enter__()
            self._ctx = ctx
        except HomeFileError as e:
            _warn_once(f"fast path not measured: {e}; the plain path is used")
            self.held = False
        except (OSError, InputError):
            pass
        return self

    def __exit__(self, *exc: Any) -> None:
        if self._ctx is not None:
            self._ctx.__exit__(None, None, None)


def _record(key: tuple, choice: PathChoice) -> None:
    """Best effort: a read-only GENMETRICS_HOME (or a link planted there) only costs the next process a
    measurement."""
    from genmetrics.data.results import atomic_write_json

    data = _recorded()
    data[_machine_key(key)] = {"path": choice.path, "speedups": choice.speedups()}
    try:
        atomic_write_json(_home() / STORE_NAME, data, root=_home())
    except (OSError, InputError):
        pass


def decide(times: Mapping[str, list[float]], baseline: str, *, margin: float = MARGIN) -> str:
    """The path to take from measured ``times``: the fastest alternative whose best time is at most
    ``1/(1+margin)`` of the baseline's best time, else the baseline.

    >>> decide({"plain": [1.0, 1.1], "packed": [0.80, 0.9]}, "plain")  # 1.25x faster
    'packed'
    >>> decide({"plain": [1.0], "packed": [0.97]}, "plain")  # 3% is within the noise
    'plain'
    >>> decide({"plain": [1.0], "packed": [1.5]}, "plain")  # slower: never taken
    'plain'
    """
    base = min(times[baseline])
    best, best_t = baseline, base / (1.0 + margin)
    for name, ts in times.items():
        if name != baseline and min(ts) <= best_t:
            best, best_t = name, min(ts)
    return best


def default_timer() -> float:
    """CPU seconds of this process when torch runs one thread (robust to other processes sharing the core),
    else wall seconds (CPU time would add up the threads).

    >>> default_timer() >= 0.0
    True
    """
    return time.process_time() if torch.get_num_threads() == 1 else time.perf_counter()


def choose_path(
    key: tuple,
    candidates: Callable[[], Mapping[str, Callable[[], Any]]],
    *,
    baseline: str,
    exact: bool,
    repeats: int = 3,
    timer: Callable[[], float] | None = None,
) -> PathChoice:
    """The path for ``key`` on this machine: measured the first time (``candidates()`` builds the timed
    callables, which all compute the same thing; interleaved rounds, the best of ``repeats`` counts, so the
    first round is also the warm-up), then kept for the process. ``exact``: every candidate gives the
    ``baseline``'s bits on the inputs the caller sends it; when it does not, or :data:`FAST_PATHS_ENV` is
    ``off``, the baseline is taken without measuring unless :func:`fast_path_allowed` says otherwise.
    :func:`force_path` overrides both for every key whose first item is the forced name. ``timer``: seconds
    now (default :func:`default_timer`, looked up at each call).

    >>> import itertools
    >>> clock = itertools.count()  # a fake timer: each call of "slow" spans 3 ticks, of "fast" 1
    >>> def slow():
    ...     next(clock), next(clock)
    >>> c = choose_path(("demo", 1), lambda: {"plain": slow, "fast": lambda: None}, baseline="plain",
    ...                 exact=True, timer=lambda: float(next(clock)))
    >>> c.path, c.speedups(), choose_path(("demo", 1), dict, baseline="plain", exact=True) is c
    ('fast', {'fast': 3.0}, True)
    >>> forget_fast_path_choices()
    """
    forced = _FORCED.get(key[0])
    if forced is not None:
        return PathChoice(forced, baseline, {})
    if not fast_path_allowed(str(key[0]), exact=exact):  # the reference path: nothing measured or recorded
        return PathChoice(baseline, baseline, {})
    hit = _CHOICES.get(key)
    if hit is not None:
        return hit
    if timer is None:  # a real measurement: one process of the machine measures, the others read its record
        rec = _entry(key)  # read first: a recorded choice needs no lock
        if not _usable(rec):
            with _machine_lock() as lock:
                rec = _entry(key)
                if not _usable(rec) and not lock.held:  # the reference choice, not measured, not recorded
                    rec = {"path": baseline}
                if not _usable(rec):
                    return _measure(key, candidates, baseline, repeats, None)
        _CHOICES[key] = PathChoice(str(rec["path"]), baseline, {})  # _usable: a dict
        return _CHOICES[key]
    return _measure(key, candidates, baseline, repeats, timer)


def _usable(rec: Any) -> bool:
    return isinstance(rec, dict) and isinstance(rec.get("path"), str)


def _measure(
    key: tuple,
    candidates: Callable[[], Mapping[str, Callable[[], Any]]],
    baseline: str,
    repeats: int,
    timer: Callable[[], float] | None,
) -> PathChoice:
    made = candidates()
    clock = timer or default_timer
    times: dict[str, list[float]] = {k: [] for k in made}
    names = list(made)
    for r in range(max(1, repeats)):
        for k in names[r % len(names) :] + names[: r % len(names)]:
            t0 = clock()
            made[k]()
            times[k].append(clock() - t0)
    choice = PathChoice(decide(times, baseline), baseline, times)
    _CHOICES[key] = choice
    if timer is None:
        _record(key, choice)
    return choice


def force_path(name: str, path: str | None) -> None:
    """Take ``path`` for every choice named ``name`` (``None``: back to :func:`choose_path`'s rule), e.g. to
    compare paths in a benchmark, or to take a bit-changing fast path in code.

    >>> force_path("onednn_packed_linear", "plain")
    >>> choose_path(("onednn_packed_linear", 64), dict, baseline="plain", exact=False).path
    'plain'
    >>> force_path("onednn_packed_linear", None)
    """
    if path is None:
        _FORCED.pop(name, None)
    else:
        _FORCED[name] = path


def fast_path_choices() -> list[dict[str, Any]]:
    """The choices measured in this process: key, path taken and speed-up of each alternative.

    >>> forget_fast_path_choices()
    >>> fast_path_choices()
    []
    """
    return [
        {"key": list(k), "path": c.path, "speedups": c.speedups()} for k, c in _CHOICES.items() if c.times
    ]


def forget_fast_path_choices() -> None:
    """Drop every measured choice (the next use measures again).

    >>> forget_fast_path_choices()
    """
    _CHOICES.clear()


def cpu_description() -> dict[str, Any]:
    """The running CPU: model name (with family and model numbers where the OS gives them), the flags that
    decide which kernels run, torch's CPU capability and thread count.

    >>> sorted(cpu_description())
    ['capability', 'flags', 'machine', 'model', 'threads']
    """
    info: dict[str, str] = {}
    try:
        with open("/proc/cpuinfo", encoding="utf-8", errors="replace") as f:
            for line in f:
                k, sep, v = line.partition(":")
                if not sep:
                    if info:
                        break  # the first processor's block is enough
                    continue
                info.setdefault(k.strip(), v.strip())
    except OSError:
        pass
    model = info.get("model name") or platform.processor() or platform.machine()
    if info.get("cpu family", "").isdigit() and info.get("model", "").isdigit():
        model = f"{model} (family {info['cpu family']}, model {info['model']})"
    flags = set((info.get("flags") or info.get("Features") or "").split())
    return {
        "model": model,
        "machine": platform.machine(),
        "flags": " ".join(f for f in _KERNEL_FLAGS if f in flags),
        "capability": torch.backends.cpu.get_cpu_capability(),
        "threads": torch.get_num_threads(),
    }


def matmul_gflops(n: int = 1024, *, dtype: torch.dtype = torch.float32, repeats: int = 3) -> float:
    """This machine's matrix-product speed in GFLOP/s: the best of ``repeats`` ``[n,n] @ [n,n]`` products at
    torch's current thread count (:func:`default_timer`), for stating a workload's fraction of the peak.

    >>> matmul_gflops(64, repeats=1) > 0
    True
    """
    g = torch.Generator().manual_seed(0)
    a, b = torch.randn(n, n, generator=g).to(dtype), torch.randn(n, n, generator=g).to(dtype)
    best = float("inf")
    with torch.no_grad():
        a @ b  # warm-up
        for _ in range(max(1, repeats)):
            t0 = default_timer()
            a @ b
            best = min(best, default_timer() - t0)
    return 2.0 * n**3 / max(best, 1e-9) / 1e9
