"""The leaderboard runner: score every generator with every metric, crash-safe and shardable.

Order of work: metric by metric (one model in memory at a time, built once and reused for every
generator), generator by generator, images in chunks of ``batch_size`` read from disk (the metric's
state is reset after each chunk, so memory does not grow with the number of images).

Files under ``OUT`` (see docs/leaderboard.md):

* ``results.jsonl`` one row per (generator, metric column, sample id), appended and fsynced per chunk;
  set-level metrics write one row per generator with ``id = "__set__"``. At the end of a run the file
  is rewritten (atomically) in canonical order, so an interrupted-and-resumed or a sharded run gives
  the same bytes as an uninterrupted single-process run;
* ``shards/rank-XXXXX.jsonl`` per-rank results under ``torchrun`` (merged into results.jsonl by rank 0);
* ``manifest.json`` (atomic): versions, command, config, options, weights and backbone fingerprints,
  seed, input fingerprints; ``summary.json`` and the reports (see :mod:`genmetrics.leaderboard.report`).

``resume=True`` keeps every finished row (a torn last line is dropped), skips finished keys and
refuses to continue when the metric options or the input files changed since the interrupted run.
"""

from __future__ import annotations

import dataclasses
import gc
import hashlib
import json
import logging
import os
import shutil
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from genmetrics.data.results import lock_output_folder  # one lock for every output folder
from genmetrics.errors import GenmetricsError, InputError
from genmetrics.leaderboard.config import LeaderboardConfig, load_config
from genmetrics.leaderboard.plan import SET_ID, MetricPlan, Plan, build_plan, device_for_run

RESULTS = "results.jsonl"
SHARDS = "shards"
MANIFEST = "manifest.json"
SUMMARY = "summary.json"
SKIPPED = "skipped.jsonl"
HASHES = ".genmetrics.hashes.json"  # content hashes of the inputs, kept for --resume (see InputHashes)
log = logging.getLogger(__name__)
OUTPUTS = (
    SKIPPED,
    RESULTS,
    MANIFEST,
    SUMMARY,
    "leaderboard.md",
    "leaderboard.csv",
    "leaderboard.html",
    "paired.csv",
)


@dataclass
class RunResult:
    """What :func:`run_leaderboard` returns: the output folder, this process's rank, the number of rows it
    wrote, and (rank 0) the summary; ``report`` and ``results`` are the paths of the Markdown report and
    of ``results.jsonl``.

    >>> import tempfile
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     result = run_leaderboard(toy_leaderboard(d), Path(d) / "out", base_dir=d, plots=False)
    ...     result.rank, result.world_size, result.scored, result.report.is_file(), result.results.name
    (0, 1, 6, True, 'results.jsonl')
    """

    out: Path
    rank: int
    world_size: int
    summary: dict[str, Any] | None  # rank 0 only
    scored: int  # rows written by this process in this call

    @property
    def report(self) -> Path:
        return self.out / "leaderboard.md"

    @property
    def results(self) -> Path:
        return self.out / RESULTS


# ------------------------------------------------------------------------------------------ distributed
class _Dist:
    """Rank and world size from the torchrun environment (RANK, WORLD_SIZE, LOCAL_RANK); initialises the
    default process group (gloo on CPU, nccl on CUDA) unless the caller already did."""

    def __init__(self, device: str):
        self.world = int(os.environ.get("WORLD_SIZE", "1"))
        self.rank = int(os.environ.get("RANK", "0"))
        self.owned = False
        if self.world > 1:
            import torch
            import torch.distributed as dist

            if not dist.is_initialized():
                backend = "nccl" if device.startswith("cuda") else "gloo"
                if backend == "nccl":
                    torch.cuda.set_device(torch.device(device))
                dist.init_process_group(backend=backend)
                self.owned = True
            self.rank, self.world = dist.get_rank(), dist.get_world_size()

    def barrier(self) -> None:
        if self.world > 1:
            import torch.distributed as dist

            dist.barrier()

    def close(self) -> None:
        if self.owned:
            import torch.distributed as dist

            dist.destroy_process_group()

    def shard(self, items: list[Any]) -> list[Any]:
        """This rank's items: every ``world``-th item starting at ``rank`` (of the full sorted list, so
        the assignment does not depend on what is already done)."""
        return items[self.rank :: self.world]


# ------------------------------------------------------------------------------------------ helpers
def _describe_option(v: Any) -> Any:
    """JSON-able description of an option value (objects such as backbones become ``<ClassName>``)."""
    if v is None or isinstance(v, (bool, int, float, str)):
        return v
    if isinstance(v, (list, tuple)):
        return [_describe_option(x) for x in v]
    if isinstance(v, dict):
        return {str(k): _describe_option(x) for k, x in v.items()}
    if isinstance(v, Path):
        return str(v)
    return f"<{type(v).__name__}>"


def _metric_identity(mp: MetricPlan) -> dict[str, Any]:
    # device, batch_size and cache_dir do not change results (metrics are batch-size invariant), so a
    # run may resume with others.
    options = {k: v for k, v in mp.kwargs.items() if k not in ("device", "batch_size", "cache_dir")}
    from genmetrics.backbones.provider import describe_provider

    return {
        "name": mp.spec.name,
        "options": _describe_option(options),
        "aspects": mp.spec.aspects,
        "backbone_provider": describe_provider(),
    }


def backbone_fingerprint(module: Any) -> dict[str, Any]:
    """A cheap identity of loaded weights: sha256 over parameter names, shapes, dtypes and a strided
    sample of values (at most 64 per tensor), plus the parameter count.

    >>> import torch
    >>> layer = torch.nn.Linear(2, 2)
    >>> before = backbone_fingerprint(layer)
    >>> with torch.no_grad():
    ...     layer.weight[0, 0] += 1.0
    >>> sorted(before), before == backbone_fingerprint(layer)
    (['class', 'fingerprint', 'parameters'], False)
    """
    import torch

    h = hashlib.sha256()
    n = 0
    for name, t in sorted(module.state_dict().items()):
        if not isinstance(t, torch.Tensor):
            continue
        n += t.numel()
        h.update(f"{name}:{tuple(t.shape)}:{t.dtype}".encode())
        flat = t.detach().reshape(-1)
        if flat.numel():
            step = max(1, flat.numel() // 64)
            h.update(flat[::step][:64].to("cpu", torch.float64).numpy().tobytes())
    return {"class": type(module).__name__, "parameters": n, "fingerprint": h.hexdigest()[:16]}


def _weights_info(metric: Any, mp: MetricPlan) -> dict[str, Any]:
    info: dict[str, Any] = {"default_weights": mp.card.default_weights}
    if "weights" in mp.kwargs:
        info["weights"] = _describe_option(mp.kwargs["weights"])
        w = mp.kwargs["weights"]
        if isinstance(w, (str, Path)) and Path(w).is_file():
            from genmetrics.backbones.weights import sha256_file

            info["weights_sha256"] = sha256_file(w)
    labels = getattr(metric, "attributes", None)  # what the columns of vector scores ("scores") are
    if isinstance(labels, (list, tuple)) and labels and all(isinstance(a, str) for a in labels):
        info["labels"] = list(labels)
    backbones = metric.backbones()
    if backbones:
        info["backbones"] = {k: backbone_fingerprint(m) for k, m in backbones.items()}
    return info


def set_value_score(value: Any) -> tuple[float | None, Any]:
    """``(score, full value)`` of a set-level ``compute()``: a scalar is the score; a dict gives its
    ``score``/``mean``/``value`` entry; a tensor of several values (SaD per attribute, PaD per pair,
    R-SaD per patch and attribute) is scored by the mean absolute value of its entries.

    >>> import torch
    >>> set_value_score(torch.tensor(0.5))
    (0.5, None)
    >>> score, full = set_value_score({"mean": torch.tensor(0.25), "per_attribute": torch.tensor([0.5, 0.0])})
    >>> score, full["per_attribute"]
    (0.25, [0.5, 0.0])
    """
    import torch

    if isinstance(value, dict):
        for k in ("score", "mean", "value"):
            if k in value:
                s, _ = set_value_score(value[k])
                return s, {kk: _describe_value(vv) for kk, vv in value.items()}
        return None, {kk: _describe_value(vv) for kk, vv in value.items()}
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return float(value), None
    if isinstance(value, torch.Tensor):
        v = value.detach().to("cpu", torch.float64)
        if v.numel() == 1:
            return float(v.reshape(())), None
        return float(v.abs().mean()), v.tolist()
    if hasattr(value, "_asdict"):
        return set_value_score(dict(value._asdict()))
    raise TypeError(
        f"set-level metric returned {type(value).__name__}; expected a tensor, a number or a dict"
    )


def _describe_value(v: Any) -> Any:
    import torch

    if isinstance(v, torch.Tensor):
        v = v.detach().cpu()
        return v.item() if v.numel() == 1 else v.tolist()
    return _describe_option(v)


def _sample_rows(
    per: dict[str, Any], generator: str, column: str, aspect: str | None
) -> list[dict[str, Any]]:
    import torch

    ids = per["ids"]
    scores = per["scores"].detach().to("cpu", torch.float64)
    # per-sample extras: tensors with one entry per sample (mie's diagnostics); other keys are metadata
    extras = {
        k: v
        for k, v in per.items()
        if k not in ("ids", "scores")
        and isinstance(v, torch.Tensor)
        and v.ndim >= 1
        and v.shape[0] == len(ids)
    }
    rows = []
    for i, sid in enumerate(ids):
        s = scores[i]
        row: dict[str, Any] = {"generator": generator, "metric": column, "id": sid}
        if s.ndim == 0:
            row["score"] = float(s)
        else:
            row["score"] = float(s.mean())
            row["scores"] = s.tolist()
        if aspect is not None:
            row["aspect"] = aspect
        for k, v in extras.items():
            row[k] = _describe_value(v[i])
        rows.append(row)
    return rows


def _local_per_sample(metric: Any) -> dict[str, Any]:
    """``per_sample()`` of this process only (ranks score different chunks, so no collective here)."""
    import inspect

    if "sync" in inspect.signature(metric.per_sample).parameters:
        return metric.per_sample(sync=False)
    return metric.per_sample()


def _bar(items: list[Any], *, rank: int, desc: str, unit: str = "batch"):
    if rank != 0:
        return items
    from genmetrics.cli.common import progress

    return progress(items, desc=desc, total=len(items), unit=unit)


def _chunks(items: list[Any], n: int) -> list[list[Any]]:
    return [items[i : i + n] for i in range(0, len(items), n)]


# ------------------------------------------------------------------------------------------ the run
def run_leaderboard(
    config: str | Path | LeaderboardConfig | dict[str, Any],
    out: str | Path | None = None,
    *,
    resume: bool = False,
    metric_kwargs: dict[str, dict[str, Any]] | None = None,
    device: str | None = None,
    batch_size: int | None = None,
    seed: int | None = None,
    plots: bool = True,
    base_dir: str | Path | None = None,
    on_error: str = "stop",
) -> RunResult:
    """Run a leaderboard (see the module docstring). ``metric_kwargs`` maps a metric label to extra
    ``create_metric`` keyword arguments (Python objects allowed, e.g. ``{"clip_i": {"backbone": m}}``);
    they override the config's options. Under torchrun every rank calls this; rank 0 merges and reports.

    Two generators on 3 references (``toy_leaderboard``: an exact copy and a noisy one), ranked best first;
    a resumed finished run scores nothing again:

    >>> import tempfile
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     config, out = toy_leaderboard(d), Path(d) / "out"
    ...     result = run_leaderboard(config, out, base_dir=d, plots=False)
    ...     again = run_leaderboard(config, out, base_dir=d, plots=False, resume=True)
    ...     result.summary["generators"], result.summary["ranking"][0]["psnr"], again.scored
    (['copy', 'noisy'], 100.0, 0)
    """
    import torch

    from genmetrics.options import check_environment

    check_environment()  # a bad GENMETRICS_* variable is named before any work
    cfg = config if isinstance(config, LeaderboardConfig) else load_config(config, base_dir=base_dir)
    if on_error not in ("stop", "skip"):
        raise InputError(f"--on-error: expected 'stop' or 'skip', got {on_error!r}")
    if batch_size is not None and batch_size < 1:
        raise InputError(f"--batch-size: expected a positive integer, got {batch_size}")
    if seed is not None and seed < 0:
        raise InputError(f"--seed: expected a non-negative integer, got {seed}")
    # command-line values win over the config's (on a copy: the caller's config is left as it is)
    cfg = dataclasses.replace(
        cfg,
        run=dataclasses.replace(
            cfg.run,
            batch_size=batch_size if batch_size is not None else cfg.run.batch_size,
            seed=seed if seed is not None else cfg.run.seed,
        ),
    )
    out_dir = Path(out) if out is not None else cfg.run.out
    if out_dir is None:
        raise InputError("no output folder: pass --out DIR (or set run.out in the config)")
    if out_dir.exists() and not out_dir.is_dir():
        raise InputError(f"--out {str(out_dir)!r} is a file; expected a folder (it is created if missing)")
    dev = device_for_run(device or cfg.run.device)
    t0 = time.time()
    plan = build_plan(cfg, metric_kwargs=metric_kwargs, device=dev)
    identities = {mp.spec.label: _metric_identity(mp) for mp in plan.metrics}
    old_manifest = _read_manifest(out_dir) if resume else None
    unknown_options = _check_resumable(cfg, plan, identities, old_manifest, out_dir) if resume else set()
    if not isinstance(old_manifest, dict):
        old_manifest = None

    dist = _Dist(dev)
    lock = None
    hashes: InputHashes | None = None
    try:
        if dist.rank == 0:
            lock = lock_output_folder(
                out_dir
            )  # a second run on the same --out refuses here, before touching anything
            _note_unused_references(plan)
            if not resume:
                for name in OUTPUTS:
                    (out_dir / name).unlink(missing_ok=True)
                shutil.rmtree(out_dir / SHARDS, ignore_errors=True)
                shutil.rmtree(out_dir / "plots", ignore_errors=True)
            _write_manifest(
                out_dir,
                cfg,
                plan,
                identities,
                old_manifest,
                dist,
                dev,
                status="running",
                resumed=old_manifest is not None,
                weights={},
                elapsed=0.0,
            )
        dist.barrier()
        from genmetrics.data.results import ResultsWriter, read_results

        hashes = InputHashes(plan, cache_file=out_dir / HASHES)
        sources = [out_dir / RESULTS, *sorted((out_dir / SHARDS).glob("*.jsonl"))]
        if (
            dist.rank == 0 and resume
        ):  # refuse rows that are not this run's; rescore rows whose inputs changed
            _drop_stale_rows(sources, _row_check(plan, unknown_options), hashes)
            hashes.save()
        dist.barrier()
        done = {
            (str(r.get("generator")), str(r.get("metric")), str(r.get("id")))
            for s in sources
            for r in read_results(s)
        }
        dist.barrier()  # every rank has read the finished keys before any rank writes
        mine = out_dir / RESULTS if dist.world == 1 else out_dir / SHARDS / f"rank-{dist.rank:05d}.jsonl"
        weights: dict[str, Any] = {}
        scored = 0
        skipped_file = out_dir / (
            SKIPPED if dist.world == 1 else f"{SHARDS}/skipped-rank-{dist.rank:05d}.jsonl"
        )
        with (
            ResultsWriter(mine, resume=True) as writer,
            ResultsWriter(skipped_file, resume=True) as skip_writer,
        ):
            skip = _Skipper(skip_writer) if on_error == "skip" else None
            for mp in plan.metrics:
                torch.manual_seed(cfg.run.seed)
                try:
                    if mp.level == "set":
                        scored += _run_set(plan, mp, done, writer, dist, weights, skip, hashes)
                    else:
                        scored += _run_samples(plan, mp, done, writer, dist, weights, skip, hashes)
                except GenmetricsError as e:  # missing weights, a corrupt image...: say which metric
                    raise _with_context(
                        e,
                        f"{cfg.where((*mp.spec.key, 'name'))} ({mp.spec.name}): {e} "
                        f"[finished results are kept in {str(out_dir)!r}; rerun with "
                        "--resume]",
                    ) from e
        dist.barrier()
        summary = None
        if dist.rank == 0:
            summary = _finish(out_dir, plan, plots=plots)
            _write_manifest(
                out_dir,
                cfg,
                plan,
                identities,
                old_manifest,
                dist,
                dev,
                status="complete",
                resumed=old_manifest is not None,
                weights=weights,
                elapsed=time.time() - t0,
            )
        dist.barrier()
        return RunResult(out=out_dir, rank=dist.rank, world_size=dist.world, summary=summary, scored=scored)
    finally:
        if hashes is not None and dist.rank == 0:
            hashes.save()  # also after a crash or Ctrl-C: a resume then reads only files it has not hashed
        if lock is not None:
            lock.release()
        dist.close()


def _with_context(err: Exception, msg: str) -> Exception:
    try:
        return type(err)(msg)
    except TypeError:  # an exception class with another signature: keep it as it is
        return err


def _free(metric: Any) -> None:
    heavy = bool(metric.backbones())
    del metric
    if heavy:  # drop the model before the next metric loads its own
        gc.collect()
    try:
        import torch

        if torch.cuda.is_available():
            torch.cuda.empty_cache()
    except Exception:  # noqa: BLE001 - best effort
        pass


class _Skipper:
    """``--on-error skip``: a batch that fails on bad input is retried one sample at a time; the bad
    samples are reported on stderr and in ``skipped.jsonl`` and the rest are scored."""

    def __init__(self, writer: Any):
        self.writer = writer
        self.count = 0

    def update(
        self, metric: Any, generator: str, label: str, kwargs: dict[str, Any], n: int, ids: list[str]
    ) -> None:
        try:
            metric.update(**kwargs)
            return
        except InputError:
            pass
        for i in range(n):
            one = {k: (v[i : i + 1] if isinstance(v, list) else v) for k, v in kwargs.items()}
            try:
                metric.update(**one)
            except InputError as e:
                self.count += 1
                log.warning("skipped %s / %s / %s: %s", generator, label, ids[i], e)
                import sys

                print(f"warning: skipped {generator}/{ids[i]} for {label}: {e}", file=sys.stderr)
                self.writer.write([{"generator": generator, "metric": label, "id": ids[i], "error": str(e)}])

    def report(self, generator: str, label: str, sid: str, msg: str) -> None:
        import sys

        self.count += 1
        print(f"warning: skipped {generator}/{sid} for {label}: {msg}", file=sys.stderr)
        self.writer.write([{"generator": generator, "metric": label, "id": sid, "error": msg}])


def finite_rows(rows: list[dict[str, Any]], skip: _Skipper | None) -> list[dict[str, Any]]:
    """Rows whose score is a finite number (or null: a set-level value without one). A NaN or infinite
    score is refused naming the generator, column and id, or with ``--on-error skip`` reported in
    ``skipped.jsonl`` and left out: it is never written, averaged or ranked.

    >>> finite_rows([{"score": 1.0}, {"score": None}], None)
    [{'score': 1.0}, {'score': None}]
    >>> finite_rows([{"generator": "g", "metric": "psnr", "id": "7", "score": float("nan")}], None)  # doctest: +ELLIPSIS
    Traceback (most recent call last):
        ...
    genmetrics.errors.InputError: g/7 for psnr: the score is nan (not finite); ... or pass --on-error skip to report it and score the rest
    """
    import math

    out = []
    for r in rows:
        s = r.get("score")
        if s is None or math.isfinite(s):
            out.append(r)
            continue
        msg = (
            f"the score is {s} (not finite); scores that are not finite are never ranked: check the image "
            "and the metric's options"
        )
        if skip is None:
            raise InputError(
                f"{r['generator']}/{r['id']} for {r['metric']}: {msg}, or pass --on-error skip to "
                "report it and score the rest"
            )
        skip.report(str(r["generator"]), str(r["metric"]), str(r["id"]), msg)
    return out


def _run_samples(
    plan: Plan,
    mp: MetricPlan,
    done: set,
    writer: Any,
    dist: _Dist,
    weights: dict,
    skip: _Skipper | None = None,
    hashes: InputHashes | None = None,
) -> int:
    import torch

    from genmetrics.registry import create_metric

    todo: dict[str, list[Any]] = {}
    for g in plan.generators:
        mine = dist.shard(mp.samples[g.name])
        todo[g.name] = [s for s in mine if any((g.name, c.name, s.id) not in done for c in mp.columns)]
    if not any(todo.values()):
        return 0
    metric = create_metric(mp.spec.name, **mp.kwargs)
    chunk = plan.config.run.batch_size or int(getattr(metric, "batch_size", 32) or 32)
    written = 0
    with torch.no_grad():
        base = None
        if "real" in mp.uses:  # the whole real set (every rank: per-sample scores stay exact), fed once
            assert mp.real is not None
            for batch in _bar(_chunks(mp.real, chunk), rank=dist.rank, desc=f"{mp.spec.label} | real set"):
                metric.update(reference=[str(p) for p in batch])
            base = metric.state_snapshot()
        for g in plan.generators:
            batches = _chunks(todo[g.name], chunk)
            for batch in _bar(batches, rank=dist.rank, desc=f"{mp.spec.label} | {g.name}"):
                rows: list[dict[str, Any]] = []
                for col in mp.columns:
                    sub = [s for s in batch if (g.name, col.name, s.id) not in done]
                    if not sub:
                        continue
                    if base is not None:
                        metric.restore_state(base)
                    else:
                        metric.reset()
                    cond = None
                    if col.aspect is not None:
                        cond = [col.aspect] * len(sub)
                    elif "prompt" in mp.uses:
                        cond = [s.condition for s in sub]
                    ref: list[Any] | None = None  # paths, or a list of paths per sample
                    if "reference" in mp.uses:
                        ref = [str(s.reference) for s in sub]
                    elif "reference_sets" in mp.uses:
                        ref = [[str(r) for r in s.reference] for s in sub]
                    kwargs = {
                        "reference": ref,
                        "candidates": [str(s.candidate) for s in sub],
                        "condition": cond,
                        "ids": [s.id for s in sub],
                    }
                    if skip is not None:
                        skip.update(metric, g.name, col.name, kwargs, len(sub), [s.id for s in sub])
                    else:
                        metric.update(**kwargs)
                    if not metric.has_data():
                        continue
                    new = _sample_rows(_local_per_sample(metric), g.name, col.name, col.aspect)
                    if hashes is not None:
                        by_id = {s.id: s for s in sub}
                        for r in new:
                            r["input"] = hashes.sample(mp, col, by_id[str(r["id"])])
                    rows.extend(new)
                written += writer.write(finite_rows(rows, skip))
    metric.reset()
    weights[mp.spec.label] = _weights_info(metric, mp)
    _free(metric)
    return written


def _run_set(
    plan: Plan,
    mp: MetricPlan,
    done: set,
    writer: Any,
    dist: _Dist,
    weights: dict,
    skip: _Skipper | None = None,
    hashes: InputHashes | None = None,
) -> int:
    import torch

    from genmetrics.registry import create_metric, metric_options

    label = mp.spec.label
    todo = [g for g in plan.generators if (g.name, label, SET_ID) not in done]
    if not todo:
        return 0
    kwargs = dict(mp.kwargs)
    # per-image scores for a bootstrap interval (the KDE modes offer none and refuse keep_scores)
    if (
        "keep_scores" in metric_options(mp.spec.name)
        and kwargs.get("divergence") != "kde"
        and not kwargs.get("compat")
    ):
        kwargs.setdefault("keep_scores", True)
    metric = create_metric(mp.spec.name, **kwargs)
    chunk = plan.config.run.batch_size or int(getattr(metric, "batch_size", 32) or 32)
    written = 0
    assert mp.real is not None
    with torch.no_grad():
        for batch in _bar(_chunks(dist.shard(mp.real), chunk), rank=dist.rank, desc=f"{label} | real set"):
            paths = [str(p) for p in batch]
            if skip is not None:
                skip.update(
                    metric, "__real__", label, {"reference": paths}, len(paths), [Path(p).stem for p in paths]
                )
            else:
                metric.update(reference=paths)
        real_state = metric.state_snapshot()
        for g in todo:
            metric.restore_state(real_state)
            files = plan.images[g.name]
            for batch in _bar(_chunks(dist.shard(files), chunk), rank=dist.rank, desc=f"{label} | {g.name}"):
                paths = [str(p) for p in batch]
                if skip is not None:
                    skip.update(
                        metric,
                        g.name,
                        label,
                        {"candidates": paths},
                        len(paths),
                        [Path(p).stem for p in paths],
                    )
                else:
                    metric.update(candidates=paths)
            value = metric.compute()  # synchronised across ranks (sum states)
            ci = None
            if callable(getattr(metric, "bootstrap_ci", None)):  # every rank: it synchronises
                run = plan.config.run
                ci = metric.bootstrap_ci(n_boot=run.n_boot, alpha=1.0 - run.ci, seed=run.seed)
            if dist.rank == 0:
                score, full = set_value_score(value)
                row: dict[str, Any] = {
                    "generator": g.name,
                    "metric": label,
                    "id": SET_ID,
                    "score": score,
                    "n": len(files),
                    "n_real": len(mp.real),
                }
                if full is not None:
                    row["value"] = full
                if ci is not None:
                    row["ci"] = [float(ci[0]), float(ci[1])]
                labels = getattr(metric, "attributes", None)
                if isinstance(labels, (list, tuple)) and labels and all(isinstance(a, str) for a in labels):
                    row["labels"] = list(labels)
                grid = getattr(metric, "grid", None)
                if (
                    isinstance(grid, (list, tuple))
                    and len(grid) == 2
                    and all(isinstance(x, int) for x in grid)
                ):
                    row["grid"] = list(grid)
                if hashes is not None:
                    row["input"] = hashes.set_level(mp, g.name)
                written += writer.write(finite_rows([row], skip))
    metric.reset()
    weights[label] = _weights_info(metric, mp)
    _free(metric)
    return written


def _finish(out_dir: Path, plan: Plan, *, plots: bool) -> dict[str, Any]:
    from genmetrics.data.results import merge_results
    from genmetrics.leaderboard.report import summarize, write_reports

    order = {k: i for i, k in enumerate(plan.keys())}
    big = len(order)
    shard_files = sorted((out_dir / SHARDS).glob("*.jsonl"))
    rows = merge_results(
        [out_dir / RESULTS, *shard_files],
        out_dir / RESULTS,
        sort_key=lambda r: order.get((str(r.get("generator")), str(r.get("metric")), str(r.get("id"))), big),
    )
    shutil.rmtree(out_dir / SHARDS, ignore_errors=True)
    summary = summarize(plan, rows)
    write_reports(out_dir, plan, summary, plots=plots)
    return summary


def _note_unused_references(plan: Plan) -> None:
    """Say which reference images no generator image matches (they are not used), once per folder and
    generator, on stderr: nothing is skipped without a word."""
    import sys

    from genmetrics.data.images import list_images, unused_references

    if not any("reference" in mp.uses for mp in plan.metrics):
        return
    cfg = plan.config
    for g in plan.generators:
        folder = g.references or cfg.data.references
        if folder is None:
            continue
        note = unused_references(
            list_images(folder, recursive=cfg.data.recursive),
            plan.images[g.name],
            ref_name=f"generator {g.name!r}: references {str(folder)!r}",
        )
        if note:
            print(f"note: {note}", file=sys.stderr)


# ------------------------------------------------------------------------------------------ inputs by content
class InputHashes:
    """What each result row was computed from, by content: sha256 over the bytes of the candidate, its
    reference(s) (or the whole real set) and the condition text. Stored as ``input`` in every row, so a
    resumed run rescores exactly the rows whose files changed (even with the same names and sizes). File
    hashes are computed once per file, cached by path, size, mtime, ctime and inode in ``cache_file`` (the
    run folder's ``.genmetrics.hashes.json``), so a resumed run does not read unchanged files again.

    >>> import tempfile
    >>> from genmetrics.testing import toy_leaderboard
    >>> with tempfile.TemporaryDirectory() as d:
    ...     plan = build_plan(load_config(toy_leaderboard(d), base_dir=d))
    ...     key = ("copy", "psnr", "000")  # (generator, column, sample id)
    ...     before = InputHashes(plan).of_key(key)
    ...     same = before == InputHashes(plan).of_key(key)
    ...     _ = (Path(d) / "copy" / "000.png").write_bytes(b"another file")  # the candidate changes
    ...     changed = before != InputHashes(plan).of_key(key)
    >>> same, changed
    (True, True)
    """

    def __init__(self, plan: Plan, cache_file: Path | None = None):
        from genmetrics.data.results import HashCache

        self.plan = plan
        self.hash = HashCache(cache_file)
        self._real: dict[int, str] = {}
        self._index: dict[tuple[str, str, str], tuple[MetricPlan, Any, Any]] | None = None

    def save(self) -> None:
        self.hash.save()

    def _files(self, files: list[Path]) -> str:
        h = hashlib.sha256()
        for f in sorted(files, key=lambda p: (p.stem, p.name)):
            h.update(f"{f.stem}\t{self.hash(f)}\n".encode())
        return h.hexdigest()[:16]

    def real(self, mp: MetricPlan) -> str:
        k = id(mp)
        if k not in self._real:
            self._real[k] = self._files(list(mp.real or []))
        return self._real[k]

    def sample(self, mp: MetricPlan, col: Any, s: Any) -> str:
        h = hashlib.sha256(self.hash(s.candidate).encode())
        refs = (
            s.reference
            if isinstance(s.reference, list)
            else ([s.reference] if s.reference is not None else [])
        )
        for r in refs:
            h.update(b"|r" + self.hash(r).encode())
        if "real" in mp.uses:
            h.update(b"|real" + self.real(mp).encode())
        if col.aspect is None and s.condition is not None:
            h.update(b"|c" + s.condition.encode())
        return h.hexdigest()[:16]

    def set_level(self, mp: MetricPlan, generator: str) -> str:
        return hashlib.sha256(
            f"{self.real(mp)}|{self._files(self.plan.images[generator])}".encode()
        ).hexdigest()[:16]

    def of_key(self, key: tuple[str, str, str]) -> str | None:
        if self._index is None:
            self._index = {}
            for mp in self.plan.metrics:
                for col in mp.columns:
                    for g in self.plan.generators:
                        if mp.level == "set":
                            self._index[(g.name, col.name, SET_ID)] = (mp, col, None)
                        else:
                            for s in mp.samples[g.name]:
                                self._index[(g.name, col.name, s.id)] = (mp, col, s)
        hit = self._index.get(key)
        if hit is None:
            return None
        mp, col, s = hit
        return self.set_level(mp, key[0]) if s is None else self.sample(mp, col, s)


def _row_check(plan: Plan, unknown_options: set[str]) -> Any:
    """The check of a results row on resume: a result row (:func:`check_result_row`) of a generator, metric
    column and id of this config, of a metric whose options the manifest records."""
    from genmetrics.data.results import check_result_row

    gens = {g.name for g in plan.generators}
    cols = {c.name: mp.spec.label for mp in plan.metrics for c in mp.columns}
    planned = set(plan.keys())

    def check(row: Any) -> str | None:
        why = check_result_row(row)
        if why:
            return why
        g, m, i = row["generator"], row["metric"], row["id"]
        if g not in gens:
            return f"generator {g!r} is not in the config"
        if m not in cols:
            return f"metric column {m!r} is not in the config"
        if (g, m, i) not in planned:
            return f"id {i!r} is not an image of generator {g!r}"
        if cols[m] in unknown_options:
            return f"manifest.json does not record the options of metric {cols[m]!r}, so this row cannot be trusted"
        return None

    return check


def _drop_stale_rows(sources: list[Path], check: Any, hashes: InputHashes) -> None:
    """Check every row of ``sources`` (refusing foreign rows with file:line) and remove the rows whose inputs
    changed since they were scored (they are scored again); says how many on stderr."""
    import sys

    from genmetrics.data.results import atomic_write_text, dumps_line, read_results

    stale_total = 0
    for src in sources:
        rows = read_results(src, check=check)
        keep = [r for r in rows if r.get("input") == hashes.of_key((r["generator"], r["metric"], r["id"]))]
        if len(keep) != len(rows):
            stale_total += len(rows) - len(keep)
            atomic_write_text(src, "".join(dumps_line(r) + "\n" for r in keep))
    if stale_total:
        print(
            f"note: --resume: {stale_total} finished row(s) were scored from files that changed since (same names, "
            "other content); they are scored again",
            file=sys.stderr,
        )


# ------------------------------------------------------------------------------------------ manifest
def _read_manifest(out_dir: Path) -> dict[str, Any] | str | None:
    """The manifest, ``None`` when there is none, or a string saying why it cannot be read."""
    p = out_dir / MANIFEST
    if not p.exists():
        return None
    try:
        doc = json.loads(p.read_text(encoding="utf-8"))
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        return f"{p} cannot be read ({type(e).__name__}: {e})"
    if not isinstance(doc, dict) or not isinstance(doc.get("metrics"), dict):
        return f"{p} is not a run manifest (no 'metrics' table)"
    return doc


def _check_resumable(
    cfg: LeaderboardConfig,
    plan: Plan,
    identities: dict[str, Any],
    old: dict[str, Any] | str | None,
    out_dir: Path,
) -> set[str]:
    """Refuse a resume whose options or input files differ from the run being resumed, or whose manifest is
    missing or unreadable while results exist. Returns the metric labels the manifest does not record."""
    hint = f"start a new --out folder, or run without --resume to start {str(out_dir)!r} afresh"
    has_rows = any(
        p.is_file() and p.stat().st_size > 0
        for p in [out_dir / RESULTS, *sorted((out_dir / SHARDS).glob("*.jsonl"))]
    )
    if not isinstance(old, dict):
        if has_rows:
            why = old if isinstance(old, str) else f"{out_dir / MANIFEST} is missing"
            raise InputError(
                f"--resume: {why}, so the options the finished rows were computed with are unknown; {hint}"
            )
        return set()
    unknown: set[str] = set()
    old_metrics = old.get("metrics", {})
    for mp in plan.metrics:
        prev = old_metrics.get(mp.spec.label)
        prev = prev.get("identity") if isinstance(prev, dict) else None
        if prev is None:
            unknown.add(mp.spec.label)
        elif prev != identities[mp.spec.label]:
            raise cfg.error(
                mp.spec.key,
                f"metric {mp.spec.label!r} is configured differently from the run being "
                f"resumed in {str(out_dir)!r} (was {json.dumps(prev)}, now "
                f"{json.dumps(identities[mp.spec.label])}); {hint}",
            )
    old_inputs = old.get("inputs", {})
    for key, fp in plan.fingerprints.items():
        if key in old_inputs and old_inputs[key] != fp:
            raise InputError(
                f"{cfg.source}: {key}: the image files changed since the run being resumed in "
                f"{str(out_dir)!r} (files added, removed or rewritten); {hint}"
            )
    return unknown


def _write_manifest(
    out_dir: Path,
    cfg: LeaderboardConfig,
    plan: Plan,
    identities: dict[str, Any],
    old: dict[str, Any] | None,
    dist: _Dist,
    device: str,
    *,
    status: str,
    resumed: bool,
    weights: dict[str, Any],
    elapsed: float,
) -> None:
    from genmetrics.data.results import atomic_write_json, manifest

    old_metrics = (old or {}).get("metrics", {})
    metrics = {}
    for mp in plan.metrics:
        prev = old_metrics.get(mp.spec.label, {})
        w = weights.get(mp.spec.label) or prev.get("weights") or {"default_weights": mp.card.default_weights}
        metrics[mp.spec.label] = {
            "identity": identities[mp.spec.label],
            "family": mp.card.family,
            "level": mp.level,
            "higher_is_better": mp.higher_is_better,
            "columns": [c.name for c in mp.columns],
            "weights": w,
        }
    cfg_sha = hashlib.sha256(cfg.path.read_bytes()).hexdigest() if cfg.path is not None else None
    runs = list((old or {}).get("runs", [])) if resumed else []
    if status == "complete":
        runs.append(
            {
                "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
                "world_size": dist.world,
                "device": device,
                "elapsed_s": round(elapsed, 3),
            }
        )
    doc = manifest(
        tool="genmetrics leaderboard",
        status=status,
        resumed=resumed,
        config=str(cfg.path) if cfg.path is not None else None,
        config_sha256=cfg_sha,
        config_data=_describe_option(cfg.raw),
        seed=cfg.run.seed,
        n_boot=cfg.run.n_boot,
        ci=cfg.run.ci,
        batch_size=cfg.run.batch_size,
        device=device,
        world_size=dist.world,
        generators={
            g.name: {"images": str(g.images), "n": len(plan.images[g.name])} for g in plan.generators
        },
        inputs=plan.fingerprints,
        metrics=metrics,
        runs=runs,
    )
    atomic_write_json(out_dir / MANIFEST, doc)
